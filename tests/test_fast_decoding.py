"""The static cache and the recorded decoding steps (tl.FastDecoder) give the tokens of the
readable loops (tl.greedy_decode, tl.beam_search), cached and uncached: padded sources,
rows that stop early at different steps, both layer orders, several beam sizes. On the
CPU the step runs eagerly and through torch.compile; the CUDA graph needs a GPU."""
from __future__ import annotations

import shutil

import pytest
import torch
import torch._dynamo
from torch.utils._python_dispatch import TorchDispatchMode

import transformer_lib as tl
from transformer_lib.decoding import length_penalty_power
from transformer_lib.fast_decoding import FastDecoder, _beam_step, _greedy_step

from conftest import PAD, make_small_model, need, random_tokens

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB, BOS, MAX_LEN = 13, 1, 12


def _case(seed, norm_first=False):
    """A small random model, a padded batch, and an EOS id the model emits early for some
    rows (but not all at once): the rows stop at different steps."""
    torch.manual_seed(seed)
    model = make_small_model(vocab=VOCAB, layers=2, norm_first=norm_first)
    src = random_tokens(5, 7, VOCAB, lengths=[7, 3, 5, 1, 6])
    free = tl.greedy_decode(model, src, MAX_LEN, BOS, eos_id=PAD)  # never stops
    eos = int(free[0, 3])  # row 0 stops at step 3
    return model, src, eos


CASES = [(seed, seed % 2 == 1) for seed in range(4)]


@pytest.mark.parametrize("seed, norm_first", CASES)
def test_static_greedy_equals_the_readable_loop(seed, norm_first):
    model, src, eos = _case(seed, norm_first)
    cached = tl.greedy_decode(model, src, MAX_LEN, BOS, eos)
    assert torch.equal(cached, tl.greedy_decode(model, src, MAX_LEN, BOS, eos,
                                                use_cache=False))
    for check_every in (1, 3, 8):
        fast = tl.fast_greedy_decode(model, src, MAX_LEN, BOS, eos, check_every=check_every)
        assert torch.equal(fast, cached)
    ends = [row.index(eos) if eos in row else None for row in cached[:, 1:].tolist()]
    assert ends[0] is not None and ends[0] <= 2  # row 0 stops by step 3 ...
    assert len(set(ends)) >= 2  # ... and the rows do not all stop together


def test_static_greedy_stops_where_the_readable_loop_stops():
    """All rows finished before max_len: the result is exactly as long as the loop's."""
    model, src, eos = _case(2)
    src = src[:1]
    cached = tl.greedy_decode(model, src, MAX_LEN, BOS, eos)
    assert cached.size(1) < MAX_LEN + 1 and cached[0, -1] == eos  # stopped early
    assert torch.equal(tl.fast_greedy_decode(model, src, MAX_LEN, BOS, eos), cached)


@pytest.mark.parametrize("seed, norm_first", CASES)
@pytest.mark.parametrize("beam_size", [1, 2, 4])
def test_static_beam_search_equals_the_readable_loop(seed, norm_first, beam_size):
    model, src, eos = _case(seed, norm_first)
    cached = tl.beam_search(model, src, beam_size, MAX_LEN, BOS, eos)
    assert torch.equal(cached, tl.beam_search(model, src, beam_size, MAX_LEN, BOS, eos,
                                              use_cache=False))
    fast = tl.fast_beam_search(model, src, beam_size, MAX_LEN, BOS, eos)
    assert torch.equal(fast, cached)


def test_static_beam_search_with_another_length_penalty():
    model, src, eos = _case(1, True)
    options = dict(length_penalty=1.5, length_penalty_fn=length_penalty_power)
    assert torch.equal(tl.fast_beam_search(model, src, 3, MAX_LEN, BOS, eos, **options),
                       tl.beam_search(model, src, 3, MAX_LEN, BOS, eos, **options))


def test_bos_equal_to_pad_as_marian_starts():
    model, src, eos = _case(3)
    assert torch.equal(tl.fast_greedy_decode(model, src, MAX_LEN, PAD, eos),
                       tl.greedy_decode(model, src, MAX_LEN, PAD, eos))
    assert torch.equal(tl.fast_beam_search(model, src, 2, MAX_LEN, PAD, eos),
                       tl.beam_search(model, src, 2, MAX_LEN, PAD, eos))


def test_one_decoder_serves_many_batches_of_one_shape():
    """The buffers are reused: a second batch must not see the first one's memory."""
    model, src, eos = _case(0)
    decoder = FastDecoder(model)
    other = random_tokens(5, 7, VOCAB, lengths=[2, 7, 7, 4, 1])
    for batch in (src, other, src):
        assert torch.equal(decoder.greedy(batch, MAX_LEN, BOS, eos),
                           tl.greedy_decode(model, batch, MAX_LEN, BOS, eos))
        assert torch.equal(decoder.beam(batch, 3, MAX_LEN, BOS, eos),
                           tl.beam_search(model, batch, 3, MAX_LEN, BOS, eos))
    assert len(decoder.sessions) == 2  # one greedy, one beam session


