"""Tests of transformer_grader: the checks of the first five assignments and their messages.

- the library's own functions (and the instructor notebooks' solutions) score full marks;
- untouched student notebooks score zero without crashing anything;
- each classic mistake, written below as a small buggy implementation, fails with the message
  that names it.

The newer assignments' checks: test_grading_tasks.py; reference use: test_grading_guard.py;
batch grading in kernels, isolation and the attacks: test_grading_batch.py.
"""
from __future__ import annotations

import csv
import functools
import math

import nbformat
import pytest
import torch
from torch import nn
from torch.nn import functional as F

import transformer_lib as tl
from transformer_grader import (
    MISTAKES,
    TASKS,
    GradeResult,
    check_attention,
    check_loss,
    check_masks,
    check_multihead,
    check_positional,
)
from transformer_grader.engine.verdict import grade_namespace


def failure_text(result: GradeResult) -> str:
    return "\n".join(message for _, ok, message in result.cases if not ok)


def assert_named(result: GradeResult, key: str) -> None:
    """The check failed, and some failed case names the mistake ``key``."""
    assert not result, str(result)
    assert result.score < 1.0
    assert MISTAKES[key] in failure_text(result), str(result)


# ------------------------------------------------------------------------------------------------
# The library's functions pass; missing implementations fail politely
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("check, reference", [
    (check_attention, tl.scaled_dot_product_attention),
    (check_multihead, tl.MultiHeadAttention),
    (check_loss, tl.masked_cross_entropy),
    (check_positional, tl.sinusoidal_table),
    (lambda f: check_masks(*f), (tl.padding_mask, tl.causal_mask, tl.cross_mask)),
])
def test_reference_implementations_score_full_marks(check, reference):
    result = check(reference)
    assert result, str(result)
    assert result.score == 1.0 and result.total >= 5
    assert "✗" not in str(result)


def _not_implemented(*args, **kwargs):
    raise NotImplementedError()


class _NotImplementedModule(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        raise NotImplementedError()


@pytest.mark.parametrize("check, student", [
    (check_attention, _not_implemented),
    (check_multihead, _NotImplementedModule),
    (check_loss, _not_implemented),
    (check_positional, _not_implemented),
    (lambda f: check_masks(f, f, f), _not_implemented),
])
def test_not_implemented_scores_zero_with_a_clear_message(check, student):
    result = check(student)
    assert not result and result.score == 0.0 and result.total >= 5
    assert all("not implemented yet" in message for _, _, message in result.cases)


def test_exceptions_in_student_code_are_reported_not_raised():
    def crashing(q, k, v, mask=None):
        return q @ v  # wrong shapes for most cases
    result = check_attention(crashing)
    assert not result
    assert "Your code raised RuntimeError" in failure_text(result)
    assert "q @ v" in failure_text(result)  # the offending line is quoted


def test_non_callable_and_wrong_return_type():
    assert not check_attention(42)
    result = check_attention(lambda q, k, v, mask=None: q)  # forgot the weights
    assert not result and "should return a pair (context, weights)" in failure_text(result)


def test_grade_result_report():
    result = GradeResult("demo", [("first", True, ""), ("second", False, "expected 1, got 2")])
    assert not result and result.score == 0.5 and (result.passed, result.total) == (1, 2)
    text = str(result)
    assert "demo: 1/2 cases passed" in text and "✓ first" in text and "✗ second" in text
    assert "expected 1, got 2" in text and repr(result) == text
    assert "expected 1, got 2" in result._repr_html_() and "&#10007;" in result._repr_html_()
    assert "second: expected 1, got 2" in result.feedback()
    assert not GradeResult("empty")  # no case: never truthy
    assert GradeResult("all good", [("a", True, "")])


def test_check_masks_needs_a_function():
    result = check_masks()
    assert not result and "Pass at least one" in failure_text(result)


# ------------------------------------------------------------------------------------------------
# Classic mistakes in attention
# ------------------------------------------------------------------------------------------------
def attention_with(q, k, v, mask=None, *, scale=None, dim=-1, invert=False, fill=-1e9,
                   zero_blocked=True):
    """A configurable attention in which each keyword reproduces one classic mistake."""
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.size(-1)) if scale is None else scale)
    blocked = None if mask is None else (~mask if invert else mask)
    if blocked is not None:
        scores = scores.masked_fill(blocked, fill)
    weights = torch.softmax(scores, dim=dim)
    if blocked is not None and zero_blocked:
        weights = weights.masked_fill(blocked, 0.0)
    return weights @ v, weights


