"""Multi-head attention (paper section 3.2.2)."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ._checks import check_mask, check_positive_int, check_probability, check_tensor
from .attention import scaled_dot_product_attention


class MultiHeadAttention(nn.Module):
    """h heads of scaled dot-product attention over learned projections, concatenated and projected.

    query (B, Lq, d_model), key and value (B, Lk, d_model), mask broadcastable to (B, H, Lq, Lk)
    (bool, True = blocked) -> output (B, Lq, d_model), weights (B, H, Lq, Lk) or None.

    Two paths that give the same numbers:
    - ``need_weights=False`` (default, fast): PyTorch's fused ``F.scaled_dot_product_attention``.
    - ``need_weights=True`` (explicit, for teaching and plots): our ``scaled_dot_product_attention``,
      which also returns the per-head attention weights.

    ``cache`` (optional dict) serves incremental decoding. For self-attention, pass ``{}`` at the first
    step and the same dict afterwards: each call appends the new keys and values (already projected,
    (B, H, L, d_k)) to ``cache["k"]`` and ``cache["v"]``. For cross-attention, pass a dict with
    ``cache["static"] = True``: the keys and values of ``key``/``value`` are projected on the first
    call and reused afterwards.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("num_heads", num_heads)
        check_probability("dropout", dropout)
        if d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(proj.weight)
            if bias:
                nn.init.zeros_(proj.bias)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, d_model) -> (B, H, L, d_k). The transpose is essential: a bare ``view`` to
        (B, H, L, d_k) would cut the *sequence* into pieces and mix positions across heads."""
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_heads, self.d_k).transpose(1, 2)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, H, L, d_k) -> (B, L, d_model), the inverse of ``split_heads``."""
        batch, _, length, _ = x.shape
        return x.transpose(1, 2).reshape(batch, length, self.d_model)

    def forward(self, query, key, value, mask=None, need_weights=False, cache=None):
        self._check_inputs(query, key, value)
        q = self.split_heads(self.q_proj(query))  # (B, H, Lq, d_k)
        k, v = self._keys_values(key, value, cache)  # (B, H, Lk, d_k) each
        if mask is not None:
            check_mask(mask, (q.size(0), self.num_heads, q.size(2), k.size(2)))
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            context, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p)
        else:
            # The fused kernel's boolean mask means True = *may attend*: the opposite of ours.
            allowed = None if mask is None else ~mask
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=dropout_p)
            weights = None
        output = self.out_proj(self.merge_heads(context))  # (B, Lq, d_model)
        return output, weights

    def _keys_values(self, key, value, cache):
        """Project (or fetch from the cache) the keys and values, each (B, H, Lk, d_k)."""
        if cache is not None and cache.get("static") and "k" in cache:
            return cache["k"], cache["v"]
        k = self.split_heads(self.k_proj(key))
        v = self.split_heads(self.v_proj(value))
        if cache is not None:
            if not cache.get("static") and "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)  # append along the key axis
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        return k, v

    def _check_inputs(self, query, key, value):
        for name, x in (("query", query), ("key", key), ("value", value)):
            check_tensor(name, x, ndim=3)
            if x.size(-1) != self.d_model:
                raise ValueError(
                    f"{name} must have last dimension d_model={self.d_model}, got {x.size(-1)}"
                )
        if not (query.size(0) == key.size(0) == value.size(0)):
            raise ValueError(
                f"query, key and value must have the same batch size, got "
                f"{query.size(0)}, {key.size(0)} and {value.size(0)}"
            )
        if key.size(1) != value.size(1):
            raise ValueError(
                f"key and value must have the same length, got {key.size(1)} and {value.size(1)}"
            )

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, num_heads={self.num_heads}, d_k={self.d_k}, dropout={self.dropout}"
