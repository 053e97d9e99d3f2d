"""Attention: scores, a NaN-free masked softmax, and the weighted sum of values (paper 3.2.1).

Shapes use B (batch), Lq (queries), Lk (keys), d_k (query/key width), d_v (value width).
Masks are boolean with **True = blocked**.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from ._checks import (
    broadcast_shape,
    check_floating,
    check_instance,
    check_mask,
    check_matches_weight,
    check_min_rank,
    check_positive_int,
    check_probability,
    check_same_dtype_device,
    check_width,
)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last axis (the keys), ignoring blocked keys.

    A query row whose keys are *all* blocked gets all-zero weights, never NaN. The usual recipe,
    ``masked_fill(mask, -inf)`` then softmax, divides 0 by 0 on such a row. Instead we fill with the
    most negative finite number (so every row has a finite maximum and softmax stays finite), then
    set the blocked weights to exactly zero. On a row with at least one open key the blocked weights
    were already exactly 0, so this changes nothing there.

    scores (..., Lq, Lk), mask broadcastable to it -> weights (..., Lq, Lk)
    """
    check_floating("scores", scores)
    if scores.dim() == 0:
        raise ValueError("scores must have at least 1 dimension (the keys), got 0")
    if mask is None:
        return torch.softmax(scores, dim=-1)
    check_mask(mask, scores.shape, device=scores.device)
    very_negative = torch.finfo(scores.dtype).min
    weights = torch.softmax(scores.masked_fill(mask, very_negative), dim=-1)
    return weights.masked_fill(mask, 0.0)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(d_k)) v, the explicit path, returning the weights too.

    q (..., Lq, d_k), k (..., Lk, d_k), v (..., Lk, d_v), mask broadcastable to (..., Lq, Lk)
    -> context (..., Lq, d_v), weights (..., Lq, Lk)

    ``dropout_p`` is applied to the weights used for the context (pass 0.0 outside training);
    the returned ``weights`` are the attention distribution before dropout.

    Half precision (float16, bfloat16): the scores and the softmax are computed in
    float32, as the fused kernels do internally. In float16, q k^T overflows (its
    largest number is 65504) long before the scaled scores are large: entries of
    size 300 are enough.
    """
    _check_qkv(q, k, v)
    check_probability("dropout_p", dropout_p)
    d_k = q.size(-1)
    if q.dtype in (torch.float16, torch.bfloat16):
        q, k = q.float(), k.float()  # float32 scores and softmax (see above)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., Lq, Lk)
    weights = masked_softmax(scores, mask).to(v.dtype)  # (..., Lq, Lk)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    context = dropped @ v  # (..., Lq, Lk) @ (..., Lk, d_v) -> (..., Lq, d_v)
    return context, weights


def _check_qkv(q, k, v) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_floating(name, x)
        check_min_rank(name, x, 2)
    check_same_dtype_device(q=q, k=k, v=v)
    if q.size(-1) != k.size(-1):
        raise ValueError(
            f"q and k must have the same last dimension d_k, got q {q.size(-1)} and k {k.size(-1)}"
        )
    if k.size(-2) != v.size(-2):
        raise ValueError(
            f"k and v must have the same length Lk, got k {k.size(-2)} and v {v.size(-2)}"
        )
    if broadcast_shape(q.shape[:-2], k.shape[:-2], v.shape[:-2]) is None:  # (B, H)
        raise ValueError(
            f"q, k and v must have the same leading (batch) dimensions, got "
            f"q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)}"
        )


# ---------------------------------------------------------------------------------------------
# Scoring functions: each maps q (B, Lq, d_q) and k (B, Lk, d_k) to scores (B, Lq, Lk).
# ---------------------------------------------------------------------------------------------


def _check_qk(q: torch.Tensor, k: torch.Tensor, weight: torch.Tensor | None = None):
    """q (B, Lq, d_q) and k (B, Lk, d_k): floating, alike, and like the weight."""
    check_floating("q", q, ndim=3)
    check_floating("k", k, ndim=3)
    check_same_dtype_device(q=q, k=k)
    if q.size(0) != k.size(0):
        raise ValueError(f"q and k must have the same batch size, got {q.size(0)} and {k.size(0)}")
    if weight is not None:
        check_matches_weight("q", q, weight)


class DotScore(nn.Module):
    """score(q, k) = q . k  (Luong's "dot"). Needs d_q == d_k."""

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        _check_qk(q, k)
        if q.size(-1) != k.size(-1):
            raise ValueError(
                f"dot scores need q and k of the same width, got d_q={q.size(-1)} and d_k={k.size(-1)}"
            )
        return q @ k.transpose(1, 2)  # (B, Lq, d) @ (B, d, Lk) -> (B, Lq, Lk)


class ScaledDotScore(DotScore):
    """score(q, k) = q . k / sqrt(d_k)  (the Transformer's choice)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return super().forward(q, k) / math.sqrt(k.size(-1))


class GeneralScore(nn.Module):
    """score(q, k) = q^T W k  (Luong's "general", a bilinear form). q and k may differ in width."""

    def __init__(self, d_q: int, d_k: int):
        super().__init__()
        check_positive_int("d_q", d_q)
        check_positive_int("d_k", d_k)
        self.d_q, self.d_k = d_q, d_k
        self.W = nn.Linear(d_k, d_q, bias=False)  # maps a key into query space

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        _check_qk(q, k, self.W.weight)
        check_width("q", q, self.d_q, "d_q")
        check_width("k", k, self.d_k, "d_k")
        return q @ self.W(k).transpose(1, 2)  # (B, Lq, d_q) @ (B, d_q, Lk) -> (B, Lq, Lk)


class AdditiveScore(nn.Module):
    """score(q, k) = v^T tanh(W_q q + W_k k)  (Bahdanau; Luong's "concat" is the same function,
    since W [q; k] = W_q q + W_k k)."""

    def __init__(self, d_q: int, d_k: int, d_hidden: int):
        super().__init__()
        for name, value in (("d_q", d_q), ("d_k", d_k), ("d_hidden", d_hidden)):
            check_positive_int(name, value)
        self.d_q, self.d_k = d_q, d_k
        self.W_q = nn.Linear(d_q, d_hidden, bias=False)
        self.W_k = nn.Linear(d_k, d_hidden, bias=False)
        self.v = nn.Linear(d_hidden, 1, bias=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        _check_qk(q, k, self.W_q.weight)
        check_width("q", q, self.d_q, "d_q")
        check_width("k", k, self.d_k, "d_k")
        # Every (query, key) pair: (B, Lq, 1, h) + (B, 1, Lk, h) -> (B, Lq, Lk, h)
        hidden = torch.tanh(self.W_q(q).unsqueeze(2) + self.W_k(k).unsqueeze(1))
        return self.v(hidden).squeeze(-1)  # (B, Lq, Lk, 1) -> (B, Lq, Lk)


class Attention(nn.Module):
    """Attention with any scoring function: weights = masked_softmax(score(q, k)), context = weights v.

    q (B, Lq, d_q), k (B, Lk, d_k), v (B, Lk, d_v), mask broadcastable to (B, Lq, Lk)
    -> context (B, Lq, d_v), weights (B, Lq, Lk)
    """

    def __init__(self, score: nn.Module, dropout: float = 0.0):
        super().__init__()
        check_instance("score", score, nn.Module,
                       "a score module such as tl.ScaledDotScore()")
        check_probability("dropout", dropout)
        self.score = score
        self.dropout = nn.Dropout(dropout)

    def forward(self, q, k, v, mask=None):
        check_floating("v", v, ndim=3)
        scores = self.score(q, k)  # (B, Lq, Lk)
        check_same_dtype_device(k=k, v=v)
        if v.size(0) != k.size(0) or v.size(1) != k.size(1):
            raise ValueError(f"k and v must have the same batch size and length Lk, "
                             f"got k {tuple(k.shape)} and v {tuple(v.shape)}")
        weights = masked_softmax(scores, mask)  # (B, Lq, Lk)
        context = self.dropout(weights) @ v  # (B, Lq, d_v)
        return context, weights
