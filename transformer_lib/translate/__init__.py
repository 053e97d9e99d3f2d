"""One trainer and one command for every corpus: ``python -m transformer_lib.translate
train|translate|evaluate``.

- ``trainer``: the training loop every corpus shares (``fit``), budgets on the wall or
  CPU clock, torchrun, resume and stop;
- ``presets``: model sizes from ``tiny`` to the paper's ``base``, and the recipes;
- ``translator``: a ``Transformer`` that carries its subword tokenizer, built for a corpus;
- ``search``: sentences in, sentences out, through ``greedy_decode`` / ``beam_search``;
- ``evaluate``: sacreBLEU's BLEU and chrF on a split, with their signatures, and the
  paired bootstrap that compares two systems;
- ``baselines``: what a model must beat: copy the source, retrieve the nearest training pair;
- ``checkpoints``: safe reading, and the average of the last K checkpoints (paper 6.1);
- ``everyday``: the project's own everyday test sentences, read and checked.
"""
from .baselines import Retrieval, copy_source
from .checkpoints import average_checkpoints, average_state_dicts, load_translator, save_translator
from .evaluate import (bootstrap_interval, evaluate, exact_matches, paired_bootstrap, report,
                       score)
from .everyday import load_everyday, parse_everyday
from .pipeline import CorpusResult, train_corpus, train_cpu_budget
from .presets import LONG_RECIPE, PRESETS, RECIPE
from .search import translate_texts
from .translator import Translator, build_translator

__all__ = ["LONG_RECIPE", "PRESETS", "RECIPE", "CorpusResult", "Retrieval", "Translator",
           "average_checkpoints", "average_state_dicts", "bootstrap_interval",
           "build_translator", "copy_source", "evaluate", "exact_matches", "load_everyday",
           "load_translator", "paired_bootstrap", "parse_everyday", "report",
           "save_translator", "score", "train_corpus", "train_cpu_budget", "translate_texts"]
