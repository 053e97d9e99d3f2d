"""Decoding off the host: greedy and beam search on a static cache, each step recorded once.

``tl.greedy_decode`` and ``tl.beam_search`` are the readable loops (chapter 10). On a GPU
they are *host-bound*: each generated token costs a few hundred small kernel launches
(every projection, norm and softmax of every layer), and for a small batch the GPU runs
each kernel faster than Python can issue the next one, so it waits. The remedy here:

1. a ``StaticCache`` (static_cache.py): every tensor a step touches is allocated once, so
   every step runs the same operations on the same addresses;
2. the whole step written as tensor operations, bookkeeping included (next token, which
   rows finished, beam reordering): no value is read on the host inside a step;
3. that step recorded once as a CUDA graph (``torch.cuda.CUDAGraph``) and replayed: one
   launch per token instead of hundreds. Optionally the step is compiled first
   (``torch.compile``, fullgraph), which fuses small kernels into fewer.

The host reads one number every ``check_every`` steps (have all rows finished?). The tokens
are those of the readable loops (the tests assert it): only the arithmetic's shape differs
(attention over ``max_len`` slots, the unwritten ones masked), not the algorithm. Beam search
calls the very functions of ``tl.beam_search`` that choose candidates, set finished
hypotheses aside and decide when an example is done; here the live beams and the finished
hypotheses live in static buffers, (B*K, max_len + 1) and (B, K, max_len + 1) tokens.

``FastDecoder`` keeps its buffers (and graphs) between calls of the same shape: the graph is
recorded on the first call and replayed by later ones.
"""
from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from ._checks import check_bool, check_positive_int
from .decoding import (
    _check_beam_args,
    _check_decode_args,
    _eval_mode,
    _length_penalties,
    _next_live,
    _set_aside,
    _top_candidates,
    _update_done,
    length_penalty_gnmt,
)
from .masks import padding_mask
from .static_cache import StaticCache


def decode_step(model, token, memory, memory_mask, cache: StaticCache) -> torch.Tensor:
    """One step on a static cache: token (B, 1) at slot ``cache.position`` -> logits (B, V).

    The same computation as ``model.decode(token, memory, src, cache=...)`` of the readable
    cache, written so that nothing depends on a value the host would have to read: the
    position is a device tensor, the positional encoding is gathered with it, and the
    self-attention mask blocks the slots not written yet. ``memory_mask`` is
    ``padding_mask(src)`` (B, 1, 1, Ls). The position is not advanced here.
    """
    embed = model.tgt_embed
    x = embed.embedding(token)  # (B, 1, d); the ids were checked where the loop began
    if embed.scale:
        x = x * math.sqrt(embed.d_model)
    pe = model.pos_enc.table.index_select(0, cache.position.view(1))  # (1, d)
    x = model.pos_enc.dropout(x + pe.to(x.dtype))
    h = model.decoder(x, memory, cache.blocked(), memory_mask, cache=cache.layers)
    return model.generator(h)[:, -1]  # (B, 1, V) -> (B, V)


