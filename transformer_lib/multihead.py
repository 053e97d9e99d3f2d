"""Multi-head attention (paper section 3.2.2)."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ._checks import (
    check_bool,
    check_instance,
    check_mask,
    check_matches_weight,
    check_positive_int,
    check_probability,
    check_same_size,
    check_tensor,
    check_width,
)
from .attention import scaled_dot_product_attention


class MultiHeadAttention(nn.Module):
    """h heads of scaled dot-product attention over learned projections, concatenated and projected.

    query (B, Lq, d_model), key and value (B, Lk, d_model), mask broadcastable to (B, H, Lq, Lk)
    (bool, True = blocked) -> output (B, Lq, d_model), weights (B, H, Lq, Lk) or None.

    Two paths that compute the same function:
    - ``need_weights=False`` (default, fast): PyTorch's fused
      ``F.scaled_dot_product_attention``.
    - ``need_weights=True`` (explicit, for teaching and plots): our
      ``scaled_dot_product_attention``, which also returns the per-head attention
      weights.

    Their outputs agree to float rounding. Their float32 *gradients* agree with float64
    equally well (relative error about 3e-7 at scores of size 5, 1e-5 at 500, 3e-3 at
    5e4: a nearly saturated softmax is ill-conditioned whatever the path) until the
    scores q k^T / sqrt(d_k) pass about 1e5. Beyond that PyTorch's CPU flash kernel,
    which the fused path picks, loses its gradients (relative error 2e-1 at scores of
    5e6, far above 1 at 5e8), while the explicit path and PyTorch's math backend stay at
    1e-7. Scores that large mean a one-hot softmax (a diverging run); to study one, use
    ``need_weights=True`` or wrap the call in
    ``torch.nn.attention.sdpa_kernel(SDPBackend.MATH)``. See
    benchmarks/attention_precision.py.

    Self-attention (``query is key is value``) on the fast path, training on a GPU,
    projects Q, K and V with one matrix product: the three weights stacked into one
    (3 d_model, d_model) matrix, as ``nn.MultiheadAttention``'s ``in_proj_weight``, which
    saves kernel launches. The parameters stay the three Linears (same initialisation,
    same ``state_dict``); ``packed_qkv`` shows the stacking, done at every call from the
    current weights (its gradient flows back to each Linear). Everywhere else three
    products, which agree to float rounding:
    - the explicit path, for teaching;
    - training on the CPU: there the forward values are the same bit for bit, but the
      gradient of ``x`` sums the three products in another order, so a CPU training run
      would end a few bits away from the book's stored results;
    - without gradients (decoding): a stack made at every call would copy 3 d_model^2
      numbers for nothing, and one kept between calls could fall out of date without
      notice (a fused optimizer, ``Adam(fused=True)``, or an edit through ``.data``
      changes the weights without their version counter); three products measured as
      fast on the CPU.

    ``cache`` (optional dict) serves incremental decoding. For self-attention, pass
    ``{}`` at the first step and the same dict afterwards: each call appends the new
    keys and values (already projected, (B, H, L, d_k)) to ``cache["k"]`` and
    ``cache["v"]``. For cross-attention, pass a dict with ``cache["static"] = True``:
    the keys and values of ``key``/``value`` are projected on the first call and reused
    while the same ``key`` tensor comes back; a different one raises ValueError (a
    static cache belongs to one source batch: start a new one for new memory).
    A preallocated cache (``tl.StaticKVCache``, for fast decoding) is any object with
    ``update(k, v) -> (keys, values)``: it writes the new keys and values in place and
    returns all its slots; the caller's mask blocks the slots not written yet.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("num_heads", num_heads)
        check_probability("dropout", dropout)
        check_bool("bias", bias)
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

    def packed_qkv(self, x: torch.Tensor):
        """Q, K and V of ``x`` (B, L, d_model) with one matrix product -> three (B, H, L, d_k).

        The same numbers as ``q_proj(x)``, ``k_proj(x)``, ``v_proj(x)`` (to float rounding),
        one GEMM instead of three: x is read once and the product is three times wider."""
        batch, length, _ = x.shape
        projs = (self.q_proj, self.k_proj, self.v_proj)
        weight = torch.cat([p.weight for p in projs], dim=0)  # [Wq; Wk; Wv] (3 d, d)
        bias = (torch.cat([p.bias for p in projs], dim=0)  # [bq; bk; bv] (3 d,)
                if self.q_proj.bias is not None else None)
        qkv = F.linear(x, weight, bias)  # (B, L, 3 d)
        qkv = qkv.view(batch, length, 3, self.num_heads, self.d_k)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B, H, L, d_k)
        return q, k, v

    def forward(self, query, key, value, mask=None, need_weights=False, cache=None):
        self._check_inputs(query, key, value, need_weights, cache)
        static = isinstance(cache, dict) and cache.get("static")
        if (not need_weights and query is key and key is value and not static
                and query.device.type != "cpu" and torch.is_grad_enabled()):
            q, k, v = self.packed_qkv(query)  # self-attention, training: one GEMM for Q, K, V
            k, v = self._cached_keys_values(k, v, cache)  # (B, H, Lk, d_k) each
        else:
            q = self.split_heads(self.q_proj(query))  # (B, H, Lq, d_k)
            k, v = self._keys_values(key, value, cache)  # (B, H, Lk, d_k) each
        if mask is not None:
            scores_shape = (q.size(0), self.num_heads, q.size(2), k.size(2))
            check_mask(mask, scores_shape, device=q.device)
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
        static = isinstance(cache, dict) and cache.get("static")
        if static and "k" in cache:
            # Reuse only for the tensors the cache was built from: attending to an old
            # source after the memory changed would be a wrong answer with no error.
            if not (_same_tensor(key, cache["key"])
                    and _same_tensor(value, cache["value"])):
                raise ValueError("key/value differ from the memory this static "
                                 "cross-attention cache was built from; use a new "
                                 "cache (Decoder.new_cache()) for a new memory")
            return cache["k"], cache["v"]
        k = self.split_heads(self.k_proj(key))
        v = self.split_heads(self.v_proj(value))
        if static:
            cache["key"], cache["value"] = key, value
            cache["k"], cache["v"] = k, v
            return k, v
        return self._cached_keys_values(k, v, cache)

    @staticmethod
    def _cached_keys_values(k, v, cache):
        """The new keys and values (B, H, new, d_k) joined to the cached ones, if any."""
        if cache is None:
            return k, v
        if not isinstance(cache, dict):  # preallocated (StaticKVCache): written in place
            return cache.update(k, v)
        if "k" in cache:
            k = torch.cat([cache["k"], k], dim=2)  # append along the key axis
            v = torch.cat([cache["v"], v], dim=2)
        cache["k"], cache["v"] = k, v
        return k, v

    def _check_inputs(self, query, key, value, need_weights, cache):
        # Self-attention passes one tensor three times, cross-attention the memory
        # twice: each tensor is checked once (this runs in every layer, every step).
        self._check_input("query", query)
        if key is not query:
            self._check_input("key", key)
        if value is not key:
            self._check_input("value", value)
            check_same_size(1, "length", key=key, value=value)
        if not (query is key and key is value):
            check_same_size(0, "batch size", query=query, key=key, value=value)
        check_bool("need_weights", need_weights)
        if cache is not None and not (isinstance(cache, dict) or hasattr(cache, "update")):
            check_instance("cache", cache, dict, "a dict or a StaticKVCache (or None)")
        if cache is not None:
            cached = cache.get("k") if isinstance(cache, dict) else cache.k
            if cached is not None and cached.size(0) != query.size(0):
                raise ValueError(f"cache holds a batch of {cached.size(0)}, "
                                 f"but query has batch size {query.size(0)}")

    def _check_input(self, name, x):
        check_tensor(name, x, ndim=3)
        check_width(name, x, self.d_model)
        check_matches_weight(name, x, self.q_proj.weight)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, num_heads={self.num_heads}, d_k={self.d_k}, dropout={self.dropout}"


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same tensor, or a view of the same memory with the same shape and strides."""
    return a is b or (a.data_ptr() == b.data_ptr() and a.shape == b.shape
                      and a.stride() == b.stride() and a.dtype == b.dtype
                      and a.device == b.device)
