"""Equivalence with PyTorch: our modules, given copied weights, compute PyTorch's numbers.

Tolerances: 1e-5 in float32 (different but equally valid orders of floating-point operations),
1e-10 in float64 (where any real difference in the formula would show up far above rounding).
"""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import transformer_lib as tl

pytestmark = pytest.mark.usefixtures("one_thread")

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float64: dict(atol=1e-10, rtol=1e-10)}
DTYPES = [torch.float32, torch.float64]


def close(actual, expected, dtype):
    torch.testing.assert_close(actual, expected, **TOL[dtype])


# ---------------------------------------------------------------------------------------------
# Scaled dot-product attention
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal", "partial_and_full_row"])
def test_sdpa_matches_torch(dtype, mask_kind):
    B, H, Lq, Lk, d_k, d_v = 2, 3, 4, 5, 8, 6
    q = torch.randn(B, H, Lq, d_k, dtype=dtype)
    k = torch.randn(B, H, Lk, d_k, dtype=dtype)
    v = torch.randn(B, H, Lk, d_v, dtype=dtype)
    if mask_kind == "none":
        mask = None
    elif mask_kind == "padding":  # batch 0 has 3 real keys, batch 1 all 5
        mask = torch.zeros(B, 1, 1, Lk, dtype=torch.bool)
        mask[0, ..., 3:] = True
    elif mask_kind == "causal":
        mask = torch.ones(Lq, Lk, dtype=torch.bool).triu(1)[None, None]
    else:
        mask = torch.zeros(B, 1, Lq, Lk, dtype=torch.bool)
        mask[0, 0, 1, ::2] = True  # a partially masked row
        mask[1, 0, 2, :] = True  # a fully masked row
    context, weights = tl.scaled_dot_product_attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else ~mask)
    close(context, expected, dtype)
    assert weights.shape == (B, H, Lq, Lk)
    # The weights are a distribution over the open keys: rows sum to 1, blocked keys get 0.
    if mask is not None:
        assert (weights.masked_select(mask.expand_as(weights)) == 0).all()
    if mask_kind == "partial_and_full_row":
        assert (weights[1, :, 2] == 0).all() and (context[1, :, 2] == 0).all()
        close(weights[0, :, 1].sum(-1), torch.ones(H, dtype=dtype), dtype)
        close(weights[0, :, 1, ::2], torch.zeros(H, 3, dtype=dtype), dtype)
    else:
        close(weights.sum(-1), torch.ones(B, H, Lq, dtype=dtype), dtype)


def test_sdpa_weights_match_explicit_softmax():
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 3)
    context, weights = tl.scaled_dot_product_attention(q, k, v)
    expected = torch.softmax(q @ k.transpose(1, 2) / 8**0.5, dim=-1)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(context, expected @ v)


# ---------------------------------------------------------------------------------------------
# Multi-head attention vs nn.MultiheadAttention
# ---------------------------------------------------------------------------------------------