class _Session:
    """The buffers of one kind of call (greedy or beam, one shape), and its recorded step.
    ``beam``: (B, K) for beam search (then ``batch`` is B*K rows), None for greedy."""

    def __init__(self, model, batch, src_len, max_len, dtype, device, beam=None):
        d_model = model.src_embed.d_model
        self.pad_id = model.pad_id
        self.src = torch.zeros(batch, src_len, dtype=torch.long, device=device)
        self.memory = torch.zeros(batch, src_len, d_model, dtype=dtype, device=device)
        self.memory_mask = torch.zeros(batch, 1, 1, src_len, dtype=torch.bool, device=device)
        self.cache = StaticCache(model, self.memory, max_len)
        self.ys = torch.zeros(batch, max_len + 1, dtype=torch.long, device=device)
        self.token = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.finished = torch.zeros(batch, dtype=torch.bool, device=device)
        self.done_at = torch.zeros((), dtype=torch.long, device=device)  # steps when all ended
        self.max_len = max_len
        self.graph = None
        self.compiled = None
        vocab = model.generator.out_features
        self.pad_column = torch.zeros(vocab, dtype=torch.bool, device=device)
        self.pad_column[model.pad_id] = True
        self.beam = beam
        if beam is not None:  # the state of tl.beam_search, in buffers of fixed shape
            examples, k = beam
            self.live_scores = torch.zeros(examples, k, device=device)  # (B, K)
            self.fin_scores = torch.zeros(examples, k, device=device)  # (B, K), best first
            self.fin_tokens = torch.zeros(examples, k, max_len + 1, dtype=torch.long,
                                          device=device)  # (B, K, max_len + 1)
            self.done = torch.zeros(examples, dtype=torch.bool, device=device)  # (B,)
            self.first_row = torch.arange(examples, device=device)[:, None] * k  # (B, 1)
            self.lp = torch.ones(max_len, device=device)  # lp(L) at L - 1, set by each call
            self.lp_best = torch.ones(max_len, device=device)

    def load(self, model, src, memory, bos_id) -> None:
        """A new batch: copy its source and memory in, project the memory's keys and values
        into the cross-attention entries in place, and reset the decoding state."""
        self.src.copy_(src)
        self.memory.copy_(memory)
        self.memory_mask.copy_(padding_mask(src, model.pad_id))
        for layer, entry in zip(model.decoder.layers, self.cache.layers):
            cross = entry["cross"]
            attn = layer.cross_attn
            cross["k"].copy_(attn.split_heads(attn.k_proj(self.memory)))
            cross["v"].copy_(attn.split_heads(attn.v_proj(self.memory)))
        self.reset(bos_id)

    def reset(self, bos_id) -> None:
        self.cache.position.zero_()
        self.ys.fill_(self.pad_id)  # beam search copies whole rows: padding after the end
        self.ys[:, 0] = bos_id
        self.token.fill_(bos_id)
        self.finished.zero_()
        self.done_at.fill_(self.max_len)
        if self.beam is not None:
            self.live_scores.zero_()
            self.live_scores[:, 1:] = float("-inf")  # all beams start equal: keep one alive
            self.fin_scores.fill_(float("-inf"))
            self.fin_tokens.fill_(self.pad_id)
            self.done.zero_()

    def state(self) -> list[torch.Tensor]:
        """Every buffer a step writes."""
        beam = [] if self.beam is None else [self.live_scores, self.fin_scores,
                                             self.fin_tokens, self.done]
        return [self.ys, self.token, self.finished, self.done_at, *beam,
                *self.cache.buffers()]


def _mark_done(s: _Session, finished: torch.Tensor) -> None:
    """Remember the first step after which every row has finished (on the device)."""
    first = finished.all() & (s.done_at == s.max_len)
    s.done_at.copy_(torch.where(first, s.cache.position + 1, s.done_at))


def _greedy_step(model, s: _Session, eos_id: int) -> None:
    """One greedy step, in place: the next token of every row into ``s.ys``."""
    logits = decode_step(model, s.token, s.memory, s.memory_mask, s.cache)  # (B, V)
    logits = logits.masked_fill(s.pad_column, float("-inf"))  # padding is never output
    next_token = logits.argmax(dim=-1).masked_fill(s.finished, model.pad_id)  # (B,)
    s.ys.index_copy_(1, (s.cache.position + 1).view(1), next_token[:, None])
    s.finished.logical_or_(next_token == eos_id)
    s.token.copy_(next_token[:, None])
    _mark_done(s, s.finished)
    s.cache.step()