def test_a_model_in_training_mode_decodes_without_dropout_and_stays_in_training():
    model, src, eos = _case(1)
    model.train()
    fast = tl.fast_greedy_decode(model, src, MAX_LEN, BOS, eos)
    assert model.training
    assert torch.equal(fast, tl.greedy_decode(model.eval(), src, MAX_LEN, BOS, eos))


def test_bad_arguments_raise_named_errors():
    model, src, eos = _case(0)
    with pytest.raises(ValueError, match="max_len=100 new tokens exceed the model's "
                                         "positional table"):
        tl.fast_greedy_decode(model, src, 100, BOS, eos)
    with pytest.raises(ValueError, match="cuda_graph=True needs a model on a CUDA device"):
        FastDecoder(model, cuda_graph=True)
    with pytest.raises(ValueError, match="check_every"):
        FastDecoder(model, check_every=0)
    with pytest.raises(TypeError, match="compile must be a bool or a torch.compile backend"):
        FastDecoder(model, compile=1)
    with pytest.raises(ValueError, match=r"src must be < vocab_size=13"):
        tl.fast_greedy_decode(model, src + VOCAB, MAX_LEN, BOS, eos)
    cache = tl.StaticCache(model, model.encode(src), 4)
    k = torch.zeros(5, 2, 2, 8)
    with pytest.raises(ValueError, match="one new position a step, got 2"):
        cache.layers[0]["self"].update(k, k)


def test_static_cache_writes_in_place_and_masks_the_future():
    model, src, _ = _case(0)
    cache = tl.StaticCache(model, model.encode(src), 4)
    layer = cache.layers[0]["self"]
    k_before, v_before = layer.k.data_ptr(), layer.v.data_ptr()
    new = torch.randn(5, 2, 1, 8)
    cache.step()  # now at slot 1
    keys, values = layer.update(new, 2 * new)
    assert keys.data_ptr() == k_before and values.data_ptr() == v_before
    torch.testing.assert_close(keys[:, :, 1:2], new)
    assert keys[:, :, 0].eq(0).all() and keys[:, :, 2:].eq(0).all()
    assert cache.blocked().tolist() == [[[[False, False, True, True]]]]


def test_the_step_is_one_graph_without_breaks():
    """No value read on the host, no data-dependent branch: one graph for a whole step,
    bookkeeping included (so a CUDA graph or torch.compile can record it)."""
    model, src, eos = _case(0)
    decoder = FastDecoder(model)
    decoder.greedy(src, MAX_LEN, BOS, eos)
    (session,) = decoder.sessions.values()
    session.reset(BOS)
    torch._dynamo.reset()
    with torch.no_grad():
        explanation = torch._dynamo.explain(lambda: _greedy_step(model, session, eos))()
    torch._dynamo.reset()
    assert (explanation.graph_count, explanation.graph_break_count) == (1, 0), [
        str(b.reason) for b in explanation.break_reasons]


class _HostReads(TorchDispatchMode):
    """Records each operation that hands a tensor's *value* to the host: ``int(t)``,
    ``bool(t)``, ``torch.equal``, and those whose output shape depends on values
    (``nonzero``, boolean-mask indexing, ``unique``). On a GPU each one waits for the
    device, and inside ``torch.cuda.graph`` each one is an error: the CUDA graph's
    precondition, checked here on the CPU, where the step runs the same operations."""

    READS = {"_local_scalar_dense", "is_nonzero", "equal", "nonzero", "masked_select",
             "unique", "_unique", "_unique2", "unique_consecutive", "unique_dim"}

    def __init__(self):
        super().__init__()
        self.reads = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name in self.READS or (name.startswith(("index", "_index_put"))
                                  and _has_bool_index(args)):
            self.reads.append(str(func))
        return func(*args, **(kwargs or {}))


def _has_bool_index(args) -> bool:
    """x[mask] and x[mask] = v: aten.index / index_put with a boolean index tensor."""
    indices = args[1] if len(args) > 1 and isinstance(args[1], (list, tuple)) else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices)


def test_the_probe_sees_a_host_read():
    """The probe below is only as good as its list: an ``int()`` and a boolean index
    in a step must show up, in this version of torch."""
    x = torch.arange(4)
    with _HostReads() as probe:
        int(x[0])
        x[x > 1].sum()
        x[x > 2] = 0
        x[torch.tensor([0, 1])].sum()  # an integer index reads nothing
    assert [r.split(".")[1] for r in probe.reads] == ["_local_scalar_dense", "index",
                                                     "index_put_"], probe.reads


