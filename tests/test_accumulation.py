"""Gradient accumulation and mixed precision: K micro-batches make the step of one batch of
all of them; autocast changes the arithmetic, not the recipe."""
from __future__ import annotations

import pytest
import torch

import transformer_lib as tl
from transformer_lib import distributed
from transformer_lib.precision import autocast, check_precision, grad_scaler
from transformer_lib.training import accumulate_gradients, accumulation_step

from ddp_worker import GRAD_BATCH, PAD, padded_batch, tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


def _weights_after_one_step(micro_batches):
    model = tiny_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    if len(micro_batches) == 1:
        tl.train_step(model, *micro_batches[0], optimizer)
    else:
        accumulation_step(model, micro_batches, optimizer)
    return model.state_dict()


@pytest.mark.parametrize("accumulate", [2, 3, 8])
def test_accumulated_micro_batches_equal_one_big_batch(accumulate):
    """float64: K padded micro-batches with different numbers of target tokens, weighted by
    tokens, give the gradient and the Adam step of the whole batch at once."""
    src, tgt = GRAD_BATCH
    pieces = distributed.split_batch(src, tgt, accumulate, PAD)
    counts = {int((t[:, 1:] != PAD).sum()) for _, t in pieces}
    assert len(counts) > 1  # the weights matter

    model = tiny_model().train()
    accumulate_gradients(model, pieces)
    accumulated = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    tl.masked_cross_entropy(model(src, tgt[:, :-1]), tgt[:, 1:], PAD).backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(accumulated[name], p.grad, rtol=0, atol=1e-12)

    stepped, whole = _weights_after_one_step(pieces), _weights_after_one_step([(src, tgt)])
    for name, value in whole.items():
        torch.testing.assert_close(stepped[name], value, rtol=0, atol=1e-10)


def test_one_micro_batch_is_train_step_bit_for_bit():
    """float32: with K=1 the token weight is n / n = 1 exactly, so the accumulated step is
    train_step's, to the last bit (the logged loss and accuracy are computed in float64
    from token counts, so they agree to float32's precision)."""
    results = []
    for step in ("plain", "accumulated"):
        torch.manual_seed(0)
        model = tl.Transformer(11, 11, d_model=16, num_heads=2, num_encoder_layers=1,
                               num_decoder_layers=1, d_ff=32, dropout=0.0)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        out = []
        for src, tgt in (padded_batch(1), padded_batch(2)):
            if step == "plain":
                out.append(tl.train_step(model, src, tgt, optimizer, clip_grad_norm=1.0))
            else:
                out.append(accumulation_step(model, [(src, tgt)], optimizer,
                                             clip_grad_norm=1.0))
        results.append((out, model.state_dict()))
    (plain, plain_weights), (accumulated, weights) = results
    assert sum(accumulated, ()) == pytest.approx(sum(plain, ()), rel=1e-6)
    assert all(torch.equal(plain_weights[k], weights[k]) for k in weights)


def test_train_reads_k_batches_per_step():
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [padded_batch(i) for i in range(7)]
    history = tl.train(model, batches, optimizer, accumulate=3, progress=False, log_every=1)
    assert history["step"] == [1, 2, 3]  # 3 + 3 + the last one alone
    reference = tiny_model()
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for group in (batches[:3], batches[3:6], batches[6:]):
        accumulation_step(reference, group, optimizer)
    for name, value in reference.state_dict().items():
        assert torch.equal(model.state_dict()[name], value)


def test_accumulation_step_bad_input():
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="non-empty list of \\(src, tgt\\) pairs"):
        accumulation_step(model, [], optimizer)
    with pytest.raises(TypeError, match="must be a \\(src, tgt\\) pair"):
        accumulation_step(model, [GRAD_BATCH[0]], optimizer)
    with pytest.raises(ValueError, match="accumulate must be >= 1"):
        tl.train(model, [GRAD_BATCH], optimizer, accumulate=0, progress=False)


# ---------------------------------------------------------------------------------------
# Mixed precision


def test_bf16_autocast_on_the_cpu_trains_close_to_fp32():
    """bf16 has 8 bits of mantissa: the loss agrees with fp32 to about 1%, the gradients
    are finite, and the weights (and Adam's state) stay float32."""
    src, tgt = padded_batch(3)
    losses = {}
    for precision in ("fp32", "bf16"):
        torch.manual_seed(0)
        model = tl.Transformer(11, 11, d_model=32, num_heads=2, num_encoder_layers=1,
                               num_decoder_layers=1, d_ff=64, dropout=0.0)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        losses[precision], _ = accumulation_step(model, [(src, tgt)], optimizer,
                                                 precision=precision)
        assert all(p.dtype == torch.float32 and torch.isfinite(p).all()
                   for p in model.parameters())
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=0.02)
    with autocast("bf16", "cpu"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with autocast("fp32", "cpu"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


def test_fp16_is_refused_on_the_cpu_with_a_reason():
    with pytest.raises(ValueError, match="'fp16' needs a CUDA device.*use 'bf16'"):
        check_precision("fp16", "cpu")
    with pytest.raises(ValueError, match="precision must be one of"):
        check_precision("fp8", "cpu")
    assert grad_scaler("fp16", "cpu") is None and grad_scaler("bf16", "cpu") is None
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="'fp16' needs a CUDA device"):
        tl.train(model, [GRAD_BATCH], optimizer, precision="fp16", progress=False)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="fp16 with a GradScaler needs CUDA")
def test_fp16_with_a_grad_scaler_on_cuda():
    torch.manual_seed(0)
    model = tl.Transformer(11, 11, d_model=32, num_heads=2, num_encoder_layers=1,
                           num_decoder_layers=1, d_ff=64, dropout=0.0).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = grad_scaler("fp16", "cuda")
    assert isinstance(scaler, torch.amp.GradScaler)
    batches = [tuple(t.cuda() for t in padded_batch(i)) for i in range(4)]
    history = tl.train(model, batches, optimizer, precision="fp16", scaler=scaler,
                       accumulate=2, clip_grad_norm=1.0, progress=False, log_every=1)
    assert history["step"] == [1, 2] and all(torch.isfinite(torch.tensor(history["loss"])))
    assert scaler.get_scale() > 0
