"""Sinusoidal positional encoding (paper section 3.5)."""
from __future__ import annotations

import math

import torch
from torch import nn

from ._checks import (
    check_activations,
    check_bool,
    check_int,
    check_positive_int,
    check_probability,
)


def sinusoidal_table(max_len: int, d_model: int,
                     interleaved: bool = True) -> torch.Tensor:
    """The (max_len, d_model) table of the paper's positional encodings.

        PE[pos, 2i]   = sin(pos / 10000 ** (2i / d_model))
        PE[pos, 2i+1] = cos(pos / 10000 ** (2i / d_model))

    Odd ``d_model`` is supported: the last column is a sine with no cosine partner.

    ``interleaved=False`` puts the same numbers in another column order: all the sines
    first, then all the cosines, as in tensor2tensor, fairseq and Marian. It is a fixed
    permutation of the columns; a model trained with one order needs that order.
    """
    check_positive_int("max_len", max_len)
    check_positive_int("d_model", d_model)
    check_bool("interleaved", interleaved)
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)  # (ceil(d/2),)
    # 1 / 10000^(2i/d), computed as exp(-ln(10000) * 2i / d) for accuracy
    inv_freq = torch.exp(-math.log(10000.0) * two_i / d_model)  # (ceil(d/2),)
    angles = position * inv_freq  # (max_len, ceil(d/2))
    sines, cosines = torch.sin(angles), torch.cos(angles[:, : d_model // 2])
    if not interleaved:  # ceil(d/2) columns of sines, then floor(d/2) of cosines
        return torch.cat([sines, cosines], dim=1)
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = sines
    table[:, 1::2] = cosines
    return table


class PositionalEncoding(nn.Module):
    """Add the sinusoidal table to a batch of embeddings, then apply dropout.

    Shapes: x (B, L, d_model) -> (B, L, d_model). ``offset`` shifts the positions, which
    incremental decoding needs (the new token at step t sits at position t).
    ``interleaved`` chooses the table's column order (see ``sinusoidal_table``).
    """

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0,
                 interleaved: bool = True):
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("max_len", max_len)
        check_probability("dropout", dropout)
        self.d_model = d_model
        self.max_len = max_len
        self.interleaved = interleaved
        self.dropout = nn.Dropout(dropout)
        # A buffer, not a parameter: it moves with .to(device) and is saved, but is never trained.
        # persistent=False keeps it out of checkpoints, since it is recomputed from (max_len, d_model).
        self.register_buffer("table", sinusoidal_table(max_len, d_model, interleaved),
                             persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        check_activations("x", x, self.d_model)
        check_int("offset", offset, minimum=0)
        length = x.size(1)
        if offset + length > self.max_len:
            raise ValueError(
                f"sequence length {offset + length} exceeds max_len={self.max_len}"
            )
        x = x + self.table[offset : offset + length].to(x.dtype)  # (B, L, d) + (L, d)
        return self.dropout(x)

    def extra_repr(self) -> str:
        extra = "" if self.interleaved else ", interleaved=False"
        return f"d_model={self.d_model}, max_len={self.max_len}{extra}"
