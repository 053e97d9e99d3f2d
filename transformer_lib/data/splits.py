"""Stable train/validation/test splits of a real corpus that keep near-duplicates together.

A split must not hold a sentence that training saw in a slightly different form: the test
sentence "Woher kommst du? Woher bist du?" is learned if training holds "Woher kommst du?" with
the same translation. So the pairs are first joined into *groups* (``group_pairs``), and a
whole group goes to one split. Two pairs are in one group when, once normalised
(``normalise_for_split``: case, punctuation and extra spaces removed),

- their sources are equal, or their targets are equal;
- one source holds the other as whole words ("das hört sich gut an" holds "hört sich gut
  an"), the shorter having at least ``MIN_CONTAINED_WORDS`` words;
- their sources are at least ``SIMILARITY`` alike character by character (``difflib``'s
  ratio; "Er reißt sich kein Bein aus" and "Er reißt sich keine Beine aus"). Only sources
  that agree, once each word is cut to its first four letters, in all words but one are
  compared (``_one_word_apart``): others are seldom so alike, and ``find_leaks`` would say.

A group's split is decided by a hash of its smallest normalised source (``split_of``), so it
never depends on the order of the file, on Python's per-process ``hash`` seed or on the
machine. ``find_leaks`` checks a split independently: it compares every held-out source with
every training source directly, by character similarity and containment, without the groups.
"""
from __future__ import annotations

import difflib
import hashlib
import unicodedata

import numpy as np

from .._checks import check_number

SPLITS = ("train", "valid", "test")
# Shares of validation and test; training gets the rest: about 1,000 each of Ding's 17,000.
DEFAULT_FRACTIONS = {"valid": 0.06, "test": 0.06}
# Near-duplicates: sources this alike (difflib's ratio, on the normalised text), or one holding
# the other as whole words when the shorter has at least this many words.
SIMILARITY = 0.9
MIN_CONTAINED_WORDS = 3

