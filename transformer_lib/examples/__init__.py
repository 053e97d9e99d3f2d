"""Worked examples built on transformer_lib. ``number_words``: the capstone (English number words
-> German or French), with ``load_checkpoint`` and ``translate`` for trained models.

The names below are imported from ``number_words`` when first used, not when this package is:
``python -m transformer_lib.examples.number_words`` (one process per rank under torchrun)
then runs the module once, without Python's warning that it was imported before it ran.
"""
from importlib import import_module

__all__ = ["NumberTranslator", "attention_batch", "attention_maps", "exact_match", "load_checkpoint", "save_checkpoint",
           "train_number_words", "translate"]


def __getattr__(name: str):
    if name == "number_words":
        return import_module(".number_words", __name__)
    if name in __all__:
        return getattr(import_module(".number_words", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
