"""The hot path (forward, loss, a training step, a cached decoding step) never reads a
tensor's value: under torch.compile it traces into one graph, whose compiled code computes
eager mode's numbers, and on a GPU it never waits for the device.

Reading a value (``.item()``, ``int(t)``, ``if t.any():``) is what breaks a graph: the
compiler cannot trace it, and on a GPU it is a sync (the host waits until the device has
run all queued work). ``torch._dynamo.explain`` counts graph breaks without compiling;
the fullgraph tests compile with the default backend (Inductor, which needs a C compiler
on the CPU); the sync test needs a CUDA device.
"""
from __future__ import annotations

import shutil

import pytest
import torch
import torch._dynamo

import transformer_lib as tl
from transformer_lib import _checks as tl_checks

from conftest import make_small_model, need, random_tokens

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = 13


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test traces from scratch (no graphs or recompilation counts carried over)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _batch():
    src = random_tokens(3, 6, VOCAB, lengths=[6, 2, 4])
    tgt = random_tokens(3, 5, VOCAB, lengths=[5, 5, 3])
    return src, tgt


def _model(dropout=0.0):
    return make_small_model(vocab=VOCAB, layers=1, dropout=dropout)


def _loss(model, src, tgt):
    logits = model(src, tgt[:, :-1])
    return tl.masked_cross_entropy(logits, tgt[:, 1:], pad_id=0, label_smoothing=0.1)


def _decode_step(model, token, memory, src, cache):
    """One incremental decoding step: the newest token (B, 1) -> next-token logits (B, V)."""
    return model.decode(token, memory, src, cache=cache)[:, -1]


def _graph_breaks(fn, *args):
    explanation = torch._dynamo.explain(fn)(*args)
    reasons = [str(b.reason).splitlines()[0] for b in explanation.break_reasons]
    return explanation.graph_count, explanation.graph_break_count, reasons


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_forward_and_loss_have_no_graph_breaks(mode):
    model = _model(dropout=0.1).train(mode == "train")
    src, tgt = _batch()
    assert _graph_breaks(model, src, tgt[:, :-1]) == (1, 0, [])
    logits = model(src, tgt[:, :-1]).detach()
    assert _graph_breaks(tl.masked_cross_entropy, logits, tgt[:, 1:]) == (1, 0, [])
    assert _graph_breaks(lambda s, t: _loss(model, s, t), src, tgt) == (1, 0, [])


def test_cached_decoding_step_has_no_graph_breaks():
    model = _model()
    src, _ = _batch()
    memory = model.encode(src)
    cache = model.decoder.new_cache()
    token = torch.ones(3, 1, dtype=torch.long)
    for _ in range(2):  # the first step fills an empty cache, the second appends to it
        result = _graph_breaks(lambda t, m, s: _decode_step(model, t, m, s, cache),
                               token, memory, src)
        assert result == (1, 0, [])


def test_bad_token_ids_still_raise_named_errors_in_eager_mode():
    """Skipping the read under the compiler must not lose the eager check, nor may a
    tensor changed in place since it was checked slip through."""
    model = _model()
    src, tgt = _batch()
    model(src, tgt)  # checked once: fine
    src[0, 0] = VOCAB  # in place: the tensor's version changes
    with pytest.raises(ValueError, match=r"src must be < vocab_size=13, got a token id of 13"):
        model(src, tgt)
    src[0, 0] = -1
    with pytest.raises(ValueError, match=r"src must be >= 0, got a token id of -1"):
        model.encode(src)


def test_bad_token_ids_raise_under_inference_mode():
    """Inference tensors have no version counter: they are checked every time."""
    model = _model()
    src, tgt = _batch()
    with torch.inference_mode():
        src, tgt = src.clone(), tgt.clone()
        model(src, tgt)
        src[0, 0] = VOCAB
        with pytest.raises(ValueError, match=r"src must be < vocab_size=13"):
            model(src, tgt)
        assert tl.greedy_decode(model, src[1:], 4, bos_id=1, eos_id=2).shape[0] == 2


