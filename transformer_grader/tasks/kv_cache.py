"""The check of self-attention with a key/value cache: ``CachedSelfAttention(d_model,
num_heads)`` with projections ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj`` (each
``nn.Linear(d_model, d_model)``) and ``forward(x, cache=None) -> (B, L_new, d_model)``.

Without a cache, x (B, L, d_model) attends causally to itself. With a cache (a dict,
empty at the first call), x holds only the new positions: their keys and values are
appended to ``cache["k"]`` and ``cache["v"]`` (B, H, L_so_far, d_k), and new query i, at
position offset + i, attends to the keys 0 .. offset + i. Fed in any chunks, the outputs
must equal the full causal computation: no position may see its future.
"""

from __future__ import annotations

import torch

from transformer_lib.multihead import MultiHeadAttention as _RefMHA
from ._ops import MHA_OPS
from ._helpers import as_tensor, compare, first_match, randn, seeded_module
from ._result import Failed, GradeResult
from ._task import Case, Task, returned, run_check
from .attention import attention_variant
from ..runner.calls import CALLERS, PROJECTIONS
from ..runner.calls import kv_layers as _layers
from ..runner.modules import layer_problem

NAME = "CachedSelfAttention"

MISTAKES = {
    "kv_no_causal": (
        "Future leak: the positions fed in one call see each other without a causal"
        " mask. Query i of a chunk sits at position offset + i and may only see keys 0"
        " .. offset + i, the cached ones and the new ones up to itself."
    ),
    "kv_offset_mask": (
        "The causal mask ignores the cached positions: with a cache of `offset` keys,"
        " the mask of the new queries is (new, offset + new) and True strictly above"
        " the diagonal shifted by offset (torch.triu(ones, diagonal=offset + 1)). A"
        " mask built as if the chunk started at position 0 (or"
        " F.scaled_dot_product_attention's is_causal=True, which aligns the diagonal"
        " top-left) hides cached keys from the new queries."
    ),
    "kv_not_appended": (
        "The earlier keys and values were not used: each call must append its new keys"
        " and values to the cache (torch.cat along the sequence axis, dim=2 of (B, H,"
        " L, d_k)) and attend to all of them."
    ),
}


# --------------------------------------------------------------------------------------
# The grader's side
# --------------------------------------------------------------------------------------
def _reference(d, h, seed, dtype):
    def make():
        ref = _RefMHA(d, h)
        with torch.no_grad():
            for name in PROJECTIONS:
                getattr(ref, name).bias.normal_(0.0, 0.1)
        return ref

    return seeded_module(make, seed).to(dtype).eval()


def cached_variant(ref, x, chunks, bug=None):
    """The outputs of ``chunks`` (sizes) fed one after the other, with one mistake or
    none: (outputs (B, L, d), keys (B, H, L, d_k), values)."""
    outputs, keys, values, start = [], None, None, 0
    for size in chunks:
        part = x[:, start : start + size]
        q = ref.split_heads(ref.q_proj(part))  # (B, H, new, d_k)
        k, v = ref.split_heads(ref.k_proj(part)), ref.split_heads(ref.v_proj(part))
        if keys is None or bug == "kv_not_appended":
            keys, values = k, v
        else:
            keys, values = torch.cat([keys, k], dim=2), torch.cat([values, v], dim=2)
        total = keys.size(2)
        ones = torch.ones(size, total, dtype=torch.bool)
        offset = 0 if bug == "kv_offset_mask" else total - size
        mask = None if bug == "kv_no_causal" else torch.triu(ones, diagonal=offset + 1)
        context, _ = attention_variant(q, keys, values, mask)
        outputs.append(ref.out_proj(ref.merge_heads(context)))
        start += size
    return torch.cat(outputs, dim=1), keys, values


