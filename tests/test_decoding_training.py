"""Decoding (greedy, beam search, the key/value cache) and training (loss drops, noam_lr)."""
from __future__ import annotations

import math

import pytest
import torch

import transformer_lib as tl
from transformer_lib.data import BucketBatcher
from conftest import PAD, make_small_model, random_tokens

pytestmark = pytest.mark.usefixtures("one_thread")

BOS, EOS = 1, 2
VOCAB = 9


def _sources():
    """Several sources with padding: lengths 6, 2, 4, 5."""
    return random_tokens(4, 6, VOCAB, lengths=[6, 2, 4, 5], low=3)


def _models():
    for seed in range(3):
        torch.manual_seed(seed)
        yield make_small_model(vocab=VOCAB, d_model=16, num_heads=2, layers=2, d_ff=32)
    torch.manual_seed(3)
    yield make_small_model(vocab=VOCAB, d_model=16, num_heads=2, layers=2, d_ff=32, norm_first=True)


def _check_decoded(ys, batch, max_len):
    assert ys.dtype == torch.long and ys.size(0) == batch and 2 <= ys.size(1) <= max_len + 1
    assert (ys[:, 0] == BOS).all()
    for row in ys.tolist():
        if EOS in row:  # after EOS, only padding
            assert all(t == PAD for t in row[row.index(EOS) + 1:])


def test_greedy_cache_equals_recomputation():
    src = _sources()
    for model in _models():
        with_cache = tl.greedy_decode(model, src, max_len=12, bos_id=BOS, eos_id=EOS)
        without = tl.greedy_decode(model, src, max_len=12, bos_id=BOS, eos_id=EOS, use_cache=False)
        assert torch.equal(with_cache, without)
        _check_decoded(with_cache, 4, 12)


def test_greedy_matches_argmax_of_full_forward():
    """Greedy decoding is teacher forcing on its own output: each token is the arg-max of the
    full model's logits at the previous position."""
    src = _sources()
    model = next(_models())
    ys = tl.greedy_decode(model, src, max_len=8, bos_id=BOS, eos_id=EOS)
    logits = model(src, ys[:, :-1])
    logits[..., PAD] = float("-inf")  # decoding never emits padding
    predicted = logits.argmax(-1)
    for b in range(src.size(0)):
        row = ys[b, 1:].tolist()
        n = row.index(EOS) + 1 if EOS in row else len(row)
        assert predicted[b, :n].tolist() == row[:n]


