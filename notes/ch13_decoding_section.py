# Chapter 13 section: "Decoding off the host" (issue 28). Cells for the lead to insert
# after chapter 13's existing sections; code cells run top-down after the chapter's
# imports (torch, transformer_lib as tl, tl.set_seed(0)). Every printed value is
# computed on the CPU and is deterministic (operation counts, tokens, booleans).

# %% [markdown]
# ## Decoding off the host
#
# Training keeps a GPU busy: every operation works on a whole batch of whole sentences.
# Decoding does not. Chapter 10's `greedy_decode` produces one token per step, and a
# step with the key/value cache is a few hundred *small* operations: for each layer the
# projections of one new position, a layer norm, two attentions, a feed-forward layer,
# then the output layer and the choice of the next token. On a GPU each operation is a
# kernel that Python (the *host*) has to launch, and launching costs the host a few
# microseconds whatever the kernel does. When a kernel takes less time than that, the
# GPU waits for the host: decoding is **host-bound**, and a faster GPU does not help.
#
# How many operations does one generated token cost? PyTorch can tell us, on any
# device: a `TorchDispatchMode` sees every operation that reaches PyTorch's kernels
# (ATen). We count them.

# %%
import collections

from torch.utils._python_dispatch import TorchDispatchMode


class OpCounter(TorchDispatchMode):
    """Counts every ATen operation dispatched inside the `with` block."""

    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def ops_per_token(decode, steps=(1, 9)):
    """Operations per generated token: count two decodings of different lengths and
    divide the difference by the extra tokens (the encoder's share cancels out)."""
    totals = []
    for n in steps:
        with OpCounter() as counter:
            decode(n)
        totals.append(counter.ops)
    extra = steps[1] - steps[0]
    per_token = {op: (totals[1][op] - totals[0][op]) / extra for op in totals[1]}
    return {op: count for op, count in per_token.items() if count}


tl.set_seed(0)
model = tl.Transformer(20, 20, d_model=32, num_heads=4, num_encoder_layers=2,
                       num_decoder_layers=2, d_ff=64).eval()  # on the CPU
src = torch.tensor([[5, 6, 7, 8, 9],
                    [7, 8, 9, 0, 0]])  # (B=2, Ls=5), the second row padded
BOS, EOS = 1, 0  # EOS = the pad id, which decoding never emits: no early stop
cached = ops_per_token(lambda n: tl.greedy_decode(model, src, n, BOS, EOS))
print(f"cached greedy loop: {sum(cached.values()):.0f} operations per token")
for op, count in sorted(cached.items(), key=lambda item: -item[1])[:8]:
    print(f"  {op:<45} {count:4.0f}")

# %% [markdown]
# Two decoder layers already cost this many operations per token; the paper's base
# model has six, and each operation is at least one kernel launch on a GPU. Only a few
# of them do real arithmetic (`addmm`, `mm` and the attention kernel): the rest are
# views, copies, concatenations for the growing cache, masks and the bookkeeping of
# the loop.
#
# The remedy has two parts.
#
# 1. **A static cache.** The readable cache grows with `torch.cat`: each step makes new
#    tensors of a new shape. `tl.StaticCache` allocates every slot once,
#    (B, H, max_len, d_k) per layer, writes step t's keys and values into slot t *in
#    place*, and masks the slots not written yet. The step position is a tensor on the
#    device, so the host never has to read it. Every step then runs the same operations
#    on the same memory.
# 2. **Record the step once, replay it.** A step with fixed shapes and addresses can be
#    captured as a **CUDA graph**: the GPU stores the whole sequence of kernels and
#    replays it with a single launch from the host. `tl.FastDecoder` writes the whole
#    greedy step (or beam-search step) as tensor operations, the choice of the next
#    token included, and records it (`cuda_graph=True`, the default on a GPU; or
#    `torch.compile`, which also fuses small kernels).
#
# On the CPU there is no graph to record, but we can count the operations of the
# static step and check that it gives the readable loop's tokens.

# %%
fast = tl.FastDecoder(model)  # on the CPU: the static cache, no CUDA graph
static = ops_per_token(lambda n: fast.greedy(src, n, BOS, EOS))
print(f"static step:        {sum(static.values()):.0f} operations per token")
readable = tl.greedy_decode(model, src, 9, BOS, EOS)
print("same tokens as the readable loop:",
      torch.equal(fast.greedy(src, 9, BOS, EOS), readable))

# %% [markdown]
# The static step dispatches a similar number of operations (it attends over all
# `max_len` slots with a mask, and keeps its bookkeeping on the device), so on the CPU
# it is not faster: there every operation is a function call either way. What changed
# is that **no operation in a step depends on a value the host must read**, and that
# every step is the same sequence on the same tensors. That is exactly what a CUDA
# graph needs: recorded once, a step of a few hundred kernels becomes **one** launch,
# and the host, free of launching, only checks every few steps whether all rows have
# finished (`check_every`). The GPU then runs back to back instead of waiting.
#
# The same property can be checked without a GPU: `torch._dynamo.explain` traces the
# step and reports where it would have to stop and hand control back to Python (a
# *graph break*, which would also end a CUDA graph).

# %%
import torch._dynamo

from transformer_lib.fast_decoding import _greedy_step

one = tl.FastDecoder(model)
one.greedy(src, 9, BOS, EOS)
(session,) = one.sessions.values()  # its buffers, kept for the next call
session.reset(BOS)  # back to step 0 (explain runs the step once)
with torch.no_grad():
    explanation = torch._dynamo.explain(lambda: _greedy_step(model, session, EOS))()
torch._dynamo.reset()
print("graphs:", explanation.graph_count, " graph breaks:",
      explanation.graph_break_count)

# %% [markdown]
# One graph, no breaks: the whole step can be recorded. `benchmarks/decoding.py` times
# the readable loop, the static step, the recorded step and Hugging Face's `generate`
# on the same weights, and prints the ratios for your machine (`--device cuda` on a
# GPU).
#
# ```{exercise}
# :label: ex-13-host-bound
# Count the operations per token of `tl.beam_search` with `beam_size=3`, and of
# `fast.beam(src, 3, n, BOS, EOS)`. Which operations does beam search add to greedy
# decoding, and why does the static version need to *copy* the cache rows of the
# surviving beams in place (`StaticKVCache.reorder`) rather than index them into new
# tensors as the readable loop does?
# ```
#
# ````{solution} ex-13-host-bound
# :class: dropdown
# Beam search adds a log-softmax, a top-k over the beams' candidates, integer division
# and remainder to find each candidate's beam and token, and gathers (`index_select`)
# that reorder the sequences, scores and cache rows of the surviving beams. The
# readable loop builds new cache tensors from the gathered rows; a recorded step must
# write into the very memory it was recorded with, so the static cache copies the
# gathered rows back into its own buffers (`copy_`).
# ```python
# beam = ops_per_token(lambda n: tl.beam_search(model, src, 3, n, BOS, EOS))
# fast_beam = ops_per_token(lambda n: fast.beam(src, 3, n, BOS, EOS))
# print(sum(beam.values()), sum(fast_beam.values()))
# ```
# ````
