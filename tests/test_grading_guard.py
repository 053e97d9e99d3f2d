"""Honest implementations only: a graded function that reaches a banned reference scores
0.

These tests grade in this process (``grade_namespace``: the student's half of each case
under a ``Guard``, the judge after), which is fast; ``test_grading_batch.py`` repeats
the main attacks in real kernels. Each attack below passes every case on its outputs (it
*is* the reference), so a score of 0 can only come from the guard.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

import pytest
import torch
from conftest import honest_attention_function
from torch import nn
from torch.nn import functional as F

import transformer_lib as tl
import transformer_lib.attention
from transformer_grader import check_attention
from transformer_grader.runner.guard import Guard
from transformer_grader.engine.verdict import grade_namespace
from transformer_lib.attention import scaled_dot_product_attention as saved_reference


honest_attention = honest_attention_function()


def _wrapper(q, k, v, mask=None):
    return tl.scaled_dot_product_attention(q, k, v, mask)


def _importlib_wrapper(q, k, v, mask=None):
    module = importlib.import_module("transformer_lib.attention")
    return module.scaled_dot_product_attention(q, k, v, mask)


def _getattr_wrapper(q, k, v, mask=None):
    return getattr(tl, "scaled_dot" + "_product_attention")(q, k, v, mask)


def _saved_wrapper(q, k, v, mask=None):  # a reference saved before grading began
    return saved_reference(q, k, v, mask)


def _second_copy(
    q, k, v, mask=None
):  # the module's file loaded again, under another name
    spec = importlib.util.spec_from_file_location(
        "transformer_lib.my_copy", transformer_lib.attention.__file__
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.scaled_dot_product_attention(q, k, v, mask)


def _reloaded(q, k, v, mask=None):
    return importlib.reload(transformer_lib.attention).scaled_dot_product_attention(
        q, k, v, mask
    )


def _torch_fused(q, k, v, mask=None):
    allowed = None if mask is None else ~mask
    context = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    return context, honest_attention(q, k, v, mask)[1]


def _torch_ops(q, k, v, mask=None):  # the same kernel reached through torch.ops
    allowed = None if mask is None else ~mask
    context = torch.ops.aten.scaled_dot_product_attention(q, k, v, allowed)
    return context, honest_attention(q, k, v, mask)[1]


def test_an_honest_implementation_scores_full_marks_under_the_guard():
    graded = grade_namespace({"scaled_dot_product_attention": honest_attention})[
        "attention"
    ]
    assert graded["score"] == 1.0 and not graded["flags"], graded


@pytest.mark.parametrize(
    "attack",
    [
        _wrapper,
        _importlib_wrapper,
        _getattr_wrapper,
        _saved_wrapper,
        _second_copy,
        _reloaded,
        tl.scaled_dot_product_attention,
        _torch_fused,
        _torch_ops,
    ],
)
def test_reaching_the_attention_reference_scores_zero(attack):
    assert check_attention(attack).score > 0.5  # on outputs alone it would pass
    graded = grade_namespace({"scaled_dot_product_attention": attack})["attention"]
    assert graded["score"] == 0.0 and graded["passed"] == 0 and graded["total"] == 10
    assert "while it was graded" in graded["feedback"] and graded["flags"]
    assert "scaled_dot_product_attention" in graded["feedback"]


def test_the_references_are_put_back_after_grading():
    original = tl.scaled_dot_product_attention
    grade_namespace({"scaled_dot_product_attention": _wrapper})
    assert tl.scaled_dot_product_attention is original
    assert (
        transformer_lib.attention.masked_softmax.__module__
        == "transformer_lib.attention"
    )
    assert sys.getprofile() is None
    torch.testing.assert_close(
        tl.masked_softmax(torch.zeros(1, 2)), torch.full((1, 2), 0.5)
    )


class _TorchMHA(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.inner = nn.MultiheadAttention(d_model, num_heads, batch_first=True)
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        return self.inner(query, key, value)[0]


def _encoder_by_torch(d_model, num_heads, d_ff, dropout=0.1, norm_first=False):
    return nn.TransformerEncoderLayer(
        d_model, num_heads, d_ff, dropout, batch_first=True, norm_first=norm_first
    )


def _loss_by_cross_entropy(logits, targets, pad_id=0, label_smoothing=0.0):
    return F.cross_entropy(logits.flatten(0, -2), targets.flatten(),
                           ignore_index=pad_id, label_smoothing=label_smoothing)


def _loss_by_module(logits, targets, pad_id=0, label_smoothing=0.0):
    loss = nn.CrossEntropyLoss(ignore_index=pad_id, label_smoothing=label_smoothing)
    return loss(logits.flatten(0, -2), targets.flatten())


@pytest.mark.parametrize(
    "namespace, task",
    [
        ({"MultiHeadAttention": tl.MultiHeadAttention}, "multihead"),
        ({"MultiHeadAttention": _TorchMHA}, "multihead"),
        ({"masked_cross_entropy": tl.masked_cross_entropy}, "loss"),
        ({"masked_cross_entropy": _loss_by_cross_entropy}, "loss"),
        ({"masked_cross_entropy": _loss_by_module}, "loss"),
        (
            {
                "padding_mask": tl.padding_mask,
                "causal_mask": lambda n: tl.causal_mask(n),
                "cross_mask": tl.cross_mask,
            },
            "masks",
        ),
        (
            {"sinusoidal_table": lambda n, d: tl.PositionalEncoding(d, n).table},
            "positional",
        ),
        ({"EncoderLayer": tl.EncoderLayer}, "encoder"),
        ({"EncoderLayer": _encoder_by_torch}, "encoder"),
        ({"noam_lr": lambda step, d, w: tl.noam_lr(step, d, w)}, "noam"),
        ({"train_step": lambda *a, **k: tl.train_step(*a, **k)[0]}, "train_step"),
        ({"greedy_decode": lambda *a: tl.greedy_decode(*a)}, "greedy"),
    ],
)
def test_each_task_bans_its_references(namespace, task):
    graded = grade_namespace(namespace, [task])[task]
    assert (
        graded["score"] == 0.0 and "while it was graded" in graded["feedback"]
    ), graded


def test_switching_the_watch_off_is_tampering():
    def sneaky(q, k, v, mask=None):
        sys.setprofile(None)
        return honest_attention(q, k, v, mask)

    graded = grade_namespace({"scaled_dot_product_attention": sneaky})["attention"]
    assert graded["score"] == 0.0 and "interfered with the grader" in graded["feedback"]
    assert sys.getprofile() is None


def test_a_replaced_setprofile_is_noticed(monkeypatch):
    monkeypatch.setattr(sys, "setprofile", lambda hook: None)
    with Guard(["transformer_lib.attention"]) as guard:
        pass
    assert guard.tampered and "does not work" in guard.tampered[0]


def test_a_mutated_mask_cannot_help_a_wrong_solution():
    """The hostile review's case: inverted polarity scores 3/10; zeroing the mask in
    place on top used to lift it to 7/10 (later cases reused the mask). Now every case
    gets fresh tensors and the mutation is itself a mistake."""

    def inverted(q, k, v, mask=None):
        return honest_attention(q, k, v, None if mask is None else ~mask)

    def inverted_and_zeroed(q, k, v, mask=None):
        out = inverted(q, k, v, mask)
        if mask is not None:
            mask.zero_()
        return out

    plain, zeroed = check_attention(inverted), check_attention(inverted_and_zeroed)
    assert plain.passed == 3
    assert zeroed.passed <= plain.passed
    assert "changed its input mask in place" in zeroed.feedback()


def test_fresh_inputs_for_every_case():
    seen = []

    def recording(q, k, v, mask=None):
        seen.append(q)
        return honest_attention(q, k, v, mask)

    assert check_attention(recording)
    assert len({id(t) for t in seen}) == len(seen)  # never the same tensor twice
