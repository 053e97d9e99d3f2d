"""Issue 27's attacks on the grader itself and on the rows, graded for real: one batch,
in sandboxes, through the command line, beside an honest classmate.

- memory held in ``memfd``s (attack 8): no process maps it, yet it counts;
- an output flood of nested JSON (attack 9): counted as serialised bytes;
- a megabyte of exception message with terminal escapes (attack 10): capped, escaped,
  and ``grades.csv`` stays readable by Python's ``csv`` with its default limits;
- two sources for one name, names a spreadsheet would run, a right-to-left override
  (attack 11): one row each, distinct, escaped, flagged.

- a forged output holding a 16384 x 16384 stride-0 tensor (attack 6): refused before any
  arithmetic; the bounds themselves are tested in ``test_grading_judging.py``;
- kernels that die in the middle of an output flood (their own exit, or the output cap's
  kill), while the grader reads their messages: ZeroMQ must not abort the grader.
"""

from __future__ import annotations

import csv
import unicodedata

import nbformat
import pytest

from classroom import grade_args, instructor, need_sandbox, run_cli, student

TIMEOUT = "60"

# 14 memfds of 240 MB each (each below the 256 MB limit of one file): 3.3 GB that no
# process maps, under --memory 2048 (3072 MB for all of a kernel's processes).
MEMFD = """
import os
held = []
for _ in range(14):
    fd = os.memfd_create("held")
    for _ in range(240):
        os.write(fd, b"x" * 2**20)
    held.append(fd)
"""

# 40 display messages of 2.4 MB of nested JSON each: 96 MB through a 32 MB cap that
# used to count every non-string item as 50 bytes.
NESTED_FLOOD = """
from IPython.display import display
nested = {"rows": [["x" * 100] * 100] * 240}
for _ in range(40):
    display({"application/json": nested}, raw=True)
"""

# Attack 6 as the issue found it: the runner's writer patched so that the saved outputs
# hold a 16384 x 16384 stride-0 tensor of the wrong shape (a file of a few kilobytes,
# 1 to 2 GB once the judge computes on it). The runner no longer runs in the student's
# kernel (the patch fails there: no _save), so the graded function itself returns the
# stride-0 tensors: the cases' interpreter makes them real under the notebook's own
# memory limit (or fails the case), and what comes back goes through the same bounds.
FORGED = """
import torch
import transformer_grader.runner.plan as _plan
_write = _plan._save
def _forged(report, path):
    huge = torch.zeros(1).expand(16384, 16384)
    for entry in report["tasks"].values():
        entry["outputs"] = [{"value": (huge, huge), "mutated": []}] * len(entry["outputs"])
    _write(report, path)
_plan._save = _forged
def scaled_dot_product_attention(q, k, v, mask=None):
    huge = torch.zeros(1).expand(16384, 16384)
    return huge, huge
"""

LONG_ERROR = """
def scaled_dot_product_attention(q, k, v, mask=None):
    raise ValueError("\\x1b]0;pwned\\x07\\x1b[2K\\rattention,1.000" + "x" * 2**20)
"""


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    need_sandbox()
    base = tmp_path_factory.mktemp("hostile")
    subs, out = base / "subs", base / "grades.csv"
    subs.mkdir()
    honest = instructor()
    files = {
        "alice.ipynb": honest,  # full marks ...
        "alice/01_attention.ipynb": student(),  # ... beside a blank folder of the name
        "memfd.ipynb": student(MEMFD),
        "flood.ipynb": student(NESTED_FLOOD),
        "longerror.ipynb": student(LONG_ERROR),
        "forger.ipynb": student(FORGED),
        "=1+1.ipynb": student(),
        "'=1+1.ipynb": honest,
        "bob\u202e000.0.ipynb": student(),
    }
    for name, nb in files.items():
        path = subs / name
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, path)
    done, peak_mb = run_cli(
        grade_args(subs, out, "--timeout", TIMEOUT, "--jobs", "2", "--memory", "2048")
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text(encoding="utf-8")
    with open(out, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))  # Python's csv, default field size limit
    print(f"grader peak {peak_mb:.0f} MB")
    return {"rows": rows, "text": text, "log": done.stderr, "peak_mb": peak_mb}


