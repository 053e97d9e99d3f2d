"""A vocabulary: the two-way map between tokens (strings) and ids (ints) that a model sees."""
from __future__ import annotations

from collections.abc import Iterable, Sequence

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)


def _check_tokens(tokens) -> None:
    if isinstance(tokens, str):
        raise TypeError(f"tokens must be a list of token strings, "
                        f"got one str {tokens!r:.40}; tokenize it first")


class Vocab:
    """Token <-> id map with four special tokens at fixed ids: <pad>=0, <bos>=1, <eos>=2, <unk>=3.

    ``<pad>`` is 0 because ``tl.Transformer`` and the masks use ``pad_id=0`` by default. Tokens that
    are not in the vocabulary encode to ``<unk>`` (or raise, with ``unknown="error"``).

    >>> v = Vocab(["b", "a", "b"])
    >>> v.encode(["a", "b"], add_bos=True, add_eos=True)
    [1, 4, 5, 2]
    """

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, tokens: Iterable[str]):
        if isinstance(tokens, str):
            raise TypeError("tokens must be an iterable of token strings, got one str")
        itos = list(SPECIALS)
        seen = set(itos)
        # Sorted, so the same tokens give the same ids whatever order they were seen in.
        for token in sorted(set(tokens)):
            if not isinstance(token, str) or not token:
                raise TypeError(f"tokens must be non-empty strings, got {token!r}")
            if token not in seen:
                itos.append(token)
                seen.add(token)
        self.itos = itos
        self.stoi = {token: i for i, token in enumerate(itos)}

    @classmethod
    def from_sequences(cls, sequences: Iterable[Sequence[str]]) -> "Vocab":
        """Build a vocabulary from tokenized sentences (an iterable of token lists)."""
        return cls(token for sequence in sequences for token in sequence)

    @classmethod
    def from_itos(cls, itos: Sequence[str]) -> "Vocab":
        """Rebuild exactly the vocabulary whose ``itos`` list was saved (e.g. in a checkpoint)."""
        if list(itos[: len(SPECIALS)]) != list(SPECIALS):
            raise ValueError(f"a saved vocabulary must start with {list(SPECIALS)}, got {list(itos[:4])}")
        vocab = cls([])
        vocab.itos = list(itos)
        vocab.stoi = {token: i for i, token in enumerate(vocab.itos)}
        return vocab

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token) -> bool:
        return token in self.stoi

    def __repr__(self) -> str:
        return f"Vocab(size={len(self)}, tokens={self.itos[4:12]}{' ...' if len(self) > 12 else ''})"

    def encode(self, tokens: Sequence[str], add_bos: bool = False, add_eos: bool = False,
               unknown: str = "unk") -> list[int]:
        """Token strings -> ids. ``unknown="unk"`` maps unseen tokens to <unk>; ``"error"`` raises."""
        _check_tokens(tokens)
        if unknown not in ("unk", "error"):
            raise ValueError(f"unknown must be 'unk' or 'error', got {unknown!r}")
        if unknown == "error":
            missing = [t for t in tokens if t not in self.stoi]
            if missing:
                raise ValueError(f"tokens not in the vocabulary: {missing}")
        ids = [self.stoi.get(token, self.unk_id) for token in tokens]
        return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

    def decode(self, ids: Iterable[int], strip_special: bool = True) -> list[str]:
        """Ids -> token strings. Stops at the first <eos>; drops <pad> and <bos> (unless
        ``strip_special=False``, which returns every token as it is)."""
        tokens = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self.itos):
                raise ValueError(f"token id must be in [0, {len(self.itos)}), got {i}")
            if strip_special:
                if i == self.eos_id:
                    break
                if i in (self.pad_id, self.bos_id):
                    continue
            tokens.append(self.itos[i])
        return tokens
