"""The decoder: masked self-attention, cross-attention over the encoder's output, feed-forward."""
from __future__ import annotations

import torch
from torch import nn

from ._checks import (
    check_activations,
    check_bool,
    check_instance,
    check_positive_int,
    check_same_dtype_device,
    check_same_size,
)
from .feedforward import PositionwiseFeedForward
from .multihead import MultiHeadAttention
from .norm import LayerNorm


class DecoderLayer(nn.Module):
    """One decoder layer (paper section 3.1), with three Add & Norm sublayers.

    Self-attention and cross-attention are *separate* modules: they attend to different things
    (earlier target tokens vs. the source sentence) and must learn different projections.

    x (B, Lt, d_model), memory (B, Ls, d_model), self_mask broadcastable to (B, H, Lt, Lt),
    memory_mask broadcastable to (B, H, Lt, Ls) -> (B, Lt, d_model); with ``need_weights=True``
    also the self- and cross-attention weights. ``cache`` (a dict, see ``Decoder.new_cache``)
    enables incremental decoding: x then holds only the new positions.
    """

    def __init__(self, d_model, num_heads, d_ff, dropout=0.1, norm_first=False, activation="relu"):
        super().__init__()
        check_bool("norm_first", norm_first)
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = PositionwiseFeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(self, x, memory, self_mask=None, memory_mask=None, need_weights=False, cache=None):
        _check_inputs(x, memory, self.self_attn.d_model)
        layer_cache = isinstance(cache, dict) and {"self", "cross"} <= set(cache)
        if cache is not None and not layer_cache:
            raise TypeError("cache must be one layer's entry of Decoder.new_cache(), "
                            "a dict with 'self' and 'cross', "
                            f"got {type(cache).__name__}")
        self_cache = cache["self"] if cache is not None else None
        cross_cache = cache["cross"] if cache is not None else None

        def self_block(h):
            out, w = self.self_attn(h, h, h, self_mask, need_weights, cache=self_cache)
            return self.dropout1(out), w

        def cross_block(h):
            out, w = self.cross_attn(h, memory, memory, memory_mask, need_weights, cache=cross_cache)
            return self.dropout2(out), w

        if self.norm_first:
            out, self_w = self_block(self.norm1(x))
            x = x + out
            out, cross_w = cross_block(self.norm2(x))
            x = x + out
            x = x + self.dropout3(self.ffn(self.norm3(x)))
        else:
            out, self_w = self_block(x)
            x = self.norm1(x + out)
            out, cross_w = cross_block(x)
            x = self.norm2(x + out)
            x = self.norm3(x + self.dropout3(self.ffn(x)))
        return (x, self_w, cross_w) if need_weights else x


class Decoder(nn.Module):
    """``num_layers`` decoder layers (plus a final LayerNorm when ``norm_first=True``).

    With ``need_weights=True`` returns (x, self_maps, cross_maps), one (B, H, Lq, Lk) map per layer.
    """

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.1, norm_first=False,
                 activation="relu"):
        super().__init__()
        check_positive_int("num_layers", num_layers)
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation)
            for _ in range(num_layers)
        )
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()

    def new_cache(self) -> list[dict]:
        """An empty key/value cache for incremental decoding, one entry per layer."""
        return [{"self": {}, "cross": {"static": True}} for _ in self.layers]

    def check_cache(self, cache) -> None:
        """Raise unless ``cache`` is None or a list with one entry per layer."""
        if cache is None:
            return
        check_instance("cache", cache, list, "a list from Decoder.new_cache()")
        layers = len(self.layers)
        if len(cache) != layers:
            raise ValueError(f"cache must have one entry per layer ({layers}), "
                             f"got {len(cache)}; make it with Decoder.new_cache()")

    def forward(self, x: torch.Tensor, memory, self_mask=None, memory_mask=None,
                need_weights=False, cache=None):
        _check_inputs(x, memory, self.layers[0].self_attn.d_model)
        self.check_cache(cache)
        self_maps, cross_maps = [], []
        for i, layer in enumerate(self.layers):
            layer_cache = cache[i] if cache is not None else None
            if need_weights:
                x, self_w, cross_w = layer(x, memory, self_mask, memory_mask, True, layer_cache)
                self_maps.append(self_w)
                cross_maps.append(cross_w)
            else:
                x = layer(x, memory, self_mask, memory_mask, cache=layer_cache)
        x = self.norm(x)
        return (x, self_maps, cross_maps) if need_weights else x


def _check_inputs(x, memory, d_model: int) -> None:
    """x (B, Lt, d_model), memory (B, Ls, d_model): floating, one batch, one dtype."""
    check_activations("x", x, d_model)
    check_activations("memory", memory, d_model)
    check_same_size(0, "batch size", x=x, memory=memory)
    check_same_dtype_device(x=x, memory=memory)
