"""The check of scaled dot-product attention: ``scaled_dot_product_attention(q, k, v,
mask=None)``.

Expected: weights = softmax(q k^T / sqrt(d_k)) over the keys, blocked weights 0, a fully
blocked query row all zeros (never NaN, in the forward pass or the gradient), context =
weights @ v.
"""

from __future__ import annotations

import math
import random

import torch

from transformer_lib import masks as _masks
from transformer_lib.attention import scaled_dot_product_attention as _ref_attention
from ._ops import SDPA_OPS
from ._helpers import compare, first_match, listed, padded_lengths, randn
from ._result import Failed, GradeResult
from ._task import Case, Task, check_function, returned
from ..runner.calls import CALLERS

NAME = "scaled_dot_product_attention"

# Messages for the classic mistakes of attention (the multi-head check uses them too).
MISTAKES = {
    "sqrt_d_model": (
        "Scaled by sqrt(d_model) instead of sqrt(d_k). Each head's dot products are"
        " sums over d_k = d_model / num_heads numbers, so divide by sqrt(d_k)."
    ),
    "no_scale": (
        "The scores were not scaled: divide q @ k^T by sqrt(d_k) before the softmax."
    ),
    "scale_d_k": "Scaled by d_k instead of sqrt(d_k): divide by math.sqrt(d_k).",
    "mask_polarity": (
        "Mask polarity inverted: you attend only where the mask is True; in this course"
        " True = blocked. Use scores.masked_fill(mask, ...), not masked_fill(mask == 0,"
        " ...) or masked_fill(~mask, ...)."
    ),
    "nan_masked_row": (
        "NaN on a fully masked row: when every key of a query is blocked, filling with"
        " -inf and taking the softmax computes 0/0. Fill with a large finite negative"
        " number (e.g. torch.finfo(scores.dtype).min) and set the blocked weights to"
        " exactly 0 after the softmax, so such a row gets all-zero weights and a zero"
        " context vector."
    ),
    "uniform_masked_row": (
        "A fully masked row got uniform weights (1/Lk on every blocked key) instead of"
        " all zeros: after filling with a large negative number all scores are equal,"
        " so softmax spreads the weight evenly over keys that are all blocked. Set"
        " blocked weights to 0 after the softmax (weights.masked_fill(mask, 0.0))."
    ),
    "nan_grad": (
        "NaN in the gradient on a fully masked row: the forward pass looks fine, but"
        " the -inf scores make the softmax's backward pass compute inf - inf. Fill with"
        " a large finite negative number (torch.finfo(scores.dtype).min) instead of"
        " -inf, then zero the blocked weights."
    ),
    "mask_ignored": (
        "The mask had no effect: your weights equal attention without any mask. Check"
        " that the mask reaches the scores (a condition such as `if mask:`, or a dtype"
        " test that skips a bool mask, can leave it out) and apply it with"
        " scores.masked_fill(mask, ...)."
    ),
    "small_mask_constant": (
        "Blocked keys take weight once the scores are large: a mask made of a modest"
        " constant (adding or filling -100, say) only works while every score"
        " difference is smaller than it, and attention scores are not bounded. Fill"
        " with torch.finfo(scores.dtype).min, then set the blocked weights to exactly 0"
        " after the softmax."
    ),
    "softmax_axis": (
        "softmax over the wrong axis: the weights of each query must sum to 1 over the"
        " keys, i.e. softmax(scores, dim=-1); yours look normalised over another axis"
        " (queries, heads or batch)."
    ),
}


def attention_variant(
    q, k, v, mask=None, scale=None, softmax_dim=-1, invert=False, zero=None
):
    """Attention with knobs that reproduce the classic mistakes (the defaults are
    correct)."""
    scores = (
        q @ k.transpose(-2, -1) / (math.sqrt(q.size(-1)) if scale is None else scale)
    )
    blocked = None if mask is None else (~mask if invert else mask)
    if blocked is not None:
        scores = scores.masked_fill(blocked, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=softmax_dim)
    if zero is None:
        zero = softmax_dim in (-1, weights.dim() - 1)
    if blocked is not None and zero:
        weights = weights.masked_fill(blocked, 0.0)
    return weights @ v, weights