def _beam_step(model, s: _Session, eos_id: int, early_stopping=False) -> None:
    """One beam-search step, in place: the step of ``tl.beam_search``'s loop, on buffers."""
    logits = decode_step(model, s.token, s.memory, s.memory_mask, s.cache)  # (B*K, V)
    log_probs = F.log_softmax(logits.float(), dim=-1).masked_fill(s.pad_column, float("-inf"))
    batch, k = s.live_scores.shape
    scores, beam, token = _top_candidates(log_probs, s.live_scores)  # (B, 2K) each
    rows = (beam + s.first_row).view(-1)  # (B*2K,) the row of ys each one continues
    grown = s.ys.index_select(0, rows)  # (B*2K, max_len + 1)
    grown.index_copy_(1, (s.cache.position + 1).view(1), token.view(-1, 1))
    last = s.cache.position + 1 == s.max_len  # () no room to grow: every candidate ends
    ends = (token == eos_id) | last  # (B, 2K)
    lp_now = s.lp.index_select(0, s.cache.position.view(1))  # (1,) lp of this step's length
    lp_best = s.lp_best.index_select(0, s.cache.position.view(1))  # (1,)
    fin_scores, fin_tokens = _set_aside(s.fin_scores, s.fin_tokens, scores,
                                        grown.view(batch, 2 * k, -1), ends, s.done, lp_now)
    s.fin_scores.copy_(fin_scores)
    s.fin_tokens.copy_(fin_tokens)
    keep = _next_live(ends, k)  # (B, K) positions among the 2K
    s.live_scores.copy_(scores.gather(1, keep))
    keep_rows = (keep + 2 * s.first_row).view(-1)  # (B*K,) rows of grown
    s.ys.copy_(grown.index_select(0, keep_rows))
    s.token.copy_(token.gather(1, keep).view(-1, 1))
    s.cache.reorder(rows.index_select(0, keep_rows))
    done = _update_done(s.done, fin_scores, s.live_scores[:, 0], lp_now, lp_best,
                        early_stopping)
    s.done.copy_(done | last)
    _mark_done(s, s.done)
    s.cache.step()


