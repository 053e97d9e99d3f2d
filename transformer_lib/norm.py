"""Layer normalisation from scratch (Ba et al. 2016; the "Norm" of the paper's Add & Norm)."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ._checks import check_matches_weight, check_number, check_positive_int, check_width


class LayerNorm(nn.Module):
    """Normalise each position's vector to mean 0 and variance 1, then scale and shift.

        y = (x - mean) / sqrt(var + eps) * weight + bias

    over the last dimension, with the *biased* variance (divide by d, not d - 1) and eps *inside*
    the square root: exactly what ``nn.LayerNorm`` computes. x (..., d_model) -> (..., d_model).

    Two paths that compute the same function, like ``MultiHeadAttention``'s:
    - ``explicit(x)`` (for teaching): the formula above, one tensor operation at a time.
    - ``forward(x)`` (fast, what ``norm(x)`` calls): PyTorch's fused ``F.layer_norm``.
      The formula runs eight kernels forward (one per operation) and more backward,
      each a full pass over the activations; the fused kernel makes one pass each way.
      A model calls its LayerNorms in every layer, so on a GPU this decides whether a
      training step keeps up with ``nn.Transformer``.

    Like ``nn.LayerNorm``, half-precision input (float16, bfloat16) is normalised in
    float32 and the result cast back: in float16 the variance of values of size 256 is
    already 65536, past float16's largest number (65504), and the output would be zeros.
    """

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        check_positive_int("d_model", d_model)
        check_number("eps", eps, 0.0, low_open=True)
        self.d_model = d_model
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def explicit(self, x: torch.Tensor) -> torch.Tensor:
        """The formula, step by step (the teaching path; ``forward`` computes the same)."""
        self._check_input(x)
        half = x.dtype in (torch.float16, torch.bfloat16)
        h = x.float() if half else x  # float32 statistics for half precision
        mean = h.mean(dim=-1, keepdim=True)  # (..., 1)
        var = h.var(dim=-1, keepdim=True, unbiased=False)  # (..., 1)
        y = (h - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias
        return y.to(x.dtype) if half else y

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        if x.dtype != self.weight.dtype and not torch.is_autocast_enabled(x.device.type):
            # Say half-precision input to float32 weights: compute in the wider dtype,
            # as ``explicit`` does (not every device's kernel takes mixed dtypes).
            dtype = torch.promote_types(x.dtype, self.weight.dtype)
            y = F.layer_norm(x.to(dtype), (self.d_model,), self.weight.to(dtype),
                             self.bias.to(dtype), self.eps)
            return y.to(x.dtype) if x.dtype in (torch.float16, torch.bfloat16) else y
        return F.layer_norm(x, (self.d_model,), self.weight, self.bias, self.eps)

    def _check_input(self, x) -> None:
        # Autocast may give half-precision input to float32 weights: dtypes may differ.
        check_matches_weight("x", x, self.weight, need_same_dtype=False)
        check_width("x", x, self.d_model)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, eps={self.eps}"
