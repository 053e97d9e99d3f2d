"""Properties the architecture must have, whatever the weights: no peeking at the future,
indifference to padding, permutation equivariance, NaN-free fully masked rows, correct gradients."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import transformer_lib as tl
from conftest import PAD

pytestmark = pytest.mark.usefixtures("one_thread")

ATOL = dict(atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# No causal leak
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("norm_first", [False, True])
def test_no_causal_leak_in_transformer(small_model, tokens, norm_first):
    model = small_model(norm_first=norm_first)
    src = tokens(2, 6, 13, lengths=[6, 3])
    tgt = tokens(2, 7, 13)
    base = model(src, tgt)  # (B, Lt, V)
    for t in range(tgt.size(1) - 1):
        changed = tgt.clone()
        changed[:, t + 1:] = torch.randint(1, 13, changed[:, t + 1:].shape)
        assert not torch.equal(changed, tgt)
        logits = model(src, changed)
        torch.testing.assert_close(logits[:, : t + 1], base[:, : t + 1], **ATOL)
        # ... while the future really does change (the test can tell a difference)
        assert not torch.allclose(logits[:, t + 1:], base[:, t + 1:], **ATOL)


def test_no_causal_leak_in_decoder_stack():
    """Perturb the decoder's future *input vectors* (not tokens): earlier outputs stay the same."""
    decoder = tl.Decoder(2, 16, 4, 32, dropout=0.0).eval()
    B, Lt, Ls = 2, 6, 5
    x = torch.randn(B, Lt, 16)
    memory = torch.randn(B, Ls, 16)
    mask = tl.causal_mask(Lt)
    base = decoder(x, memory, self_mask=mask)
    for t in range(Lt - 1):
        perturbed = x.clone()
        perturbed[:, t + 1:] += 10 * torch.randn(B, Lt - t - 1, 16)
        out = decoder(perturbed, memory, self_mask=mask)
        torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1], **ATOL)
        assert not torch.allclose(out[:, t + 1:], base[:, t + 1:], **ATOL)
    # Without the mask the future does leak: the mask is what prevents it.
    unmasked = decoder(perturbed, memory)
    assert not torch.allclose(unmasked[:, :1], decoder(x, memory)[:, :1], **ATOL)


# ---------------------------------------------------------------------------------------------
# Padding invariance
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("norm_first", [False, True])
def test_source_padding_does_not_change_outputs(small_model, tokens, norm_first):
    model = small_model(norm_first=norm_first)
    src = tokens(3, 5, 13, lengths=[5, 2, 4])
    tgt = tokens(3, 4, 13)
    base_logits = model(src, tgt)
    base_memory = model.encode(src)
    for extra in (1, 3, 8):
        padded = torch.cat([src, torch.full((3, extra), PAD)], dim=1)
        torch.testing.assert_close(model(padded, tgt), base_logits, **ATOL)
        memory = model.encode(padded)
        for b, n in enumerate([5, 2, 4]):
            torch.testing.assert_close(memory[b, :n], base_memory[b, :n], **ATOL)


def test_padding_invariance_needs_the_mask(small_model, tokens):
    """Control experiment: without the padding mask the padded source would change the logits,
    so the invariance above is the mask's doing and the test can fail."""
    model = small_model()
    src = tokens(1, 4, 13)
    padded = torch.cat([src, torch.full((1, 3), PAD)], dim=1)
    x, x_pad = (model.pos_enc(model.src_embed(s)) for s in (src, padded))
    m, m_pad = model.encoder(x), model.encoder(x_pad)
    assert not torch.allclose(m_pad[:, :4], m, **ATOL)


# ---------------------------------------------------------------------------------------------
# Permutation equivariance
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_is_permutation_equivariant(norm_first):
    encoder = tl.Encoder(2, 16, 4, 32, dropout=0.0, norm_first=norm_first).eval()
    x = torch.randn(2, 7, 16)
    perm = torch.randperm(7)
    assert not torch.equal(perm, torch.arange(7))
    torch.testing.assert_close(encoder(x[:, perm]), encoder(x)[:, perm], **ATOL)


def test_positional_encoding_breaks_permutation_equivariance():
    """With positions added, order matters again (why the model needs them)."""
    encoder = tl.Encoder(1, 16, 4, 32, dropout=0.0).eval()
    pos = tl.PositionalEncoding(16, max_len=10)
    x = torch.randn(1, 7, 16)
    perm = torch.tensor([6, 5, 4, 3, 2, 1, 0])
    assert not torch.allclose(encoder(pos(x[:, perm])), encoder(pos(x))[:, perm], **ATOL)


# ---------------------------------------------------------------------------------------------
# Fully blocked query rows: zero weights, zero context, finite gradients
# ---------------------------------------------------------------------------------------------

