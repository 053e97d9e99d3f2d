"""Chapters 5, 7 and 13 time the reader's machine, and print the build machine's times only
where stored outputs are made or checked (``BOOK_STORED_OUTPUTS=1``, set by conftest.py
and scripts/execute_chapters.py)."""
from __future__ import annotations

import contextlib
import io
import math
import os
import time
from pathlib import Path

import nbformat
import pytest
import torch
from torch import nn

import transformer_lib as tl

ROOT = Path(__file__).resolve().parents[1]
TIMED = {"05_multihead_attention.ipynb": "this machine", "07_encoder.ipynb": "(this machine)",
         "13_scaling_out.ipynb": "(this machine)"}
# What a timing cell reads from the cells before it: chapter 13 times the two torchrun runs
# it made (their checkpoints' metrics).
EARLIER = {"13_scaling_out.ipynb": {"runs": {
    n: {"metrics": {"train_seconds": 1.5 * n, "steps": 40.0}} for n in (1, 2)}}}


def _timing_cell(name: str) -> str:
    """The cell that sets MEASURE, after the code cells right before it (what it times
    may be defined there, in the same section)."""
    nb = nbformat.read(ROOT / "book" / name, as_version=4)
    where = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and "MEASURE =" in c.source]
    assert len(where) == 1, name
    first = where[0]
    while first > 0 and nb.cells[first - 1].cell_type == "code":
        first -= 1
    return "\n\n".join(c.source for c in nb.cells[first:where[0] + 1])


def _run(source: str, earlier: dict | None = None) -> tuple[dict, str]:
    namespace = {"torch": torch, "nn": nn, "tl": tl, "math": math, "time": time, "os": os,
                 **(earlier or {})}
    out = io.StringIO()
    with contextlib.redirect_stdout(out), torch.no_grad():
        exec(compile(source, "<timing cell>", "exec"), namespace)
    return namespace, out.getvalue()


def test_pytest_runs_with_stored_outputs_switched_on():
    assert os.environ.get("BOOK_STORED_OUTPUTS") == "1"


@pytest.mark.parametrize("name", sorted(TIMED))
def test_timing_cells_measure_unless_stored_outputs_are_made(name, monkeypatch):
    source = _timing_cell(name)
    namespace, printed = _run(source, EARLIER.get(name))  # as nbval runs it
    assert namespace["MEASURE"] is False and "(this book's build machine)" in printed
    monkeypatch.delenv("BOOK_STORED_OUTPUTS")  # as in Jupyter or Colab
    namespace, printed = _run(source, EARLIER.get(name))
    assert namespace["MEASURE"] is True and TIMED[name] in printed
    assert "build machine" not in printed
