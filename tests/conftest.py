"""Shared fixtures and helpers for the transformer_lib test suite.

The central helper is ``copy_from_torch``: it copies the weights of a PyTorch reference module
(``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer``, ``nn.TransformerDecoderLayer``) into
the matching ``transformer_lib`` module, so the two can be compared number for number.
Tests receive it through the ``copy_weights`` fixture.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import transformer_lib as tl

PAD = 0  # the padding id used throughout the tests


@torch.no_grad()
def _copy_mha(ours: tl.MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """nn.MultiheadAttention stores W_q, W_k, W_v stacked in one (3d, d) ``in_proj_weight``."""
    d = ours.d_model
    if theirs.embed_dim != d or theirs.num_heads != ours.num_heads:
        raise ValueError(
            f"size mismatch: ours d_model={d}, num_heads={ours.num_heads}; "
            f"theirs embed_dim={theirs.embed_dim}, num_heads={theirs.num_heads}"
        )
    w_q, w_k, w_v = theirs.in_proj_weight.split(d, dim=0)  # 3 x (d, d)
    b_q, b_k, b_v = theirs.in_proj_bias.split(d, dim=0)  # 3 x (d,)
    for proj, w, b in ((ours.q_proj, w_q, b_q), (ours.k_proj, w_k, b_k), (ours.v_proj, w_v, b_v)):
        proj.weight.copy_(w)
        proj.bias.copy_(b)
    ours.out_proj.weight.copy_(theirs.out_proj.weight)
    ours.out_proj.bias.copy_(theirs.out_proj.bias)


@torch.no_grad()
def _copy_linear_and_norm(dst: nn.Module, src: nn.Module) -> None:
    dst.weight.copy_(src.weight)
    dst.bias.copy_(src.bias)


@torch.no_grad()
def copy_from_torch(ours: nn.Module, theirs: nn.Module) -> None:
    """Copy the weights of a PyTorch reference module into ours (in place).

    Supported pairs: (MultiHeadAttention, nn.MultiheadAttention),
    (EncoderLayer, nn.TransformerEncoderLayer), (DecoderLayer, nn.TransformerDecoderLayer).
    """
    if isinstance(ours, tl.MultiHeadAttention) and isinstance(theirs, nn.MultiheadAttention):
        _copy_mha(ours, theirs)
        return
    if isinstance(ours, tl.EncoderLayer) and isinstance(theirs, nn.TransformerEncoderLayer):
        _copy_mha(ours.self_attn, theirs.self_attn)
        pairs = [(ours.norm1, theirs.norm1), (ours.norm2, theirs.norm2)]
    elif isinstance(ours, tl.DecoderLayer) and isinstance(theirs, nn.TransformerDecoderLayer):
        _copy_mha(ours.self_attn, theirs.self_attn)
        _copy_mha(ours.cross_attn, theirs.multihead_attn)
        pairs = [(ours.norm1, theirs.norm1), (ours.norm2, theirs.norm2), (ours.norm3, theirs.norm3)]
    else:
        raise TypeError(f"cannot copy {type(theirs).__name__} into {type(ours).__name__}")
    pairs += [(ours.ffn.linear1, theirs.linear1), (ours.ffn.linear2, theirs.linear2)]
    for dst, src in pairs:
        _copy_linear_and_norm(dst, src)


@pytest.fixture
def copy_weights():
    """The weight-copy helper: ``copy_weights(ours, theirs)``."""
    return copy_from_torch


@pytest.fixture
def one_thread():
    """Run a test with one intra-op thread, then restore the previous setting.

    The library tests use tiny tensors, for which extra threads cost more than they bring (and
    test machines are often shared). Modules opt in with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same random state, so failures reproduce."""
    torch.manual_seed(0)
    yield


def make_small_model(vocab: int = 13, d_model: int = 16, num_heads: int = 2, layers: int = 2,
                     d_ff: int = 32, dropout: float = 0.0, max_len: int = 64, **kwargs):
    """A small randomly initialised Transformer in eval mode."""
    model = tl.Transformer(vocab, vocab, d_model=d_model, num_heads=num_heads,
                           num_encoder_layers=layers, num_decoder_layers=layers, d_ff=d_ff,
                           dropout=dropout, max_len=max_len, pad_id=PAD, **kwargs)
    return model.eval()


@pytest.fixture
def small_model():
    """Factory fixture: ``small_model(**overrides)`` -> an eval-mode ``tl.Transformer``."""
    return make_small_model


def random_tokens(batch: int, length: int, vocab: int, lengths=None, low: int = 1) -> torch.Tensor:
    """(batch, length) int64 ids in [low, vocab); row b is padded with PAD after ``lengths[b]``."""
    tokens = torch.randint(low, vocab, (batch, length))
    if lengths is not None:
        for b, n in enumerate(lengths):
            tokens[b, n:] = PAD
    return tokens


@pytest.fixture
def tokens():
    """Factory fixture for padded token batches: ``tokens(batch, length, vocab, lengths=None)``."""
    return random_tokens
