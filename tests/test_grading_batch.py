"""Batch grading in real kernels: isolation, verdicts computed outside the kernel, the
attacks of the hostile review, reporting, and the command line's checks before any work.

One class folder holds an honest, a buggy, a crashing, a hanging and a malformed
submission and one submission per attack; it is graded once (a module-scoped fixture:
kernels are slow) and the tests read the rows. A second, small class uses one folder per
student.
"""

from __future__ import annotations

import copy
import csv
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from conftest import HONEST_ATTENTION
from transformer_lib.grading import MISTAKES, batch
from transformer_lib.grading.__main__ import main

ROOT = Path(__file__).resolve().parents[1]
STUDENT = ROOT / "assignments" / "student"
INSTRUCTOR = ROOT / "assignments" / "instructor"
TIMEOUT = 15

GOOD = HONEST_ATTENTION

FORGER = """
import transformer_lib.grading as grading
from transformer_lib.grading import kernel, verdict, batch, submission
fake = {"score": 1.0, "passed": 99, "total": 99, "feedback": "all 99 cases passed",
        "flags": []}
verdict.judge_task = lambda *args, **kwargs: fake
verdict.grade_namespace = lambda *args, **kwargs: {"attention": fake}
batch.grade_notebook = submission.grade_notebook = None
grading.check_attention = lambda fn: True
print("attention,1.000,all 99 cases passed")
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

VANDAL = """
import glob
for name in ("good.ipynb", "buggy.ipynb", "../good.ipynb"):
    try:
        open(name, "w").write("{}")
    except OSError:
        pass
for name in glob.glob("*.ipynb") + glob.glob("../*.ipynb"):
    print(name, len(open(name).read()))
"""

# An informed attack: the grader's command line and folder are in /proc; read the
# classmates' notebooks there, take the honest one's function, and overwrite another
# classmate's file.
INFORMED = """
import glob, json, os
parent = os.environ.get("JPY_PARENT_PID") or str(os.getppid())
args = open(f"/proc/{parent}/cmdline").read().split("\\0")
home = os.readlink(f"/proc/{parent}/cwd")
for folder in [os.path.join(home, a) for a in args] + [os.path.dirname(SUBMISSIONS)]:
    found = glob.glob(os.path.join(folder, "*", "*.ipynb"))
    for path in found + glob.glob(os.path.join(folder, "*.ipynb")):
        if path.endswith("good.ipynb"):
            for cell in json.load(open(path))["cells"]:
                if "def scaled_dot_product_attention" in "".join(cell["source"]):
                    exec("".join(cell["source"]))
open(os.path.join(SUBMISSIONS, "buggy.ipynb"), "w").write("{}")
"""

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

PROBE = """
import json, os, sys
seen = json.dumps([os.getcwd(), dict(os.environ), sys.argv, sys.path, os.listdir("."),
                   os.listdir(".."), get_ipython().profile_dir.location])
if SUBMISSIONS in seen or os.path.basename(SUBMISSIONS) in seen:
    raise RuntimeError("the kernel can see where the submissions are")
