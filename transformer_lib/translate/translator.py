"""A ``Transformer`` that carries its subword tokenizer: text in, text out.

``build_translator(tokenizer, preset, ...)`` makes one for a corpus's joint vocabulary;
``encode_pairs`` turns (source, target) sentences into the padded id tensors the trainer
batches: source ``ids + [EOS]``, target ``[BOS] + ids + [EOS]`` (the decoder reads all but
the last, and learns to predict all but the first). A source may begin with tag tokens
(``<2en>``: "translate into English"; ``<dict>``: "a dictionary entry, not a sentence"),
special tokens of the vocabulary; a ``Translator`` trained with a ``source_tag`` puts that
tag before every sentence it translates (``encode_source``).
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
    exactly a ``Transformer``'s (same ``state_dict``). ``source_tag`` (e.g. ``"<2en>"``
    for a model trained in both directions): a tag of the vocabulary put before every
    source sentence it translates."""

    def __init__(self, tokenizer, corpus: dict | None = None, preset: str | None = None,
                 max_target_len: int = 128, source_tag: str | None = None, **model_config):
        vocab = len(tokenizer)
        super().__init__(vocab, vocab, pad_id=tokenizer.pad_id, **model_config)
        self.tokenizer = tokenizer
        self.corpus = dict(corpus or {})
        self.preset = preset
        self.max_target_len = max_target_len
        self.source_tag = source_tag
        self._prefix = [tokenizer.token_id(source_tag)] if source_tag is not None else []

    def encode_source(self, text: str) -> list[int]:
        """A sentence to translate -> its source ids: the ``source_tag`` (if any), the
        pieces, EOS, as the model saw its sources in training."""
        return self._prefix + self.tokenizer.encode(text) + [self.tokenizer.eos_id]

    def extra_state(self) -> dict:
        """Everything besides the weights that a checkpoint needs (plain Python values)."""
        state = dict(tokenizer=self.tokenizer.to_json(), corpus=self.corpus,
                     preset=self.preset, max_target_len=self.max_target_len)
        if self.source_tag is not None:  # (absent: the checkpoints saved before tags)
            state["source_tag"] = self.source_tag
        return state


def build_translator(tokenizer, preset: str = "small", corpus: dict | None = None,
                     max_target_len: int = 128, source_tag: str | None = None,
                     **overrides) -> Translator:
    """A fresh ``Translator`` of ``preset``'s size; ``overrides`` are more
    ``tl.Transformer`` settings (``dropout``, ``attention_dropout``,
    ``activation_dropout``, ``norm_first``, ``share_embeddings``, ``max_len``, or a
    preset's own keys: ``d_model``, ``num_heads``, ``num_encoder_layers``,
    ``num_decoder_layers``, ``d_ff``)."""
    allowed = {"dropout", "attention_dropout", "activation_dropout", "norm_first",
               "share_embeddings", "max_len", "d_model", "num_heads", "num_encoder_layers",
               "num_decoder_layers", "d_ff"}
    unknown = set(overrides) - allowed
    if unknown:
        raise ValueError(f"unknown model settings {sorted(unknown)}; expected some of "
                         f"{sorted(allowed)}")
    config = {**preset_config(preset), **overrides}
    return Translator(tokenizer, corpus, preset, max_target_len, source_tag, **config)


def encode_examples(tokenizer, pairs, tags=None, dropout: float = 0.0):
    """(source, target) pairs -> lists of source ids (``tags[i]``'s ids, the pieces, EOS)
    and target ids (BOS, the pieces, EOS). ``tags``: one tuple of tag tokens per pair, or
    None; ``dropout``: BPE-dropout on both sides (training only)."""
    sources = tokenizer.encode_batch([s for s, _ in pairs], dropout=dropout)
    targets = tokenizer.encode_batch([t for _, t in pairs], dropout=dropout)
    eos, bos = [tokenizer.eos_id], [tokenizer.bos_id]
    if tags is not None:
        ids = {tag: tokenizer.token_id(tag) for tag in set().union(*tags)}
        sources = [[ids[tag] for tag in before] + s for before, s in zip(tags, sources)]
    return [s + eos for s in sources], [bos + t + eos for t in targets]


def encode_pairs(tokenizer, pairs, max_len: int, tags=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(source, target) sentence pairs -> padded (N, Ls) source and (N, Lt) target ids
    (``encode_examples``; ``tags``: one tuple of tag tokens per pair, put before its
    source). Pairs longer than ``max_len`` tokens on either side are left out (they are
    rare, and the model has only ``max_len`` positions)."""
    check_positive_int("max_len", max_len)
    encoded = encode_examples(tokenizer, pairs, tags)
    kept = [(s, t) for s, t in zip(*encoded) if len(s) <= max_len and len(t) <= max_len]
    if not kept:
        raise ValueError(f"no pair fits in max_len={max_len} tokens")
    return (pad_sequences([s for s, _ in kept], tokenizer.pad_id),
            pad_sequences([t for _, t in kept], tokenizer.pad_id))