def test_correct_variant_of_the_helper_passes():
    assert check_attention(attention_with)


@pytest.mark.parametrize("kwargs, key", [
    (dict(scale=1.0), "no_scale"),
    (dict(dim=-2), "softmax_axis"),
    (dict(invert=True), "mask_polarity"),
    (dict(fill=float("-inf"), zero_blocked=False), "nan_masked_row"),
    (dict(zero_blocked=False), "uniform_masked_row"),
    (dict(fill=-100.0), "small_mask_constant"),  # passes every moderate case: only large scores show it
])
def test_attention_mistakes_are_named(kwargs, key):
    assert_named(check_attention(functools.partial(attention_with, **kwargs)), key)


def test_attention_adding_minus_100_is_named_on_large_scores():
    def add_minus_100(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        weights = torch.softmax(scores + mask * -100.0, dim=-1)
        return weights @ v, weights
    result = check_attention(add_minus_100)
    failed = [name for name, ok, _ in result.cases if not ok]
    assert any(name.startswith("large scores") for name in failed), failed
    assert_named(result, "small_mask_constant")


def test_attention_that_ignores_its_mask_is_named_as_such():
    def ignores_mask(q, k, v, mask=None):
        return attention_with(q, k, v, None)
    result = check_attention(ignores_mask)
    assert_named(result, "mask_ignored")
    # At moderate scores a leak is not blamed on a small mask constant (at large scores the two
    # mistakes give the same output, and the large-score case names the constant).
    padding = dict((name, message) for name, message in result.failures())["padding mask (B, 1, Lk) hiding padded keys (lengths 5 and 2)"]
    assert MISTAKES["mask_ignored"] in padding and MISTAKES["small_mask_constant"] not in padding


def test_a_stray_nan_is_not_blamed_on_the_mask():
    """Where there is no mask, the polarity and ignored-mask variants equal the right answer:
    they cannot explain an output that differs from it (here by one NaN)."""
    def one_nan(q, k, v, mask=None):
        context, weights = attention_with(q, k, v, mask)
        context = context.clone()
        context.view(-1)[0] = float("nan")
        return context, weights
    text = failure_text(check_attention(one_nan))
    assert "contains NaN" in text
    assert MISTAKES["mask_polarity"] not in text and MISTAKES["mask_ignored"] not in text, text


def test_attention_scaled_by_d_k_instead_of_its_root():
    def by_d_k(q, k, v, mask=None):
        return attention_with(q, k, v, mask, scale=float(q.size(-1)))
    assert_named(check_attention(by_d_k), "scale_d_k")


def test_attention_view_on_non_contiguous_input_gets_a_hint():
    def with_view(q, k, v, mask=None):
        rows = k.view(-1, k.size(-1))  # fails on a non-contiguous k
        return attention_with(q, rows.view(k.shape), v, mask)
    result = check_attention(with_view)
    assert not result
    assert "non-contiguous inputs" in [name for name, ok, _ in result.cases if not ok][-1]
    assert ".reshape()" in failure_text(result)


def test_attention_float64_downcast_is_reported():
    def downcast(q, k, v, mask=None):
        context, weights = attention_with(q.float(), k.float(), v.float(), mask)
        return context, weights
    result = check_attention(downcast)
    assert not result and "expected dtype torch.float64" in failure_text(result)


def test_attention_in_place_modification_is_reported():
    def in_place(q, k, v, mask=None):
        q /= math.sqrt(q.size(-1))
        return attention_with(q, k, v, mask, scale=1.0)
    result = check_attention(in_place)
    assert not result and "changed its input q in place" in failure_text(result)


# ------------------------------------------------------------------------------------------------
# Classic mistakes in multi-head attention
# ------------------------------------------------------------------------------------------------
class BuggyMHA(nn.Module):
    """Multi-head attention with one switchable bug (``bug=None`` is correct)."""

    def __init__(self, d_model, num_heads, bug=None):
        super().__init__()
        self.h, self.d_k, self.d_model, self.bug = num_heads, d_model // num_heads, d_model, bug
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def split(self, x):
        batch, length, _ = x.shape
        if self.bug == "view":
            return x.view(batch, self.h, length, self.d_k)  # right shape, wrong content
        return x.view(batch, length, self.h, self.d_k).transpose(1, 2)

    def forward(self, query, key, value, mask=None):
        q, k, v = self.split(self.q_proj(query)), self.split(self.k_proj(key)), self.split(self.v_proj(value))
        scale = math.sqrt(self.d_model if self.bug == "sqrt_d_model" else self.d_k)
        scores = q @ k.transpose(-2, -1) / scale
        blocked = None if mask is None else (~mask if self.bug == "polarity" else mask)
        if blocked is not None:
            scores = scores.masked_fill(blocked, float("-inf") if self.bug == "nan" else -1e9)
        weights = torch.softmax(scores, dim=-2 if self.bug == "axis" else -1)
        if blocked is not None and self.bug != "nan":
            weights = weights.masked_fill(blocked, 0.0)
        context = weights @ v
        batch, _, length, _ = context.shape
        if self.bug == "merge":
            merged = context.reshape(batch, length, self.d_model)
        else:
            merged = context.transpose(1, 2).reshape(batch, length, self.d_model)
        return self.out_proj(merged), weights


def test_correct_buggy_mha_passes():
    assert check_multihead(BuggyMHA)


@pytest.mark.parametrize("bug, key", [
    ("view", "view_no_transpose"),
    ("sqrt_d_model", "sqrt_d_model"),
    ("polarity", "mask_polarity"),
    ("nan", "nan_masked_row"),
    ("axis", "softmax_axis"),
    ("merge", "merge_no_transpose"),
])
def test_multihead_mistakes_are_named(bug, key):
    assert_named(check_multihead(functools.partial(BuggyMHA, bug=bug)), key)


class ListOfHeads(nn.Module):
    """Per-head projections kept in a plain Python list: invisible to .parameters()."""

    def __init__(self, d_model, num_heads):
        super().__init__()
        d_k = d_model // num_heads
        self.heads = [(nn.Linear(d_model, d_k), nn.Linear(d_model, d_k), nn.Linear(d_model, d_k))
                      for _ in range(num_heads)]
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        outputs = [tl.scaled_dot_product_attention(wq(query), wk(key), wv(value),
                                                   None if mask is None else mask[:, 0])[0]
                   for wq, wk, wv in self.heads]
        return self.out_proj(torch.cat(outputs, dim=-1))


def test_per_head_layers_in_a_python_list_are_named():
    result = check_multihead(ListOfHeads)
    assert_named(result, "list_of_layers")
    assert "nn.ModuleList" in result.cases[0][2]


def test_multihead_with_other_projection_names_says_which_names_are_expected():
    class Renamed(BuggyMHA):
        def __init__(self, d_model, num_heads):
            super().__init__(d_model, num_heads)
            self.w_q = self.q_proj
            del self.q_proj
    result = check_multihead(Renamed)
    assert not result
    assert "named q_proj, k_proj, v_proj and out_proj" in failure_text(result)
    assert "Missing (or not nn.Linear): q_proj" in failure_text(result)


# ------------------------------------------------------------------------------------------------
# Classic mistakes in the loss, the masks and the positional table
# ------------------------------------------------------------------------------------------------
def loss_with(logits, targets, pad_id=0, label_smoothing=0.0, *, log_of_softmax=False,
              count_pads=False):
    vocab = logits.size(-1)
    logits, targets = logits.reshape(-1, vocab), targets.reshape(-1)
    if log_of_softmax:
        log_probs = torch.log(torch.softmax(logits, dim=-1))  # -inf where p underflows
    else:
        log_probs = F.log_softmax(logits, dim=-1)
    nll = -log_probs.gather(1, targets[:, None]).squeeze(1)
    per_token = (1 - label_smoothing) * nll - label_smoothing * log_probs.mean(-1)
    real = torch.ones_like(per_token) if count_pads else (targets != pad_id).to(per_token.dtype)
    return (per_token * real).sum() / real.sum().clamp(min=1)


def test_loss_mistakes_are_named():
    assert check_loss(loss_with)
    result = check_loss(functools.partial(loss_with, log_of_softmax=True))
    assert_named(result, "smoothing_inf")
    assert [name for name, ok, _ in result.cases if not ok] == [
        "very confident logits (scale 100) with label smoothing 0.1: finite loss"]
    assert_named(check_loss(functools.partial(loss_with, count_pads=True)), "pad_included")
    no_smoothing = lambda logits, targets, pad_id=0, label_smoothing=0.0: loss_with(logits, targets, pad_id)
    assert_named(check_loss(no_smoothing), "smoothing_ignored")


def test_pytorch_cross_entropy_fails_only_on_the_all_padding_batch():
    def torch_loss(logits, targets, pad_id=0, label_smoothing=0.0):
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1),
                               ignore_index=pad_id, label_smoothing=label_smoothing)
    result = check_loss(torch_loss)
    assert result.passed == result.total - 1
    assert "0/0" in failure_text(result)


