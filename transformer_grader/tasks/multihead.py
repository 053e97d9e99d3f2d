"""The check of multi-head attention: a class ``cls(d_model, num_heads)``, an
``nn.Module`` with projections ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj`` (each
``nn.Linear(d_model, d_model)``) and ``forward(query, key, value, mask=None)`` returning
the output (B, Lq, d_model) or a tuple whose first element is it.

The grader makes the library's ``MultiHeadAttention`` with seeded weights (random
biases, so that a missing bias shows); the student's module gets a copy of them, then
both see the same inputs.
"""

from __future__ import annotations

import math
import random

import torch

from transformer_lib import masks as _masks
from transformer_lib.multihead import MultiHeadAttention as _RefMHA
from ._ops import SDPA_OPS
from ._helpers import (
    as_tensor, compare, first_match, padded_lengths, randn, seeded_module, token_batch
)
from ._result import Failed, GradeResult
from ._task import Case, Task, returned, run_check
from .attention import MISTAKES as _ATTENTION_MISTAKES
from .attention import attention_variant
from ..runner.calls import CALLERS, PROJECTIONS

NAME = "MultiHeadAttention"

MISTAKES = {
    "view_no_transpose": (
        "Your heads look split with .view() but without .transpose(1, 2): positions are"
        " mixed across heads. Reshape (B, L, d_model) to (B, L, H, d_k) first, then"
        " transpose to (B, H, L, d_k)."
    ),
    "merge_no_transpose": (
        "Your heads look merged with .view()/.reshape() but without .transpose(1, 2)"
        " first: the context of (B, H, L, d_k) must become (B, L, H, d_k) before it is"
        " flattened to (B, L, d_model), otherwise positions are mixed across heads."
    ),
    "list_of_layers": (
        "per-head layers kept in a Python list: they are not registered as parameters"
        " (model.parameters() does not see them), so the optimizer never trains them,"
        " .to(device) does not move them and state_dict does not save them; use"
        " nn.ModuleList (or, as the course does, one nn.Linear(d_model, d_model) per"
        " projection)."
    ),
    "no_out_proj": (
        "The output projection is missing: after merging the heads, apply out_proj."
    ),
}


# --------------------------------------------------------------------------------------
# The grader's side
# --------------------------------------------------------------------------------------
def _projection_problem(facts, d) -> str | None:
    """Why the reference's weights cannot be copied into the student's module, or
    None."""
    missing, wrong = [], []
    for name in PROJECTIONS:
        layer = facts["layers"].get(name)
        if not layer or not layer["linear"]:
            missing.append(name)
        elif layer["weight"] != [d, d]:
            wrong.append(
                f"{name} is nn.Linear({layer['weight'][1]}, {layer['weight'][0]})"
            )
    if not missing and not wrong:
        return None
    text = (
        "The checker needs four projections named q_proj, k_proj, v_proj and out_proj, "
        f"each nn.Linear(d_model, d_model) = nn.Linear({d}, {d})."
    )
    if missing:
        text += f" Missing (or not nn.Linear): {', '.join(missing)}."
    if wrong:
        text += f" Wrong size: {'; '.join(wrong)}."
    linears = facts.get("linears") or []
    text += f" Your nn.Linear sub-modules: {', '.join(linears) if linears else 'none'}."
    if facts.get("lists"):
        text += (
            "\nFound layers kept in a plain Python list/dict:"
            f" {', '.join(facts['lists'])}.\n" + MISTAKES["list_of_layers"]
        )
    return text


def _reference(d_model, num_heads, seed, dtype=torch.float32):
    def make():
        ref = _RefMHA(d_model, num_heads)
        with torch.no_grad():
            for name in PROJECTIONS:  # random biases, so that a missing bias shows
                getattr(ref, name).bias.normal_(0.0, 0.1)
        return ref

    return seeded_module(make, seed).to(dtype).eval()


def _weights(ref) -> dict:
    return {k: v.detach().clone() for k, v in ref.state_dict().items()}


def _mha_variant(
    ref,
    query,
    key,
    value,
    mask=None,
    split="ok",
    merge="ok",
    scale=None,
    invert=False,
    softmax_dim=-1,
    out=True,
    zero=None,
):
    batch, lq, d = query.shape
    h, d_k = ref.num_heads, ref.d_k

    def split_heads(x):
        if split == "ok":
            return x.view(batch, -1, h, d_k).transpose(1, 2)  # (B, H, L, d_k)
        if split == "view_hld":
            return x.reshape(batch, h, -1, d_k)  # view to (B, H, L, d_k), no transpose
        return x.reshape(batch, -1, h, d_k)  # (B, L, H, d_k), transpose forgotten

    q, k, v = (
        split_heads(ref.q_proj(query)),
        split_heads(ref.k_proj(key)),
        split_heads(ref.v_proj(value)),
    )
    # the attention itself, with the same knobs as the plain attention check's variants
    context, _ = attention_variant(
        q,
        k,
        v,
        mask,
        scale=math.sqrt(d_k) if scale is None else scale,
        softmax_dim=softmax_dim,
        invert=invert,
        zero=zero,
    )
    if merge == "ok" and split != "view_lhd":
        context = context.transpose(1, 2)
    context = context.reshape(batch, lq, d)
    return ref.out_proj(context) if out else context


