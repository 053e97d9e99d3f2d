"""Batch grading in real kernels: verdicts computed outside the kernel, reporting, the
collection rules, interruption, grading without a sandbox, and the command line's checks
before any work.

One class folder holds an honest, a buggy, a crashing, a hanging and a malformed
submission and a few that try the plain tricks; it is graded once (a module-scoped
fixture: kernels are slow) and the tests read the rows. The hostile review's attacks are
in ``test_grading_attacks.py``.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from classroom import (
    INSTRUCTOR,
    ROOT,
    STUDENT,
    grade_args,
    grader_processes,
    instructor,
    need_sandbox,
    run_cli,
    write,
)
from conftest import HONEST_ATTENTION
from transformer_grader import MISTAKES
from transformer_grader.engine import batch, collect
from transformer_grader.__main__ import main
from transformer_grader.engine.sandbox import SandboxUnavailable

TIMEOUT = 15

GOOD = HONEST_ATTENTION

FORGER = """
import transformer_grader as grading
print("attention,1.000,all 99 cases passed")
grading.check_attention = lambda fn: True
def scaled_dot_product_attention(q, k, v, mask=None):
    raise NotImplementedError()
"""

WRAPPER = """
import transformer_lib as tl
def scaled_dot_product_attention(q, k, v, mask=None):
    return tl.scaled_dot_product_attention(q, k, v, mask)
"""

IMPORTLIB = """
import importlib
def scaled_dot_product_attention(q, k, v, mask=None):
    module = importlib.import_module("transformer_lib.attention")
    return module.scaled_dot_product_attention(q, k, v, mask)
"""

GETATTR = """
import transformer_lib
def scaled_dot_product_attention(q, k, v, mask=None):
    return getattr(transformer_lib, "scaled_dot" + "_product_attention")(q, k, v, mask)
"""

# The honest attention, with PyTorch's fused kernel for the context: a banned reference
# named in the graded code.
TORCH_REFERENCE = "import torch.nn.functional as F\n" + HONEST_ATTENTION.replace(
    "return weights @ v, weights",
    "keep = None if mask is None else ~mask\n"
    "    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep), weights",
)

MUTATOR = """
def scaled_dot_product_attention(q, k, v, mask=None):  # wrong polarity, zeroes the mask
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        mask.zero_()
    return weights @ v, weights
"""

PROBE = (
    """
import json, os, sys
seen = json.dumps([os.getcwd(), dict(os.environ), sys.argv, sys.path, os.listdir("."),
                   os.listdir(".."), get_ipython().profile_dir.location])
if SUBMISSIONS in seen or os.path.basename(SUBMISSIONS) in seen:
    raise RuntimeError("the kernel can see where the submissions are")
