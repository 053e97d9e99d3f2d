"""One joint subword vocabulary for source and target, learned by BPE on real sentences.

``bpe.py`` fits a BPE to the number words' targets (no spaces to care about, one language).
Real sentences need more: both languages share one vocabulary (the paper's shared source-target
vocabulary; it lets names and numbers be copied, and lets ``share_embeddings=True`` tie the
weights), spaces must survive, and unseen text must not break the model. So the Hugging Face
``tokenizers`` pipeline is set up as SentencePiece does it:

- normaliser: Unicode NFC, runs of white space made one space, no space at either end. This is
  the only change to a text: ``decode(encode(text)) == normalise(text)``, and our corpora's
  sentences are already normalised, so their round trip is exact;
- pre-tokeniser: a space is written ``▁`` and glued to the word after it (Metaspace), each
  punctuation mark and each digit is a piece of its own, so "Haus." and "Haus" share "▁Haus"
  and 1987 is four pieces;
- decoder: the pieces joined, ``▁`` turned back into a space.

Ids 0-3 are ``<pad>``, ``<bos>``, ``<eos>``, ``<unk>`` (as in ``Vocab``). A character never
seen in training becomes ``<unk>`` unless it is in ``BASE_ALPHABET`` (German and English letters,
digits, common punctuation), which every vocabulary holds. ``tags`` (e.g. ``<2en>``, ``<dict>``)
are more special tokens, ids 4, 5, ...: never split, never learned from, skipped by ``decode``;
a caller prepends their ids (``token_id``) to a source to say what kind of example it is.

BPE-dropout (Provilkov et al. 2020, ``encode_batch(texts, dropout=p)``) skips each merge
with probability ``p`` while segmenting, so one word comes out in different pieces from
one epoch to the next: training only, never to evaluate. Its draws come from the Rust
library's own random generator, which cannot be seeded.
"""
from __future__ import annotations

import json
import re

from .._checks import check_int, check_number
from .bpe import _tokenizers
from .vocab import SPECIALS

SPACE = "▁"  # U+2581, SentencePiece's visible space
_SPACES = re.compile(" {2,}")
# Characters every vocabulary holds, seen in training or not.
BASE_ALPHABET = sorted(set(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    "äöüßÄÖÜẞéèêëàâçîïôûùÉÈÀ"
    ".,;:!?'\"()[]{}<>-–—/\\&%$€£°+*=#@_„“”‚‘’«»…"))


