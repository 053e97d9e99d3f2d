"""Two translators that learn nothing, for every score to stand beside.

- ``copy_source``: the German sentence itself as the "English" one. Names, numbers and
  shared words score a little BLEU and quite some chrF; a model must beat it.
- ``Retrieval``: the English side of the *training* pair whose German side shares the
  most words with the sentence to translate (a translation memory). It shows how much
  of a test set a lookup already gets right: near-duplicates across splits show up here
  first.

Retrieval, precisely. A sentence's words are its lower-cased word tokens
(``re.findall(r"\\w+", text.lower())``), taken as a set. For each source:

1. if a training source is exactly the same string (surrounding spaces stripped), the
   target of the first such pair (in training order);
2. otherwise the training pair sharing the most distinct words with it; among equals,
   the one with the fewest distinct words (the closest to a match), then the first;
3. if no training source shares a word, the empty string.

Only training pairs are ever given to it; the sources to translate come without their
references. An inverted index (word -> training pairs) and one ``np.bincount`` per
source make a thousand queries over 15,000 pairs take about a second.
"""
from __future__ import annotations

import re

import numpy as np

_WORD = re.compile(r"\w+")


def words(text: str) -> set[str]:
    """The distinct lower-cased word tokens of ``text``."""
    return set(_WORD.findall(text.lower()))


def copy_source(sources: list[str]) -> list[str]:
    """The sources themselves, as translations."""
    if isinstance(sources, str):
        raise TypeError("sources must be a list of str, not one str")
    return [str(s) for s in sources]


class Retrieval:
    """A translation memory over ``train_pairs`` (a list of (source, target)): see the
    module's docstring for the rule. ``translate(sources)`` -> list of targets."""

    def __init__(self, train_pairs):
        pairs = list(train_pairs)
        if not pairs:
            raise ValueError("Retrieval needs at least one training pair")
        self.targets = [t for _, t in pairs]
        self.exact: dict[str, int] = {}
        index: dict[str, list[int]] = {}
        sizes = []
        for i, (source, _) in enumerate(pairs):
            self.exact.setdefault(source.strip(), i)
            found = words(source)
            sizes.append(len(found))
            for word in found:
                index.setdefault(word, []).append(i)
        self.index = {w: np.asarray(ids, dtype=np.int64) for w, ids in index.items()}
        sizes = np.asarray(sizes, dtype=np.int64)
        # One key orders "more shared words, then fewer words": argmax takes the first.
        self._scale = int(sizes.max()) + 1
        self._tiebreak = self._scale - 1 - sizes  # in [0, scale): fewer words is larger

    def lookup(self, source: str) -> int | None:
        """The index of the training pair chosen for ``source``, or None (no shared word)."""
        if source.strip() in self.exact:
            return self.exact[source.strip()]
        postings = [self.index[w] for w in words(source) if w in self.index]
        if not postings:
            return None
        shared = np.bincount(np.concatenate(postings), minlength=len(self.targets))
        return int(np.argmax(shared * self._scale + self._tiebreak))

    def translate(self, sources: list[str]) -> list[str]:
        if isinstance(sources, str):
            raise TypeError("sources must be a list of str, not one str")
        chosen = (self.lookup(s) for s in sources)
        return ["" if i is None else self.targets[i] for i in chosen]


def retrieve(train_pairs, sources: list[str]) -> list[str]:
    """``Retrieval(train_pairs).translate(sources)``."""
    return Retrieval(train_pairs).translate(sources)