"""
    + GOOD
)


def _student_notebook(*cells, tasks=None):
    """The student version of assignment 1 with ``cells`` appended."""
    nb = nbformat.read(STUDENT / "01_attention.ipynb", as_version=4)
    nb.cells += [nbformat.v4.new_code_cell(c) for c in cells]
    if tasks is not None:
        nb.metadata["transformer_lib"]["tasks"] = tasks
    return nb


def _files(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    need_sandbox()
    subs = tmp_path_factory.mktemp("class") / "submissions"
    subs.mkdir()
    where = f"SUBMISSIONS = {str(subs)!r}"
    solution = nbformat.read(INSTRUCTOR / "01_attention.ipynb", as_version=4)
    notebooks = {
        "good": solution,
        "buggy": _student_notebook(GOOD.replace(" / math.sqrt(q.size(-1))", "")),
        "crashing": _student_notebook('raise RuntimeError("boom")\n' + GOOD),
        "hanging": _student_notebook("import time\ntime.sleep(600)", GOOD),
        "forger": _student_notebook(FORGER),
        "wrapper": _student_notebook(WRAPPER),
        "importlib": _student_notebook(IMPORTLIB),
        "getattr": _student_notebook(GETATTR),
        "torch_reference": _student_notebook(TORCH_REFERENCE),
        "mutator": _student_notebook(MUTATOR),
        "metadata": _student_notebook(
            "def sinusoidal_table(max_len, d_model):\n    raise NotImplementedError()",
            tasks=["positional"],
        ),
        "probe": _student_notebook(where, PROBE),
    }
    for name, nb in notebooks.items():
        nbformat.write(nb, subs / f"{name}.ipynb")
    (subs / "malformed.ipynb").write_text('{"cells": [ not json', encoding="utf-8")
    before = _files(subs)
    out = subs.parent / "grades.csv"
    lines = []
    rows = batch.grade_folder(
        subs,
        out,
        timeout=TIMEOUT,
        jobs=2,
        assignments=["01_attention"],
        log=lines.append,
    )
    with open(out, newline="", encoding="utf-8") as handle:
        table = list(csv.DictReader(handle))
    return {
        "subs": subs,
        "before": before,
        "after": _files(subs),
        "rows": rows,
        "csv": {row["student"]: row for row in table},
        "columns": list(table[0]),
        "log": lines,
    }


def test_the_csv_has_one_row_per_student_and_one_column_per_task(graded_class):
    csv_rows = graded_class["csv"]
    assert sorted(csv_rows) == sorted(p[:-6] for p in graded_class["before"])
    assert graded_class["columns"] == [
        *batch.FIXED_COLUMNS,
        "attention",
        *batch.END_COLUMNS,
    ]
    for row in csv_rows.values():
        assert 0.0 <= float(row["attention"]) <= 1.0 and row["max_total"] == "1"
        assert row["sandbox"] == "bubblewrap"
    summary = graded_class["log"][-1]
    assert summary.startswith(
        "graded 13 students (13 notebooks, each in its own sandbox)"
    )
    assert "flagged:" in summary


def test_honest_and_buggy_submissions(graded_class):
    good, buggy = graded_class["csv"]["good"], graded_class["csv"]["buggy"]
    assert good["status"] == "ok" and good["attention"] == "1.000" and not good["flags"]
    assert buggy["status"] == "ok" and 0.0 < float(buggy["attention"]) < 1.0
    assert MISTAKES["no_scale"] in buggy["feedback"]


def test_crashed_timed_out_and_malformed_notebooks_score_zero_with_the_reason(
    graded_class,
):
    rows = graded_class["csv"]
    crashing, hanging, malformed = rows["crashing"], rows["hanging"], rows["malformed"]
    assert crashing["status"].startswith("crashed: RuntimeError: boom in cell")
    # the cases run on the graded definitions of its source (issue 27), which hold a
    # correct function after the failing line: the crash is the status, not the score
    assert crashing["attention"] == "1.000"
    assert (
        hanging["status"].startswith("timed out")
        and "(import time)" in hanging["status"]
    )
    assert malformed["status"].startswith("malformed")
    for row in (hanging, malformed):
        assert (
            row["attention"] == "0.000"
            and row["total"] == "0.000"
            and row["max_total"] == "1"
        )
        assert "0/10" in row["feedback"] and row["status"] in row["feedback"]


def test_forging_the_grade_in_the_kernel_changes_nothing(graded_class):
    forger = graded_class["csv"]["forger"]
    assert forger["attention"] == "0.000" and forger["status"] == "ok"
    assert (
        "99" not in forger["feedback"] and "not implemented yet" in forger["feedback"]
    )


@pytest.mark.parametrize("name", ["wrapper", "getattr"])
def test_the_librarys_reference_is_not_there(graded_class, name):
    """However it is looked for, the reference in the student edition is a stand-in:
    using it scores 0, flagged, with the reason."""
    row = graded_class["csv"][name]
    assert row["attention"] == "0.000"
    assert "transformer_lib.attention.scaled_dot_product_attention" in row["flags"]
    assert "your code used" in row["feedback"]


def test_looking_for_the_reference_through_importlib_is_refused(graded_class):
    """Graded code is restricted Python (issue 37): ``importlib`` is not importable
    there, so the search for the reference stops at the import, before it can reach the
    stand-in; the task scores 0 and the row says why."""
    row = graded_class["csv"]["importlib"]
    assert row["attention"] == "0.000"
    assert "imports by a computed name (importlib)" in row["flags"]


def test_a_pytorch_reference_named_in_the_graded_code_scores_zero(graded_class):
    row = graded_class["csv"]["torch_reference"]
    assert row["attention"] == "0.000"
    assert "torch.nn.functional.scaled_dot_product_attention" in row["flags"]
    assert (
        "your code uses torch.nn.functional.scaled_dot_product_attention"
        in (row["feedback"])
    )


def test_a_mutated_mask_is_a_mistake_and_gains_nothing(graded_class):
    row = graded_class["csv"]["mutator"]
    assert float(row["attention"]) <= 0.3
    assert "changed its input mask in place" in row["feedback"]


def test_the_task_list_comes_from_the_instructor_not_the_metadata(graded_class):
    row = graded_class["csv"]["metadata"]
    assert row["attention"] == "0.000" and row["max_total"] == "1"
    assert "positional" not in graded_class["columns"]


def test_the_kernel_cannot_see_where_the_submissions_are(graded_class):
    probe = graded_class["csv"]["probe"]
    assert probe["status"] == "ok" and probe["attention"] == "1.000", probe["feedback"]


def test_the_grader_writes_no_submission_and_leaves_nothing_running(graded_class):
    assert graded_class["after"] == graded_class["before"]
    assert grader_processes() == []


# --------------------------------------------------------------------------------------
# One folder per student, several assignments
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def student_folders(tmp_path_factory):
    need_sandbox()
    subs = tmp_path_factory.mktemp("folders")
    (subs / "alice").mkdir()
    (subs / "bob" / "ps1").mkdir(parents=True)
    for name in ("01_attention", "02_masks"):
        nb = nbformat.read(INSTRUCTOR / f"{name}.ipynb", as_version=4)
        nbformat.write(nb, subs / "alice" / f"{name}.ipynb")
    nbformat.write(_student_notebook(GOOD), subs / "bob" / "ps1" / "01_attention.ipynb")
    nbformat.write(_student_notebook(), subs / "bob" / "scratch.ipynb")
    lines = []
    rows = batch.grade_folder(
        subs,
        None,
        timeout=TIMEOUT,
        jobs=2,
        assignments=["01_attention", "02_masks"],
        log=lines.append,
    )
    return {row["student"]: row for row in rows}, lines


def test_student_folders_expect_every_assignment_named(student_folders):
    rows, lines = student_folders
    alice, bob = rows["alice"], rows["bob"]
    assert (alice["attention"], alice["masks"], alice["max_total"]) == (
        "1.000",
        "1.000",
        "2",
    )
    assert (bob["attention"], bob["masks"], bob["max_total"]) == ("1.000", "0.000", "2")
    assert (
        "02_masks: not submitted" in bob["status"]
        and "02_masks: not submitted" in bob["feedback"]
    )
    assert any("ignored scratch.ipynb" in line for line in lines)


# --------------------------------------------------------------------------------------
# The command line: everything is checked before the first kernel starts
# --------------------------------------------------------------------------------------
@pytest.fixture
def no_kernels(monkeypatch):
    async def refuse(*args, **kwargs):
        raise AssertionError("a kernel was started")

    monkeypatch.setattr(batch, "grade_notebook", refuse)


@pytest.fixture
def one_notebook(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    nbformat.write(_student_notebook(), subs / "alice.ipynb")
    return subs


def _fails(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code != 0
    return capsys.readouterr().err


@pytest.mark.parametrize("timeout", ["-5", "0", "abc", "nan", "inf"])
def test_a_bad_timeout_is_refused(timeout, one_notebook, tmp_path, capsys, no_kernels):
    err = _fails(
        grade_args(one_notebook, tmp_path / "g.csv", "--timeout", timeout),
        capsys,
    )
    assert "timeout must be a number of seconds > 0" in err and repr(timeout) in err


def test_bad_jobs_are_refused(one_notebook, tmp_path, capsys, no_kernels):
    err = _fails(
        grade_args(one_notebook, tmp_path / "g.csv", "--jobs", "0"),
        capsys,
    )
    assert "jobs must be an int >= 1" in err


def test_too_little_memory_for_a_kernel_is_refused_before_any_work(
    one_notebook, tmp_path, capsys, no_kernels
):
    """``--memory 1024`` used to kill every kernel at start, the reference solution's
    too ("crashed: the kernel died"); now it is refused, naming the minimum."""
    err = _fails(
        grade_args(one_notebook, tmp_path / "g.csv", "--memory", "1024"),
        capsys,
    )
    assert "--memory 1024 is too small" in err and "at least 2048 MB" in err
    assert not (tmp_path / "g.csv").exists()


def test_an_empty_folder_is_an_error(tmp_path, capsys, no_kernels):
    (tmp_path / "empty").mkdir()
    err = _fails(
        grade_args(tmp_path / "empty", tmp_path / "g.csv"),
        capsys,
    )
    assert "no notebooks to grade" in err
    assert not (tmp_path / "g.csv").exists()


def test_a_missing_folder_and_an_unnamed_assignment_are_errors(
    one_notebook, tmp_path, capsys, no_kernels
):
    err = _fails(
        grade_args(tmp_path / "nope", tmp_path / "g.csv"),
        capsys,
    )
    assert "does not exist" in err
    err = _fails(["grade", str(one_notebook), "--out", str(tmp_path / "g.csv")], capsys)
    assert "--assignment" in err
    err = _fails(["grade", str(one_notebook), "--assignment", "99_nothing"], capsys)
    assert "invalid choice" in err


@pytest.mark.parametrize("where", ["missing-folder", "a-folder", "under-a-file"])
def test_a_bad_out_is_refused_before_grading(
    where, one_notebook, tmp_path, capsys, no_kernels
):
    out = {
        "missing-folder": tmp_path / "nope" / "g.csv",
        "a-folder": tmp_path,
        "under-a-file": one_notebook / "alice.ipynb" / "g.csv",
    }[where]
    err = _fails(
        grade_args(one_notebook, out),
        capsys,
    )
    assert "--out" in err


@pytest.mark.skipif(
    os.name != "posix" or os.geteuid() == 0, reason="root may write anywhere"
)
def test_an_unwritable_out_folder_is_refused(
    one_notebook, tmp_path, capsys, no_kernels
):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        err = _fails(
            grade_args(one_notebook, locked / "g.csv"),
            capsys,
        )
    finally:
        locked.chmod(0o700)
    assert "cannot write" in err


def test_the_csv_is_written_atomically(tmp_path, monkeypatch):
    out = tmp_path / "g.csv"
    out.write_text("the previous grades\n", encoding="utf-8")
    columns = [*batch.FIXED_COLUMNS, "attention", *batch.END_COLUMNS]
    rows = [
        {
            "student": "alice",
            "status": "ok",
            "attention": "1.000",
            "total": "1.000",
            "max_total": "1",
            "sandbox": "bubblewrap",
            "flags": "",
            "feedback": "",
        }
    ]
    batch.write_csv(out, rows, columns)
    assert out.read_text(encoding="utf-8").startswith("student,status,attention,total")

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(batch.csv.DictWriter, "writerows", broken)
    with pytest.raises(OSError):
        batch.write_csv(out, rows, columns)
    assert out.read_text(encoding="utf-8").startswith(
        "student,status"
    )  # the old file, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "g.csv"
    ]  # no temporary file left


def test_text_that_a_spreadsheet_would_run_is_kept_as_text(tmp_path):
    table = batch._Table(tmp_path / "g.csv", ["attention"])
    row = {
        "student": "=HYPERLINK(1)",
        "status": "ok",
        "attention": "1.000",
        "total": "1.000",
        "max_total": "1",
        "sandbox": "bubblewrap",
        "flags": "",
        "feedback": "@SUM(1)",
    }
    table.append(row)
    table.finish([row])
    with open(tmp_path / "g.csv", newline="", encoding="utf-8") as handle:
        (written,) = list(csv.DictReader(handle))
    assert written["student"] == "'=HYPERLINK(1)" and written["feedback"] == "'@SUM(1)"
    assert written["attention"] == "1.000"
    assert not (tmp_path / "g.partial.csv").exists()


def test_the_module_entry_point_answers_help():
    result = subprocess.run(
        [sys.executable, "-m", "transformer_grader", "grade", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert (
        result.returncode == 0
        and "--assignment" in result.stdout
        and "--timeout" in result.stdout
        and "--no-sandbox" in result.stdout
    )


# --------------------------------------------------------------------------------------
# Interrupted, unsandboxed, refused
# --------------------------------------------------------------------------------------
def test_an_interrupted_batch_leaves_its_finished_rows_and_no_kernel(tmp_path):
    need_sandbox()
    subs, out = tmp_path / "subs", tmp_path / "grades.csv"
    write(
        subs,
        {
            "alice/01_attention.ipynb": instructor(),
            "zed/01_attention.ipynb": _student_notebook("import time\ntime.sleep(600)"),
        },
    )
    child = subprocess.Popen(
        [sys.executable, "-m", "transformer_grader"]
        + grade_args(subs, out, "--timeout", "300"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    partial = tmp_path / "grades.partial.csv"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:  # until alice's row is in
            if partial.exists() and "alice" in partial.read_text(encoding="utf-8"):
                break
            time.sleep(0.2)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130, err[-2000:]
    assert "INTERRUPTED: 1 of 2 students graded" in err
    assert "grades.partial.csv" in err and not out.exists()
    with open(partial, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["student"] for r in rows] == ["alice"] and rows[0]["attention"] == "1.000"
    time.sleep(1)
    assert grader_processes() == []


def test_without_a_sandbox_every_row_says_so_and_honest_work_is_not_flagged(
    tmp_path,
):
    """--no-sandbox, as on a machine without bubblewrap, with a fresh HOME: the
    grader's own first run there must not be blamed on the students."""
    subs, out, home = tmp_path / "subs", tmp_path / "grades.csv", tmp_path / "home"
    home.mkdir()
    write(
        subs,
        {"alice.ipynb": instructor(), "dave.ipynb": _student_notebook()},
    )
    done, _ = run_cli(
        grade_args(subs, out, "--no-sandbox"),
        env=dict(os.environ, HOME=str(home)),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "WITHOUT a sandbox (--no-sandbox)" in done.stderr
    with open(out, newline="", encoding="utf-8") as handle:
        rows = {r["student"]: r for r in csv.DictReader(handle)}
    assert (
        rows["alice"]["attention"] == "1.000" and rows["dave"]["attention"] == "0.000"
    )
    for row in rows.values():
        assert row["sandbox"] == "none (--no-sandbox)"
        assert row["flags"] == "", row["flags"]


def test_no_sandbox_is_refused_unless_asked_for(
    one_notebook, tmp_path, capsys, monkeypatch, no_kernels
):
    monkeypatch.setattr(
        "transformer_grader.engine.sandbox.shutil.which", lambda name, *a, **k: None
    )
    with pytest.raises(SandboxUnavailable, match="bubblewrap is not installed"):
        batch.grade_folder(one_notebook, None, assignments=["01_attention"])
    err = _fails(
        grade_args(one_notebook, tmp_path / "g.csv"),
        capsys,
    )
    assert "no sandbox can run here" in err and "--no-sandbox" in err
    assert not (tmp_path / "g.csv").exists()


# --------------------------------------------------------------------------------------
# Collection: what a folder holds cannot trick the grader (no kernels here)
# --------------------------------------------------------------------------------------
def _collect(folder, assignments=("01_attention",)):
    students, notes = collect.collect(folder, list(assignments))
    return {s.name: s for s in students}, notes


def test_only_regular_files_are_read_and_links_are_never_followed(tmp_path):
    subs = tmp_path / "subs"
    write(subs, {"alice/01_attention.ipynb": instructor()})
    (subs / "bob").mkdir()
    (subs / "bob" / "01_attention.ipynb").symlink_to(
        subs / "alice" / "01_attention.ipynb"
    )
    (subs / "carl").symlink_to(subs / "alice")
    (subs / "dora" / "01_attention.ipynb").mkdir(parents=True)
    (subs / "emil").mkdir()
    os.mkfifo(subs / "emil" / "01_attention.ipynb")
    (subs / "fay").mkdir()
    (subs / "fay" / "work").symlink_to(subs / "alice")  # a linked folder inside
    students, _ = _collect(subs)
    assert list(students["alice"].notebooks) == ["01_attention"]
    assert "symbolic link" in students["bob"].problems["01_attention"]
    assert "symbolic link" in students["carl"].problems["01_attention"]
    assert "is a folder" in students["dora"].problems["01_attention"]
    assert "is a FIFO" in students["emil"].problems["01_attention"]
    assert not students["fay"].notebooks and not students["fay"].problems
    for name in ("bob", "carl", "dora", "emil"):
        assert not students[name].notebooks


def test_a_notebook_too_large_is_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(collect, "MAX_NOTEBOOK_BYTES", 1000)
    write(tmp_path, {"alice/01_attention.ipynb": instructor(), "bob/x.txt": b""})
    write(tmp_path, {"bob/01_attention.ipynb": b"{}"})
    students, _ = _collect(tmp_path)
    assert "larger than" in students["alice"].problems["01_attention"]
    assert students["bob"].notebooks["01_attention"][1] == b"{}"


def test_hard_linked_notebooks_are_flagged_on_both_rows(tmp_path):
    write(tmp_path, {"alice/01_attention.ipynb": instructor()})
    (tmp_path / "bob").mkdir()
    os.link(
        tmp_path / "alice" / "01_attention.ipynb",
        tmp_path / "bob" / "01_attention.ipynb",
    )
    students, _ = _collect(tmp_path)
    assert "the same file as bob" in students["alice"].flags[0]
    assert "the same file as alice" in students["bob"].flags[0]


def test_the_instructors_list_decides_what_is_expected(tmp_path):
    write(
        tmp_path,
        {
            "alice/01_attention.ipynb": instructor(),
            "alice/05_positional.ipynb": instructor("05_positional"),
            "bob/lab/whatever.ipynb": instructor(),
        },
    )
    students, notes = _collect(tmp_path)
    assert list(students["alice"].notebooks) == ["01_attention"]
    assert any("05_positional is not an assignment of this batch" in n for n in notes)
    # one assignment named: a folder's only notebook is it, whatever its name
    assert students["bob"].notebooks["01_attention"][0] == "bob/lab/whatever.ipynb"
    students, _ = _collect(tmp_path, ("01_attention", "02_masks"))
    assert students["bob"].notebooks == {}


def test_one_notebook_per_assignment_and_the_rule_is_stated(tmp_path):
    write(
        tmp_path,
        {
            "kate/01_attention.ipynb": instructor(),
            "kate/old/01_attention.ipynb": _student_notebook(),
            "liam/a/01_attention.ipynb": instructor(),
            "liam/b/01_attention.ipynb": instructor(),
            "mia/.ipynb_checkpoints/01_attention-checkpoint.ipynb": instructor(),
            "mia/01_attention.ipynb": instructor(),
        },
    )
    students, _ = _collect(tmp_path)
    kate, liam, mia = students["kate"], students["liam"], students["mia"]
    assert kate.notebooks["01_attention"][0] == "kate/01_attention.ipynb"
    assert "nearest the top" in kate.flags[0] and "kate/old" in kate.flags[0]
    assert not liam.notebooks and "none graded" in liam.problems["01_attention"]
    assert "exactly one notebook per assignment" in liam.flags[0]
    assert mia.flags == [] and list(mia.notebooks) == ["01_attention"]


def test_one_notebook_per_student_needs_exactly_one_assignment(tmp_path):
    write(tmp_path, {"alice.ipynb": instructor()})
    with pytest.raises(ValueError, match="exactly one assignment"):
        collect.collect(tmp_path, ["01_attention", "02_masks"])
    with pytest.raises(ValueError, match="--assignment"):
        batch.check_assignments([])
