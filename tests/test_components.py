"""Building blocks: masks, positional encoding, embedding, feed-forward, scoring functions."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import transformer_lib as tl

pytestmark = pytest.mark.usefixtures("one_thread")

# ---------------------------------------------------------------------------------------------
# Masks (True = blocked)
# ---------------------------------------------------------------------------------------------


def test_padding_mask():
    tokens = torch.tensor([[5, 6, 0, 0], [7, 8, 9, 4]])
    mask = tl.padding_mask(tokens)
    assert mask.shape == (2, 1, 1, 4) and mask.dtype == torch.bool
    assert mask[:, 0, 0].tolist() == [[False, False, True, True], [False] * 4]
    assert tl.padding_mask(tokens, pad_id=4)[1, 0, 0].tolist() == [False, False, False, True]


def test_causal_mask():
    mask = tl.causal_mask(4)
    assert mask.shape == (1, 1, 4, 4) and mask.dtype == torch.bool
    expected = [[j > i for j in range(4)] for i in range(4)]
    assert mask[0, 0].tolist() == expected
    # same convention as PyTorch's helper (which uses -inf for blocked)
    torch_mask = nn.Transformer.generate_square_subsequent_mask(4)
    assert torch.equal(mask[0, 0], torch.isinf(torch_mask))


def test_causal_mask_with_offset_is_the_last_rows_of_the_full_mask():
    for offset, length in ((0, 3), (2, 3), (5, 1)):
        mask = tl.causal_mask(length, offset=offset)
        assert mask.shape == (1, 1, length, offset + length)
        assert torch.equal(mask, tl.causal_mask(offset + length)[:, :, offset:])
    with pytest.raises(ValueError, match="offset must be >= 0, got -1"):
        tl.causal_mask(3, offset=-1)
    for bad in (1.5, True):  # the wrong kind of value: TypeError (see _checks)
        with pytest.raises(TypeError, match="offset must be an int, got"):
            tl.causal_mask(3, offset=bad)


def test_decoder_self_mask_is_causal_or_padding():
    tgt = torch.tensor([[1, 5, 6, 0], [1, 7, 0, 0]])
    mask = tl.decoder_self_mask(tgt)
    assert mask.shape == (2, 1, 4, 4)
    expected = tl.causal_mask(4) | (tgt == 0)[:, None, None, :]
    assert torch.equal(mask, expected)
    assert mask[1, 0, 3].tolist() == [False, False, True, True]


def test_cross_mask_matches_broadcast_padding_mask():
    src = torch.tensor([[3, 4, 0], [5, 0, 0]])
    mask = tl.cross_mask(src, tgt_len=5)
    assert mask.shape == (2, 1, 5, 3)
    assert torch.equal(mask, tl.padding_mask(src).expand(2, 1, 5, 3))


# ---------------------------------------------------------------------------------------------
# Positional encoding
# ---------------------------------------------------------------------------------------------

def test_sinusoidal_table_formula_in_float64():
    max_len, d = 50, 16
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    i = torch.arange(d // 2, dtype=torch.float64)[None, :]
    angle = pos / 10000 ** (2 * i / d)
    expected = torch.empty(max_len, d, dtype=torch.float64)
    expected[:, 0::2], expected[:, 1::2] = torch.sin(angle), torch.cos(angle)
    torch.testing.assert_close(tl.sinusoidal_table(max_len, d).double(), expected, atol=2e-5, rtol=0)


@pytest.mark.parametrize("d", [8, 7])
def test_sinusoidal_table_sines_then_cosines(d):
    """``interleaved=False`` (Marian, fairseq, tensor2tensor): the columns reordered."""
    table = tl.sinusoidal_table(12, d)
    expected = torch.cat([table[:, 0::2], table[:, 1::2]], dim=1)  # sines, then cosines
    assert torch.equal(tl.sinusoidal_table(12, d, interleaved=False), expected)
    pe = tl.PositionalEncoding(d, max_len=12, interleaved=False)
    x = torch.randn(2, 3, d)
    torch.testing.assert_close(pe(x, offset=2), x + expected[2:5])


def test_positional_encoding_adds_table_with_offset():
    pe = tl.PositionalEncoding(6, max_len=10)
    x = torch.randn(2, 3, 6)
    table = tl.sinusoidal_table(10, 6)
    torch.testing.assert_close(pe(x), x + table[:3])
    torch.testing.assert_close(pe(x, offset=4), x + table[4:7])
    assert "table" not in pe.state_dict()  # recomputed, not saved


def test_positional_encoding_dropout_only_in_training():
    pe = tl.PositionalEncoding(8, max_len=10, dropout=0.5)
    x = torch.ones(2, 5, 8)
    pe.eval()
    assert torch.equal(pe(x), pe(x))
    pe.train()
    assert (pe(x) == 0).any()


# ---------------------------------------------------------------------------------------------
# Embedding and feed-forward
# ---------------------------------------------------------------------------------------------

def test_token_embedding_scales_by_sqrt_d_model_and_zeroes_padding():
    emb = tl.TokenEmbedding(10, 16, pad_id=0)
    tokens = torch.tensor([[3, 0, 7]])
    out = emb(tokens)
    torch.testing.assert_close(out, emb.weight[tokens] * math.sqrt(16))
    assert (out[0, 1] == 0).all()
    # initialisation: entries of size about 1 after scaling
    assert 0.7 < (emb.weight[1:] * 4).std().item() < 1.3


def _gelu_tanh(x):
    """GELU's tanh approximation, written out (Hendrycks and Gimpel 2016)."""
    return 0.5 * x * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (x + 0.044715 * x**3)))