class FastDecoder:
    """Greedy decoding and beam search of ``model`` on a static cache, with recorded steps.

    ``cuda_graph`` (default: True on a CUDA device): record each step once as a CUDA graph
    and replay it. ``compile``: run the step through ``torch.compile(fullgraph=True)``
    (on the CPU too; slow to compile, so off by default); a string names the backend
    ("inductor", the default of ``True``, fuses kernels; "aot_eager" only traces).
    Inductor's fused kernels round differently: greedy tokens have stayed identical in
    our tests, but beam search can keep other *runner-up* beams, and so stop at another
    step, when two candidates' scores differ in the last bits. ``check_every``: how many steps
    run between two reads of "have all rows finished?" (each read waits for the device).

    The buffers and graphs of a call are kept for the next call of the same shape (batch,
    source length, ``max_len``, beam size): decode many batches of one shape with one
    ``FastDecoder``. A graph holds the addresses of what it reads, and reads the weights
    where they lie, so it sees any update made in place; if the weights have moved
    (``.to()``) or changed in a way their version counter shows (an optimizer step,
    ``load_state_dict``), the next call records the step again.
    """

    def __init__(self, model, cuda_graph: bool | None = None, compile: bool | str = False,
                 check_every: int = 8):
        device = next(model.parameters()).device
        if cuda_graph is None:
            cuda_graph = device.type == "cuda"
        check_bool("cuda_graph", cuda_graph)
        if not isinstance(compile, (bool, str)):
            raise TypeError(f"compile must be a bool or a torch.compile backend name, "
                            f"got {type(compile).__name__}")
        check_positive_int("check_every", check_every)
        if cuda_graph and device.type != "cuda":
            raise ValueError(f"cuda_graph=True needs a model on a CUDA device, got {device}")
        self.model, self.device = model, device
        self.cuda_graph, self.compile, self.check_every = cuda_graph, compile, check_every
        self.sessions: dict[tuple, _Session] = {}

    @torch.no_grad()
    def greedy(self, src, max_len, bos_id, eos_id) -> torch.Tensor:
        """Like ``tl.greedy_decode(model, src, max_len, bos_id, eos_id)``, same tokens."""
        model = self.model
        _check_decode_args(model, src, max_len, bos_id, eos_id, True)
        self._check_max_len(max_len)
        with _eval_mode(model):
            memory = model.encode(src)  # (B, Ls, d)
            s = self._session(("greedy", *src.shape, max_len, eos_id), src.size(0), src,
                              memory, max_len, beam=None)
            s.load(model, src, memory, bos_id)
            steps = self._run(s, lambda: _greedy_step(model, s, eos_id), bos_id)
            return s.ys[:, : steps + 1].clone()

    @torch.no_grad()
    def beam(self, src, beam_size, max_len, bos_id, eos_id, length_penalty=0.6,
             length_penalty_fn=length_penalty_gnmt, *, early_stopping=False,
             return_scores=False):
        """Like ``tl.beam_search(model, src, beam_size, max_len, bos_id, eos_id, ...)``,
        same tokens (and scores)."""
        model = self.model
        _check_decode_args(model, src, max_len, bos_id, eos_id, True)
        _check_beam_args(beam_size, length_penalty, length_penalty_fn, early_stopping)
        check_bool("return_scores", return_scores)
        self._check_max_len(max_len)
        with _eval_mode(model):
            batch, k = src.size(0), beam_size
            src_rep = src.repeat_interleave(k, dim=0)  # (B*K, Ls): beams of one example adjacent
            memory = model.encode(src_rep)  # (B*K, Ls, d)
            key = ("beam", *src.shape, k, max_len, eos_id, early_stopping)
            s = self._session(key, batch * k, src_rep, memory, max_len, beam=(batch, k))
            s.load(model, src_rep, memory, bos_id)
            lp, lp_best = _length_penalties(length_penalty_fn, length_penalty, max_len,
                                            src.device)
            s.lp.copy_(lp)  # in place: a recorded graph reads these buffers
            s.lp_best.copy_(lp_best)
            self._run(s, lambda: _beam_step(model, s, eos_id, early_stopping), bos_id)
            best = s.fin_tokens[:, 0]  # (B, max_len + 1): best first
            width = 1 + int((best[:, 1:] != model.pad_id).sum(dim=1).max())
            if return_scores:
                return best[:, :width].clone(), s.fin_scores[:, 0].clone()
            return best[:, :width].clone()

    # -- machinery ----------------------------------------------------------------------

    def _check_max_len(self, max_len):
        positions = self.model.pos_enc.max_len
        if max_len > positions:
            raise ValueError(f"max_len={max_len} new tokens exceed the model's positional "
                             f"table (max_len={positions})")

    def _session(self, key, rows, src, memory, max_len, beam) -> _Session:
        s = self.sessions.get(key)
        if s is None:
            s = _Session(self.model, rows, src.size(1), max_len, memory.dtype, self.device,
                         beam)
            self.sessions[key] = s
        return s

    def _run(self, s: _Session, step, bos_id) -> int:
        """Run up to ``max_len`` steps; return how many the readable loop would have run."""
        if self.compile and s.compiled is None:
            backend = "inductor" if self.compile is True else self.compile
            s.compiled = torch.compile(step, fullgraph=True, backend=backend)
        run = s.compiled or step
        if self.cuda_graph:
            run = self._graph(s, run, bos_id)
        for i in range(s.max_len):
            run()
            if (i + 1) % self.check_every == 0 and int(s.done_at) < s.max_len:
                break
        return int(s.done_at)

    def _graph(self, s: _Session, step, bos_id):
        """Record ``step`` as a CUDA graph (once per session) and return its replay."""
        weights = [(p.data_ptr(), p._version) for p in self.model.parameters()]
        if s.graph is not None and s.weights != weights:
            s.graph = None  # recorded with other weights: record again
        if s.graph is None:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):  # warm up (lazy initialisations) off the graph
                self._warm_up(s, step)
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):  # records the kernels, runs none of them
                step()
            s.graph, s.weights = graph, weights  # only a graph recorded to the end
        return s.graph.replay

    def _warm_up(self, s: _Session, step, steps: int = 3) -> None:
        """Run ``step`` a few times (at most ``max_len``: the buffers have no room for
        more), then put back every buffer those steps wrote."""
        state = [t.clone() for t in s.state()]
        for _ in range(min(steps, s.max_len)):
            step()
        for buffer, saved in zip(s.state(), state):
            buffer.copy_(saved)


def fast_greedy_decode(model, src, max_len, bos_id, eos_id, **options) -> torch.Tensor:
    """``tl.greedy_decode`` on a static cache (a one-off ``FastDecoder(model, **options)``)."""
    return FastDecoder(model, **options).greedy(src, max_len, bos_id, eos_id)


def fast_beam_search(model, src, beam_size, max_len, bos_id, eos_id, length_penalty=0.6,
                     length_penalty_fn=length_penalty_gnmt, *, early_stopping=False,
                     return_scores=False, **options):
    """``tl.beam_search`` on a static cache (a one-off ``FastDecoder(model, **options)``)."""
    return FastDecoder(model, **options).beam(
        src, beam_size, max_len, bos_id, eos_id, length_penalty, length_penalty_fn,
        early_stopping=early_stopping, return_scores=return_scores)
