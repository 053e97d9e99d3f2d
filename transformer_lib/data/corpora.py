"""Every corpus by name: ``load_corpus("ding")``, ``load_corpus("tsv", path=...)``, ...

One registry, one level deep: each name maps to the function that loads it, so a reader goes
from ``--corpus ding`` to ``load_ding`` in one jump.
"""
from __future__ import annotations

import inspect

from .corpus import Corpus
from .ding import load_ding
from .multi30k import load_multi30k
from .numbers import NumberWordsData
from .tsv import load_tsv


def load_number_words(lang: str = "de", **options) -> Corpus:
    """The capstone's number words (English -> ``lang``) as a corpus of text pairs.

    ``NumberWordsData(lang, **options)`` makes the data exactly as the capstone does (its split
    is *by number*, not by hash), and the corpus lists its pairs: "train" its ``train_size``
    sampled numbers (with repeats), "valid" and "test" its held-out numbers in order. The
    ``NumberWordsData`` itself is ``corpus.dataset``.
    """
    data = NumberWordsData(lang, **options)
    splits = {name: [data.pair(int(n)) for n in data.numbers[name]]
              for name in ("train", "valid", "test")}
    info = {"source": "num2words", "version": "", "lang": lang, "scheme": data.scheme,
            "options": dict(options), "split": "by number (split_numbers)"}
    return Corpus("number-words", "en", lang, splits["train"], splits["valid"], splits["test"],
                  info=info, dataset=data)


CORPORA = {
    "ding": load_ding,
    "tsv": load_tsv,
    "multi30k": load_multi30k,
    "number-words": load_number_words,
}


def load_corpus(name: str, /, **options) -> Corpus:
    """The corpus ``name`` (a key of ``CORPORA``), loaded with ``options``:
    ``load_corpus("ding", phrases=True)``, ``load_corpus("tsv", path="deu.txt", src_col=1,
    tgt_col=0, src_lang="de", tgt_lang="en")``, ``load_corpus("multi30k", folder="m30k")``,
    ``load_corpus("number-words", lang="de", train_size=30_000)``."""
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}; the corpora are {sorted(CORPORA)}")
    loader = CORPORA[name]
    if name != "number-words":  # its options are NumberWordsData's, checked there
        accepted = inspect.signature(loader).parameters
        unknown = sorted(set(options) - set(accepted))
        if unknown:
            raise ValueError(f"corpus {name!r} has no option {', '.join(unknown)}; its options "
                             f"are {', '.join(accepted)}")
        required = [p.name for p in accepted.values() if p.default is inspect.Parameter.empty
                    and p.name not in options]
        if required:
            raise ValueError(f"corpus {name!r} needs {', '.join(f'{r}=' for r in required)} "
                             f"(e.g. load_corpus({name!r}, {required[0]}='...'))")
        if name == "multi30k" and "folder" not in options and "path" not in options:
            raise ValueError("corpus 'multi30k' needs folder= (the folder of its files)")
    return loader(**options)


__all__ = ["CORPORA", "load_corpus", "load_number_words"]