def _mha_pair(d_model, num_heads, dtype, copy_weights):
    theirs = nn.MultiheadAttention(d_model, num_heads, batch_first=True, dtype=dtype).eval()
    with torch.no_grad():  # non-zero biases, so copying them is really tested
        theirs.in_proj_bias.normal_()
        theirs.out_proj.bias.normal_()
    ours = tl.MultiHeadAttention(d_model, num_heads).to(dtype).eval()
    copy_weights(ours, theirs)
    return ours, theirs


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("kind", ["self", "self_causal", "cross"])
def test_multihead_matches_torch(dtype, need_weights, kind, copy_weights):
    B, d_model, H = 3, 16, 4
    Lq = 5
    Lk = 5 if kind.startswith("self") else 7
    ours, theirs = _mha_pair(d_model, H, dtype, copy_weights)
    query = torch.randn(B, Lq, d_model, dtype=dtype)
    memory = query if kind.startswith("self") else torch.randn(B, Lk, d_model, dtype=dtype)
    key_padding = torch.zeros(B, Lk, dtype=torch.bool)  # True = padded key
    key_padding[0, Lk - 2:] = True
    key_padding[2, 1:] = True  # only one real key
    if kind == "cross":
        key_padding[1] = True  # a source that is all padding: every query row of example 1 is blocked
    attn_mask = torch.ones(Lq, Lk, dtype=torch.bool).triu(1) if kind == "self_causal" else None
    our_mask = key_padding[:, None, None, :]  # (B, 1, 1, Lk)
    if attn_mask is not None:
        our_mask = our_mask | attn_mask[None, None]  # (B, 1, Lq, Lk)

    out, weights = ours(query, memory, memory, mask=our_mask, need_weights=need_weights)
    expected, expected_w = theirs(query, memory, memory, key_padding_mask=key_padding,
                                  attn_mask=attn_mask, need_weights=True,
                                  average_attn_weights=True)
    # Rows whose keys are all blocked: nn gives NaN there, we give a defined value; compare the rest.
    open_rows = ~our_mask.expand(B, 1, Lq, Lk).all(-1)[:, 0]  # (B, Lq)
    assert open_rows.sum() == (B - 1 if kind == "cross" else B) * Lq  # all other rows are compared
    close(out[open_rows], expected[open_rows], dtype)
    if kind == "cross":  # ours stays finite on the blocked rows: the output is out_proj(0) = bias
        close(out[1], ours.out_proj.bias.detach().expand(Lq, d_model), dtype)
    if need_weights:
        assert weights.shape == (B, H, Lq, Lk)
        close(weights.mean(dim=1)[open_rows], expected_w[open_rows], dtype)
    else:
        assert weights is None


@pytest.mark.parametrize("dtype", DTYPES)
def test_multihead_paths_agree_without_mask(dtype, copy_weights):
    ours, theirs = _mha_pair(12, 3, dtype, copy_weights)
    x, mem = torch.randn(2, 4, 12, dtype=dtype), torch.randn(2, 6, 12, dtype=dtype)
    fast, _ = ours(x, mem, mem)
    explicit, w = ours(x, mem, mem, need_weights=True)
    expected, expected_w = theirs(x, mem, mem)
    close(fast, expected, dtype)
    close(explicit, expected, dtype)
    close(w.mean(1), expected_w, dtype)


# ---------------------------------------------------------------------------------------------
# Encoder and decoder layers vs nn.TransformerEncoderLayer / nn.TransformerDecoderLayer
# ---------------------------------------------------------------------------------------------

D_MODEL, HEADS, D_FF = 16, 4, 24


def _randomise_norms(module):
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.normal_(1.0, 0.2)
                m.bias.normal_(0.0, 0.2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_torch(dtype, norm_first, copy_weights):
    theirs = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, activation="relu",
                                        batch_first=True, norm_first=norm_first, dtype=dtype).eval()
    _randomise_norms(theirs)
    ours = tl.EncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, norm_first=norm_first).to(dtype).eval()
    copy_weights(ours, theirs)
    x = torch.randn(3, 6, D_MODEL, dtype=dtype)
    key_padding = torch.tensor([[False] * 6, [False] * 4 + [True] * 2, [False] * 2 + [True] * 4])
    for need_weights in (False, True):
        out = ours(x, mask=key_padding[:, None, None, :], need_weights=need_weights)
        out = out[0] if need_weights else out
        expected = theirs(x, src_key_padding_mask=key_padding)
        close(out, expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(dtype, norm_first, copy_weights):
    theirs = nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, activation="relu",
                                        batch_first=True, norm_first=norm_first, dtype=dtype).eval()
    _randomise_norms(theirs)
    ours = tl.DecoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, norm_first=norm_first).to(dtype).eval()
    copy_weights(ours, theirs)
    B, Lt, Ls = 3, 5, 7
    x = torch.randn(B, Lt, D_MODEL, dtype=dtype)
    memory = torch.randn(B, Ls, D_MODEL, dtype=dtype)
    causal = torch.ones(Lt, Lt, dtype=torch.bool).triu(1)  # True = blocked
    tgt_padding = torch.zeros(B, Lt, dtype=torch.bool)
    tgt_padding[1, 3:] = True  # padding at the end: no query row is fully blocked
    memory_padding = torch.zeros(B, Ls, dtype=torch.bool)
    memory_padding[0, 4:] = True
    memory_padding[2, 1:] = True
    self_mask = causal[None, None] | tgt_padding[:, None, None, :]  # (B, 1, Lt, Lt)
    memory_mask = memory_padding[:, None, None, :]  # (B, 1, 1, Ls)
    expected = theirs(x, memory, tgt_mask=causal, tgt_key_padding_mask=tgt_padding,
                      memory_key_padding_mask=memory_padding)
    for need_weights in (False, True):
        out = ours(x, memory, self_mask=self_mask, memory_mask=memory_mask,
                   need_weights=need_weights)
        out = out[0] if need_weights else out
        close(out, expected, dtype)


