"""Weights across to PyTorch's built-in layers and back, to compare the two on the same numbers.

The layouts differ in one place only: ``nn.MultiheadAttention`` keeps W_Q, W_K and W_V stacked in
one (3d, d) ``in_proj_weight`` (their biases in one (3d,) ``in_proj_bias``), where
``MultiHeadAttention`` has three ``nn.Linear(d, d)``. The output projection, the feed-forward
layers and the LayerNorms have the same shapes on both sides.

Supported pairs (ours, theirs): (MultiHeadAttention, nn.MultiheadAttention),
(EncoderLayer, nn.TransformerEncoderLayer), (DecoderLayer, nn.TransformerDecoderLayer).

    copy_to_torch(ours, theirs)    # theirs now computes what ours computes
    copy_from_torch(ours, theirs)  # and the other way round

Copied weights make two layers compute the same thing only if they are built the
same way, so a pair whose sizes, ``norm_first``, activation, biases or LayerNorm eps
differ is refused with a ValueError (copied anyway, a pre-norm and a post-norm layer
differ by about 1 on random input).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

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
        _check_layer_settings(ours, theirs)
        same += [(ours.ffn.linear1, theirs.linear1), (ours.ffn.linear2, theirs.linear2)]
    for mine, other in attention:
        _check_attention_settings(mine, other)
        same.append((mine.out_proj, other.out_proj))
    return attention, same


def _refuse(setting: str, mine, other) -> None:
    raise ValueError(f"{setting} differs: ours {mine}, theirs {other}; copied weights "
                     f"would not give the same outputs, so build both layers alike")


def _check_attention_settings(mine: MultiHeadAttention, other: nn.MultiheadAttention):
    if (other.embed_dim, other.num_heads) != (mine.d_model, mine.num_heads):
        raise ValueError(f"size mismatch: ours d_model={mine.d_model}, "
                         f"num_heads={mine.num_heads}; "
                         f"theirs embed_dim={other.embed_dim}, "
                         f"num_heads={other.num_heads}")
    if not other._qkv_same_embed_dim or other.bias_k is not None or other.add_zero_attn:
        raise ValueError("theirs uses kdim/vdim, add_bias_kv or add_zero_attn, which "
                         "MultiHeadAttention does not have")
    ours_bias, their_bias = mine.q_proj.bias is not None, other.in_proj_bias is not None
    if ours_bias != their_bias:
        _refuse("attention bias", f"bias={ours_bias}", f"bias={their_bias}")


def _activation_name(activation) -> str | None:
    """"relu" or "gelu" for PyTorch's ways of writing them, else None."""
    if activation is F.relu or isinstance(activation, nn.ReLU):
        return "relu"
    exact_gelu = isinstance(activation, nn.GELU) and activation.approximate == "none"
    if activation is F.gelu or exact_gelu:
        return "gelu"
    return None


def _check_layer_settings(ours, theirs) -> None:
    """Encoder or decoder layers: same norm_first, activation, bias, sizes, eps."""
    if ours.norm_first != theirs.norm_first:
        _refuse("norm_first", f"norm_first={ours.norm_first}",
                f"norm_first={theirs.norm_first}")
    their_activation = _activation_name(theirs.activation)
    if ours.ffn.activation != their_activation:
        _refuse("the activation", repr(ours.ffn.activation),
                repr(their_activation or theirs.activation))
    if theirs.linear1.bias is None or theirs.norm1.bias is None:
        _refuse("bias", "bias=True (feed-forward and LayerNorm)", "bias=False")
    mine_ff, their_ff = ours.ffn.linear1.out_features, theirs.linear1.out_features
    if mine_ff != their_ff:
        raise ValueError(
            f"size mismatch: ours d_ff={mine_ff}, theirs dim_feedforward={their_ff}")
    if ours.norm1.eps != theirs.norm1.eps:
        _refuse("LayerNorm eps", f"eps={ours.norm1.eps}", f"eps={theirs.norm1.eps}")


@torch.no_grad()
def copy_to_torch(ours: nn.Module, theirs: nn.Module) -> None:
    """Copy our module's weights into the matching PyTorch module (in place)."""
    attention, same = _pairs(ours, theirs)
    for mine, other in attention:
        projections = (mine.q_proj, mine.k_proj, mine.v_proj)
        other.in_proj_weight.copy_(torch.cat([p.weight for p in projections]))  # (3d, d)
        if other.in_proj_bias is not None:
            other.in_proj_bias.copy_(torch.cat([p.bias for p in projections]))  # (3d,)
    for mine, other in same:
        other.weight.copy_(mine.weight)
        if other.bias is not None:
            other.bias.copy_(mine.bias)


@torch.no_grad()
def copy_from_torch(ours: nn.Module, theirs: nn.Module) -> None:
    """Copy a PyTorch module's weights into the matching module of ours (in place)."""
    attention, same = _pairs(ours, theirs)
    for mine, other in attention:
        projections = (mine.q_proj, mine.k_proj, mine.v_proj)
        weights = other.in_proj_weight.split(mine.d_model, dim=0)  # 3 x (d, d): W_Q, W_K, W_V
        for proj, w in zip(projections, weights):
            proj.weight.copy_(w)
        if other.in_proj_bias is not None:
            biases = other.in_proj_bias.split(mine.d_model, dim=0)  # 3 x (d,)
            for proj, b in zip(projections, biases):
                proj.bias.copy_(b)
    for mine, other in same:
        mine.weight.copy_(other.weight)
        if other.bias is not None:
            mine.bias.copy_(other.bias)


__all__ = ["copy_from_torch", "copy_to_torch"]


# Hugging Face Marian models (transformers.MarianMTModel): see transformer_lib.marian.
# Importing them is cheap: transformers is imported only when one of them is called.
from .marian import from_marian, marian_weight_map, to_marian  # noqa: E402

__all__ += ["from_marian", "marian_weight_map", "to_marian"]