def test_token_embedding_without_scale():
    emb = tl.TokenEmbedding(10, 16, pad_id=0, scale=False)
    tokens = torch.tensor([[3, 0]])
    assert torch.equal(emb(tokens), emb.weight[tokens])
    assert "scale=False" in repr(emb)


@pytest.mark.parametrize("activation, fn", [
    ("relu", F.relu), ("gelu", F.gelu), ("gelu_tanh", _gelu_tanh),
    ("silu", lambda x: x * torch.sigmoid(x)),
])
def test_feedforward_formula(activation, fn):
    ffn = tl.PositionwiseFeedForward(8, 32, activation=activation)
    x = torch.randn(2, 3, 8)
    expected = ffn.linear2(fn(ffn.linear1(x)))
    torch.testing.assert_close(ffn(x), expected)
    # position-wise: each position is transformed alone
    torch.testing.assert_close(ffn(x[:, 1:2]), ffn(x)[:, 1:2])


# ---------------------------------------------------------------------------------------------
# Scoring functions and generic Attention
# ---------------------------------------------------------------------------------------------

def test_score_functions_formulas():
    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    torch.testing.assert_close(tl.DotScore()(q, k), torch.einsum("bqd,bkd->bqk", q, k))
    torch.testing.assert_close(tl.ScaledDotScore()(q, k), torch.einsum("bqd,bkd->bqk", q, k) / 2)
    k6 = torch.randn(2, 5, 6)
    general = tl.GeneralScore(4, 6)
    torch.testing.assert_close(general(q, k6), torch.einsum("bqd,de,bke->bqk", q, general.W.weight, k6))
    additive = tl.AdditiveScore(4, 6, 7)
    scores = additive(q, k6)
    assert scores.shape == (2, 3, 5)
    b, i, j = 1, 2, 4
    hidden = torch.tanh(additive.W_q.weight @ q[b, i] + additive.W_k.weight @ k6[b, j])
    torch.testing.assert_close(scores[b, i, j], (additive.v.weight @ hidden).squeeze())


def test_attention_module_with_scaled_dot_equals_sdpa():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 7)
    mask = torch.zeros(2, 1, 5, dtype=torch.bool)
    mask[0, 0, 3:] = True
    context, weights = tl.Attention(tl.ScaledDotScore())(q, k, v, mask)
    expected_c, expected_w = tl.scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(context, expected_c)
    torch.testing.assert_close(weights, expected_w)
    assert (weights[0, :, 3:] == 0).all()


def test_split_and_merge_heads_are_inverse_and_keep_positions():
    mha = tl.MultiHeadAttention(8, 2)
    x = torch.arange(2 * 3 * 8, dtype=torch.float32).view(2, 3, 8)
    heads = mha.split_heads(x)
    assert heads.shape == (2, 2, 3, 4)
    torch.testing.assert_close(heads[:, 1, 2], x[:, 2, 4:])  # head 1, position 2 = columns 4..7
    torch.testing.assert_close(mha.merge_heads(heads), x)
