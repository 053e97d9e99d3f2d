"""The encoder: a stack of (self-attention, feed-forward) layers, each wrapped in Add & Norm."""
from __future__ import annotations

import torch
from torch import nn

from ._checks import check_activations, check_bool, check_positive_int
from .feedforward import PositionwiseFeedForward
from .multihead import MultiHeadAttention
from .norm import LayerNorm


class EncoderLayer(nn.Module):
    """One encoder layer (paper section 3.1).

    Post-norm (the paper, ``norm_first=False``):  x = norm(x + dropout(sublayer(x)))
    Pre-norm (``norm_first=True``):               x = x + dropout(sublayer(norm(x)))

    x (B, L, d_model), mask broadcastable to (B, H, L, L) -> (B, L, d_model);
    with ``need_weights=True`` also the self-attention weights (B, H, L, L).
    """

    def __init__(self, d_model, num_heads, d_ff, dropout=0.1, norm_first=False, activation="relu"):
        super().__init__()
        check_bool("norm_first", norm_first)
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = PositionwiseFeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, mask=None, need_weights=False):
        check_activations("x", x, self.self_attn.d_model)
        if self.norm_first:
            attended, weights = self._self_attention(self.norm1(x), mask, need_weights)
            x = x + attended
            x = x + self.dropout2(self.ffn(self.norm2(x)))
        else:
            attended, weights = self._self_attention(x, mask, need_weights)
            x = self.norm1(x + attended)
            x = self.norm2(x + self.dropout2(self.ffn(x)))
        return (x, weights) if need_weights else x

    def _self_attention(self, x, mask, need_weights):
        out, weights = self.self_attn(x, x, x, mask=mask, need_weights=need_weights)
        return self.dropout1(out), weights


class Encoder(nn.Module):
    """``num_layers`` encoder layers. With ``norm_first=True`` a final LayerNorm follows the stack
    (pre-norm layers leave their output un-normalised).

    x (B, L, d_model) -> (B, L, d_model); with ``need_weights=True`` also a list of
    (B, H, L, L) attention maps, one per layer.
    """

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.1, norm_first=False,
                 activation="relu"):
        super().__init__()
        check_positive_int("num_layers", num_layers)
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation)
            for _ in range(num_layers)
        )
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x: torch.Tensor, mask=None, need_weights=False):
        check_activations("x", x, self.layers[0].self_attn.d_model)
        maps = []
        for layer in self.layers:
            if need_weights:
                x, weights = layer(x, mask, need_weights=True)
                maps.append(weights)
            else:
                x = layer(x, mask)
        x = self.norm(x)
        return (x, maps) if need_weights else x