# --------------------------------------------------------------------------------------
# The grader's side
# --------------------------------------------------------------------------------------
def _leak_diagnosis(weights, q, k, blocked) -> str | None:
    """The small-constant mistake: where the scores are large, blocked keys got weight
    on rows with an open key, or the open keys' weights do not sum to 1 (the blocked
    ones took a share before being zeroed). At moderate scores a leak has other causes,
    so nothing is claimed there.
    """
    if not isinstance(weights, torch.Tensor) or weights.shape != blocked.shape:
        return None
    scores = (q @ k.transpose(-2, -1)).double() / math.sqrt(q.size(-1))  # (..., Lq, Lk)
    if (
        scores.amax(-1) - scores.amin(-1)
    ).max() < 50:  # a -100 mask would still hold here
        return None
    w = weights.detach().double().cpu()
    open_rows = ~blocked.all(-1)  # (..., Lq)
    on_blocked = w.masked_fill(~blocked, 0.0).sum(-1)[open_rows]
    on_open = w.masked_fill(blocked, 0.0).sum(-1)[open_rows]
    if (on_blocked > 1e-6).any() or (on_open < 1 - 1e-4).any():
        return MISTAKES["small_mask_constant"]
    return None


def _masked_row_diagnosis(found, q, k, mask, index) -> str | None:
    """NaN or uniform weights on the query rows whose keys are all blocked."""
    full = mask.expand(*q.shape[:-1], k.size(-2)).all(-1)  # fully blocked query rows
    if (
        not full.any()
        or not isinstance(found, torch.Tensor)
        or found.dim() < full.dim()
    ):
        return None
    bad = found.detach()
    try:
        rows = (
            bad[full.expand(*bad.shape[:-1])]
            if bad.shape[:-1] != full.shape
            else bad[full]
        )
    except Exception:
        return None
    if not rows.numel():
        return None
    if torch.isnan(rows).any():
        return MISTAKES["nan_masked_row"]
    uniform = torch.full_like(rows.double(), 1.0 / k.size(-2))
    if index == 1 and torch.allclose(rows.double(), uniform, atol=1e-4):
        return MISTAKES["uniform_masked_row"]
    return None


def diagnose_attention(q, k, v, mask, which):
    """Return a function found -> message naming the classic mistake (or None)."""
    index = 0 if which == "context" else 1

    def diagnose(found):
        if mask is not None:
            hit = _masked_row_diagnosis(found, q, k, mask, index)
            if hit is not None:
                return hit
        if index == 1 and mask is not None:
            # First, since at large scores a leaking mask looks like no mask at all.
            leak = _leak_diagnosis(found, q, k, mask.expand(*q.shape[:-1], k.size(-2)))
            if leak is not None:
                return leak
        d_k = q.size(-1)
        variants = [
            (
                MISTAKES["mask_polarity"],
                lambda: attention_variant(q, k, v, mask, invert=True)[index],
            ),
            (MISTAKES["mask_ignored"], lambda: attention_variant(q, k, v, None)[index]),
            (
                MISTAKES["no_scale"],
                lambda: attention_variant(q, k, v, mask, scale=1.0)[index],
            ),
            (
                MISTAKES["scale_d_k"],
                lambda: attention_variant(q, k, v, mask, scale=float(d_k))[index],
            ),
        ]
        for dim in range(q.dim() - 1):
            for zero in (False, True):
                variants.append(
                    (
                        MISTAKES["softmax_axis"],
                        lambda dim=dim, zero=zero: attention_variant(
                            q, k, v, mask, softmax_dim=dim, zero=zero
                        )[index],
                    )
                )
        if q.dim() == 4:
            d_model = q.size(1) * d_k
            variants.append(
                (
                    MISTAKES["sqrt_d_model"],
                    lambda: attention_variant(q, k, v, mask, scale=math.sqrt(d_model))[
                        index
                    ],
                )
            )
        return first_match(found, variants, _ref_attention(q, k, v, mask)[index])

    return diagnose