def test_mask_mistakes_are_named():
    inverted = lambda tokens, pad_id=0: (tokens != pad_id)[:, None, None, :]
    assert_named(check_masks(padding_mask=inverted), "mask_polarity")
    flat = check_masks(padding_mask=lambda tokens, pad_id=0: tokens == pad_id)
    assert not flat and "must be (B, 1, 1, L)" in failure_text(flat)
    lower = lambda n: torch.tril(torch.ones(n, n, dtype=torch.bool))[None, None]
    assert_named(check_masks(causal_mask=lower), "mask_polarity")
    diagonal = check_masks(causal_mask=lambda n: torch.triu(torch.ones(n, n, dtype=torch.bool))[None, None])
    assert not diagonal and "also blocks the diagonal" in failure_text(diagonal)
    as_float = check_masks(causal_mask=lambda n: torch.triu(torch.ones(n, n), 1)[None, None])
    assert not as_float and "expected a bool tensor" in failure_text(as_float)
    swapped = lambda src, t, pad_id=0: (src == pad_id)[:, None, :, None].expand(-1, -1, -1, t)
    result = check_masks(cross_mask=swapped)
    assert not result and "Rows and columns are swapped" in failure_text(result)


def _table(max_len, d_model, swap=False, concat=False):
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    angles = pos / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    sin, cos = torch.sin(angles), torch.cos(angles[:, : d_model // 2])
    if swap:
        sin, cos = torch.cos(angles), torch.sin(angles[:, : d_model // 2])
    if concat:
        return torch.cat([sin, cos], dim=1)
    table = torch.zeros(max_len, d_model)
    table[:, 0::2], table[:, 1::2] = sin, cos
    return table


def test_positional_odd_d_model_crash_gets_a_hint():
    def even_only(max_len, d_model):
        pos = torch.arange(max_len, dtype=torch.float32)[:, None]
        angles = pos / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
        table = torch.zeros(max_len, d_model)
        table[:, 0::2], table[:, 1::2] = torch.sin(angles), torch.cos(angles)  # fails if d is odd
        return table
    result = check_positional(even_only)
    assert [name for name, ok, _ in result.cases if not ok] == [
        "max_len=12, d_model=7 (odd d_model: the last column is a sine)"]
    assert "angles[:, :d_model // 2]" in failure_text(result)


def test_positional_mistakes_are_named():
    assert check_positional(_table)
    assert_named(check_positional(functools.partial(_table, swap=True)), "sin_cos_swapped")
    assert_named(check_positional(functools.partial(_table, concat=True)), "concatenated_halves")


# ------------------------------------------------------------------------------------------------
# grade_namespace: both halves of every case in this process
# ------------------------------------------------------------------------------------------------
def test_grade_namespace_scores_missing_and_borrowed_functions_zero():
    graded = grade_namespace({"scaled_dot_product_attention": attention_with}, ["attention", "loss"])
    assert graded["attention"]["score"] == 1.0
    assert graded["loss"]["score"] == 0.0 and "not found" in graded["loss"]["feedback"]
    assert graded["loss"]["total"] == 11  # every case counts: 0/11, not "not graded"
    borrowed = grade_namespace({"masked_cross_entropy": tl.masked_cross_entropy})
    assert list(borrowed) == ["loss"] and borrowed["loss"]["score"] == 0.0
    assert "transformer_lib.loss.masked_cross_entropy" in borrowed["loss"]["feedback"]
    assert set(TASKS) == {"attention", "masks", "multihead", "loss", "positional", "encoder",
                          "noam", "train_step", "kv_cache", "greedy"}


def test_a_task_with_several_names_counts_the_missing_ones():
    graded = grade_namespace({"padding_mask": lambda t, pad_id=0: (t == pad_id)[:, None, None, :]},
                             ["masks"])["masks"]
    assert graded["passed"] == 5 and graded["total"] == 12  # causal and cross masks: 0
    assert "define causal_mask" in graded["feedback"]


def test_random_seeds_give_other_inputs_and_the_same_verdicts():
    from transformer_grader.tasks.attention import make_cases
    names = ("scaled_dot_product_attention",)
    fixed, other = make_cases(names, 0), make_cases(names, 12345)
    assert not torch.equal(fixed[0].inputs["q"], other[0].inputs["q"])
    for seed in (1, 999, 2**30):
        graded = grade_namespace({"scaled_dot_product_attention": attention_with}, seed=seed)
        assert graded["attention"]["score"] == 1.0
