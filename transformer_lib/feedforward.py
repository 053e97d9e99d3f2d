"""Position-wise feed-forward network (paper section 3.3)."""
from __future__ import annotations

import functools

import torch
from torch import nn
from torch.nn import functional as F

from ._checks import (
    check_choice,
    check_matches_weight,
    check_positive_int,
    check_probability,
    check_width,
)

# The paper uses ReLU. GELU (exact, or its tanh approximation) and SiLU (= swish,
# x * sigmoid(x)) are the usual alternatives, used by BERT, GPT-2 and Marian models.
_ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"),
    "silu": F.silu,
}


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = linear2(dropout(activation(linear1(x)))), applied to each position independently.

    x (B, L, d_model) -> (B, L, d_model), through a hidden width d_ff (the paper: 4 d_model).
    ``activation`` is "relu" (the paper), "gelu", "gelu_tanh" or "silu".
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("d_ff", d_ff)
        check_probability("dropout", dropout)
        check_choice("activation", activation, _ACTIVATIONS)
        self.d_model = d_model
        self.activation = activation
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_matches_weight("x", x, self.linear1.weight)
        check_width("x", x, self.d_model)
        hidden = _ACTIVATIONS[self.activation](self.linear1(x))  # (B, L, d_ff)
        return self.linear2(self.dropout(hidden))  # (B, L, d_model)
