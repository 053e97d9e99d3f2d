"""Self-attention on the fast path, training on a GPU, projects Q, K and V with one GEMM
(the three weights stacked): the same outputs and gradients as three separate projections,
in float64 and float32; the parameters, their initialisation and the state_dict are
unchanged; without gradients (decoding) the three products follow every kind of weight
update."""
from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

import transformer_lib as tl

from conftest import make_small_model, random_tokens

pytestmark = pytest.mark.usefixtures("one_thread")

TOLERANCE = {torch.float64: dict(atol=1e-12, rtol=1e-12),
             torch.float32: dict(atol=1e-5, rtol=1e-5)}


def three_projections(mha, query, key, value, mask=None):
    """Multi-head attention written with three separate projections (the old fast path)."""
    q = mha.split_heads(mha.q_proj(query))
    k = mha.split_heads(mha.k_proj(key))
    v = mha.split_heads(mha.v_proj(value))
    allowed = None if mask is None else ~mask
    context = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    return mha.out_proj(mha.merge_heads(context))


def _mha(dtype, bias=True):
    torch.manual_seed(0)
    mha = tl.MultiHeadAttention(16, 4, bias=bias).to(dtype)
    with torch.no_grad():  # biases start at zero: move them, so a misplaced one shows
        for p in mha.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return mha


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("bias", [True, False])
def test_packed_self_attention_equals_three_projections(dtype, bias):
    mha = _mha(dtype, bias)
    x = torch.randn(3, 5, 16, dtype=dtype, requires_grad=True)
    mask = tl.padding_mask(random_tokens(3, 5, 7, lengths=[5, 2, 4]))
    out, _ = mha(x, x, x, mask)
    grads = torch.autograd.grad(out.square().sum(), [x, *mha.parameters()])
    expected = three_projections(mha, x, x, x, mask)
    expected_grads = torch.autograd.grad(expected.square().sum(), [x, *mha.parameters()])
    torch.testing.assert_close(out, expected, **TOLERANCE[dtype])
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, **TOLERANCE[dtype])


def test_packed_projection_is_the_three_projections():
    mha = _mha(torch.float64)
    x = torch.randn(2, 4, 16, dtype=torch.float64)
    q, k, v = mha.packed_qkv(x)
    for got, proj in zip((q, k, v), (mha.q_proj, mha.k_proj, mha.v_proj)):
        torch.testing.assert_close(got, mha.split_heads(proj(x)), atol=1e-12, rtol=1e-12)


def test_cross_attention_and_the_explicit_path_keep_three_projections():
    """Only self-attention (query is key is value) packs; the explicit path (weights
    returned) keeps the three products the chapters show."""
    mha = _mha(torch.float64)
    x, memory = torch.randn(2, 4, 16, dtype=torch.float64), torch.randn(2, 6, 16,
                                                                        dtype=torch.float64)
    calls = []
    mha.packed_qkv = lambda h: calls.append(h) or tl.MultiHeadAttention.packed_qkv(mha, h)
    out, _ = mha(x, memory, memory)
    torch.testing.assert_close(out, three_projections(mha, x, memory, memory))
    out, weights = mha(x, x, x, need_weights=True)
    torch.testing.assert_close(out, three_projections(mha, x, x, x))
    assert calls == [] and weights.shape == (2, 4, 4, 4)
    mha(x, x, x)  # training on the CPU: three products (the stored CPU results' gradients)
    with torch.no_grad():
        mha(x, x, x)  # no gradients (decoding): three products
    assert calls == []