""" + GOOD


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
        "vandal": _student_notebook(VANDAL),
        "informed": _student_notebook(where, INFORMED),
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
        "student",
        "status",
        "attention",
        "total",
        "max_total",
        "flags",
        "feedback",
    ]
    for row in csv_rows.values():
        assert 0.0 <= float(row["attention"]) <= 1.0 and row["max_total"] == "1"
    assert graded_class["log"][-1].startswith("graded 14 students (14 notebooks)")
    assert any("flagged:" in line for line in graded_class["log"][-1].splitlines())


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
    assert (
        crashing["attention"] == "0.000"
        and "not implemented yet" in crashing["feedback"]
    )
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


@pytest.mark.parametrize("name", ["wrapper", "importlib", "getattr"])
def test_reaching_the_reference_scores_zero_and_is_flagged(graded_class, name):
    row = graded_class["csv"][name]
    assert row["attention"] == "0.000"
    assert "transformer_lib.attention.scaled_dot_product_attention" in row["flags"]
    assert "while it was graded" in row["feedback"]


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


def test_vandalism_in_the_working_folder_changes_no_file(graded_class):
    """Writing good.ipynb in the kernel's folder writes the kernel's private copy of
    nothing: no classmate's file changes, and nobody's grade does."""
    row = graded_class["csv"]["vandal"]
    assert row["attention"] == "0.000"
    assert "files outside" not in row["flags"]
    changed = {
        n
        for n in graded_class["before"]
        if graded_class["after"].get(n) != graded_class["before"][n]
    }
    assert changed <= {"buggy.ipynb"}  # only the informed attack's target (see below)


def test_an_informed_attack_gains_nothing_and_is_flagged(graded_class):
    """A notebook that finds the submissions through /proc, runs a classmate's solution
    and overwrites another classmate's file: on one machine without containers the write
    happens (see assignments/README.md), but it is flagged, scores 0, and the classmate
    is graded from the copy read before any kernel started."""
    rows = graded_class["csv"]
    informed, buggy = rows["informed"], rows["buggy"]
    assert informed["attention"] == "0.000"
    assert "touched files of other submissions" in informed["feedback"]
    assert "(the submissions)" in informed["flags"]
    assert "buggy.ipynb" in informed["flags"]  # the changed file is named
    assert 0.0 < float(buggy["attention"]) < 1.0 and buggy["status"] == "ok"
    assert graded_class["after"]["buggy.ipynb"] == b"{}"  # the write did happen


def test_the_grader_writes_no_submission(graded_class):
    for name, content in graded_class["before"].items():
        if name != "buggy.ipynb":
            assert graded_class["after"][name] == content, name
    assert set(graded_class["after"]) == set(graded_class["before"])


# --------------------------------------------------------------------------------------
# One folder per student, several assignments
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def student_folders(tmp_path_factory):
    subs = tmp_path_factory.mktemp("folders")
    (subs / "alice").mkdir()
    (subs / "bob" / "ps1").mkdir(parents=True)
    for name in ("01_attention", "02_masks"):
        nb = nbformat.read(INSTRUCTOR / f"{name}.ipynb", as_version=4)
        nbformat.write(nb, subs / "alice" / f"{name}.ipynb")
    nbformat.write(_student_notebook(GOOD), subs / "bob" / "ps1" / "01_attention.ipynb")
    nbformat.write(_student_notebook(), subs / "bob" / "scratch.ipynb")
    lines = []
    rows = batch.grade_folder(subs, None, timeout=TIMEOUT, jobs=2, log=lines.append)
    return {row["student"]: row for row in rows}, lines


def test_student_folders_expect_every_assignment_of_the_class(student_folders):
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
        [
            "grade",
            str(one_notebook),
            "--assignment",
            "01_attention",
            "--out",
            str(tmp_path / "g.csv"),
            "--timeout",
            timeout,
        ],
        capsys,
    )
    assert "timeout must be a number of seconds > 0" in err and repr(timeout) in err


def test_bad_jobs_are_refused(one_notebook, tmp_path, capsys, no_kernels):
    err = _fails(
        [
            "grade",
            str(one_notebook),
            "--assignment",
            "01_attention",
            "--jobs",
            "0",
            "--out",
            str(tmp_path / "g.csv"),
        ],
        capsys,
    )
    assert "jobs must be an int >= 1" in err


def test_an_empty_folder_is_an_error(tmp_path, capsys, no_kernels):
    (tmp_path / "empty").mkdir()
    err = _fails(
        ["grade", str(tmp_path / "empty"), "--out", str(tmp_path / "g.csv")], capsys
    )
    assert "no notebooks to grade" in err
    assert not (tmp_path / "g.csv").exists()


def test_a_missing_folder_and_an_unnamed_assignment_are_errors(
    one_notebook, tmp_path, capsys, no_kernels
):
    err = _fails(
        ["grade", str(tmp_path / "nope"), "--out", str(tmp_path / "g.csv")], capsys
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
        ["grade", str(one_notebook), "--assignment", "01_attention", "--out", str(out)],
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
            [
                "grade",
                str(one_notebook),
                "--assignment",
                "01_attention",
                "--out",
                str(locked / "g.csv"),
            ],
            capsys,
        )
    finally:
        locked.chmod(0o700)
    assert "cannot write" in err


def test_the_csv_is_written_atomically(tmp_path, monkeypatch):
    out = tmp_path / "g.csv"
    out.write_text("the previous grades\n", encoding="utf-8")
    rows = [
        {
            "student": "alice",
            "status": "ok",
            "attention": "1.000",
            "total": "1.000",
            "max_total": "1",
            "flags": "",
            "feedback": "",
        }
    ]
    batch.write_csv(out, rows, ["attention"])
    assert out.read_text(encoding="utf-8").startswith("student,status,attention,total")

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(batch.csv.DictWriter, "writerows", broken)
    with pytest.raises(OSError):
        batch.write_csv(out, rows, ["attention"])
    assert out.read_text(encoding="utf-8").startswith(
        "student,status"
    )  # the old file, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "g.csv"
    ]  # no temporary file left


def test_the_module_entry_point_answers_help():
    result = subprocess.run(
        [sys.executable, "-m", "transformer_lib.grading", "grade", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert (
        result.returncode == 0
        and "--assignment" in result.stdout
        and "--timeout" in result.stdout
    )
