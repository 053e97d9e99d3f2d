"""Automatic feedback on student code: compare with the library, name the classic bugs.

Public API (each check returns a ``GradeResult``; none of them ever raises because of
the student's code, they report it instead):

- ``check_attention(fn)``: ``fn(q, k, v, mask=None) -> (context, weights)``, q (..., Lq,
  d_k), mask bool with True = blocked.
- ``check_masks(padding_mask=None, causal_mask=None, cross_mask=None)``: the mask
  builders given, with the library's signatures ``padding_mask(tokens, pad_id=0) ->
  (B,1,1,L)``, ``causal_mask(L) -> (1,1,L,L)``, ``cross_mask(src, tgt_len, pad_id=0) ->
  (B,1,Lt,Ls)``.
- ``check_multihead(cls)``: ``cls(d_model, num_heads)`` an ``nn.Module`` with
  ``nn.Linear(d_model, d_model)`` projections named ``q_proj``, ``k_proj``, ``v_proj``,
  ``out_proj`` and ``forward(query, key, value, mask=None)`` returning the output or
  ``(output, weights)``.
- ``check_loss(fn)``: ``fn(logits, targets, pad_id=0, label_smoothing=0.0) -> scalar``.
- ``check_positional(fn)``: ``fn(max_len, d_model) -> (max_len, d_model)`` sinusoidal
  table.
- ``check_encoder_layer(cls)``: ``cls(d_model, num_heads, d_ff, dropout=0.1,
  norm_first=False)`` with the library's layout (``self_attn``, ``ffn``, ``norm1``,
  ``norm2``), against PyTorch's ``nn.TransformerEncoderLayer``, post-norm and pre-norm.
- ``check_noam(fn)``: ``fn(step, d_model, warmup) -> float``, the paper's schedule.
- ``check_train_step(fn)``: ``fn(model, src, tgt, optimizer, scheduler,
  label_smoothing=0.0) -> float``, one step of teacher forcing with label smoothing and
  padding.
- ``check_kv_cache(cls)``: ``cls(d_model, num_heads)``, self-attention with a key/value
  cache (``forward(x, cache=None)``) equal to the full causal computation, fed in any
  chunks.
- ``check_greedy_decode(fn)``: ``fn(model, src, max_len, bos_id, eos_id)``, greedy
  decoding with the model's cache.
- ``GradeResult``: truthy only when every case passed; ``.score`` (passed / total),
  ``.cases`` (list of ``(name, passed, message)``), ``.feedback()`` (failures only);
  ``print(result)`` or displaying it in Jupyter shows one line per case with a tick or a
  cross, and for each failure what was expected, what was found and the classic mistake
  when it is recognised.
- ``MISTAKES``: the messages that name the classic mistakes (dict, key -> text).
- ``TASKS``: the graded tasks (task -> ``Task``: the names a notebook defines, its
  cases, the references it may not use); ``ASSIGNMENTS``: assignment -> its tasks.

Each check lives in the module named for its task (``tasks/attention.py``,
``tasks/masks.py``, ...), beside the helpers they share (``_helpers.py``,
``_task.py``). A check compares the student's code with the library on random inputs and
on edge cases (batch of 1, lengths 1, fully padded rows, float64, non-contiguous
tensors). A failed case is diagnosed by running known buggy variants on the same inputs:
when the student's output matches one, the message names the mistake.

Batch grading of a folder of notebooks: ``python -m transformer_grader grade
SUBMISSIONS_DIR --assignment 01_attention --out grades.csv`` (``engine/batch.py``):
each notebook runs in its own kernel in an OS sandbox (``engine/sandbox.py``), with a
student edition of the library that holds no reference of the graded task
(``engine/edition.py``) and only the student's half of grading (``runner/``); its
outputs are judged in the grading process.

The package: ``tasks/`` (one module per graded task: its cases, its judge, its classic
mistakes; the registry ``TASKS``/``ASSIGNMENTS`` in ``tasks/__init__.py``),
``engine/`` (collecting submissions, the sandbox, kernels, watches, the verdict, the
batch and its CSV), ``runner/`` (the only grading code a graded kernel sees) and
``nbgrader.py`` (nbgrader's autograder cells).

Example::

    from transformer_grader import check_attention
    result = check_attention(my_attention)
    print(result)          # a report, one line per case
    assert result          # True only if every case passed
"""

from __future__ import annotations

from .tasks._result import GradeResult
from .tasks.attention import check_attention
from .tasks.encoder import check_encoder_layer
from .tasks.greedy import check_greedy_decode
from .tasks.kv_cache import check_kv_cache
from .tasks.loss import check_loss
from .tasks.masks import check_masks
from .tasks.multihead import check_multihead
from .tasks.noam import check_noam
from .tasks.positional import check_positional
from .runner.placeholders import CHECKS
from .tasks import ASSIGNMENTS, MISTAKES, TASKS
from .tasks.train_step import check_train_step


__all__ = ["ASSIGNMENTS", "GradeResult", "MISTAKES", "TASKS", *CHECKS]