def test_training_off_the_cpu_packs_and_decoding_does_not():
    """Which path a device takes, shown on the meta device (shapes only, not the CPU)."""
    mha = tl.MultiHeadAttention(16, 4).to("meta")
    calls = []
    mha.packed_qkv = lambda h: calls.append(h) or tl.MultiHeadAttention.packed_qkv(mha, h)
    x = torch.empty(2, 4, 16, device="meta", requires_grad=True)
    out, _ = mha(x, x, x)
    assert out.shape == (2, 4, 16) and len(calls) == 1
    with torch.no_grad():
        mha(x, x, x)
    memory = torch.empty(2, 6, 16, device="meta")
    mha(x, memory, memory)  # cross-attention: three products
    assert len(calls) == 1


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_packed_projection_gradients_equal_three_projections(dtype):
    """The gradients the packed path gives where it trains (on a GPU): each Linear gets its
    own share, and x the sum of the three."""
    mha = _mha(dtype)
    x = torch.randn(3, 5, 16, dtype=dtype, requires_grad=True)
    got = torch.autograd.grad(sum(t.square().sum() for t in mha.packed_qkv(x)),
                              [x, *mha.parameters()], allow_unused=True)
    three = [mha.split_heads(p(x)) for p in (mha.q_proj, mha.k_proj, mha.v_proj)]
    want = torch.autograd.grad(sum(t.square().sum() for t in three),
                               [x, *mha.parameters()], allow_unused=True)
    for g, w in zip(got, want):
        if w is None:  # out_proj takes no part in the projection
            assert g is None
        else:
            torch.testing.assert_close(g, w, **TOLERANCE[dtype])


def test_parameters_initialisation_and_state_dict_are_unchanged():
    torch.manual_seed(5)
    mha = tl.MultiHeadAttention(8, 2)
    torch.manual_seed(5)
    reference = [torch.nn.Linear(8, 8) for _ in range(4)]  # the same draws, in order
    for linear in reference:
        torch.nn.init.xavier_uniform_(linear.weight)
    keys = ["q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias",
            "v_proj.weight", "v_proj.bias", "out_proj.weight", "out_proj.bias"]
    assert list(mha.state_dict()) == keys
    for proj, linear in zip((mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj), reference):
        assert torch.equal(proj.weight, linear.weight)
    x = torch.randn(1, 3, 8)
    packed = mha.packed_qkv(x)  # the stack is made for the call ...
    assert list(mha.state_dict()) == keys and len(packed) == 3  # ... and kept nowhere


@pytest.mark.parametrize("update", ["fused Adam", "foreach Adam", ".data", "in place",
                                    "load_state_dict", "double"])
def test_attention_without_gradients_follows_every_kind_of_weight_update(update):
    """Decoding after training: whatever changed the weights, and however (a fused
    optimizer and ``.data`` leave the version counter alone), the next call uses them."""
    mha = _mha(torch.float32)
    x = torch.randn(2, 3, 16)
    with torch.no_grad():
        before, _ = mha(x, x, x)
    if update.endswith("Adam"):
        options = {"fused": True} if update == "fused Adam" else {"foreach": True}
        optimizer = torch.optim.Adam(mha.parameters(), lr=0.1, **options)
        mha(x, x, x)[0].square().sum().backward()
        optimizer.step()
    elif update == ".data":
        mha.k_proj.weight.data.mul_(2)
    elif update == "in place":
        with torch.no_grad():
            mha.k_proj.weight.mul_(2)
    elif update == "load_state_dict":
        mha.load_state_dict({k: v * 0.5 for k, v in mha.state_dict().items()})
    else:
        mha.double()
        x = x.double()
    with torch.no_grad():
        after, _ = mha(x, x, x)
        torch.testing.assert_close(after, three_projections(mha, x, x, x), atol=0, rtol=0)
    assert not torch.allclose(before.to(after.dtype), after) or update == "double"


def test_encoder_and_cached_decoder_self_attention_agree_with_recomputation():
    """The whole model: encoder self-attention and the decoder's cached self-attention
    (one new token a step) on the packed path give full recomputation's logits."""
    torch.manual_seed(0)
    model = make_small_model(vocab=11, layers=2).double()
    src = random_tokens(3, 6, 11, lengths=[6, 2, 4])
    tgt = random_tokens(3, 5, 11)
    with torch.no_grad():
        full = model(src, tgt)
        memory = model.encode(src)
        cache = model.decoder.new_cache()
        steps = [model.decode(tgt[:, t:t + 1], memory, src, cache=cache)
                 for t in range(tgt.size(1))]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-10, rtol=1e-10)
