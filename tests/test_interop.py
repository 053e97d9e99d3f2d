"""transformer_lib.interop: weights across to PyTorch's layers and back give the same outputs."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import transformer_lib as tl
from transformer_lib.interop import copy_from_torch, copy_to_torch

D, H, D_FF = 16, 4, 32


def _randomise(module):
    # biases start at 0 and LayerNorms at 1: move every parameter, so a misplaced one shows
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return module.eval()


def _layer_pairs():
    yield tl.EncoderLayer(D, H, D_FF, dropout=0.0), nn.TransformerEncoderLayer(
        D, H, D_FF, dropout=0.0, batch_first=True)
    yield tl.DecoderLayer(D, H, D_FF, dropout=0.0), nn.TransformerDecoderLayer(
        D, H, D_FF, dropout=0.0, batch_first=True)


def _outputs(ours, theirs, x, memory):
    if isinstance(ours, tl.EncoderLayer):
        return ours(x, None), theirs(x)
    causal = tl.causal_mask(x.size(1))
    return ours(x, memory, causal, None), theirs(x, memory, tgt_mask=causal[0, 0])


@pytest.mark.parametrize("direction", ["to_torch", "from_torch"])
def test_copied_layers_compute_the_same(direction):
    torch.manual_seed(0)
    x, memory = torch.randn(2, 5, D), torch.randn(2, 7, D)
    for ours, theirs in _layer_pairs():
        if direction == "to_torch":
            copy_to_torch(_randomise(ours), theirs.eval())
        else:
            copy_from_torch(ours.eval(), _randomise(theirs))
        mine, other = _outputs(ours, theirs, x, memory)
        torch.testing.assert_close(mine, other)


def test_attention_round_trip_is_exact():
    ours = _randomise(tl.MultiHeadAttention(D, H))
    theirs = nn.MultiheadAttention(D, H, batch_first=True)
    back = tl.MultiHeadAttention(D, H)
    copy_to_torch(ours, theirs)
    copy_from_torch(back, theirs)
    for (name, a), b in zip(ours.named_parameters(), back.parameters()):
        assert torch.equal(a, b), name


def test_bad_pairs_are_refused():
    with pytest.raises(TypeError, match="cannot pair EncoderLayer with TransformerDecoderLayer"):
        copy_to_torch(tl.EncoderLayer(D, H, D_FF), nn.TransformerDecoderLayer(D, H, D_FF))
    with pytest.raises(ValueError, match="size mismatch: ours d_model=16, num_heads=4; theirs embed_dim=16, num_heads=2"):
        copy_from_torch(tl.MultiHeadAttention(D, H), nn.MultiheadAttention(D, 2))
