"""Stable train/validation/test splits of a real corpus, by a hash of the source sentence.

A pair's split is decided by its source sentence alone, so it never depends on the order of the
file, on the other pairs, or on Python's per-process ``hash`` seed: the same sentence lands in
the same split on every machine and in every release of the corpus that still holds it.

The hash is taken of the sentence *normalised* (``normalise_for_split``: case, punctuation and
extra spaces removed), so near-duplicates ("Wie geht's?", "wie gehts") share a split: a test
sentence can never be learned in training in a slightly different spelling. Every pair with the
same normalised source lands in the same split too, whatever its target.
"""
from __future__ import annotations

import hashlib
import unicodedata

from .._checks import check_number

SPLITS = ("train", "valid", "test")
# Shares of validation and test; training gets the rest: about 1,000 each of Ding's 17,000.
DEFAULT_FRACTIONS = {"valid": 0.06, "test": 0.06}

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


def split_pairs(pairs, fractions: dict | None = None) -> dict[str, list[tuple[str, str]]]:
    """Deal (source, target) pairs into {"train": [...], "valid": [...], "test": [...]} by
    ``split_of(source)``, keeping their order and dropping exact repeats of a pair."""
    shares = _check_fractions(DEFAULT_FRACTIONS if fractions is None else fractions)
    out: dict[str, list[tuple[str, str]]] = {name: [] for name in SPLITS}
    seen: set[tuple[str, str]] = set()
    for pair in pairs:
        if pair in seen:
            continue
        seen.add(pair)
        out[split_of(pair[0], shares)].append(pair)
    return out


def content_hash(pairs) -> str:
    """A short fingerprint of a list of pairs (SHA-256 of its text, first 16 hex digits): the
    tests pin the Ding test split by it without storing the sentences."""
    digest = hashlib.sha256()
    for source, target in pairs:
        digest.update(f"{source}\t{target}\n".encode("utf-8"))
    return digest.hexdigest()[:16]


__all__ = ["DEFAULT_FRACTIONS", "SPLITS", "content_hash", "normalise_for_split", "split_of",
           "split_pairs", "split_position"]
