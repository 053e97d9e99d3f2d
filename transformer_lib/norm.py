"""Layer normalisation from scratch (Ba et al. 2016; the "Norm" of the paper's Add & Norm)."""
from __future__ import annotations

import torch
from torch import nn

from ._checks import check_positive_int, check_tensor


class LayerNorm(nn.Module):
    """Normalise each position's vector to mean 0 and variance 1, then scale and shift.

        y = (x - mean) / sqrt(var + eps) * weight + bias

    over the last dimension, with the *biased* variance (divide by d, not d - 1) and eps *inside*
    the square root: exactly what ``nn.LayerNorm`` computes. x (..., d_model) -> (..., d_model).
    """

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        check_positive_int("d_model", d_model)
        self.d_model = d_model
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_tensor("x", x)
        if x.size(-1) != self.d_model:
            raise ValueError(f"x must have last dimension d_model={self.d_model}, got {x.size(-1)}")
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        var = x.var(dim=-1, keepdim=True, unbiased=False)  # (..., 1)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, eps={self.eps}"
