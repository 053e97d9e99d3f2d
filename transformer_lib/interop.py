"""Weights across to PyTorch's built-in layers and back, to compare the two on the same numbers.

The layouts differ in one place only: ``nn.MultiheadAttention`` keeps W_Q, W_K and W_V stacked in
one (3d, d) ``in_proj_weight`` (their biases in one (3d,) ``in_proj_bias``), where
``MultiHeadAttention`` has three ``nn.Linear(d, d)``. The output projection, the feed-forward
layers and the LayerNorms have the same shapes on both sides.

Supported pairs (ours, theirs): (MultiHeadAttention, nn.MultiheadAttention),
(EncoderLayer, nn.TransformerEncoderLayer), (DecoderLayer, nn.TransformerDecoderLayer).

    copy_to_torch(ours, theirs)    # theirs now computes what ours computes
    copy_from_torch(ours, theirs)  # and the other way round
"""
from __future__ import annotations

import torch
from torch import nn

from .decoder import DecoderLayer
from .encoder import EncoderLayer
from .multihead import MultiHeadAttention


def _pairs(ours: nn.Module, theirs: nn.Module):
    """The matching parts: [(our attention, their attention)], [(our part, their part) with the
    same .weight and .bias shapes]."""
    if isinstance(ours, MultiHeadAttention) and isinstance(theirs, nn.MultiheadAttention):
        attention, same = [(ours, theirs)], []
    elif isinstance(ours, EncoderLayer) and isinstance(theirs, nn.TransformerEncoderLayer):
        attention = [(ours.self_attn, theirs.self_attn)]
        same = [(ours.norm1, theirs.norm1), (ours.norm2, theirs.norm2)]
    elif isinstance(ours, DecoderLayer) and isinstance(theirs, nn.TransformerDecoderLayer):
        attention = [(ours.self_attn, theirs.self_attn), (ours.cross_attn, theirs.multihead_attn)]
        same = [(ours.norm1, theirs.norm1), (ours.norm2, theirs.norm2), (ours.norm3, theirs.norm3)]
    else:
        raise TypeError(f"cannot pair {type(ours).__name__} with {type(theirs).__name__}; see "
                        f"transformer_lib.interop for the supported pairs")
    if not isinstance(ours, MultiHeadAttention):
        same += [(ours.ffn.linear1, theirs.linear1), (ours.ffn.linear2, theirs.linear2)]
    for mine, other in attention:
        if (other.embed_dim, other.num_heads) != (mine.d_model, mine.num_heads):
            raise ValueError(f"size mismatch: ours d_model={mine.d_model}, num_heads={mine.num_heads}; "
                             f"theirs embed_dim={other.embed_dim}, num_heads={other.num_heads}")
        same.append((mine.out_proj, other.out_proj))
    return attention, same


@torch.no_grad()
def copy_to_torch(ours: nn.Module, theirs: nn.Module) -> None:
    """Copy our module's weights into the matching PyTorch module (in place)."""
    attention, same = _pairs(ours, theirs)
    for mine, other in attention:
        projections = (mine.q_proj, mine.k_proj, mine.v_proj)
        other.in_proj_weight.copy_(torch.cat([p.weight for p in projections]))  # (3d, d)
        other.in_proj_bias.copy_(torch.cat([p.bias for p in projections]))  # (3d,)
    for mine, other in same:
        other.weight.copy_(mine.weight)
        other.bias.copy_(mine.bias)


@torch.no_grad()
def copy_from_torch(ours: nn.Module, theirs: nn.Module) -> None:
    """Copy a PyTorch module's weights into the matching module of ours (in place)."""
    attention, same = _pairs(ours, theirs)
    for mine, other in attention:
        weights = other.in_proj_weight.split(mine.d_model, dim=0)  # 3 x (d, d): W_Q, W_K, W_V
        biases = other.in_proj_bias.split(mine.d_model, dim=0)  # 3 x (d,)
        for proj, w, b in zip((mine.q_proj, mine.k_proj, mine.v_proj), weights, biases):
            proj.weight.copy_(w)
            proj.bias.copy_(b)
    for mine, other in same:
        mine.weight.copy_(other.weight)
        mine.bias.copy_(other.bias)


__all__ = ["copy_from_torch", "copy_to_torch"]


# Hugging Face Marian models (transformers.MarianMTModel): see transformer_lib.marian.
# Importing them is cheap: transformers is imported only when one of them is called.
from .marian import from_marian, marian_weight_map, to_marian  # noqa: E402

__all__ += ["from_marian", "marian_weight_map", "to_marian"]
