"""Automatic feedback for student implementations: compare with the library, name the classic bugs.

Public API (each check returns a ``GradeResult``; none of them ever raises because of the
student's code, they report it instead):

- ``check_attention(fn)``: ``fn(q, k, v, mask=None) -> (context, weights)``, q (..., Lq, d_k),
  mask bool with True = blocked.
- ``check_masks(padding_mask=None, causal_mask=None, cross_mask=None)``: the mask builders given,
  with the library's signatures ``padding_mask(tokens, pad_id=0) -> (B,1,1,L)``,
  ``causal_mask(L) -> (1,1,L,L)``, ``cross_mask(src, tgt_len, pad_id=0) -> (B,1,Lt,Ls)``.
- ``check_multihead(cls)``: ``cls(d_model, num_heads)`` an ``nn.Module`` with ``nn.Linear(d_model,
  d_model)`` projections named ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj`` and
  ``forward(query, key, value, mask=None)`` returning the output or ``(output, weights)``.
- ``check_loss(fn)``: ``fn(logits, targets, pad_id=0, label_smoothing=0.0) -> scalar``.
- ``check_positional(fn)``: ``fn(max_len, d_model) -> (max_len, d_model)`` sinusoidal table.
- ``GradeResult``: truthy only when every case passed; ``.score`` (passed / total), ``.cases``
  (list of ``(name, passed, message)``), ``.feedback()`` (failures only); ``print(result)`` or
  displaying it in Jupyter shows one line per case with a tick or a cross, and for each failure
  what was expected, what was found and the classic mistake when it is recognised.
- ``MISTAKES``: the messages that name the classic mistakes (dict, key -> text).
- ``TASKS``: the graded tasks, for batch grading (task -> names a notebook defines, check).

Each check compares the student's code with the library on random inputs and on edge cases
(batch of 1, lengths 1, fully padded rows, float64, non-contiguous tensors). A failed case is
diagnosed by running known buggy variants on the same inputs: when the student's output matches
one, the message names the mistake (heads split with view but no transpose, sqrt(d_model) instead
of sqrt(d_k), inverted mask polarity, NaN on fully masked rows, softmax over the wrong axis,
per-head layers in a Python list, label smoothing producing inf, ...).

Batch grading of a folder of notebooks: ``python -m transformer_lib.grading grade SUBMISSIONS_DIR
--out grades.csv [--timeout 60]`` (see ``transformer_lib.grading.batch``).

Example::

    from transformer_lib.grading import check_attention
    result = check_attention(my_attention)
    print(result)          # a report, one line per case
    assert result          # True only if every case passed
"""
from __future__ import annotations

from ._result import GradeResult
from .checks import (
    MISTAKES,
    check_attention,
    check_loss,
    check_masks,
    check_multihead,
    check_positional,
)

# The graded tasks: task name -> (names a notebook must define, how to check them).
# Batch grading looks these names up in the executed notebook's namespace.
TASKS = {
    "attention": (("scaled_dot_product_attention",), lambda ns: check_attention(ns["scaled_dot_product_attention"])),
    "masks": (("padding_mask", "causal_mask", "cross_mask"),
              lambda ns: check_masks(ns.get("padding_mask"), ns.get("causal_mask"), ns.get("cross_mask"))),
    "multihead": (("MultiHeadAttention",), lambda ns: check_multihead(ns["MultiHeadAttention"])),
    "loss": (("masked_cross_entropy",), lambda ns: check_loss(ns["masked_cross_entropy"])),
    "positional": (("sinusoidal_table",), lambda ns: check_positional(ns["sinusoidal_table"])),
}

__all__ = ["GradeResult", "MISTAKES", "TASKS", "check_attention", "check_loss", "check_masks",
           "check_multihead", "check_positional"]
