"""The checks behind ``transformer_lib.grading``: each compares a student's code with the library.

Every check builds a ``GradeResult`` case by case. A case that fails is diagnosed by computing the
outputs of known buggy variants (the classic mistakes) on the same inputs: when the student's output
matches one, the message names that mistake.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from .. import loss as _loss
from .. import masks as _masks
from ..attention import scaled_dot_product_attention as _ref_attention
from ..multihead import MultiHeadAttention as _RefMHA
from ..positional import sinusoidal_table as _ref_table
from ._result import Failed, GradeResult

# ------------------------------------------------------------------------------------------------
# Messages for the classic mistakes (one place, so tests and chapters can refer to them).
# ------------------------------------------------------------------------------------------------
MISTAKES = {
    "view_no_transpose": (
        "Your heads look split with .view() but without .transpose(1, 2): positions are mixed "
        "across heads. Reshape (B, L, d_model) to (B, L, H, d_k) first, then transpose to "
        "(B, H, L, d_k)."),
    "merge_no_transpose": (
        "Your heads look merged with .view()/.reshape() but without .transpose(1, 2) first: the "
        "context of (B, H, L, d_k) must become (B, L, H, d_k) before it is flattened to "
        "(B, L, d_model), otherwise positions are mixed across heads."),
    "sqrt_d_model": (
        "Scaled by sqrt(d_model) instead of sqrt(d_k). Each head's dot products are sums over "
        "d_k = d_model / num_heads numbers, so divide by sqrt(d_k)."),
    "no_scale": (
        "The scores were not scaled: divide q @ k^T by sqrt(d_k) before the softmax."),
    "scale_d_k": (
        "Scaled by d_k instead of sqrt(d_k): divide by math.sqrt(d_k)."),
    "mask_polarity": (
        "Mask polarity inverted: you attend only where the mask is True; in this course "
        "True = blocked. Use scores.masked_fill(mask, ...), not masked_fill(mask == 0, ...) or "
        "masked_fill(~mask, ...)."),
    "nan_masked_row": (
        "NaN on a fully masked row: when every key of a query is blocked, filling with -inf and "
        "taking the softmax computes 0/0. Fill with a large finite negative number (e.g. "
        "torch.finfo(scores.dtype).min) and set the blocked weights to exactly 0 after the "
        "softmax, so such a row gets all-zero weights and a zero context vector."),
    "uniform_masked_row": (
        "A fully masked row got uniform weights (1/Lk on every blocked key) instead of all zeros: "
        "after filling with a large negative number all scores are equal, so softmax spreads the "
        "weight evenly over keys that are all blocked. Set blocked weights to 0 after the softmax "
        "(weights.masked_fill(mask, 0.0))."),
    "nan_grad": (
        "NaN in the gradient on a fully masked row: the forward pass looks fine, but the -inf "
        "scores make the softmax's backward pass compute inf - inf. Fill with a large finite "
        "negative number (torch.finfo(scores.dtype).min) instead of -inf, then zero the blocked "
        "weights."),
    "mask_ignored": (
        "The mask had no effect: your weights equal attention without any mask. Check that the "
        "mask reaches the scores (a condition such as `if mask:`, or a dtype test that skips a bool "
        "mask, can leave it out) and apply it with scores.masked_fill(mask, ...)."),
    "small_mask_constant": (
        "Blocked keys take weight once the scores are large: a mask made of a modest constant "
        "(adding or filling -100, say) only works while every score difference is smaller than it, "
        "and attention scores are not bounded. Fill with torch.finfo(scores.dtype).min, then set "
        "the blocked weights to exactly 0 after the softmax."),
    "softmax_axis": (
        "softmax over the wrong axis: the weights of each query must sum to 1 over the keys, "
        "i.e. softmax(scores, dim=-1); yours look normalised over another axis (queries, heads "
        "or batch)."),
    "list_of_layers": (
        "per-head layers kept in a Python list: they are not registered as parameters "
        "(model.parameters() does not see them), so the optimizer never trains them, "
        ".to(device) does not move them and state_dict does not save them; use nn.ModuleList "
        "(or, as the course does, one nn.Linear(d_model, d_model) per projection)."),
    "no_out_proj": (
        "The output projection is missing: after merging the heads, apply out_proj."),
    "smoothing_inf": (
        "label smoothing produced inf: with confident logits some probabilities underflow to 0, "
        "log(0) = -inf, and smoothing gives every class (even those) a weight eps / V, so the "
        "loss becomes inf. Use F.log_softmax(logits, dim=-1), which stays finite, instead of "
        "torch.log(torch.softmax(...))."),
    "pad_included": (
        "Padding tokens were included in the mean: average only over positions where "
        "targets != pad_id (e.g. ignore_index=pad_id, or weight each token by a non-pad mask)."),
    "sum_not_mean": (
        "You returned the sum over tokens; the loss is the mean over the non-padding tokens."),
    "per_sequence_mean": (
        "You averaged each sequence first and then averaged the sequences; the course (and "
        "F.cross_entropy) averages over all non-padding tokens of the batch at once."),
    "smoothing_ignored": (
        "label_smoothing had no effect: with smoothing eps the target distribution puts 1 - eps "
        "on the true token and eps / V on every class, i.e. loss = (1 - eps) * NLL + "
        "eps * mean over classes of -log p."),
    "smoothing_v_minus_1": (
        "You spread eps over the V - 1 wrong classes; the course (like PyTorch's "
        "label_smoothing) spreads eps uniformly over all V classes, the true one included: "
        "loss = (1 - eps) * NLL + eps * mean over classes of -log p."),
    "sin_cos_swapped": (
        "sin and cos are swapped: even columns (0, 2, 4, ...) hold sin, odd columns hold cos."),
    "exponent_i": (
        "The frequencies use i / d_model instead of 2i / d_model: the pair of columns (2i, 2i+1) "
        "shares the frequency 1 / 10000^(2i / d_model)."),
    "concatenated_halves": (
        "You concatenated [all sines | all cosines]; the paper interleaves them: column 2i is "
        "sin, column 2i + 1 is cos, with the same frequency."),
    "positions_from_1": (
        "Positions start at 1; they start at 0 (the first row of the table is sin(0)=0, cos(0)=1)."),
}


# ------------------------------------------------------------------------------------------------
# Small helpers
# ------------------------------------------------------------------------------------------------
def _fmt_shape(x) -> str:
    return str(tuple(x.shape)) if isinstance(x, torch.Tensor) else type(x).__name__


def _as_tensor(name: str, x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise Failed(f"{name} should be a torch.Tensor, got {type(x).__name__}.")
    return x


def _matches(found, expected, atol=1e-5, rtol=1e-4) -> bool:
    """True when ``found`` equals ``expected`` where ``found`` is finite (most of it must be)."""
    if not isinstance(found, torch.Tensor) or not isinstance(expected, torch.Tensor):
        return False
    if found.shape != expected.shape:
        return False
    found = found.detach().double()
    expected = expected.detach().double()
    finite = torch.isfinite(found)
    if finite.float().mean() < 0.5:
        return False
    return torch.allclose(found[finite], expected[finite], atol=atol, rtol=rtol)


def _compare(what: str, found, expected: torch.Tensor, diagnose=None, atol=1e-5, rtol=1e-4,
             check_dtype=True) -> None:
    """Raise ``Failed`` with a student-readable message unless ``found`` equals ``expected``."""
    found = _as_tensor(what, found)
    if found.shape != expected.shape:
        hint = diagnose(found) if diagnose else None
        raise Failed(f"{what}: expected shape {tuple(expected.shape)}, got {tuple(found.shape)}."
                     + (f"\n{hint}" if hint else ""))
    if check_dtype and found.dtype != expected.dtype:
        raise Failed(f"{what}: expected dtype {expected.dtype} (the input's dtype), got "
                     f"{found.dtype}. Keep the input's dtype: avoid creating tensors with a fixed "
                     f"dtype such as torch.tensor(..., dtype=torch.float32).")
    f64, e64 = found.detach().double().cpu(), expected.detach().double().cpu()
    if expected.dtype == torch.bool:
        if torch.equal(found.detach().cpu(), expected.cpu()):
            return
        wrong = (found.detach().cpu() != expected.cpu()).nonzero()[0].tolist()
        hint = diagnose(found) if diagnose else None
        raise Failed(f"{what}: {int((found.detach().cpu() != expected.cpu()).sum())} entries differ; "
                     f"e.g. at index {tuple(wrong)} expected {bool(expected[tuple(wrong)])}, got "
                     f"{bool(found[tuple(wrong)])}." + (f"\n{hint}" if hint else ""))
    if torch.allclose(f64, e64, atol=atol, rtol=rtol, equal_nan=False):
        return
    hint = diagnose(found) if diagnose else None
    nan = torch.isnan(f64)
    if nan.any() and not torch.isnan(e64).any():
        where = tuple(nan.nonzero()[0].tolist())
        msg = (f"{what}: contains NaN ({int(nan.sum())} entries, e.g. at index {where}); expected "
               f"finite numbers (e.g. {e64[where].item():.4g} there).")
    elif torch.isinf(f64).any() and not torch.isinf(e64).any():
        msg = f"{what}: contains inf; expected finite numbers."
    else:
        diff = (f64 - e64).abs()
        diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
        where = tuple(torch.nonzero(diff == diff.max())[0].tolist())
        if f64.dim() == 0:
            msg = f"{what}: expected {e64.item():.6g}, got {f64.item():.6g}."
        else:
            msg = (f"{what}: values differ from the reference (largest difference "
                   f"{diff.max().item():.3g} at index {where}: expected {e64[where].item():.4g}, "
                   f"got {f64[where].item():.4g}).")
    raise Failed(msg + (f"\n{hint}" if hint else ""))


def _first_match(found, variants, expected) -> str | None:
    """The message of the first variant (message, thunk) whose output matches ``found``.

    A variant that equals ``expected`` on this input (a mask polarity bug, say, when there is no
    mask) cannot explain a difference from it, so it is skipped.
    """
    for message, thunk in variants:
        try:
            candidate = thunk()
        except Exception:
            continue
        if _matches(found, candidate) and not _matches(candidate, expected):
            return message
    return None


def _rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape, seed=0, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, generator=_rng(seed), dtype=torch.float64) * scale).to(dtype)


# ------------------------------------------------------------------------------------------------
# (a) scaled dot-product attention
# ------------------------------------------------------------------------------------------------
def _attention_variant(q, k, v, mask=None, scale=None, softmax_dim=-1, invert=False, zero=None):
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.size(-1)) if scale is None else scale)
    blocked = None if mask is None else (~mask if invert else mask)
    if blocked is not None:
        scores = scores.masked_fill(blocked, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=softmax_dim)
    if zero is None:
        zero = softmax_dim in (-1, weights.dim() - 1)
    if blocked is not None and zero:
        weights = weights.masked_fill(blocked, 0.0)
    return weights @ v, weights


def _call_attention(fn, q, k, v, mask):
    out = fn(q, k, v) if mask is None else fn(q, k, v, mask)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise Failed("Your function should return a pair (context, weights), got "
                     f"{type(out).__name__}{'' if not isinstance(out, (tuple, list)) else f' of length {len(out)}'}.")
    return out


def _leak_diagnosis(weights, q, k, blocked) -> str | None:
    """The small-constant mistake: where the scores are large, blocked keys got weight on rows with
    an open key, or the open keys' weights do not sum to 1 (the blocked ones took a share before
    being zeroed). At moderate scores a leak has other causes, so nothing is claimed there."""
    if not isinstance(weights, torch.Tensor) or weights.shape != blocked.shape:
        return None
    scores = (q @ k.transpose(-2, -1)).double() / math.sqrt(q.size(-1))  # (..., Lq, Lk)
    if (scores.amax(-1) - scores.amin(-1)).max() < 50:  # a -100 mask would still hold here
        return None
    w = weights.detach().double().cpu()
    open_rows = ~blocked.all(-1)  # (..., Lq)
    on_blocked = w.masked_fill(~blocked, 0.0).sum(-1)[open_rows]
    on_open = w.masked_fill(blocked, 0.0).sum(-1)[open_rows]
    if (on_blocked > 1e-6).any() or (on_open < 1 - 1e-4).any():
        return MISTAKES["small_mask_constant"]
    return None


def _diagnose_attention(q, k, v, mask, which):
    """Return a function found -> message naming the classic mistake (or None)."""
    index = 0 if which == "context" else 1

    def diagnose(found):
        if mask is not None:
            full = mask.expand(*q.shape[:-1], k.size(-2)).all(-1)  # fully blocked query rows
            if full.any() and isinstance(found, torch.Tensor) and found.dim() >= full.dim():
                bad = found.detach()
                try:
                    rows = bad[full.expand(*bad.shape[:-1])] if bad.shape[:-1] != full.shape else bad[full]
                except Exception:
                    rows = None
                if rows is not None and rows.numel():
                    if torch.isnan(rows).any():
                        return MISTAKES["nan_masked_row"]
                    if index == 1 and torch.allclose(rows.double(), torch.full_like(rows.double(), 1.0 / k.size(-2)), atol=1e-4):
                        return MISTAKES["uniform_masked_row"]
        if index == 1 and mask is not None:
            # First, since at large scores a leaking mask looks like no mask at all.
            leak = _leak_diagnosis(found, q, k, mask.expand(*q.shape[:-1], k.size(-2)))
            if leak is not None:
                return leak
        d_k = q.size(-1)
        variants = [
            (MISTAKES["mask_polarity"], lambda: _attention_variant(q, k, v, mask, invert=True)[index]),
            (MISTAKES["mask_ignored"], lambda: _attention_variant(q, k, v, None)[index]),
            (MISTAKES["no_scale"], lambda: _attention_variant(q, k, v, mask, scale=1.0)[index]),
            (MISTAKES["scale_d_k"], lambda: _attention_variant(q, k, v, mask, scale=float(d_k))[index]),
        ]
        for dim in range(q.dim() - 1):
            for zero in (False, True):
                variants.append((MISTAKES["softmax_axis"], lambda dim=dim, zero=zero:
                                 _attention_variant(q, k, v, mask, softmax_dim=dim, zero=zero)[index]))
        if q.dim() == 4:
            d_model = q.size(1) * d_k
            variants.append((MISTAKES["sqrt_d_model"],
                             lambda: _attention_variant(q, k, v, mask, scale=math.sqrt(d_model))[index]))
        return _first_match(found, variants, _ref_attention(q, k, v, mask)[index])

    return diagnose


def _attention_case(fn, q, k, v, mask=None, grad=False):
    def case():
        ref_ctx, ref_w = _ref_attention(q, k, v, mask)
        args = [t.clone() if t.is_contiguous() else t for t in (q, k, v)]
        originals = [t.clone() for t in args]
        context, weights = _call_attention(fn, *args, mask)
        for name, a, o in zip("qkv", args, originals):
            if not torch.equal(a, o):
                raise Failed(f"Your function changed its input {name} in place; it must not "
                             f"modify q, k or v (avoid in-place ops like {name}.mul_() or "
                             f"{name} /= ...).")
        _compare("weights", weights, ref_w, _diagnose_attention(q, k, v, mask, "weights"))
        _compare("context", context, ref_ctx, _diagnose_attention(q, k, v, mask, "context"))
        if grad:
            qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
            context, weights = _call_attention(fn, qg, kg, vg, mask)
            if not context.requires_grad:
                raise Failed("The context does not depend on q, k, v through autograd (did you "
                             "call .detach(), .item() or use torch.no_grad()?).")
            context.sum().backward()
            for name, t in (("q", qg), ("k", kg), ("v", vg)):
                if t.grad is None or not torch.isfinite(t.grad).all():
                    raise Failed(f"gradient of {name}: expected finite numbers, got "
                                 f"{'None' if t.grad is None else 'NaN or inf'}.\n"
                                 + MISTAKES["nan_grad"])
    return case


def check_attention(fn) -> GradeResult:
    """Check ``fn(q, k, v, mask=None) -> (context, weights)`` against the library's attention.

    q (..., Lq, d_k), k (..., Lk, d_k), v (..., Lk, d_v); mask bool, True = blocked, broadcastable to
    (..., Lq, Lk). Expected: weights = softmax(q k^T / sqrt(d_k)) over the keys, blocked weights 0,
    a fully blocked query row all zeros (never NaN), context = weights @ v.
    """
    result = GradeResult("check_attention")
    if not callable(fn):
        result.add("is a function", False, f"Expected a function, got {type(fn).__name__}.")
        return result
    q, k, v = _randn(2, 3, 8, seed=1), _randn(2, 5, 8, seed=2), _randn(2, 5, 6, seed=3)
    result.run("random 3-D inputs (B=2, Lq=3, Lk=5, d_k=8, d_v=6), no mask",
               _attention_case(fn, q, k, v))
    q4, k4, v4 = (_randn(2, 3, 4, 16, seed=s, scale=2.0) for s in (4, 5, 6))
    result.run("4-D inputs with heads (B=2, H=3, L=4, d_k=16), no mask", _attention_case(fn, q4, k4, v4))
    lengths = torch.tensor([5, 2])
    pad = torch.arange(5)[None, :] >= lengths[:, None]  # (B, Lk), True on padding
    result.run("padding mask (B, 1, Lk) hiding padded keys (lengths 5 and 2)",
               _attention_case(fn, q, k, v, pad[:, None, :]))
    causal = _masks.causal_mask(4)  # (1, 1, 4, 4)
    result.run("causal mask (1, 1, L, L) on 4-D inputs", _attention_case(fn, q4, k4, v4, causal))
    full = torch.zeros(2, 3, 5, dtype=torch.bool)
    full[0, 1] = True  # query 1 of sequence 0 may attend to nothing
    full[1, :, 3:] = True
    result.run("a fully masked query row gets zero weights and a zero context (not NaN)",
               _attention_case(fn, q, k, v, full))
    result.run("gradients stay finite with a fully masked row",
               _attention_case(fn, q, k, v, full, grad=True))
    # Scores in the hundreds, as in a trained model (float64, so a correct function's rounding
    # cannot matter): a mask made of a modest constant such as -100 lets padding win here.
    q_big, k_big = (_randn(2, 3, 8, seed=11, scale=30.0, dtype=torch.float64),
                    _randn(2, 5, 8, seed=12, scale=30.0, dtype=torch.float64))
    result.run("large scores (about +-900, float64): padded keys still get exactly zero weight",
               _attention_case(fn, q_big, k_big, v.double(), pad[:, None, :]))
    result.run("batch of 1, lengths 1 (B=1, Lq=Lk=1)",
               _attention_case(fn, _randn(1, 1, 4, seed=7), _randn(1, 1, 4, seed=8), _randn(1, 1, 3, seed=9)))
    q64, k64, v64 = (t.double() for t in (q, k, v))
    result.run("float64 inputs (the output must stay float64)",
               _attention_case(fn, q64, k64, v64, pad[:, None, :]))
    qt = _randn(8, 2, 3, seed=1).transpose(0, 1).transpose(1, 2)  # (2, 3, 8), non-contiguous
    kt = _randn(5, 8, 2, seed=2).permute(2, 0, 1)
    vt = _randn(2, 6, 5, seed=3).transpose(1, 2)
    result.run("non-contiguous inputs (transposed views)", _attention_case(fn, qt, kt, vt, pad[:, None, :]))
    return result


# ------------------------------------------------------------------------------------------------
# (b) masks
# ------------------------------------------------------------------------------------------------
def _check_bool_mask(what, found, expected, diagnose):
    found = _as_tensor(what, found)
    if found.dtype != torch.bool:
        raise Failed(f"{what}: expected a bool tensor (True = blocked), got dtype {found.dtype}. "
                     f"A comparison such as `tokens == pad_id` already gives a bool tensor.")
    _compare(what, found, expected, diagnose)


def _padding_diagnose(tokens, pad_id):
    def diagnose(found):
        ref = tokens == pad_id
        if found.shape == ref.shape or found.numel() == ref.numel() and found.shape != (ref.shape[0], 1, 1, ref.shape[1]):
            return (f"Your mask has shape {tuple(found.shape)}; it must be (B, 1, 1, L) so that it "
                    f"broadcasts over the heads and the query positions of the scores (B, H, Lq, Lk): "
                    f"use (tokens == pad_id)[:, None, None, :].")
        if _matches(found.to(torch.float64), (~ref)[:, None, None, :].double()):
            return MISTAKES["mask_polarity"]
        return None
    return diagnose


def _padding_case(fn, tokens, pad_id):
    def case():
        expected = _masks.padding_mask(tokens, pad_id)
        found = fn(tokens.clone() if tokens.is_contiguous() else tokens, pad_id)
        _check_bool_mask("padding mask", found, expected, _padding_diagnose(tokens, pad_id))
    return case


def _causal_diagnose(length):
    def diagnose(found):
        ones = torch.ones(length, length, dtype=torch.bool)
        named = [
            ("Your mask also blocks the diagonal: a position may attend to itself. Use "
             "torch.triu(ones, diagonal=1).", torch.triu(ones)),
            (MISTAKES["mask_polarity"] + " (Your mask is True on and below the diagonal.)",
             torch.tril(ones)),
            ("Your mask blocks the past instead of the future: row i (a query) may attend to "
             "columns 0..i; True must be strictly ABOVE the diagonal.", torch.tril(ones, -1)),
        ]
        for message, pattern in named:
            if found.shape[-2:] == (length, length) and torch.equal(found.detach().reshape(-1, length, length)[0].bool(), pattern):
                return message
        if found.shape != (1, 1, length, length) and found.numel() == length * length:
            return (f"Your mask has shape {tuple(found.shape)}; it must be (1, 1, L, L) to broadcast "
                    f"over batch and heads: add two leading dimensions with [None, None].")
        return None
    return diagnose


def _causal_case(fn, length):
    def case():
        expected = _masks.causal_mask(length)
        found = fn(length)
        _check_bool_mask("causal mask", found, expected, _causal_diagnose(length))
    return case


def _cross_diagnose(src, tgt_len, pad_id):
    def diagnose(found):
        ref = _masks.cross_mask(src, tgt_len, pad_id)
        if found.shape == (src.size(0), 1, src.size(1), tgt_len) and src.size(1) != tgt_len:
            return ("Rows and columns are swapped: rows are the queries (the tgt_len target "
                    "positions), columns are the keys (the source positions): shape "
                    "(B, 1, tgt_len, Ls).")
        if _matches(found.double(), (~ref).double()):
            return MISTAKES["mask_polarity"]
        if found.shape == ref.shape and tgt_len <= src.size(1):
            causal = torch.triu(torch.ones(tgt_len, src.size(1), dtype=torch.bool), 1)
            if torch.equal(found.detach(), ref | causal):
                return ("Your cross mask is causal: the decoder may look at the whole source "
                        "sentence; only padded source tokens are blocked.")
        return None
    return diagnose


def _cross_case(fn, src, tgt_len, pad_id):
    def case():
        expected = _masks.cross_mask(src, tgt_len, pad_id)
        found = fn(src.clone(), tgt_len, pad_id)
        found = _as_tensor("cross mask", found)
        if found.shape != expected.shape and found.dim() == 4:
            try:
                if torch.equal(found.expand_as(expected), expected) if found.size(2) == 1 else False:
                    raise Failed(f"cross mask: expected shape {tuple(expected.shape)} (one row per "
                                 f"target position), got {tuple(found.shape)}. The values broadcast "
                                 f"correctly, but the exercise asks for the explicit (B, 1, tgt_len, "
                                 f"Ls) mask: use .expand(-1, -1, tgt_len, -1).")
            except RuntimeError:
                pass
        _check_bool_mask("cross mask", found, expected, _cross_diagnose(src, tgt_len, pad_id))
    return case


def check_masks(padding_mask=None, causal_mask=None, cross_mask=None) -> GradeResult:
    """Check the mask builders that are given (each optional), against the library's.

    padding_mask(tokens, pad_id=0) -> (B, 1, 1, L) bool; causal_mask(L) -> (1, 1, L, L) bool, True
    strictly above the diagonal; cross_mask(src, tgt_len, pad_id=0) -> (B, 1, tgt_len, Ls) bool.
    True = blocked everywhere.
    """
    result = GradeResult("check_masks")
    if padding_mask is None and causal_mask is None and cross_mask is None:
        result.add("a mask function was given", False,
                   "Pass at least one of padding_mask=..., causal_mask=..., cross_mask=....")
        return result
    tokens = torch.tensor([[5, 7, 2, 9, 4], [3, 8, 0, 0, 0], [6, 0, 0, 0, 0]])
    if padding_mask is not None:
        result.run("padding_mask: batch with lengths 5, 2, 1 (pad_id=0)", _padding_case(padding_mask, tokens, 0))
        result.run("padding_mask: pad_id=3", _padding_case(padding_mask, torch.tensor([[1, 4, 3, 3], [3, 3, 3, 3]]), 3))
        result.run("padding_mask: batch of 1, length 1", _padding_case(padding_mask, torch.tensor([[4]]), 0))
        result.run("padding_mask: a fully padded row", _padding_case(padding_mask, torch.tensor([[0, 0, 0], [2, 5, 0]]), 0))
        result.run("padding_mask: non-contiguous tokens", _padding_case(padding_mask, tokens.t().contiguous().t(), 0))
    if causal_mask is not None:
        for length in (4, 7, 1):
            result.run(f"causal_mask: L={length}", _causal_case(causal_mask, length))
    if cross_mask is not None:
        result.run("cross_mask: source lengths 5, 2, 1; tgt_len=3", _cross_case(cross_mask, tokens, 3, 0))
        result.run("cross_mask: tgt_len longer than the source (tgt_len=7)", _cross_case(cross_mask, tokens, 7, 0))
        result.run("cross_mask: batch of 1, lengths 1", _cross_case(cross_mask, torch.tensor([[4]]), 1, 0))
        result.run("cross_mask: fully padded source with pad_id=3",
                   _cross_case(cross_mask, torch.tensor([[3, 3, 3], [1, 2, 3]]), 2, 3))
    return result


# ------------------------------------------------------------------------------------------------
# (c) multi-head attention
# ------------------------------------------------------------------------------------------------
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")


def _holds_module(value, depth=0) -> bool:
    """True if a plain list/tuple/dict (possibly nested) holds an nn.Module."""
    if depth > 3:
        return False
    if isinstance(value, nn.Module):
        return depth > 0
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_module(x, depth + 1) for x in value)
    return False


def _python_lists_of_modules(module: nn.Module) -> list[str]:
    """Attribute names (anywhere in the module tree) holding a plain list/tuple/dict of modules."""
    found = []
    for prefix, sub in module.named_modules():
        for name, value in vars(sub).items():
            if not name.startswith("_") and _holds_module(value):
                found.append(f"{prefix + '.' if prefix else ''}{name}")
    return found


def _mha_variant(ref, query, key, value, mask=None, split="ok", merge="ok", scale=None,
                 invert=False, softmax_dim=-1, out=True, zero=None):
    batch, lq, d = query.shape
    h, d_k = ref.num_heads, ref.d_k

    def split_heads(x):
        if split == "ok":
            return x.view(batch, -1, h, d_k).transpose(1, 2)  # (B, H, L, d_k)
        if split == "view_hld":
            return x.reshape(batch, h, -1, d_k)  # view to (B, H, L, d_k), no transpose
        return x.reshape(batch, -1, h, d_k)  # (B, L, H, d_k), transpose forgotten

    q, k, v = split_heads(ref.q_proj(query)), split_heads(ref.k_proj(key)), split_heads(ref.v_proj(value))
    # the attention itself, with the same knobs as the plain attention check's variants
    context, _ = _attention_variant(q, k, v, mask, scale=scale if scale is not None else math.sqrt(d_k),
                                    softmax_dim=softmax_dim, invert=invert, zero=zero)
    if merge == "ok" and split != "view_lhd":
        context = context.transpose(1, 2)
    context = context.reshape(batch, lq, d)
    return ref.out_proj(context) if out else context


def _copy_into_student(student: nn.Module, ref: _RefMHA) -> str | None:
    """Copy ref's projection weights into the student's; return a problem description or None."""
    d = ref.d_model
    missing, wrong = [], []
    for name in PROJECTIONS:
        layer = getattr(student, name, None)
        if not isinstance(layer, nn.Linear):
            missing.append(name)
        elif layer.in_features != d or layer.out_features != d:
            wrong.append(f"{name} is nn.Linear({layer.in_features}, {layer.out_features})")
    if missing or wrong:
        linears = [n for n, m in student.named_modules() if isinstance(m, nn.Linear)]
        text = ("The checker needs four projections named q_proj, k_proj, v_proj and out_proj, "
                f"each nn.Linear(d_model, d_model) = nn.Linear({d}, {d}).")
        if missing:
            text += f" Missing (or not nn.Linear): {', '.join(missing)}."
        if wrong:
            text += f" Wrong size: {'; '.join(wrong)}."
        text += f" Your nn.Linear sub-modules: {', '.join(linears) if linears else 'none'}."
        lists = _python_lists_of_modules(student)
        if lists:
            text += (f"\nFound layers kept in a plain Python list/dict: {', '.join(lists)}.\n"
                     + MISTAKES["list_of_layers"])
        return text
    with torch.no_grad():
        for name in PROJECTIONS:
            mine, theirs = getattr(student, name), getattr(ref, name)
            mine.weight.copy_(theirs.weight)
            if mine.bias is not None:
                mine.bias.copy_(theirs.bias)
            else:
                theirs.bias.zero_()
    return None


def _call_mha(module, query, key, value, mask):
    out = module(query, key, value) if mask is None else module(query, key, value, mask)
    if isinstance(out, (tuple, list)):
        if not out:
            raise Failed("forward returned an empty tuple; expected output or (output, weights).")
        out = out[0]
    return _as_tensor("output", out)


def _make_pair(cls, d_model, num_heads, seed, dtype=torch.float32):
    torch.manual_seed(seed)
    ref = _RefMHA(d_model, num_heads)
    with torch.no_grad():
        for name in PROJECTIONS:  # random biases, so that a missing bias shows
            getattr(ref, name).bias.normal_(0.0, 0.1)
    student = cls(d_model, num_heads)
    if not isinstance(student, nn.Module):
        raise Failed(f"{getattr(cls, '__name__', cls)}(d_model, num_heads) should create an "
                     f"nn.Module, got {type(student).__name__}.")
    problem = _copy_into_student(student, ref)
    if problem:
        raise Failed(problem)
    student.eval()
    ref.eval()
    return student.to(dtype), ref.to(dtype)


def _mha_case(cls, d_model, num_heads, query, key, value, mask=None, seed=0, grad=False):
    def case():
        student, ref = _make_pair(cls, d_model, num_heads, seed, query.dtype)
        with torch.no_grad():
            expected, _ = ref(query, key, value, mask, need_weights=True)

        def diagnose(found):
            d_model_ = ref.d_model
            variants = [
                (MISTAKES["view_no_transpose"], lambda: _mha_variant(ref, query, key, value, mask, split="view_hld")),
                (MISTAKES["view_no_transpose"], lambda: _mha_variant(ref, query, key, value, mask, split="view_hld", merge="bad")),
                (MISTAKES["view_no_transpose"], lambda: _mha_variant(ref, query, key, value, mask, split="view_lhd")),
                (MISTAKES["merge_no_transpose"], lambda: _mha_variant(ref, query, key, value, mask, merge="bad")),
                (MISTAKES["sqrt_d_model"], lambda: _mha_variant(ref, query, key, value, mask, scale=math.sqrt(d_model_))),
                (MISTAKES["no_scale"], lambda: _mha_variant(ref, query, key, value, mask, scale=1.0)),
                (MISTAKES["scale_d_k"], lambda: _mha_variant(ref, query, key, value, mask, scale=float(ref.d_k))),
                (MISTAKES["mask_polarity"], lambda: _mha_variant(ref, query, key, value, mask, invert=True)),
                (MISTAKES["softmax_axis"], lambda: _mha_variant(ref, query, key, value, mask, softmax_dim=-2)),
                (MISTAKES["softmax_axis"], lambda: _mha_variant(ref, query, key, value, mask, softmax_dim=-2, zero=True)),
                (MISTAKES["softmax_axis"], lambda: _mha_variant(ref, query, key, value, mask, softmax_dim=1)),
                (MISTAKES["softmax_axis"], lambda: _mha_variant(ref, query, key, value, mask, softmax_dim=1, zero=True)),
                (MISTAKES["no_out_proj"], lambda: _mha_variant(ref, query, key, value, mask, out=False)),
            ]
            with torch.no_grad():
                hit = _first_match(found, variants, expected)
            if hit is None and mask is not None and torch.isnan(found.detach()).any():
                hit = MISTAKES["nan_masked_row"]
            return hit

        if grad:
            found = _call_mha(student, query, key, value, mask)
            _compare("output", found, expected, diagnose)
            found.sum().backward()
            for name in PROJECTIONS:
                g = getattr(student, name).weight.grad
                if g is None or not torch.isfinite(g).all() or not g.abs().sum() > 0:
                    raise Failed(f"{name}.weight received no (finite, non-zero) gradient: the "
                                 f"output must depend on every projection, through autograd.")
        else:
            with torch.no_grad():
                found = _call_mha(student, query, key, value, mask)
            _compare("output", found, expected, diagnose)
    return case


def _registration_case(cls, d_model, num_heads):
    def case():
        student = cls(d_model, num_heads)
        if not isinstance(student, nn.Module):
            raise Failed(f"Expected an nn.Module, got {type(student).__name__}.")
        lists = _python_lists_of_modules(student)
        if lists:
            raise Failed(f"Found sub-modules kept in a plain Python list/dict: {', '.join(lists)}.\n"
                         + MISTAKES["list_of_layers"])
        count = sum(p.numel() for p in student.parameters())
        expected = 4 * (d_model * d_model + d_model)
        if count not in (expected, 4 * d_model * d_model):
            raise Failed(f"Expected {expected} trainable numbers (4 projections of d_model x "
                         f"d_model plus biases) in model.parameters(), found {count}. Every "
                         f"layer must be an attribute of type nn.Module (or inside nn.ModuleList).")
        problem = _copy_into_student(student, _RefMHA(d_model, num_heads))
        if problem:
            raise Failed(problem)
    return case


def check_multihead(cls) -> GradeResult:
    """Check a multi-head attention class ``cls(d_model, num_heads)`` against the library's.

    ``forward(query, key, value, mask=None)`` must return the output (B, Lq, d_model), or a tuple
    whose first element is it. The module must have four projections ``q_proj``, ``k_proj``,
    ``v_proj`` and ``out_proj``, each ``nn.Linear(d_model, d_model)``: the checker copies the
    library's weights into them and compares outputs.
    """
    result = GradeResult("check_multihead")
    if not callable(cls):
        result.add("is a class", False, f"Expected a class, got {type(cls).__name__}.")
        return result
    d, h = 16, 4
    result.run(f"creates the module and registers q_proj, k_proj, v_proj, out_proj "
               f"(d_model={d}, num_heads={h})", _registration_case(cls, d, h))
    x = _randn(2, 5, d, seed=11)
    result.run("self-attention, random input (B=2, L=5), no mask", _mha_case(cls, d, h, x, x, x))
    src = _randn(2, 6, d, seed=12)
    tgt = _randn(2, 3, d, seed=13)
    src_tokens = torch.tensor([[4, 5, 6, 7, 8, 9], [4, 5, 6, 0, 0, 0]])
    result.run("cross-attention (Lq=3, Lk=6) with a key padding mask (B, 1, 1, Lk)",
               _mha_case(cls, d, h, tgt, src, src, _masks.padding_mask(src_tokens)))
    tgt_tokens = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 0, 0, 0]])
    result.run("self-attention with a causal + padding mask (B, 1, L, L)",
               _mha_case(cls, d, h, x, x, x, _masks.decoder_self_mask(tgt_tokens)))
    all_pad = torch.tensor([[4, 5, 6, 7, 8, 9], [0, 0, 0, 0, 0, 0]])
    result.run("a fully padded sequence (every key blocked): no NaN",
               _mha_case(cls, d, h, tgt, src, src, _masks.padding_mask(all_pad)))
    one = _randn(1, 1, d, seed=14)
    result.run("batch of 1, length 1", _mha_case(cls, d, h, one, one, one))
    x64 = x.double()
    result.run("float64 (module.double() and float64 inputs)", _mha_case(cls, d, h, x64, x64, x64))
    xt = _randn(5, 2, d, seed=11).transpose(0, 1)  # (2, 5, d), non-contiguous
    result.run("non-contiguous inputs (transposed views)", _mha_case(cls, d, h, xt, xt, xt))
    x12 = _randn(2, 4, 12, seed=15)
    result.run("other sizes: d_model=12, num_heads=3", _mha_case(cls, 12, 3, x12, x12, x12, seed=1))
    result.run("gradients reach q_proj, k_proj, v_proj and out_proj",
               _mha_case(cls, d, h, tgt, src, src, _masks.padding_mask(src_tokens), grad=True))
    return result


# ------------------------------------------------------------------------------------------------
# (d) masked cross entropy with label smoothing
# ------------------------------------------------------------------------------------------------
def _loss_variants(logits, targets, pad_id, eps):
    v = logits.size(-1)
    flat, tflat = logits.reshape(-1, v).double(), targets.reshape(-1)
    logp = F.log_softmax(flat, dim=-1)
    nll = -logp.gather(1, tflat[:, None]).squeeze(1)
    real = (tflat != pad_id).double()
    per = (1 - eps) * nll + eps * (-logp.mean(-1))
    per_v1 = (1 - eps) * nll + eps / max(v - 1, 1) * (-(logp.sum(-1)) + logp.gather(1, tflat[:, None]).squeeze(1))
    out = [
        (MISTAKES["pad_included"], lambda: per.mean()),
        (MISTAKES["sum_not_mean"], lambda: (per * real).sum()),
    ]
    if targets.dim() == 2:
        rows = (per * real).reshape(targets.shape).sum(1) / real.reshape(targets.shape).sum(1).clamp(min=1)
        out.append((MISTAKES["per_sequence_mean"], lambda: rows.mean()))
    if eps > 0:
        nll_only = (nll * real).sum() / real.sum().clamp(min=1)
        out += [(MISTAKES["smoothing_ignored"], lambda: nll_only),
                (MISTAKES["smoothing_v_minus_1"], lambda: (per_v1 * real).sum() / real.sum().clamp(min=1))]
    return out


def _loss_case(fn, logits, targets, pad_id=0, eps=0.0, grad=False):
    def case():
        expected = _loss.masked_cross_entropy(logits, targets, pad_id, eps)
        lg = logits.detach().clone().requires_grad_(grad) if logits.is_contiguous() else logits
        found = fn(lg, targets.clone(), pad_id=pad_id, label_smoothing=eps)
        found = _as_tensor("loss", found)
        if found.dim() != 0:
            raise Failed(f"The loss should be a scalar (a 0-dim tensor), got shape {tuple(found.shape)}. "
                         f"Average over the non-padding tokens.")
        if torch.isinf(found) and torch.isfinite(expected):
            raise Failed(f"loss: expected {expected.item():.6g}, got inf.\n"
                         + (MISTAKES["smoothing_inf"] if eps > 0 else
                            "log(0) = -inf: use F.log_softmax(logits, dim=-1) (or F.cross_entropy) "
                            "instead of torch.log(torch.softmax(...))."))

        if torch.isnan(found) and not (targets != pad_id).any():
            raise Failed("loss: expected 0 when every target is padding, got NaN: dividing by the "
                         "number of real tokens computes 0/0 here. Divide by "
                         "real.sum().clamp(min=1) instead.")

        def diagnose(f):
            return _first_match(f.reshape(()), _loss_variants(logits, targets, pad_id, eps), expected)

        _compare("loss", found.double(), expected.double(), diagnose, atol=1e-5, rtol=1e-4)
        if found.dtype != expected.dtype:
            raise Failed(f"loss: expected dtype {expected.dtype}, got {found.dtype}.")
        if grad:
            if not found.requires_grad:
                raise Failed("The loss is not connected to the logits through autograd (did you "
                             "use .item(), .detach() or torch.no_grad()?).")
            found.backward()
            if lg.grad is None or not torch.isfinite(lg.grad).all():
                raise Failed("The gradient with respect to the logits is missing or not finite.")
    return case


def check_loss(fn) -> GradeResult:
    """Check ``fn(logits, targets, pad_id=0, label_smoothing=0.0) -> scalar`` against
    ``transformer_lib.masked_cross_entropy``: mean over non-padding tokens; with smoothing eps the
    target puts 1 - eps on the true class and eps / V on every class; finite for extreme logits."""
    result = GradeResult("check_loss")
    if not callable(fn):
        result.add("is a function", False, f"Expected a function, got {type(fn).__name__}.")
        return result
    logits = _randn(2, 5, 7, seed=21, scale=2.0)
    targets = torch.tensor([[3, 1, 4, 1, 5], [2, 6, 0, 0, 0]])
    result.run("random logits (B=2, L=5, V=7), padded targets, no smoothing",
               _loss_case(fn, logits, targets))
    result.run("label smoothing 0.1", _loss_case(fn, logits, targets, eps=0.1))
    result.run("flat logits (N, V) and targets (N,), smoothing 0.2",
               _loss_case(fn, logits.reshape(10, 7), targets.reshape(10), eps=0.2))
    t3 = torch.tensor([[0, 1, 4, 3, 5], [2, 0, 3, 3, 3]])  # 3 is padding here, 0 a real token
    result.run("pad_id=3 (0 is then a real token)", _loss_case(fn, logits, t3, pad_id=3))
    result.run("batch of 1, length 1", _loss_case(fn, _randn(1, 1, 5, seed=22), torch.tensor([[2]]), eps=0.1))
    result.run("a fully padded sequence in the batch",
               _loss_case(fn, logits, torch.tensor([[3, 1, 4, 1, 5], [0, 0, 0, 0, 0]]), eps=0.1))
    result.run("every target is padding: loss 0, not NaN",
               _loss_case(fn, logits, torch.zeros(2, 5, dtype=torch.long)))
    confident = _randn(2, 4, 6, seed=23, scale=100.0)
    result.run("very confident logits (scale 100) with label smoothing 0.1: finite loss",
               _loss_case(fn, confident, confident.argmax(-1).clamp(min=1), eps=0.1))
    result.run("float64 logits (the loss stays float64)", _loss_case(fn, logits.double(), targets, eps=0.1))
    nc = _randn(5, 2, 7, seed=21, scale=2.0).transpose(0, 1)  # (2, 5, 7), non-contiguous
    result.run("non-contiguous logits", _loss_case(fn, nc, targets, eps=0.1))
    result.run("a scalar with a finite gradient", _loss_case(fn, logits, targets, eps=0.1, grad=True))
    return result


# ------------------------------------------------------------------------------------------------
# (e) sinusoidal positional encoding
# ------------------------------------------------------------------------------------------------
def _table_variant(max_len, d_model, kind):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    if kind == "positions_from_1":
        pos = pos + 1
    i2 = torch.arange(0, d_model, 2, dtype=torch.float64)
    exponent = (i2 / 2 if kind == "exponent_i" else i2) / d_model
    angles = pos / 10000.0 ** exponent
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    n_cos = d_model // 2
    if kind == "concatenated_halves":
        return torch.cat([torch.sin(angles), torch.cos(angles[:, :n_cos])], dim=1)  # (max_len, d_model)
    first, second = (torch.cos, torch.sin) if kind == "sin_cos_swapped" else (torch.sin, torch.cos)
    table[:, 0::2] = first(angles)
    table[:, 1::2] = second(angles[:, :n_cos])
    return table


def _positional_case(fn, max_len, d_model):
    def case():
        expected = _ref_table(max_len, d_model)
        try:
            found = fn(max_len, d_model)
        except NotImplementedError:
            raise
        except (RuntimeError, IndexError) as error:
            if d_model % 2:
                raise Failed(f"Your code raised {type(error).__name__}: {error}\nWith an odd "
                             f"d_model={d_model} there are {d_model // 2 + 1} sine columns but only "
                             f"{d_model // 2} cosine columns: use angles[:, :d_model // 2] for "
                             f"the cosines.") from None
            raise
        found = _as_tensor("table", found)

        def diagnose(f):
            return _first_match(f.double(), [
                (MISTAKES[k], lambda k=k: _table_variant(max_len, d_model, k))
                for k in ("sin_cos_swapped", "exponent_i", "concatenated_halves", "positions_from_1")],
                expected)

        if found.shape == expected.shape and found.dtype.is_floating_point:
            found = found.float() if found.dtype != torch.float32 else found
        _compare("table", found, expected, diagnose, atol=1e-4, rtol=1e-4)
    return case


def check_positional(fn) -> GradeResult:
    """Check ``fn(max_len, d_model) -> (max_len, d_model)`` against ``tl.sinusoidal_table``:
    PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(same angle)."""
    result = GradeResult("check_positional")
    if not callable(fn):
        result.add("is a function", False, f"Expected a function, got {type(fn).__name__}.")
        return result
    for max_len, d_model, label in ((50, 16, ""), (100, 64, ""), (1, 4, " (a single position)"),
                                    (10, 2, " (one sin/cos pair)"), (12, 7, " (odd d_model: the last column is a sine)")):
        result.run(f"max_len={max_len}, d_model={d_model}{label}", _positional_case(fn, max_len, d_model))
    return result