# ---------------------------------------------------------------------------------------------
# LayerNorm
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7,), (3, 7), (2, 5, 16), (2, 3, 4, 1)])
def test_layernorm_matches_torch(dtype, shape):
    d = shape[-1]
    theirs = nn.LayerNorm(d, dtype=dtype)
    ours = tl.LayerNorm(d).to(dtype)
    with torch.no_grad():
        theirs.weight.normal_()
        theirs.bias.normal_()
        ours.weight.copy_(theirs.weight)
        ours.bias.copy_(theirs.bias)
    x = torch.randn(shape, dtype=dtype) * 3 + 1
    close(ours(x), theirs(x), dtype)


# Outputs of size 1 to 4: a few units in the last place of each dtype.
PATH_TOL = {
    torch.float64: dict(atol=1e-12, rtol=1e-12),
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=4e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=3e-2, rtol=1.6e-2),
}


@pytest.mark.parametrize("dtype", list(PATH_TOL))
def test_layernorm_fast_and_explicit_paths_agree(dtype):
    """forward (PyTorch's fused F.layer_norm) and explicit (the formula) compute the same
    outputs and the same gradients, and forward is exactly nn.LayerNorm."""
    d = 24
    ours, theirs = tl.LayerNorm(d), nn.LayerNorm(d)
    with torch.no_grad():
        ours.weight.copy_(1 + 0.3 * torch.randn(d))
        ours.bias.copy_(0.3 * torch.randn(d))
        theirs.load_state_dict(ours.state_dict())
    ours, theirs = ours.to(dtype), theirs.to(dtype)
    x = (3 * torch.randn(2, 5, d, dtype=torch.float64) + 1).to(dtype)
    grad_out = torch.randn(2, 5, d, dtype=torch.float64).to(dtype)
    results = []
    for path in (ours, ours.explicit, theirs):
        ours.zero_grad()
        theirs.zero_grad()
        xi = x.clone().requires_grad_()
        y = path(xi)
        y.backward(grad_out)
        module = theirs if path is theirs else ours
        results.append((y, xi.grad, module.weight.grad, module.bias.grad))
    fast, explicit, reference = results
    for a, b in zip(fast, reference):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for a, b in zip(fast, explicit):
        assert a.dtype == b.dtype == dtype
        scale = max(1.0, b.abs().max().item())  # the weight and bias gradients sum 10 rows
        torch.testing.assert_close(a, b, rtol=PATH_TOL[dtype]["rtol"],
                                   atol=PATH_TOL[dtype]["atol"] * scale)