def _judge_chunks(inputs, outputs):
    out = returned(outputs)
    d, h, x = inputs["d_model"], inputs["num_heads"], inputs["x"]
    problem = layer_problem(out["facts"], _layers(d), NAME)
    if problem:
        raise Failed(problem)
    chunks = inputs["chunks"] or [x.size(1)]
    parts = out["outputs"]
    if not isinstance(parts, list) or len(parts) != len(chunks):
        raise Failed("forward should return one tensor per call.")
    for size, part in zip(chunks, parts):
        part = as_tensor("output", part)
        if part.shape != (x.size(0), size, d):
            raise Failed(
                f"a call with {size} new position(s) should return ({x.size(0)},"
                f" {size}, {d}), got {tuple(part.shape)}."
            )
    found = torch.cat(parts, dim=1)
    ref = _reference(d, h, inputs["seed"], getattr(torch, inputs["dtype"]))
    with torch.no_grad():
        expected, keys, values = cached_variant(ref, x, chunks)

        def diagnose(f):
            variants = [
                (message, lambda bug=bug: cached_variant(ref, x, chunks, bug)[0])
                for bug, message in MISTAKES.items()
            ]
            return first_match(f, variants, expected)

        compare("outputs, all calls together", found, expected, diagnose)
    if inputs["chunks"] is not None:
        cache = out["cache"] or {}
        for name, wanted in (("k", keys), ("v", values)):
            held = cache.get(name)
            if not isinstance(held, torch.Tensor) or held.shape != wanted.shape:
                shape = (
                    tuple(held.shape)
                    if isinstance(held, torch.Tensor)
                    else type(held).__name__
                )
                raise Failed(
                    f"after the last call, cache['{name}'] should hold every position's"
                    f" {'keys' if name == 'k' else 'values'}: shape"
                    f" {tuple(wanted.shape)} (B, H, L, d_k), got {shape}."
                )
            compare(f"cache['{name}']", held, wanted)


def _chunks(name, x, chunks, seed, sizes=(16, 4)) -> Case:
    d, h = sizes
    ref = _reference(d, h, seed, x.dtype)
    weights = {k: v.detach().clone() for k, v in ref.state_dict().items()}
    inputs = dict(
        d_model=d,
        num_heads=h,
        seed=seed,
        dtype=str(x.dtype).replace("torch.", ""),
        weights=weights,
        x=x,
        chunks=None if chunks is None else list(chunks),
    )
    return Case(name, "chunks", inputs, _judge_chunks, uses=(NAME,), args=("x",))


def make_cases(present, seed: int = 0) -> list[Case]:
    s = seed
    x = randn(2, 5, 16, seed=s + 51)
    return [
        _chunks("no cache: causal self-attention over x (B=2, L=5)", x, None, s),
        _chunks(
            "one position at a time with a cache (5 calls): equals the full"
            " computation",
            x,
            (1, 1, 1, 1, 1),
            s,
        ),
        _chunks("a chunk of 3 positions, then 2 single ones", x, (3, 1, 1), s),
        _chunks(
            "chunks of 2, 2 and 1 (a chunk after cached positions)", x, (2, 2, 1), s
        ),
        _chunks("batch of 1, one position", randn(1, 1, 16, seed=s + 52), (1,), s),
        _chunks("float64, chunks of 1 and 4", x.double(), (1, 4), s),
        _chunks(
            "other sizes: d_model=12, num_heads=3, chunks of 2 and 2",
            randn(2, 4, 12, seed=s + 53),
            (2, 2),
            s + 1,
            sizes=(12, 3),
        ),
    ]


TASK = Task(
    name="kv_cache",
    title="check_kv_cache",
    names=(NAME,),
    callers=CALLERS["kv_cache"],
    make_cases=make_cases,
    # Every cached attention of the library (its decoder, its model) runs multihead.py.
    ops=MHA_OPS,
    banned=(
        "transformer_lib.multihead",
        "transformer_lib.masks",
        "torch.nn.functional.multi_head_attention_forward",
        "torch.nn.MultiheadAttention",
    ),
    rules=(
        "the library's cached attention and masks (transformer_lib.multihead, .masks,"
        " and so its decoder and model) and nn.MultiheadAttention;"
        " scaled_dot_product_attention (ours or PyTorch's) is fine"
    ),
)


def check_kv_cache(cls) -> GradeResult:
    """Check ``cls(d_model, num_heads)``, self-attention with a key/value cache: fed in
    any chunks, its outputs equal the full causal computation of the library's
    ``MultiHeadAttention``.
    """
    result = GradeResult("check_kv_cache")
    if not callable(cls):
        result.add("is a class", False, f"Expected a class, got {type(cls).__name__}.")
        return result
    return run_check(TASK, {NAME: cls}, result)