@pytest.mark.parametrize("kind", ["greedy", "beam"])
def test_the_eager_step_reads_nothing_on_the_host(kind):
    """What ``torch.cuda.graph`` records is the *eager* step, checks and all (torch.compile
    traces them, but the uncompiled CUDA graph runs them as written): none of it may read a
    value, in any of the first steps, rows finishing or not."""
    model, src, eos = _case(1)
    decoder = FastDecoder(model)
    step = _greedy_step if kind == "greedy" else _beam_step
    if kind == "greedy":
        decoder.greedy(src, MAX_LEN, BOS, eos)
    else:
        decoder.beam(src, 3, MAX_LEN, BOS, eos)
    (session,) = decoder.sessions.values()
    session.reset(BOS)  # as FastDecoder.beam starts a batch (beam state included)
    with torch.no_grad(), _HostReads() as probe:
        for _ in range(MAX_LEN):
            step(model, session, eos)
    assert probe.reads == []
    if kind == "greedy":
        assert bool(session.finished.any())  # the steps above included rows that ended
    else:  # hypotheses ending with EOS were set aside, and every example is done
        assert bool((session.fin_tokens == eos).any()) and bool(session.done.all())


@pytest.mark.parametrize("kind", ["greedy", "beam"])
def test_compiled_step_traced_without_fusion_gives_the_same_tokens(kind):
    """torch.compile(fullgraph=True) with the aot_eager backend: the traced, functionalised
    step (in-place updates turned into copies) computes eager mode's tokens exactly."""
    model, src, eos = _case(3, True)
    torch._dynamo.reset()
    decoder = FastDecoder(model, compile="aot_eager", check_every=4)
    try:
        for batch in (src, src.flip(0)):
            if kind == "greedy":
                expected = tl.greedy_decode(model, batch, MAX_LEN, BOS, eos)
                assert torch.equal(decoder.greedy(batch, MAX_LEN, BOS, eos), expected)
            else:
                expected = tl.beam_search(model, batch, 3, MAX_LEN, BOS, eos)
                assert torch.equal(decoder.beam(batch, 3, MAX_LEN, BOS, eos), expected)
    finally:
        torch._dynamo.reset()


def test_inductor_compiled_greedy_gives_the_same_tokens():
    """Inductor (fused kernels, generated C++) on the CPU: slow to compile (about a
    minute here), so one greedy case."""
    need(shutil.which("cc") or shutil.which("gcc") or shutil.which("clang"),
         "torch.compile's CPU backend (Inductor) needs a C compiler (cc, gcc or clang)")
    model, src, eos = _case(1, True)
    torch._dynamo.reset()
    try:
        fast = tl.fast_greedy_decode(model, src, MAX_LEN, BOS, eos, compile=True)
    finally:
        torch._dynamo.reset()
    assert torch.equal(fast, tl.greedy_decode(model, src, MAX_LEN, BOS, eos))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("compile", [False, True])
def test_cuda_graph_gives_the_readable_loops_tokens(compile):
    model, src, eos = _case(2)
    model, src = model.cuda(), src.cuda()
    decoder = FastDecoder(model, cuda_graph=True, compile=compile)
    for batch in (src, src.flip(0)):  # the second call replays the recorded graph
        assert torch.equal(decoder.greedy(batch, MAX_LEN, BOS, eos),
                           tl.greedy_decode(model, batch, MAX_LEN, BOS, eos))
        if not compile:
            assert torch.equal(decoder.beam(batch, 3, MAX_LEN, BOS, eos),
                               tl.beam_search(model, batch, 3, MAX_LEN, BOS, eos))
    with torch.no_grad():  # an optimizer-like update in place: the graph is recorded again
        for p in model.parameters():
            p.mul_(1.5)
    assert torch.equal(decoder.greedy(src, MAX_LEN, BOS, eos),
                       tl.greedy_decode(model, src, MAX_LEN, BOS, eos))


@pytest.mark.parametrize("kind", ["greedy", "beam"])
@pytest.mark.parametrize("max_len", [1, 2, 5])
def test_the_warm_up_before_recording_fits_short_outputs_and_is_undone(kind, max_len):
    """Before a CUDA graph is recorded the step runs a few times (lazy initialisations):
    never more often than ``max_len``, the room its buffers have (a step past it would
    write out of bounds: a device-side assert on a GPU), and every buffer it wrote is
    put back. Shown on the CPU with the method the graph path calls."""
    model, src, eos = _case(0)
    decoder = FastDecoder(model)
    if kind == "greedy":
        decoder.greedy(src, max_len, BOS, eos)
    else:
        decoder.beam(src, 2, max_len, BOS, eos)
    (session,) = decoder.sessions.values()
    session.reset(BOS)  # where a call starts (position 0), as _run finds it
    step = _greedy_step if kind == "greedy" else _beam_step
    tensors = [t for t in vars(session).values() if isinstance(t, torch.Tensor)]
    tensors += list(session.cache.buffers())
    before = [t.clone() for t in tensors]
    with torch.no_grad():
        decoder._warm_up(session, lambda: step(model, session, eos))
    assert all(torch.equal(t, b) for t, b in zip(tensors, before))