def _row_blocking_mask(B, Lq, Lk):
    mask = torch.zeros(B, 1, Lq, Lk, dtype=torch.bool)
    mask[0, 0, 1, :] = True  # query 1 of example 0 may attend to nothing
    mask[1, 0, :, 3:] = True  # an ordinary padding pattern
    return mask


def test_fully_blocked_row_sdpa():
    B, H, Lq, Lk = 2, 2, 3, 5
    q = torch.randn(B, H, Lq, 4, requires_grad=True)
    k = torch.randn(B, H, Lk, 4, requires_grad=True)
    v = torch.randn(B, H, Lk, 4, requires_grad=True)
    mask = _row_blocking_mask(B, Lq, Lk)
    context, weights = tl.scaled_dot_product_attention(q, k, v, mask)
    assert (weights[0, :, 1] == 0).all()
    assert (context[0, :, 1] == 0).all()
    assert torch.isfinite(context).all() and torch.isfinite(weights).all()
    (context.square().sum() + weights.square().sum()).backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[0, :, 1] == 0).all()  # the blocked query influences nothing


@pytest.mark.parametrize("need_weights", [False, True])
def test_fully_blocked_row_multihead(need_weights):
    mha = tl.MultiHeadAttention(8, 2)
    with torch.no_grad():
        mha.out_proj.bias.normal_()
    B, Lq, Lk = 2, 3, 5
    query = torch.randn(B, Lq, 8, requires_grad=True)
    memory = torch.randn(B, Lk, 8, requires_grad=True)
    mask = _row_blocking_mask(B, Lq, Lk)
    out, weights = mha(query, memory, memory, mask=mask, need_weights=need_weights)
    assert torch.isfinite(out).all()
    # zero context -> the output is out_proj(0) = its bias
    torch.testing.assert_close(out[0, 1], mha.out_proj.bias.detach().expand(8), **ATOL)
    if need_weights:
        assert (weights[0, :, 1] == 0).all()
    out.square().sum().backward()
    for t in [query, memory] + list(mha.parameters()):
        assert torch.isfinite(t.grad).all()
    assert (query.grad[0, 1] == 0).all()


def test_fully_padded_sequence_in_transformer_is_finite(small_model, tokens):
    """An all-padding source row blocks every cross-attention key: logits stay finite."""
    model = small_model()
    src = tokens(2, 4, 13, lengths=[4, 0])
    tgt = tokens(2, 3, 13)
    logits = model(src, tgt)
    assert torch.isfinite(logits).all()


def test_torch_multihead_gives_nan_on_fully_blocked_row():
    """The motivation for our policy: nn.MultiheadAttention returns NaN for such a row."""
    theirs = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(2, 3, 8)
    key_padding = torch.zeros(2, 3, dtype=torch.bool)
    key_padding[1] = True  # example 1 is all padding
    out, _ = theirs(x, x, x, key_padding_mask=key_padding)
    assert torch.isfinite(out[0]).all()
    if not torch.isnan(out[1]).any():
        pytest.skip(f"torch {torch.__version__} no longer returns NaN for fully masked rows")
    assert torch.isnan(out[1]).all()


# ---------------------------------------------------------------------------------------------
# Gradients
# ---------------------------------------------------------------------------------------------

def test_gradcheck_sdpa_float64():
    B, H, Lq, Lk = 2, 1, 3, 4
    q = torch.randn(B, H, Lq, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(B, H, Lk, 3, dtype=torch.float64, requires_grad=True)
    v = torch.randn(B, H, Lk, 2, dtype=torch.float64, requires_grad=True)
    mask = _row_blocking_mask(B, Lq, Lk)

    def fn(q, k, v):
        return tl.scaled_dot_product_attention(q, k, v, mask)  # context and weights

    assert torch.autograd.gradcheck(fn, (q, k, v))
    assert torch.autograd.gradcheck(lambda q, k, v: tl.scaled_dot_product_attention(q, k, v), (q, k, v),
                                    fast_mode=True)


def test_gradcheck_multihead_explicit_path():
    mha = tl.MultiHeadAttention(4, 2).double()
    query = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(2, 4, 4, dtype=torch.float64, requires_grad=True)
    mask = _row_blocking_mask(2, 3, 4)

    names = [name for name, _ in mha.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for _, p in mha.named_parameters())

    def fn(query, memory, *params):
        # functional_call runs the module with these parameter tensors, so gradcheck covers them
        out, weights = torch.func.functional_call(
            mha, dict(zip(names, params)), (query, memory, memory),
            dict(mask=mask, need_weights=True))
        return out, weights

    assert torch.autograd.gradcheck(fn, (query, memory) + params, fast_mode=True)