def test_layernorm_half_input_to_float32_weights():
    """Without autocast, half-precision input to float32 weights is normalised in float32
    and cast back, on both paths; under autocast the fast path is nn.LayerNorm's."""
    ours, theirs = tl.LayerNorm(16), nn.LayerNorm(16)
    x = (5 * torch.randn(3, 16)).to(torch.bfloat16)
    out, explicit = ours(x), ours.explicit(x)
    assert out.dtype == explicit.dtype == torch.bfloat16
    torch.testing.assert_close(out, explicit, **PATH_TOL[torch.bfloat16])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, reference = ours(x), theirs(x)
        out32, reference32 = ours(x.float()), theirs(x.float())
    assert out.dtype == reference.dtype and torch.equal(out, reference)
    assert out32.dtype == reference32.dtype and torch.equal(out32, reference32)


def test_layernorm_normalises():
    x = torch.randn(4, 9, dtype=torch.float64) * 5 - 2
    y = tl.LayerNorm(9).double()(x)
    close(y.mean(-1), torch.zeros(4, dtype=torch.float64), torch.float64)
    # biased variance: var + eps = 1 after normalisation, up to eps's effect
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(4, dtype=torch.float64),
                               atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# Loss
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("rank", [2, 3])
@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_cross_entropy_matches_torch(eps, rank, dtype):
    V, pad = 11, 0
    logits = torch.randn(3, 5, V, dtype=dtype) * 2
    targets = torch.randint(1, V, (3, 5))
    targets[0, 3:] = pad
    targets[2, 1:] = pad
    if rank == 2:
        logits, targets = logits.reshape(-1, V), targets.reshape(-1)
    ours = tl.masked_cross_entropy(logits, targets, pad_id=pad, label_smoothing=eps)
    # F.cross_entropy wants the class axis second for (B, L, V) logits.
    theirs_logits = logits if rank == 2 else logits.transpose(1, 2)
    theirs = F.cross_entropy(theirs_logits, targets, ignore_index=pad, label_smoothing=eps)
    close(ours, theirs, dtype)


def test_masked_cross_entropy_nonzero_pad_id():
    logits = torch.randn(4, 6, 9)
    targets = torch.randint(0, 9, (4, 6))
    targets[:, 4:] = 3
    ours = tl.masked_cross_entropy(logits, targets, pad_id=3, label_smoothing=0.1)
    theirs = F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=3, label_smoothing=0.1)
    torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_masked_cross_entropy_huge_logits_finite(eps):
    logits = torch.zeros(2, 3, 7)
    logits[..., 2] = 1e4  # extreme confidence in class 2
    logits[0, 0, 5] = -1e4
    targets = torch.tensor([[2, 4, 0], [1, 2, 2]])
    loss = tl.masked_cross_entropy(logits, targets, label_smoothing=eps)
    assert torch.isfinite(loss)
    # wrong tokens cost about 1e4 nats each; the value is large but finite and well defined
    assert loss.item() > 1000
    theirs = F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=0, label_smoothing=eps)
    torch.testing.assert_close(loss, theirs)


def test_masked_cross_entropy_all_padding_is_zero_not_nan():
    logits = torch.randn(2, 4, 5, requires_grad=True)
    targets = torch.zeros(2, 4, dtype=torch.long)
    loss = tl.masked_cross_entropy(logits, targets, label_smoothing=0.1)
    assert loss.item() == 0.0
    loss.backward()
    assert torch.isfinite(logits.grad).all() and (logits.grad == 0).all()
    # PyTorch divides 0 by 0 here: the reason for our behaviour.
    assert torch.isnan(F.cross_entropy(logits.detach().transpose(1, 2), targets, ignore_index=0))


def test_token_accuracy_ignores_padding():
    logits = torch.full((1, 4, 5), -1.0)
    logits[0, 0, 1] = logits[0, 1, 2] = logits[0, 2, 4] = logits[0, 3, 1] = 1.0
    targets = torch.tensor([[1, 2, 3, 0]])  # 2 of 3 real tokens right, the pad is ignored
    assert tl.token_accuracy(logits, targets).item() == pytest.approx(2 / 3)