def _row(hostile, name):
    (row,) = [r for r in hostile["rows"] if r["student"] == name]
    return row


def test_the_batch_completes_with_one_row_per_source(hostile):
    names = sorted(r["student"] for r in hostile["rows"])
    assert names == sorted(
        [
            "alice.ipynb",
            "alice/",
            "memfd",
            "flood",
            "longerror",
            "forger",
            "'=1+1",
            "''=1+1",
            "bob\\u202e000.0",
        ]
    )


def test_the_graders_peak_memory_stays_under_a_gigabyte(hostile):
    assert hostile["peak_mb"] < 1000, hostile["peak_mb"]


def test_a_forged_stride_zero_output_scores_zero_without_sinking_the_grader(hostile):
    row = _row(hostile, "forger")
    assert row["attention"] == "0.000" and row["feedback"]
    assert hostile["peak_mb"] < 1000


def test_two_sources_for_one_name_keep_both_scores_and_are_flagged(hostile):
    full, blank = _row(hostile, "alice.ipynb"), _row(hostile, "alice/")
    assert full["attention"] == "1.000" and blank["attention"] == "0.000"
    for row in (full, blank):
        assert "two sources for the student alice" in row["flags"]


def test_memory_held_in_memfds_stops_the_kernel(hostile):
    row = _row(hostile, "memfd")
    assert row["status"].startswith("stopped: its processes held more than 3072 MB")
    assert row["attention"] == "0.000"


def test_nested_output_counts_as_its_serialised_bytes(hostile):
    row = _row(hostile, "flood")
    assert row["status"].startswith("stopped: its output passed 32 MB"), row["status"]


def test_a_huge_escaped_error_is_capped_and_shown_escaped(hostile):
    row = _row(hostile, "longerror")
    assert row["attention"] == "0.000"
    assert len(row["feedback"]) < 3000
    assert "\\x1b]0;pwned\\x07" in row["feedback"]
    for value in row.values():
        assert not any(
            unicodedata.category(c) in ("Cc", "Cf") and c not in "\n\r" for c in value
        )
    assert "\x1b" not in hostile["log"] and "\u202e" not in hostile["log"]


def test_formula_names_stay_distinct_and_honest_work_keeps_its_score(hostile):
    assert _row(hostile, "'=1+1")["attention"] == "0.000"  # =1+1: the blank one
    assert _row(hostile, "''=1+1")["attention"] == "1.000"  # '=1+1: the honest one
    assert _row(hostile, "bob\\u202e000.0")["attention"] == "0.000"


# Megabytes of output, then the kernel ends itself while the grader is still reading.
FLOOD_THEN_EXIT = """
import os, sys
for _ in range(30):
    sys.stdout.write("y" * 2_000_000)
    sys.stdout.flush()
    print("z" * 500_000, flush=True)
os._exit(0)
"""


def test_kernels_dying_mid_flood_never_abort_the_grader(tmp_path):
    """With ZeroMQ's "never reconnect" (RECONNECT_IVL -1) such a batch of 12 aborted the
    grader process (libzmq's fq.cpp assertion, exit -6) in 2 of 3 runs; it must finish
    with a row for every notebook."""
    need_sandbox()
    subs, out = tmp_path / "subs", tmp_path / "grades.csv"
    subs.mkdir()
    for i in range(6):
        nbformat.write(student(NESTED_FLOOD), subs / f"flood{i}.ipynb")
        nbformat.write(student(FLOOD_THEN_EXIT), subs / f"exit{i}.ipynb")
    done, _ = run_cli(grade_args(subs, out, "--timeout", TIMEOUT, "--jobs", "2"))
    assert done.returncode == 0, done.stderr[-3000:]
    with open(out, newline="", encoding="utf-8") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert sorted(rows) == sorted([f"flood{i}" for i in range(6)] + [f"exit{i}" for i in range(6)])
    for row in rows.values():
        assert row["total"] == "0.000"
        assert row["status"].startswith(("stopped: its output passed", "crashed: the kernel died"))
