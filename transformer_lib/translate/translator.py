"""A ``Transformer`` that carries its subword tokenizer: text in, text out.

``build_translator(tokenizer, preset, ...)`` makes one for a corpus's joint vocabulary;
``encode_pairs`` turns (source, target) sentences into the padded id tensors the trainer
batches: source ``ids + [EOS]``, target ``[BOS] + ids + [EOS]`` (the decoder reads all but
the last, and learns to predict all but the first).
"""
from __future__ import annotations

import torch

from .._checks import check_positive_int
from ..data.batching import pad_sequences
from ..model import Transformer
from .presets import preset_config


class Translator(Transformer):
    """A ``tl.Transformer`` with its ``tokenizer`` (a ``SubwordTokenizer``: one joint
    vocabulary, pad id 0), the corpus it learned from (``corpus``: name, languages and
    info) and ``max_target_len``, the most tokens decoding writes. Its weights are
    exactly a ``Transformer``'s (same ``state_dict``)."""

    def __init__(self, tokenizer, corpus: dict | None = None, preset: str | None = None,
                 max_target_len: int = 128, **model_config):
        vocab = len(tokenizer)
        super().__init__(vocab, vocab, pad_id=tokenizer.pad_id, **model_config)
        self.tokenizer = tokenizer
        self.corpus = dict(corpus or {})
        self.preset = preset
        self.max_target_len = max_target_len

    def extra_state(self) -> dict:
        """Everything besides the weights that a checkpoint needs (plain Python values)."""
        return dict(tokenizer=self.tokenizer.to_json(), corpus=self.corpus,
                    preset=self.preset, max_target_len=self.max_target_len)


def build_translator(tokenizer, preset: str = "small", corpus: dict | None = None,
                     max_target_len: int = 128, **overrides) -> Translator:
    """A fresh ``Translator`` of ``preset``'s size; ``overrides`` are more
    ``tl.Transformer`` settings (``dropout``, ``norm_first``, ``share_embeddings``,
    ``max_len``, or a preset's own keys)."""
    allowed = {"dropout", "norm_first", "share_embeddings", "max_len", "d_model",
               "num_heads", "num_encoder_layers", "num_decoder_layers", "d_ff"}
    unknown = set(overrides) - allowed
    if unknown:
        raise ValueError(f"unknown model settings {sorted(unknown)}; expected some of "
                         f"{sorted(allowed)}")
    config = {**preset_config(preset), **overrides}
    return Translator(tokenizer, corpus, preset, max_target_len, **config)


def encode_pairs(tokenizer, pairs, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(source, target) sentence pairs -> padded (N, Ls) source and (N, Lt) target ids.
    Pairs longer than ``max_len`` tokens on either side are left out (they are rare, and
    the model has only ``max_len`` positions)."""
    check_positive_int("max_len", max_len)
    sources, targets = [], []
    for src, tgt in pairs:
        s = tokenizer.encode(src) + [tokenizer.eos_id]
        t = [tokenizer.bos_id] + tokenizer.encode(tgt) + [tokenizer.eos_id]
        if len(s) <= max_len and len(t) <= max_len:
            sources.append(s)
            targets.append(t)
    if not sources:
        raise ValueError(f"no pair fits in max_len={max_len} tokens")
    return pad_sequences(sources, tokenizer.pad_id), pad_sequences(targets, tokenizer.pad_id)
