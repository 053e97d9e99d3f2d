"""Worked examples built on transformer_lib. ``number_words``: the capstone (English number words
-> German or French), with ``load_checkpoint`` and ``translate`` for trained models."""
from .number_words import (
    NumberTranslator,
    attention_batch,
    attention_maps,
    exact_match,
    load_checkpoint,
    save_checkpoint,
    train_number_words,
    translate,
)

__all__ = ["NumberTranslator", "attention_batch", "attention_maps", "exact_match", "load_checkpoint", "save_checkpoint",
           "train_number_words", "translate"]