def _judge(inputs, outputs):
    out = returned(outputs)
    q, k, v, mask = inputs["q"], inputs["k"], inputs["v"], inputs["mask"]
    ref_ctx, ref_w = _ref_attention(q, k, v, mask)
    compare(
        "weights", out["weights"], ref_w, diagnose_attention(q, k, v, mask, "weights")
    )
    compare(
        "context", out["context"], ref_ctx, diagnose_attention(q, k, v, mask, "context")
    )
    if inputs["grad"]:
        if not out.get("requires_grad"):
            raise Failed(
                "The context does not depend on q, k, v through autograd (did you "
                "call .detach(), .item() or use torch.no_grad()?)."
            )
        for name in "qkv":
            grad = out["grads"][name]
            if not isinstance(grad, torch.Tensor) or not torch.isfinite(grad).all():
                raise Failed(
                    f"gradient of {name}: expected finite numbers, got "
                    f"{'None' if grad is None else 'NaN or inf'}.\n"
                    + MISTAKES["nan_grad"]
                )


def _case(name, q, k, v, mask=None, grad=False) -> Case:
    return Case(
        name,
        "attention",
        dict(q=q, k=k, v=v, mask=mask, grad=grad),
        _judge,
        uses=(NAME,),
        args=("q", "k", "v", "mask"),
    )


def _sizes(seed: int) -> dict:
    """The sizes and masks of the cases: seed 0, the notebook check's fixed ones; any
    other seed draws fresh ones (batch, lengths, widths, heads, which keys are padding
    and which query row sees nothing), so a function built for one set of shapes fails.
    """
    if seed == 0:
        return dict(B=2, Lq=3, Lk=5, dk=8, dv=6, B4=2, H=3, L=4, d4=16, lengths=[5, 2],
                    blind=(0, 1), cut=(1, 3), one=(4, 3))
    rng = random.Random(seed)
    B, Lk = rng.randint(2, 4), rng.randint(3, 9)
    blind_row, cut_row = rng.sample(range(B), 2)
    Lq = rng.randint(2, 7)
    return dict(
        B=B, Lq=Lq, Lk=Lk, dk=rng.choice([4, 8, 12, 16]), dv=rng.randint(3, 10),
        B4=rng.randint(1, 3), H=rng.randint(2, 4), L=rng.randint(3, 8),
        d4=rng.choice([8, 16, 24]), lengths=padded_lengths(rng, B, Lk),
        blind=(blind_row, rng.randrange(Lq)), cut=(cut_row, rng.randint(1, Lk - 1)),
        one=(rng.randint(2, 8), rng.randint(2, 8)),
    )