def _diagnose(ref, query, key, value, mask, expected):
    def variant(**knobs):
        return lambda: _mha_variant(ref, query, key, value, mask, **knobs)

    def diagnose(found):
        variants = [
            (MISTAKES["view_no_transpose"], variant(split="view_hld")),
            (MISTAKES["view_no_transpose"], variant(split="view_hld", merge="bad")),
            (MISTAKES["view_no_transpose"], variant(split="view_lhd")),
            (MISTAKES["merge_no_transpose"], variant(merge="bad")),
            (
                _ATTENTION_MISTAKES["sqrt_d_model"],
                variant(scale=math.sqrt(ref.d_model)),
            ),
            (_ATTENTION_MISTAKES["no_scale"], variant(scale=1.0)),
            (_ATTENTION_MISTAKES["scale_d_k"], variant(scale=float(ref.d_k))),
            (_ATTENTION_MISTAKES["mask_polarity"], variant(invert=True)),
            (_ATTENTION_MISTAKES["softmax_axis"], variant(softmax_dim=-2)),
            (_ATTENTION_MISTAKES["softmax_axis"], variant(softmax_dim=-2, zero=True)),
            (_ATTENTION_MISTAKES["softmax_axis"], variant(softmax_dim=1)),
            (_ATTENTION_MISTAKES["softmax_axis"], variant(softmax_dim=1, zero=True)),
            (MISTAKES["no_out_proj"], variant(out=False)),
        ]
        with torch.no_grad():
            hit = first_match(found, variants, expected)
        if hit is None and mask is not None and torch.isnan(found.detach()).any():
            hit = _ATTENTION_MISTAKES["nan_masked_row"]
        return hit

    return diagnose


def _judge_registration(inputs, outputs):
    facts = returned(outputs)
    d = inputs["d_model"]
    if not facts.get("is_module"):
        raise Failed(f"Expected an nn.Module, got {facts.get('type')}.")
    if facts["lists"]:
        raise Failed(
            "Found sub-modules kept in a plain Python list/dict: "
            f"{', '.join(facts['lists'])}.\n" + MISTAKES["list_of_layers"]
        )
    count, expected = facts["parameters"], 4 * (d * d + d)
    if count not in (expected, 4 * d * d):
        raise Failed(
            f"Expected {expected} trainable numbers (4 projections of d_model x "
            f"d_model plus biases) in model.parameters(), found {count}. Every "
            "layer must be an attribute of type nn.Module (or inside nn.ModuleList)."
        )
    problem = _projection_problem(facts, d)
    if problem:
        raise Failed(problem)


def _judge_forward(inputs, outputs):
    out = returned(outputs)
    problem = _projection_problem(out["facts"], inputs["d_model"])
    if problem:
        raise Failed(problem)
    dtype = getattr(torch, inputs["dtype"])
    ref = _reference(inputs["d_model"], inputs["num_heads"], inputs["seed"], dtype)
    with torch.no_grad():
        for name in PROJECTIONS:  # a projection without bias: compare with a zero bias
            if out["facts"]["layers"][name]["bias"] is None:
                getattr(ref, name).bias.zero_()
    query, key, value, mask = (inputs[n] for n in ("query", "key", "value", "mask"))
    with torch.no_grad():
        expected, _ = ref(query, key, value, mask, need_weights=True)
    found = as_tensor("output", out["output"])
    compare(
        "output", found, expected, _diagnose(ref, query, key, value, mask, expected)
    )
    if inputs["grad"]:
        grads = out.get("grads") or {}
        for name in PROJECTIONS:
            g = grads.get(name)
            if (
                not isinstance(g, torch.Tensor)
                or not torch.isfinite(g).all()
                or not g.abs().sum() > 0
            ):
                raise Failed(
                    f"{name}.weight received no (finite, non-zero) gradient: the "
                    "output must depend on every projection, through autograd."
                )


def _forward(
    name, d_model, num_heads, query, key, value, mask=None, seed=0, grad=False
) -> Case:
    dtype = str(query.dtype).replace("torch.", "")
    weights = _weights(_reference(d_model, num_heads, seed, query.dtype))
    inputs = dict(
        d_model=d_model,
        num_heads=num_heads,
        seed=seed,
        dtype=dtype,
        weights=weights,
        query=query,
        key=key,
        value=value,
        mask=mask,
        grad=grad,
    )
    return Case(
        name,
        "forward",
        inputs,
        _judge_forward,
        uses=(NAME,),
        args=("query", "key", "value", "mask"),
    )