class SubwordTokenizer:
    """A joint BPE vocabulary: ``encode(text) -> ids`` and ``decode(ids) -> text``.

    Learn one with ``SubwordTokenizer.train(texts, vocab_size)`` from the *training* split only
    (both sides); keep it in a checkpoint as ``to_json()`` (a plain str) and rebuild it with
    ``SubwordTokenizer.from_json``. The same texts give the same vocabulary.
    """

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, tokenizer):
        for i, special in enumerate(SPECIALS):
            if tokenizer.token_to_id(special) != i:
                raise ValueError(f"a SubwordTokenizer needs {special} at id {i}, "
                                 f"got {tokenizer.token_to_id(special)}")
        self._tokenizer = tokenizer
        self._dropped = {}  # BPE-dropout rate -> a copy of the tokenizer that applies it

    @classmethod
    def train(cls, texts, vocab_size: int = 8000, min_frequency: int = 2,
              tags=()) -> "SubwordTokenizer":
        """Learn merges from ``texts`` (a list of str: the training sentences of both languages)
        until the vocabulary, the 4 specials, the ``tags`` and the alphabet included, has
        ``vocab_size`` tokens (fewer if no pair occurs ``min_frequency`` times any more).
        ``tags``: more special tokens (str such as ``"<2en>"``), ids 4, 5, ... in order."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError(f"texts must be a list of strings, got {texts!r:.60}")
        if not any(t.strip() for t in texts):
            raise ValueError("texts must hold some text to learn from, got none")
        if isinstance(tags, str) or not all(isinstance(t, str) and t.strip() == t and t
                                            for t in tags):
            raise TypeError(f"tags must be a list of tokens (str without spaces), "
                            f"got {tags!r:.60}")
        tags = list(tags)
        if len(set(tags)) != len(tags) or set(tags) & set(SPECIALS):
            raise ValueError(f"tags must be distinct and not one of {list(SPECIALS)}, "
                             f"got {tags}")
        check_int("vocab_size", vocab_size, minimum=len(SPECIALS) + len(tags) + 1)
        check_int("min_frequency", min_frequency, minimum=1)
        tk = _tokenizers()
        tokenizer = tk.Tokenizer(tk.models.BPE(unk_token="<unk>"))
        tokenizer.normalizer = tk.normalizers.Sequence([
            tk.normalizers.NFC(),
            tk.normalizers.Replace(tk.Regex(r"\s+"), " "),
            tk.normalizers.Strip(),
        ])
        tokenizer.pre_tokenizer = tk.pre_tokenizers.Sequence([
            tk.pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always"),
            tk.pre_tokenizers.Punctuation(behavior="isolated"),
            tk.pre_tokenizers.Digits(individual_digits=True),
        ])
        tokenizer.decoder = tk.decoders.Metaspace(replacement=SPACE, prepend_scheme="always")
        trainer = tk.trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency,
            special_tokens=list(SPECIALS) + tags,
            initial_alphabet=BASE_ALPHABET + [SPACE], show_progress=False)
        tokenizer.train_from_iterator(list(texts), trainer)
        return cls(tokenizer)

    @classmethod
    def from_json(cls, state: str) -> "SubwordTokenizer":
        """The tokenizer whose ``to_json()`` this is (e.g. read from a checkpoint)."""
        if not isinstance(state, str):
            raise TypeError(f"state must be the str of SubwordTokenizer.to_json(), "
                            f"got {type(state).__name__}")
        try:
            json.loads(state)
        except json.JSONDecodeError as error:
            raise ValueError(f"state is not the JSON of a tokenizer: {error}") from None
        return cls(_tokenizers().Tokenizer.from_str(state))

    def to_json(self) -> str:
        """Everything the tokenizer is, as one JSON string (``tokenizers``' own format): plain
        text that ``torch.save`` stores and ``torch.load(weights_only=True)`` reads back."""
        return self._tokenizer.to_str()

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return f"SubwordTokenizer(vocab_size={self.vocab_size})"

    def normalise(self, text: str) -> str:
        """The text as the tokenizer sees it (NFC, single spaces, stripped): what ``decode``
        gives back."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return self._tokenizer.normalizer.normalize_str(text)

    def encode(self, text: str) -> list[int]:
        """Text -> ids, without <bos>/<eos> (the caller adds them where it needs them)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts, dropout: float = 0.0) -> list[list[int]]:
        """``encode`` for many texts at once (in parallel, in Rust). ``dropout > 0``:
        BPE-dropout, each merge skipped with that probability (for training batches only;
        a new segmentation at every call, from an unseeded generator)."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError(f"texts must be a list of strings, got {texts!r:.60}")
        check_number("dropout", dropout, 0.0, 1.0, high_open=True)
        tokenizer = self._tokenizer if dropout == 0 else self._with_dropout(dropout)
        return [e.ids for e in tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def _with_dropout(self, dropout: float):
        # A copy, so that the tokenizer itself (saved in checkpoints, used to evaluate)
        # never segments at random. The Rust BPE skips its cache when dropout is on.
        if dropout not in self._dropped:
            copy = _tokenizers().Tokenizer.from_str(self.to_json())
            copy.model.dropout = dropout
            self._dropped[dropout] = copy
        return self._dropped[dropout]

    @property
    def tags(self) -> list[str]:
        """The special tokens after the 4 of every vocabulary (``train(..., tags=...)``)."""
        added = self._tokenizer.get_added_tokens_decoder()  # id -> AddedToken
        return [added[i].content for i in sorted(added)
                if added[i].special and added[i].content not in SPECIALS]

    def token_id(self, token: str) -> int:
        """The id of ``token`` (a piece or a special token such as a tag); ValueError if the
        vocabulary lacks it."""
        if not isinstance(token, str):
            raise TypeError(f"token must be a str, got {type(token).__name__}")
        found = self._tokenizer.token_to_id(token)
        if found is None:
            raise ValueError(f"token {token!r} is not in this vocabulary (tags: {self.tags})")
        return found

    def _ids(self, ids) -> list[int]:
        if hasattr(ids, "tolist"):  # a tensor or an array
            ids = ids.tolist()
        if isinstance(ids, (str, bytes)) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise TypeError(f"ids must be a sequence of ints, got {ids!r:.60}")
        size = self.vocab_size
        bad = [i for i in ids if not 0 <= i < size]
        if bad:
            raise ValueError(f"token ids must be in [0, {size}), got {bad[:5]}")
        return list(ids)

    def decode(self, ids) -> str:
        """Ids -> text: stops at the first <eos>, skips <pad>, <bos> and <unk>, and joins the
        pieces (a list of ints, or a 1-D tensor). Spaces stay single where an <unk> was."""
        ids = self._ids(ids)
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        text = self._tokenizer.decode(ids, skip_special_tokens=True)
        return _SPACES.sub(" ", text).strip()

    def decode_batch(self, batch) -> list[str]:
        """``decode`` for each row of a (B, L) tensor or a list of id lists."""
        if hasattr(batch, "tolist"):
            batch = batch.tolist()
        return [self.decode(ids) for ids in batch]

    def token_strings(self, ids) -> list[str]:
        """The piece of each id, as it is in the vocabulary ("▁Haus", ".", "<eos>"): labels for
        an attention map, one per position."""
        return [self._tokenizer.id_to_token(i) for i in self._ids(ids)]

    def tokenize(self, text: str) -> list[str]:
        """Text -> its pieces (``token_strings(encode(text))``)."""
        return self.token_strings(self.encode(text))


__all__ = ["BASE_ALPHABET", "SPACE", "SubwordTokenizer"]
