"""Multi30k (Elliott et al., 2016): 31,014 image captions in English and German, from a folder.

The reader downloads the files once (nothing here ever downloads); the official repository
https://github.com/multi30k/dataset keeps them under ``data/task1/raw/``::

    train.de.gz  train.en.gz             29,000 pairs
    val.de.gz    val.en.gz                1,014 pairs
    test_2016_flickr.de.gz  ...en.gz      1,000 pairs (the test set of WMT 2016; sacreBLEU
                                          knows it as -t multi30k/2016)

Files may be gzipped or not. The older names ``valid.*``, ``test2016.*`` and ``test.*`` are
accepted too. Multi30k comes with its own split, which is kept as published.
"""
from __future__ import annotations

import gzip
import os
import unicodedata

from .corpus import Corpus, CorpusNotFoundError

MULTI30K_URL = "https://github.com/multi30k/dataset/tree/master/data/task1/raw"
# For each split, the file stems tried in order (the official name first).
MULTI30K_FILES = {"train": ("train",), "valid": ("val", "valid"),
                  "test": ("test_2016_flickr", "test2016", "test")}


def _find(folder: str, stems, lang: str) -> str | None:
    for stem in stems:
        for name in (f"{stem}.{lang}", f"{stem}.{lang}.gz"):
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                return path
    return None


def _read_lines(path: str) -> list[str]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [" ".join(unicodedata.normalize("NFC", line).split()) for line in f]


def load_multi30k(folder=None, src_lang: str = "de", tgt_lang: str = "en", *,
                  path=None) -> Corpus:
    """Multi30k's train/valid/test pairs from ``folder`` (see the module's docstring for the
    file names; ``path=`` is another name for it, as the other corpora are found by ``path``).
    A missing file raises ``CorpusNotFoundError`` naming every missing file and where to get
    it; files of one split with different line counts raise ``ValueError``."""
    if folder is None and path is None:
        raise TypeError("load_multi30k needs the folder of the Multi30k files")
    if folder is not None and path is not None:
        raise TypeError("give the Multi30k folder once, as folder= or as path=")
    folder = path if folder is None else folder
    if not isinstance(folder, (str, os.PathLike)):
        raise TypeError(f"folder must be a str or a path, got {type(folder).__name__}")
    if not os.path.isdir(folder):
        raise CorpusNotFoundError(
            f"no Multi30k folder at {os.fspath(folder)}: download the files from "
            f"{MULTI30K_URL} (train, val and test_2016_flickr, .{src_lang} and .{tgt_lang}, "
            f"gzipped or not) into one folder")
    for lang in (src_lang, tgt_lang):
        if not isinstance(lang, str) or not lang:
            raise ValueError(f"src_lang and tgt_lang must be language codes like 'de', "
                             f"got {lang!r}")
    if src_lang == tgt_lang:
        raise ValueError(f"src_lang and tgt_lang must differ, got {src_lang!r} for both")
    folder = os.fspath(folder)
    paths, missing = {}, []
    for split, stems in MULTI30K_FILES.items():
        for lang in (src_lang, tgt_lang):
            path = _find(folder, stems, lang)
            if path is None:
                missing.append(f"{stems[0]}.{lang}(.gz)")
            paths[split, lang] = path
    if missing:
        raise CorpusNotFoundError(
            f"Multi30k is not complete in {folder}: missing {', '.join(missing)}. Download the "
            f"files from {MULTI30K_URL} (e.g. train.{src_lang}.gz, val.{src_lang}.gz, "
            f"test_2016_flickr.{src_lang}.gz and the same for {tgt_lang}) into that folder")
    splits = {}
    for split in MULTI30K_FILES:
        sources, targets = _read_lines(paths[split, src_lang]), _read_lines(paths[split, tgt_lang])
        if len(sources) != len(targets):
            raise ValueError(f"Multi30k {split}: {paths[split, src_lang]} has {len(sources)} "
                             f"lines but {paths[split, tgt_lang]} has {len(targets)}")
        splits[split] = [(s, t) for s, t in zip(sources, targets) if s and t]
    empty = [split for split, pairs in splits.items() if not pairs]
    if empty:
        raise ValueError(f"Multi30k in {folder}: the {' and '.join(empty)} files hold no pairs")
    info = {"source": os.path.abspath(folder), "version": "task1 raw",
            "files": {f"{split}.{lang}": os.path.basename(path)
                      for (split, lang), path in paths.items()},
            "split": "the published one (train / val / test_2016_flickr)"}
    return Corpus("multi30k", src_lang, tgt_lang, splits["train"], splits["valid"],
                  splits["test"], info=info)


__all__ = ["MULTI30K_FILES", "MULTI30K_URL", "load_multi30k"]