def normalise_for_split(text: str) -> str:
    """The key two sentences share when they are near-duplicates: Unicode NFKC, case folded
    (so "ß" and "ss" agree), punctuation removed, runs of spaces made one.

    >>> normalise_for_split("  Wie GEHT'S, Straßen-Bahn?  ")
    'wie gehts strassen bahn'
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if text.isascii():  # most text: a fast path through bytes.translate, the same result
        text = text.lower().encode("ascii").translate(None, _ASCII_PUNCTUATION).decode("ascii")
    else:
        text = unicodedata.normalize("NFKC", text).casefold().translate(_PUNCTUATION)
    return " ".join(text.replace("-", " ").replace("/", " ").split())


class _PunctuationTable(dict):
    """``str.translate``'s table, filled as characters are met: a character of a Unicode category
    P* (. , ? ! ' " „ “ - ( ) ...) goes, but dashes and slashes part words ("well-known" =
    "well known"; "geht's" = "gehts"); every other character stays."""

    def __missing__(self, code: int):
        category = unicodedata.category(chr(code))
        if category == "Pd" or code == ord("/"):
            value = " "
        else:
            value = None if category.startswith("P") else code
        self[code] = value
        return value


_PUNCTUATION = _PunctuationTable()
# ASCII punctuation but "-" and "/", which become spaces after the translation.
_ASCII_PUNCTUATION = bytes(c for c in range(128)
                           if unicodedata.category(chr(c)).startswith("P") and chr(c) not in "-/")


def _check_fractions(fractions) -> dict[str, float]:
    if not isinstance(fractions, dict):
        raise TypeError(f"fractions must be a dict like {DEFAULT_FRACTIONS}, "
                        f"got {type(fractions).__name__}")
    unknown = set(fractions) - {"valid", "test"}
    if unknown:
        raise ValueError(f"fractions may name 'valid' and 'test' (training gets the rest), "
                         f"got {sorted(unknown)}")
    for name, value in fractions.items():
        check_number(f"fractions[{name!r}]", value, 0.0, 1.0)
    if sum(fractions.values()) >= 1.0:
        raise ValueError(f"fractions must leave some pairs for training, got {fractions}")
    return {"valid": float(fractions.get("valid", 0.0)), "test": float(fractions.get("test", 0.0))}


def split_position(text: str) -> float:
    """Where ``text`` falls in [0, 1): the first 8 bytes of the SHA-256 of its normalised form,
    read as a fraction. Stable across processes, machines and Python versions."""
    digest = hashlib.sha256(normalise_for_split(text).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64


def split_of(text: str, fractions: dict | None = None) -> str:
    """"train", "valid" or "test" for a source sentence: "test" if its ``split_position`` is below
    ``fractions["test"]``, "valid" if below test + valid, else "train"."""
    shares = _check_fractions(DEFAULT_FRACTIONS if fractions is None else fractions)
    position = split_position(text)
    if position < shares["test"]:
        return "test"
    if position < shares["test"] + shares["valid"]:
        return "valid"
    return "train"


class _Groups:
    """Union-find over pair indices: ``join(a, b)`` puts two pairs in one group."""

    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]  # halve the path as we go
            i = self.parent[i]
        return i

    def join(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[max(a, b)] = min(a, b)


def _join_equal(groups: _Groups, keys: list[str]) -> None:
    first: dict[str, int] = {}
    for i, key in enumerate(keys):
        groups.join(first.setdefault(key, i), i)


def _word_spans(words: list[str], shortest: int):
    """Every run of at least ``shortest`` consecutive words, shorter than the whole."""
    n = len(words)
    for length in range(shortest, n):
        for start in range(n - length + 1):
            yield " ".join(words[start:start + length])


def _one_word_apart(keys: list[str]):
    """Pairs of indices whose texts are equal but for one word (one word changed, added or
    dropped) once every word is cut to its first four letters (so "kein Bein" and "keine
    Beine" agree): a text and each of its one-word-shorter forms share a bucket."""
    buckets: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        words = [word[:4] for word in key.split()]
        key = " ".join(words)
        forms = {key} | {" ".join(words[:j] + words[j + 1:]) for j in range(len(words))}
        for form in forms:
            buckets.setdefault(form, []).append(i)
    for members in buckets.values():
        for a in range(len(members)):
            for b in range(a + 1, len(members)):
                yield members[a], members[b]


def similarity(a: str, b: str) -> float:
    """``difflib.SequenceMatcher``'s ratio of two normalised texts: 1.0 for equal texts,
    2 * (characters in matching blocks) / (total length) in general."""
    return difflib.SequenceMatcher(None, normalise_for_split(a), normalise_for_split(b),
                                   autojunk=False).ratio()


def _alike(a: str, b: str) -> bool:
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return matcher.real_quick_ratio() >= SIMILARITY and matcher.quick_ratio() >= SIMILARITY \
        and matcher.ratio() >= SIMILARITY


def group_pairs(pairs) -> list[int]:
    """For each pair, the index of the first pair of its group of near-duplicates (the rules of
    the module's docstring). ``pairs`` is a list of (source, target)."""
    sources = [normalise_for_split(s) for s, _ in pairs]
    groups = _Groups(len(pairs))
    _join_equal(groups, sources)
    _join_equal(groups, [normalise_for_split(t) for _, t in pairs])
    index = {}
    for i, key in enumerate(sources):
        index.setdefault(key, i)
    for i, key in enumerate(sources):  # containment: look up every shorter run of words
        for span in _word_spans(key.split(), MIN_CONTAINED_WORDS):
            j = index.get(span)
            if j is not None:
                groups.join(i, j)
    for a, b in _one_word_apart(sources):
        if groups.find(a) != groups.find(b) and _alike(sources[a], sources[b]):
            groups.join(a, b)
    return [groups.find(i) for i in range(len(pairs))]


def split_pairs(pairs, fractions: dict | None = None) -> dict[str, list[tuple[str, str]]]:
    """Deal (source, target) pairs into {"train": [...], "valid": [...], "test": [...]},
    keeping their order and dropping exact repeats of a pair. Each group of near-duplicates
    (``group_pairs``) goes whole to ``split_of`` its smallest normalised source."""
    shares = _check_fractions(DEFAULT_FRACTIONS if fractions is None else fractions)
    unique = list(dict.fromkeys((s, t) for s, t in pairs))
    roots = group_pairs(unique)
    canonical: dict[int, str] = {}
    for (source, _), root in zip(unique, roots):
        key = normalise_for_split(source)
        if root not in canonical or key < canonical[root]:
            canonical[root] = key
    home = {root: split_of(key, shares) for root, key in canonical.items()}
    out: dict[str, list[tuple[str, str]]] = {name: [] for name in SPLITS}
    for pair, root in zip(unique, roots):
        out[home[root]].append(pair)
    return out


def _char_counts(texts: list[str], alphabet: dict[str, int]) -> np.ndarray:
    counts = np.zeros((len(texts), len(alphabet) + 1), dtype=np.int16)
    for row, text in enumerate(texts):
        for char in text:
            counts[row, alphabet.get(char, len(alphabet))] += 1
    return counts


def find_leaks(train, held_out, threshold: float = SIMILARITY,
               min_words: int = MIN_CONTAINED_WORDS) -> list[tuple[str, str, str]]:
    """Held-out pairs whose source has a near-duplicate among the training sources, found by
    comparing the two lists directly (not through ``group_pairs``): (held-out source, training
    source, why), why being "similar" (``similarity`` >= ``threshold``) or "contains" (one
    normalised source holds the other as whole words, the shorter of ``min_words`` or more).

    Every held-out source is compared with every training source: an upper bound on difflib's
    ratio from the two texts' letter counts (numpy) leaves few to compare exactly."""
    check_number("threshold", threshold, 0.0, 1.0)
    train_keys = sorted({normalise_for_split(s) for s, _ in train})
    held_keys = sorted({normalise_for_split(s) for s, _ in held_out})
    leaks: list[tuple[str, str, str]] = []
    if not train_keys or not held_keys:
        return leaks
    train_set, held_set = set(train_keys), set(held_keys)
    found: set[tuple[str, str]] = set()
    for key in held_keys:  # the held-out source holds a training source, or is one
        for span in [key, *_word_spans(key.split(), min_words)]:
            if span in train_set and (key, span) not in found:
                found.add((key, span))
                leaks.append((key, span, "contains"))
    for key in train_keys:  # a training source holds a held-out source
        for span in _word_spans(key.split(), min_words):
            if span in held_set and (span, key) not in found:
                found.add((span, key))
                leaks.append((span, key, "contains"))
    alphabet = {c: i for i, c in enumerate(sorted(set("".join(train_keys + held_keys))))}
    train_counts = _char_counts(train_keys, alphabet)
    train_lengths = train_counts.sum(1)
    held_counts = _char_counts(held_keys, alphabet)
    for row, key in enumerate(held_keys):
        common = np.minimum(train_counts, held_counts[row]).sum(1)
        bound = 2 * common / np.maximum(train_lengths + len(key), 1)
        for j in np.flatnonzero(bound >= threshold):
            other = train_keys[j]
            if (key, other) not in found and difflib.SequenceMatcher(
                    None, key, other, autojunk=False).ratio() >= threshold:
                found.add((key, other))
                leaks.append((key, other, "similar"))
    return leaks


def content_hash(pairs) -> str:
    """A short fingerprint of a list of pairs (SHA-256 of its text, first 16 hex digits): the
    tests pin the Ding test split by it without storing the sentences."""
    digest = hashlib.sha256()
    for source, target in pairs:
        digest.update(f"{source}\t{target}\n".encode("utf-8"))
    return digest.hexdigest()[:16]


__all__ = ["DEFAULT_FRACTIONS", "MIN_CONTAINED_WORDS", "SIMILARITY", "SPLITS", "content_hash",
           "find_leaks", "group_pairs", "normalise_for_split", "similarity", "split_of",
           "split_pairs", "split_position"]