def _sizes(seed: int) -> dict:
    """The sizes and padding of the cases: seed 0, the notebook check's fixed ones; any
    other seed draws fresh ones (width, heads, batch, lengths, which keys are padding, a
    second model size), so a module built for one set of shapes fails."""
    if seed == 0:
        return dict(d=16, h=4, B=2, L=5, Ls=6, Lt=3, src=[6, 3], tgt=[5, 2],
                    other=(12, 3, 4))
    rng = random.Random(seed)
    h = rng.randint(2, 4)
    h2 = rng.choice([n for n in (2, 3, 4, 6) if n != h])
    B, L, Ls = rng.randint(2, 3), rng.randint(3, 7), rng.randint(3, 8)
    return dict(
        d=h * rng.randint(2, 5), h=h, B=B, L=L, Ls=Ls, Lt=rng.randint(2, 6),
        src=padded_lengths(rng, B, Ls), tgt=padded_lengths(rng, B, L),
        other=(h2 * rng.randint(2, 4), h2, rng.randint(2, 6)),
    )


def make_cases(present, seed: int = 0) -> list[Case]:
    """``seed`` 0: the notebook check's fixed sizes and masks; any other seed draws the
    same kinds of cases with fresh sizes, lengths and masks (``_sizes``)."""
    s, z = seed, _sizes(seed)
    d, h, B, L, Ls, Lt = z["d"], z["h"], z["B"], z["L"], z["Ls"], z["Lt"]
    rng = random.Random(seed)
    x = randn(B, L, d, seed=s + 11)
    src, tgt = randn(B, Ls, d, seed=s + 12), randn(B, Lt, d, seed=s + 13)
    if seed == 0:
        src_tokens = torch.tensor([[4, 5, 6, 7, 8, 9], [4, 5, 6, 0, 0, 0]])
        tgt_tokens = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 0, 0, 0]])
    else:
        src_tokens = token_batch(rng, B, Ls, 0, z["src"])
        tgt_tokens = token_batch(rng, B, L, 0, z["tgt"])
    all_pad = src_tokens.clone()  # (B, Ls): the last sequence is all padding
    all_pad[-1] = 0
    one = randn(1, 1, d, seed=s + 14)
    x64 = x.double()
    xt = randn(L, B, d, seed=s + 11).transpose(0, 1)  # (B, L, d), non-contiguous
    d2, h2, L2 = z["other"]
    x2 = randn(B, L2, d2, seed=s + 15)
    return [
        Case(
            "creates the module and registers q_proj, k_proj, v_proj, out_proj "
            f"(d_model={d}, num_heads={h})",
            "registration",
            dict(d_model=d, num_heads=h),
            _judge_registration,
            uses=(NAME,),
        ),
        _forward(
            f"self-attention, random input (B={B}, L={L}), no mask", d, h, x, x, x,
            seed=s,
        ),
        _forward(
            f"cross-attention (Lq={Lt}, Lk={Ls}) with a key padding mask (B, 1, 1, Lk)",
            d,
            h,
            tgt,
            src,
            src,
            _masks.padding_mask(src_tokens),
            seed=s,
        ),
        _forward(
            "self-attention with a causal + padding mask (B, 1, L, L)",
            d,
            h,
            x,
            x,
            x,
            _masks.decoder_self_mask(tgt_tokens),
            seed=s,
        ),
        _forward(
            "a fully padded sequence (every key blocked): no NaN",
            d,
            h,
            tgt,
            src,
            src,
            _masks.padding_mask(all_pad),
            seed=s,
        ),
        _forward("batch of 1, length 1", d, h, one, one, one, seed=s),
        _forward(
            "float64 (module.double() and float64 inputs)", d, h, x64, x64, x64, seed=s
        ),
        _forward("non-contiguous inputs (transposed views)", d, h, xt, xt, xt, seed=s),
        _forward(
            f"other sizes: d_model={d2}, num_heads={h2}", d2, h2, x2, x2, x2, seed=s + 1
        ),
        _forward(
            "gradients reach q_proj, k_proj, v_proj and out_proj",
            d,
            h,
            tgt,
            src,
            src,
            _masks.padding_mask(src_tokens),
            seed=s,
            grad=True,
        ),
    ]


TASK = Task(
    name="multihead",
    title="check_multihead",
    names=(NAME,),
    callers=CALLERS["multihead"],
    make_cases=make_cases,
    ops=SDPA_OPS,
    banned=(
        "transformer_lib.multihead",
        "transformer_lib.attention",
        "torch.nn.functional.scaled_dot_product_attention",
        "torch.nn.functional.multi_head_attention_forward",
        "torch.nn.MultiheadAttention",
    ),
    rules=(
        "the library's MultiHeadAttention and attention (transformer_lib.multihead, "
        "transformer_lib.attention) and PyTorch's (nn.MultiheadAttention, "
        "F.scaled_dot_product_attention)"
    ),
)


def check_multihead(cls) -> GradeResult:
    """Check a multi-head attention class ``cls(d_model, num_heads)`` against the
    library's.

    ``forward(query, key, value, mask=None)`` must return the output (B, Lq, d_model),
    or a tuple whose first element is it. The module must have four projections
    ``q_proj``, ``k_proj``, ``v_proj`` and ``out_proj``, each ``nn.Linear(d_model,
    d_model)``: the checker copies the library's weights into them and compares outputs.
    """
    result = GradeResult("check_multihead")
    if not callable(cls):
        result.add("is a class", False, f"Expected a class, got {type(cls).__name__}.")
        return result
    return run_check(TASK, {NAME: cls}, result)
