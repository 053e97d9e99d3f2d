"""A learned subword vocabulary for the target side: byte-pair encoding (BPE).

The paper tokenizes with BPE (Sennrich et al., 2016): start from the characters of the
training text, then merge the most frequent pair of adjacent tokens into a new token,
again and again, until the vocabulary has the size asked for. Frequent words become one
token, rare words stay in pieces, and every text made of known characters can be
written. Nothing here is written by hand: Hugging Face ``tokenizers`` learns the merges
and applies them (its Rust BPE, the one behind many Hub tokenizers), and this module only
fits it to the interface of the other target tokenizers (``tokenize``/``detokenize``
with an exact round trip, see ``tokenize.py``).

No normalizer and no pre-tokenizer: the text is taken as it is, spaces and hyphens
included, so that a token is a piece of the text and detokenizing is concatenation.
``tokenizers`` is imported only when a tokenizer is learned or loaded.
"""
from __future__ import annotations

import json

from .._checks import check_int


def _tokenizers():
    try:
        import tokenizers
    except ImportError as error:  # an optional dependency of the library
        raise ImportError("BPE needs Hugging Face tokenizers: pip install tokenizers"
                          ) from error
    return tokenizers


class BPETokenizer:
    """Byte-pair encoding learned from data, with the target tokenizers' interface.

    Build one with ``BPETokenizer.train(texts, vocab_size)``; save it with ``state()``
    and rebuild it with ``BPETokenizer.from_state``. ``vocab`` lists the tokens in the
    order they were made (the characters, then one token per merge) and ``merges`` the
    merges in the order they were learned.

    >>> bpe = BPETokenizer.train(["dreiunddreißig", "dreizehn", "dreißig"], 15)
    >>> bpe.merges  # 10 characters + 5 merges = 15 tokens
    [('d', 'r'), ('e', 'i'), ('dr', 'ei'), ('i', 'g'), ('ß', 'ig')]
    >>> bpe.tokenize("dreiunddreißig")
    ['drei', 'u', 'n', 'd', 'drei', 'ßig']
    """

    def __init__(self, tokenizer):
        model = json.loads(tokenizer.to_str())["model"]
        if model.get("type") != "BPE":
            raise TypeError(f"tokenizer must hold a BPE model, got {model.get('type')!r}")
        self._tokenizer = tokenizer
        vocab = model["vocab"]  # token -> id, ids in the order the tokens were made
        self.vocab = sorted(vocab, key=vocab.get)
        self.merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
                       for m in model["merges"]]
        self._alphabet = {token for token in self.vocab if len(token) == 1}

    @classmethod
    def train(cls, texts, vocab_size: int) -> "BPETokenizer":
        """Learn merges from ``texts`` (a list of strings, repeats counting as often as
        they occur) until the vocabulary, characters included, has ``vocab_size`` tokens
        (fewer if the texts run out of pairs to merge)."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError(f"texts must be a list of strings, got {texts!r:.60}")
        if not any(texts):
            raise ValueError("texts must hold some text to learn from, got none")
        check_int("vocab_size", vocab_size, minimum=1)
        tokenizers = _tokenizers()
        tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
        trainer = tokenizers.trainers.BpeTrainer(vocab_size=vocab_size,
                                                 show_progress=False)
        tokenizer.train_from_iterator(list(texts), trainer)
        return cls(tokenizer)

    @classmethod
    def from_state(cls, state: str) -> "BPETokenizer":
        """The tokenizer whose ``state()`` this is (e.g. read from a checkpoint)."""
        if not isinstance(state, str):
            raise TypeError(f"state must be a str from BPETokenizer.state(), "
                            f"got {type(state).__name__}")
        return cls(_tokenizers().Tokenizer.from_str(state))

    def state(self) -> str:
        """Everything the tokenizer is, as one JSON string (``tokenizers``' own format)."""
        return self._tokenizer.to_str()

    def __len__(self) -> int:
        return len(self.vocab)

    def __repr__(self) -> str:
        return (f"BPETokenizer(vocab_size={len(self)}, {len(self._alphabet)} characters, "
                f"{len(self.merges)} merges)")

    def tokenize(self, text: str) -> list[str]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        tokens = self._tokenizer.encode(text).tokens
        if "".join(tokens) != text:  # BPE drops characters it never saw in training
            unknown = sorted(set(text) - self._alphabet)
            raise ValueError(f"text {text!r} has characters the BPE vocabulary was not "
                             f"learned with: {unknown}")
        return tokens

    def detokenize(self, tokens: list[str]) -> str:
        if isinstance(tokens, str) or not all(isinstance(t, str) for t in tokens):
            raise TypeError(f"tokens must be a list of token strings, got {tokens!r:.60}")
        return "".join(tokens)