def test_token_ids_checked_against_a_smaller_vocabulary_are_checked_again():
    ids = torch.tensor([[1, 2, 9]])
    tl_checks.check_token_ids("ids", ids, vocab_size=10)
    tl_checks.check_token_ids("ids", ids)  # a weaker check: already passed
    with pytest.raises(ValueError, match=r"ids must be < vocab_size=5, got a token id of 9"):
        tl_checks.check_token_ids("ids", ids, vocab_size=5)
    with pytest.raises(ValueError, match=r"targets must be < vocab_size=5"):
        tl_checks.check_token_ids("targets", ids, vocab_size=5, ignore=2)
    tl_checks.check_token_ids("targets", ids, vocab_size=5, ignore=9)  # 9 is padding


def test_token_ids_on_a_device_that_cannot_be_read_are_not_read():
    """No value is read where reading would cost (here: the meta device has none)."""
    ids = torch.empty(2, 3, dtype=torch.long, device="meta")
    tl_checks.check_token_ids("ids", ids, vocab_size=5)
    with pytest.raises(TypeError, match="integer token ids"):
        tl_checks.check_token_ids("ids", torch.empty(2, 3, device="meta"), vocab_size=5)


def _need_compiler():
    need(shutil.which("cc") or shutil.which("gcc") or shutil.which("clang"),
         "torch.compile's CPU backend (Inductor) needs a C compiler (cc, gcc or clang)")


def test_fullgraph_forward_and_training_step_match_eager():
    """One compiled graph holds the forward pass and the loss; backward runs the graph
    that torch.compile derived for it. Logits, loss and every gradient match eager."""
    _need_compiler()
    model = _model().train()  # dropout 0: train mode computes the same as eval
    src, tgt = _batch()

    def forward_and_loss(model, src, tgt):
        logits = model(src, tgt[:, :-1])
        loss = tl.masked_cross_entropy(logits, tgt[:, 1:], pad_id=0, label_smoothing=0.1)
        return logits, loss

    def run(fn):
        model.zero_grad(set_to_none=True)
        logits, loss = fn(model, src, tgt)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        return logits.detach(), loss.detach(), grads

    eager_logits, eager_loss, eager_grads = run(forward_and_loss)
    logits, loss, grads = run(torch.compile(forward_and_loss, fullgraph=True))
    torch.testing.assert_close(logits, eager_logits)
    torch.testing.assert_close(loss, eager_loss)
    assert grads.keys() == eager_grads.keys()
    for name, grad in eager_grads.items():
        torch.testing.assert_close(grads[name], grad, atol=1e-5, rtol=1e-4,
                                   msg=lambda m, name=name: f"{name}: {m}")


@torch.no_grad()
def test_fullgraph_cached_decoding_step_matches_eager():
    _need_compiler()
    model = _model()
    src, _ = _batch()
    memory = model.encode(src)
    step = torch.compile(_decode_step, fullgraph=True, dynamic=True)
    eager_cache, compiled_cache = model.decoder.new_cache(), model.decoder.new_cache()
    eager_token = compiled_token = torch.ones(3, 1, dtype=torch.long)
    # The first step fills the empty caches (eagerly); the compiled steps append to one.
    _decode_step(model, eager_token, memory, src, eager_cache)
    _decode_step(model, compiled_token, memory, src, compiled_cache)
    for _ in range(3):
        expected = _decode_step(model, eager_token, memory, src, eager_cache)
        logits = step(model, compiled_token, memory, src, compiled_cache)
        torch.testing.assert_close(logits, expected)
        eager_token = compiled_token = expected.argmax(-1, keepdim=True)
    assert compiled_cache[0]["self"]["k"].shape == eager_cache[0]["self"]["k"].shape


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_hot_path_never_syncs_a_cuda_device():
    """torch.cuda's sync debug mode turns every device-to-host wait into an error."""
    model = _model(dropout=0.1).cuda().train()
    src, tgt = (t.cuda() for t in _batch())
    token = torch.ones(3, 1, dtype=torch.long, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        _loss(model, src, tgt).backward()  # forward, loss and backward
        model.eval()
        with torch.no_grad():
            memory = model.encode(src)
            cache = model.decoder.new_cache()
            for _ in range(3):
                token = _decode_step(model, token, memory, src, cache).argmax(-1, keepdim=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()  # a bad id would surface here, as a device-side assert
