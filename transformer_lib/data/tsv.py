"""Any tab-separated file of sentence pairs as a corpus: Tatoeba's and Anki's ``deu.txt`` style.

Those files hold one pair a line, ``English<TAB>German<TAB>attribution``; any column can be the
source or the target, and the other columns are ignored. The pairs are split as every real
corpus here is (``splits.split_pairs``): near-duplicates are grouped first (same normalised
source or target, one source inside another, or 0.9 character similarity), and each group goes
whole to the split that a hash of its smallest normalised source names.
"""
from __future__ import annotations

import os
import unicodedata

from .._checks import check_int
from .corpus import Corpus, CorpusNotFoundError
from .splits import DEFAULT_FRACTIONS, split_pairs


def read_tsv_pairs(path, src_col: int = 0, tgt_col: int = 1) -> tuple[list[tuple[str, str]], int]:
    """(the (source, target) pairs of a TSV file, how many lines were skipped). Texts are
    Unicode NFC with single spaces; a line with an empty source or target is skipped. A line
    with too few columns raises, naming the line."""
    check_int("src_col", src_col, minimum=0)
    check_int("tgt_col", tgt_col, minimum=0)
    if src_col == tgt_col:
        raise ValueError(f"src_col and tgt_col must differ, got {src_col} for both")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or a path, got {type(path).__name__}")
    if not os.path.isfile(path):
        raise CorpusNotFoundError(
            f"no TSV file at {os.fspath(path)}: give the path of a file with one pair a line, "
            f"columns separated by tabs (e.g. deu.txt from https://www.manythings.org/anki/)")
    pairs, skipped, needed = [], 0, max(src_col, tgt_col) + 1
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            columns = line.rstrip("\r\n").split("\t")
            if len(columns) < needed:
                raise ValueError(
                    f"{os.fspath(path)} line {number} has {len(columns)} tab-separated "
                    f"column(s), but src_col={src_col} and tgt_col={tgt_col} need {needed}: "
                    f"{line.strip()[:80]!r}")
            source, target = (" ".join(unicodedata.normalize("NFC", columns[i]).split())
                              for i in (src_col, tgt_col))
            if source and target:
                pairs.append((source, target))
            else:
                skipped += 1
    return pairs, skipped


def load_tsv(path, src_col: int = 0, tgt_col: int = 1, src_lang: str = "src",
             tgt_lang: str = "tgt", fractions: dict | None = None,
             name: str | None = None) -> Corpus:
    """A corpus from a TSV file: column ``src_col`` is the source, ``tgt_col`` the target.

    For Tatoeba's ``deu.txt`` (English first), German -> English is
    ``load_tsv("deu.txt", src_col=1, tgt_col=0, src_lang="de", tgt_lang="en")``.
    Exact repeats of a pair are dropped; ``fractions`` as in ``splits.split_of``.
    """
    pairs, skipped = read_tsv_pairs(path, src_col, tgt_col)
    if not pairs:
        raise ValueError(f"{os.fspath(path)} holds no pairs (no line with text in columns "
                         f"{src_col} and {tgt_col})")
    splits = split_pairs(pairs, fractions)
    info = {"source": os.path.abspath(path), "version": "", "src_col": src_col,
            "tgt_col": tgt_col, "fractions": dict(fractions or DEFAULT_FRACTIONS),
            "lines_with_pairs": len(pairs), "skipped_lines": skipped}
    name = name or os.path.splitext(os.path.basename(path))[0]
    return Corpus(name, src_lang, tgt_lang, splits["train"], splits["valid"], splits["test"],
                  info=info)


__all__ = ["load_tsv", "read_tsv_pairs"]
