"""A parallel corpus: (source, target) sentence pairs, already split into train/valid/test.

Every loader (``load_ding``, ``load_tsv``, ``load_multi30k``, the number words) returns one of
these, so the trainer is handed a corpus and never needs to know where its sentences came from.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .splits import SPLITS

Pair = tuple[str, str]


class CorpusNotFoundError(FileNotFoundError):
    """A corpus's files are not where they were looked for; the message says how to get them."""


@dataclass
class Corpus:
    """Clean text pairs of one language direction, split three ways.

    - ``train``, ``valid``, ``test``: lists of (source, target) strings. For the real corpora the
      split keeps near-duplicates together (``splits.split_pairs``: same source, same target,
      one source inside another, or 0.9 alike), so no sentence or near-duplicate is in two
      splits; ``splits.find_leaks`` checks it independently.
    - ``extra_train``: more training material that is not sentences (Ding's word and phrase pairs
      with ``phrases=True``); never in valid or test, empty unless asked for.
    - ``info``: where it came from and how it was read (path, the file's version line, counts,
      the options), for the record a chapter or a checkpoint keeps.
    - ``dataset``: the library object the corpus wraps, if any (``NumberWordsData`` for the
      number words), for code that wants more than the text.
    """

    name: str
    src_lang: str
    tgt_lang: str
    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]
    extra_train: list[Pair] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    dataset: object = field(default=None, repr=False, compare=False)

    def split(self, name: str) -> list[Pair]:
        """The pairs of the split ``name``: "train", "valid" or "test"."""
        if name not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
        return getattr(self, name)

    def texts(self, name: str = "train", side: str = "both") -> list[str]:
        """The sentences of one split: the sources, the targets, or both (a joint vocabulary
        is learned from both sides of the training split)."""
        pairs = self.split(name)
        if side == "src":
            return [s for s, _ in pairs]
        if side == "tgt":
            return [t for _, t in pairs]
        if side == "both":
            return [text for pair in pairs for text in pair]
        raise ValueError(f"side must be 'src', 'tgt' or 'both', got {side!r}")

    def summary(self) -> str:
        """One line: name, direction and the size of each split."""
        sizes = ", ".join(f"{name} {len(self.split(name)):,}" for name in SPLITS)
        extra = f", extra_train {len(self.extra_train):,}" if self.extra_train else ""
        version = f" ({self.info['version']})" if self.info.get("version") else ""
        return f"{self.name}{version} {self.src_lang}->{self.tgt_lang}: {sizes}{extra} pairs"

    def __repr__(self) -> str:
        return f"Corpus({self.summary()})"


__all__ = ["Corpus", "CorpusNotFoundError", "Pair"]
