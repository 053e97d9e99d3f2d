"""Token embedding (paper section 3.4)."""
from __future__ import annotations

import math

import torch
from torch import nn

from ._checks import (
    check_bool,
    check_on_device,
    check_positive_int,
    check_tensor,
    check_token_id,
    check_token_ids,
)


class TokenEmbedding(nn.Module):
    """Look up a ``d_model``-dimensional vector for each token id and scale it by sqrt(d_model).

    The paper multiplies the embedding weights by sqrt(d_model) (section 3.4). With weights drawn
    with standard deviation d_model**-0.5 (our initialisation), the scaled vectors have entries of
    size about 1, the same scale as the sinusoidal positional encoding added next.

    The row ``pad_id`` is all zeros and receives no gradient (``padding_idx``).

    ``scale=False`` leaves out the sqrt(d_model) factor, for models trained without it.
    Hugging Face's Marian models have the same switch, ``scale_embedding``; the opus-mt
    models set it to True, like the paper (chapter 12).

    Shapes: tokens (B, L) int64 -> (B, L, d_model).
    """

    def __init__(self, vocab_size: int, d_model: int, pad_id: int | None = 0,
                 scale: bool = True):
        super().__init__()
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("d_model", d_model)
        check_bool("scale", scale)
        if pad_id is not None:
            check_token_id("pad_id", pad_id, vocab_size)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.pad_id = pad_id
        self.scale = scale
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        nn.init.normal_(self.embedding.weight, mean=0.0, std=d_model**-0.5)
        if pad_id is not None:
            with torch.no_grad():
                self.embedding.weight[pad_id].zero_()

    @property
    def weight(self) -> torch.Tensor:
        """The (vocab_size, d_model) embedding matrix (shared with the output layer when tied)."""
        return self.embedding.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        check_tensor("tokens", tokens)
        check_on_device("tokens", tokens, self.weight)
        check_token_ids("tokens", tokens, self.vocab_size)
        vectors = self.embedding(tokens)  # (B, L, d_model)
        return vectors * math.sqrt(self.d_model) if self.scale else vectors

    def extra_repr(self) -> str:
        extra = "" if self.scale else ", scale=False"
        return (f"vocab_size={self.vocab_size}, d_model={self.d_model}, "
                f"pad_id={self.pad_id}{extra}")