def test_cached_decode_logits_equal_full_decode():
    model = next(_models())
    src = _sources()
    tgt = random_tokens(4, 5, VOCAB, low=3)
    memory = model.encode(src)
    full = model.decode(tgt, memory, src)
    cache = model.decoder.new_cache()
    steps = [model.decode(tgt[:, t:t + 1], memory, src, cache=cache) for t in range(5)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("decode", ["greedy", "beam"])
def test_decoding_never_emits_padding(decode):
    """Even a model that prefers the pad token does not put padding inside a sequence, and the
    cache still agrees with recomputation (a pad inside ys is a blocked key only when recomputing)."""
    model = make_small_model(vocab=VOCAB)
    boost = torch.zeros(VOCAB)
    boost[PAD] = 100.0
    model.generator.register_forward_hook(lambda module, inputs, out: out + boost)
    src = _sources()
    if decode == "greedy":
        run = lambda cache: tl.greedy_decode(model, src, 8, BOS, EOS, use_cache=cache)  # noqa: E731
    else:
        run = lambda cache: tl.beam_search(model, src, 3, 8, BOS, EOS, use_cache=cache)  # noqa: E731
    ys = run(True)
    assert torch.equal(ys, run(False))
    for row in ys[:, 1:].tolist():
        body = row[: row.index(EOS)] if EOS in row else row
        assert PAD not in body


def test_beam_size_one_equals_greedy():
    src = _sources()
    for model in _models():
        greedy = tl.greedy_decode(model, src, max_len=10, bos_id=BOS, eos_id=EOS)
        beam = tl.beam_search(model, src, beam_size=1, max_len=10, bos_id=BOS, eos_id=EOS)
        assert torch.equal(beam, greedy)


@pytest.mark.parametrize("beam_size", [2, 4])
def test_beam_search_cache_equals_recomputation(beam_size):
    src = _sources()
    for model in _models():
        with_cache = tl.beam_search(model, src, beam_size, max_len=10, bos_id=BOS, eos_id=EOS)
        without = tl.beam_search(model, src, beam_size, max_len=10, bos_id=BOS, eos_id=EOS,
                                 use_cache=False)
        assert torch.equal(with_cache, without)
        _check_decoded(with_cache, 4, 10)


def test_decoding_restores_training_mode():
    model = make_small_model(vocab=VOCAB, dropout=0.5).train()
    src = _sources()
    a = tl.greedy_decode(model, src, max_len=6, bos_id=BOS, eos_id=EOS)
    b = tl.greedy_decode(model, src, max_len=6, bos_id=BOS, eos_id=EOS)
    assert torch.equal(a, b)  # dropout was off while decoding
    assert model.training  # and the caller's mode is back
    tl.beam_search(model, src, 2, max_len=6, bos_id=BOS, eos_id=EOS)
    assert model.training


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------

def _copy_batches(n_batches, batch=32, length=5, vocab=8, seed=0):
    """Copy task: source = random digits, target = BOS + the same digits + EOS."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(n_batches):
        body = torch.randint(3, vocab, (batch, length), generator=g)
        src = body
        bos = torch.full((batch, 1), BOS)
        eos = torch.full((batch, 1), EOS)
        yield src, torch.cat([bos, body, eos], dim=1)


def test_tiny_model_learns_copy_task():
    torch.manual_seed(0)
    model = tl.Transformer(8, 8, d_model=32, num_heads=4, num_encoder_layers=1,
                           num_decoder_layers=1, d_ff=64, dropout=0.0, max_len=16)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    batches = list(_copy_batches(100))
    history = tl.train(model, batches, optimizer, progress=False, log_every=10)
    assert history["step"][-1] == 100
    assert len(history["loss"]) == 10
    first, last = history["loss"][0], history["loss"][-1]
    assert first > 1.5  # about log(8) = 2.08 at the start (the mean of the first 10 steps)
    assert last < 0.2 * first  # about 0.03 here
    assert history["acc"][-1] > 0.9
    # and decoding a fresh source really copies it (mostly)
    src, tgt = next(_copy_batches(1, batch=16, seed=99))
    ys = tl.greedy_decode(model, src, max_len=6, bos_id=BOS, eos_id=EOS)
    assert (ys[:, 1:6] == src).float().mean() > 0.8


def test_train_step_returns_floats_and_updates_weights():
    model = tl.Transformer(8, 8, d_model=16, num_heads=2, num_encoder_layers=1,
                           num_decoder_layers=1, d_ff=32, dropout=0.1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    src, tgt = next(_copy_batches(1, batch=4))
    before = model.generator.weight.detach().clone()
    loss, acc = tl.train_step(model, src, tgt, optimizer, label_smoothing=0.1, clip_grad_norm=1.0)
    assert isinstance(loss, float) and isinstance(acc, float)
    assert math.isfinite(loss) and 0.0 <= acc <= 1.0
    assert not torch.equal(before, model.generator.weight)
    assert model.training


def test_train_stops_at_max_steps_on_endless_iterator():
    model = tl.Transformer(8, 8, d_model=16, num_heads=2, num_encoder_layers=1,
                           num_decoder_layers=1, d_ff=32)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def endless():
        while True:
            yield from _copy_batches(1, batch=2)

    history = tl.train(model, endless(), optimizer, max_steps=7, progress=False, log_every=5)
    assert history["step"] == [5, 7]
    assert all(math.isfinite(x) for x in history["loss"])
    with pytest.raises(ValueError, match="max_steps or max_seconds"):
        tl.train(model, endless(), optimizer, progress=False)
    # an endless BucketBatcher is endless too, although it knows its batches per epoch
    src, tgt = next(_copy_batches(1, batch=6))
    with pytest.raises(ValueError, match="max_steps or max_seconds"):
        tl.train(model, BucketBatcher(src, tgt, batch_size=2), optimizer, progress=False)
    history = tl.train(model, BucketBatcher(src, tgt, batch_size=2, epochs=2), optimizer,
                       progress=False, log_every=100)
    assert history["step"] == [6]  # 3 batches per epoch, 2 epochs


def test_train_logs_the_last_steps_when_the_batches_run_out():
    model = tl.Transformer(8, 8, d_model=16, num_heads=2, num_encoder_layers=1,
                           num_decoder_layers=1, d_ff=32)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    calls = []
    history = tl.train(model, list(_copy_batches(7, batch=2)), optimizer, progress=False,
                       log_every=5, callback=lambda step, h: calls.append(step))
    assert history["step"] == [5, 7]  # the last two steps are not lost
    assert calls == [5, 7]
    assert len(history["loss"]) == len(history["lr"]) == len(history["seconds"]) == 2
    # a generator that ends is handled the same way
    history = tl.train(model, _copy_batches(3, batch=2), optimizer, max_steps=10, progress=False,
                       log_every=5)
    assert history["step"] == [3]


# ---------------------------------------------------------------------------------------------
# Learning-rate schedule
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("d_model, warmup", [(512, 4000), (64, 100)])
def test_noam_lr_peaks_at_warmup(d_model, warmup):
    peak = tl.noam_lr(warmup, d_model, warmup)
    assert peak == pytest.approx(d_model**-0.5 * warmup**-0.5, rel=1e-12)
    steps = range(1, 3 * warmup)
    values = [tl.noam_lr(s, d_model, warmup) for s in steps]
    assert max(values) == pytest.approx(peak, rel=1e-12)
    assert values.index(max(values)) + 1 == warmup
    # linear warm-up, then 1/sqrt(step) decay
    assert tl.noam_lr(warmup // 2, d_model, warmup) == pytest.approx(peak * (warmup // 2) / warmup)
    assert tl.noam_lr(4 * warmup, d_model, warmup) == pytest.approx(peak / 2)
    assert tl.noam_lr(0, d_model, warmup) == tl.noam_lr(1, d_model, warmup) > 0


def test_noam_lr_with_lambda_lr_as_documented():
    """The recipe in noam_lr's docstring, as the capstone's make_optimizer uses it: update k
    (counting from 1) runs at the paper's rate for step k, times lr_factor."""
    from transformer_lib.examples.number_words import make_optimizer

    model = tl.Transformer(8, 8, d_model=16, num_heads=2, num_encoder_layers=1,
                           num_decoder_layers=1, d_ff=32)
    optimizer, scheduler = make_optimizer(model, lr_factor=0.5, warmup=10)
    seen = []
    for _ in range(30):
        seen.append(optimizer.param_groups[0]["lr"])  # the rate of the coming update
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx([0.5 * tl.noam_lr(k, 16, 10) for k in range(1, 31)], rel=1e-12)
    assert seen.index(max(seen)) + 1 == 10  # the peak is update 10, the end of the warm-up


# ------------------------------------------------------------------------------------
# Starting from the pad id (Marian's convention: decoder_start_token_id == pad_token_id)


@pytest.mark.parametrize("decode", ["greedy", "beam"])
def test_starting_from_the_pad_id_cache_equals_recomputation(decode):
    """With bos_id == pad_id, position 0 is the start token, not padding: recomputation
    must not block it (the cache never does), or the two paths give different tokens."""
    src = _sources()

    def run(model, cache):
        if decode == "greedy":
            return tl.greedy_decode(model, src, 10, PAD, EOS, use_cache=cache)
        return tl.beam_search(model, src, 3, 10, PAD, EOS, use_cache=cache)

    for model in _models():
        ys = run(model, True)
        assert torch.equal(ys, run(model, False))
        assert (ys[:, 0] == PAD).all()


def test_first_decoder_position_is_never_padding():
    """The full forward pass sees the start token at position 0 even when its id is
    pad_id, exactly as the cached step does; later pad positions stay blocked."""
    model = next(_models())
    src = _sources()
    tgt = random_tokens(4, 5, VOCAB, lengths=[5, 3, 4, 2], low=3)
    tgt[:, 0] = PAD  # start from the pad id
    memory = model.encode(src)
    cache = model.decoder.new_cache()
    first = model.decode(tgt[:, :1], memory, src, cache=cache)
    torch.testing.assert_close(model.decode(tgt, memory, src)[:, :1], first)
    # every query attends to the start token; the padding after it stays blocked
    _, maps = model(src, tgt, return_attention=True)
    for weights in maps["decoder"]:  # (B, H, Lt, Lt) per layer
        assert (weights[..., 0] > 0).all()
        for b, n in enumerate([5, 3, 4, 2]):
            assert (weights[b, :, :, n:] == 0).all()


def test_beam_search_length_penalty_fn():
    """``length_penalty_fn(lengths, alpha)`` scores the finished hypotheses (default GNMT).
    The lengths count the generated tokens, EOS included, as Hugging Face's do: 1..max_len."""
    from transformer_lib.decoding import length_penalty_gnmt, length_penalty_power

    src = _sources()
    model = next(_models())
    seen = []

    def recording(lengths, alpha):
        seen.append((lengths.clone(), alpha))
        return length_penalty_gnmt(lengths, alpha)

    ys = tl.beam_search(model, src, 3, 10, BOS, EOS, length_penalty=0.7,
                        length_penalty_fn=recording)
    default = tl.beam_search(model, src, 3, 10, BOS, EOS, length_penalty=0.7)
    assert torch.equal(ys, default)
    (lengths, alpha), = seen  # called once, for every length a hypothesis can have
    assert alpha == 0.7 and lengths.tolist() == list(range(1, 11))
    n = torch.tensor([1, 4, 9])
    torch.testing.assert_close(length_penalty_power(n, 0.5), torch.tensor([1., 2., 3.]))
    gnmt = torch.tensor([1, 1.5, 14 / 6])  # (5 + n) / 6
    torch.testing.assert_close(length_penalty_gnmt(n, 1.0), gnmt)
    message = "length_penalty_fn must be callable, got float"
    with pytest.raises(TypeError, match=message):
        tl.beam_search(model, src, 3, 10, BOS, EOS, length_penalty_fn=0.6)