def make_cases(present, seed: int = 0) -> list[Case]:
    """``seed`` 0: the notebook check's fixed sizes and masks; any other seed draws the
    same kinds of cases with fresh sizes, lengths and masks (``_sizes``)."""
    s, z = seed, _sizes(seed)
    B, Lq, Lk, dk, dv = z["B"], z["Lq"], z["Lk"], z["dk"], z["dv"]
    q, k, v = (
        randn(B, Lq, dk, seed=s + 1),
        randn(B, Lk, dk, seed=s + 2),
        randn(B, Lk, dv, seed=s + 3),
    )
    B4, H, L, d4 = z["B4"], z["H"], z["L"], z["d4"]
    q4, k4, v4 = (randn(B4, H, L, d4, seed=s + i, scale=2.0) for i in (4, 5, 6))
    lengths = torch.tensor(z["lengths"])
    shown = listed(z["lengths"])
    pad = torch.arange(Lk)[None, :] >= lengths[:, None]  # (B, Lk), True on padding
    full = torch.zeros(B, Lq, Lk, dtype=torch.bool)
    full[z["blind"]] = True  # one query row of one sequence may attend to nothing
    row, cut = z["cut"]
    full[row, :, cut:] = True
    # Scores in the hundreds, as in a trained model (float64, so a correct function's
    # rounding cannot matter): a mask made of a modest constant such as -100 lets
    # padding win here.
    q_big = randn(B, Lq, dk, seed=s + 11, scale=30.0, dtype=torch.float64)
    k_big = randn(B, Lk, dk, seed=s + 12, scale=30.0, dtype=torch.float64)
    q64, k64, v64 = (t.double() for t in (q, k, v))
    # the same shapes as q, k, v, as non-contiguous views
    qt = randn(dk, B, Lq, seed=s + 1).permute(1, 2, 0)
    kt = randn(Lk, dk, B, seed=s + 2).permute(2, 0, 1)
    vt = randn(B, dv, Lk, seed=s + 3).transpose(1, 2)
    d1, dv1 = z["one"]
    return [
        _case(
            f"random 3-D inputs (B={B}, Lq={Lq}, Lk={Lk}, d_k={dk}, d_v={dv}), no mask",
            q,
            k,
            v,
        ),
        _case(f"4-D inputs with heads (B={B4}, H={H}, L={L}, d_k={d4}), no mask",
              q4, k4, v4),
        _case(
            f"padding mask (B, 1, Lk) hiding padded keys (lengths {shown})",
            q,
            k,
            v,
            pad[:, None, :],
        ),
        _case(
            "causal mask (1, 1, L, L) on 4-D inputs", q4, k4, v4, _masks.causal_mask(L)
        ),
        _case(
            "a fully masked query row gets zero weights and a zero context (not NaN)",
            q,
            k,
            v,
            full,
        ),
        _case(
            "gradients stay finite with a fully masked row", q, k, v, full, grad=True
        ),
        _case(
            "large scores (about +-900, float64): padded keys still get exactly zero"
            " weight",
            q_big,
            k_big,
            v.double(),
            pad[:, None, :],
        ),
        _case(
            "batch of 1, lengths 1 (B=1, Lq=Lk=1)",
            randn(1, 1, d1, seed=s + 7),
            randn(1, 1, d1, seed=s + 8),
            randn(1, 1, dv1, seed=s + 9),
        ),
        _case(
            "float64 inputs (the output must stay float64)",
            q64,
            k64,
            v64,
            pad[:, None, :],
        ),
        _case("non-contiguous inputs (transposed views)", qt, kt, vt, pad[:, None, :]),
    ]


TASK = Task(
    name="attention",
    title="check_attention",
    names=(NAME,),
    callers=CALLERS["attention"],
    make_cases=make_cases,
    ops=SDPA_OPS,
    banned=(
        "transformer_lib.attention",
        "torch.nn.functional.scaled_dot_product_attention",
        "torch.nn.functional.multi_head_attention_forward",
        "torch.nn.MultiheadAttention",
    ),
    rules=(
        "the library's attention (transformer_lib.attention:"
        " scaled_dot_product_attention, masked_softmax, ...) and PyTorch's"
        " (F.scaled_dot_product_attention, nn.MultiheadAttention)"
    ),
)


def check_attention(fn) -> GradeResult:
    """Check ``fn(q, k, v, mask=None) -> (context, weights)`` against the library's
    attention.

    q (..., Lq, d_k), k (..., Lk, d_k), v (..., Lk, d_v); mask bool, True = blocked,
    broadcastable to (..., Lq, Lk). Expected: weights = softmax(q k^T / sqrt(d_k)) over
    the keys, blocked weights 0, a fully blocked query row all zeros (never NaN),
    context = weights @ v.
    """
    return check_function(TASK, NAME, fn)
