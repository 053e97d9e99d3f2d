"""A preallocated key/value cache: decoding steps whose tensors never change shape or address.

The readable cache of ``tl.greedy_decode`` (``Decoder.new_cache()``) grows by one position a
step with ``torch.cat``: each step allocates new keys and values, and each step's tensors
have a new shape. A *static* cache allocates every slot once, (B, H, max_len, d_k) per
layer, writes step t's keys and values into slot t in place, and attends over all slots
with a mask that blocks those not written yet. Every step then runs the same operations on
the same tensors at the same addresses: the precondition for recording a step once (a CUDA
graph, or ``torch.compile``) and replaying it (``tl.fast_decoding``).

The step position lives on the device, as a tensor: reading it on the host would make the
host wait for the device every step.
"""
from __future__ import annotations

import torch

from ._checks import check_positive_int


class StaticKVCache:
    """One self-attention layer's preallocated keys and values, (B, H, max_len, d_k) each.

    ``update(k, v)`` with the new step's keys and values (B, H, 1, d_k) writes them at
    ``position`` (a 0-dim int64 tensor shared by all layers of a ``StaticCache``) and
    returns all slots; ``MultiHeadAttention`` calls it for any cache that is not a dict.
    """

    def __init__(self, batch, num_heads, max_len, d_k, position, dtype, device):
        shape = (batch, num_heads, max_len, d_k)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.position = position

    def update(self, k: torch.Tensor, v: torch.Tensor):
        if k.size(2) != 1:
            raise ValueError(f"a StaticKVCache takes one new position a step, got {k.size(2)}")
        slot = self.position.view(1)  # (1,): which slot, without reading it on the host
        self.k.index_copy_(2, slot, k.to(self.k.dtype))
        self.v.index_copy_(2, slot, v.to(self.v.dtype))
        return self.k, self.v  # (B, H, max_len, d_k) each

    def reorder(self, parent: torch.Tensor) -> None:
        """Beam search: row i continues beam ``parent[i]`` (in place: same addresses)."""
        self.k.copy_(self.k.index_select(0, parent))
        self.v.copy_(self.v.index_select(0, parent))


class StaticCache:
    """A whole decoder's static cache for one source batch: per layer a ``StaticKVCache``
    for self-attention and the cross-attention keys and values of ``memory``, projected
    once here.

    ``layers`` has the form of ``Decoder.new_cache()`` (a list of {"self", "cross"}
    dicts), so ``model.decoder(...)`` runs on it unchanged. ``position`` (0-dim int64,
    on the device) is the slot the next step writes; ``step()`` advances it in place.
    """

    def __init__(self, model, memory: torch.Tensor, max_len: int, dtype=None):
        check_positive_int("max_len", max_len)
        batch = memory.size(0)
        self.max_len = max_len
        self.device = memory.device
        self.position = torch.zeros((), dtype=torch.long, device=self.device)
        self.slots = torch.arange(max_len, device=self.device)  # (max_len,)
        dtype = dtype or memory.dtype
        self.layers = []
        for layer in model.decoder.layers:
            attn = layer.self_attn
            cross = {"static": True}
            with torch.no_grad():  # project the memory once: keys and values of the source
                layer.cross_attn._keys_values(memory, memory, cross)
            self.layers.append({
                "self": StaticKVCache(batch, attn.num_heads, max_len, attn.d_k,
                                      self.position, dtype, self.device),
                "cross": cross})

    def blocked(self) -> torch.Tensor:
        """The self-attention mask of the current step, True = blocked: (1, 1, 1, max_len),
        the slots after ``position`` (not written yet)."""
        return (self.slots > self.position).view(1, 1, 1, self.max_len)

    def step(self) -> None:
        self.position.add_(1)

    def reorder(self, parent: torch.Tensor) -> None:
        """Beam search: make every layer's cached keys and values follow their beams. The
        cross-attention entries need no reordering: the beams of one example share a source."""
        for layer in self.layers:
            layer["self"].reorder(parent)

    def buffers(self) -> list[torch.Tensor]:
        """Every tensor a step writes (for ``torch._dynamo.mark_static_address``)."""
        return [self.position] + [t for layer in self.layers
                                  for t in (layer["self"].k, layer["self"].v)]
