"""Tests of the assignments: instructor notebooks, the student-version generator, the committed
student notebooks (up to date, no solution inside), and what the checks say about both versions."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from transformer_lib.assignments import (
    CODE_STUB,
    MarkerError,
    build,
    main,
    make_student,
    strip_regions,
)
from transformer_lib.grading import TASKS
from transformer_lib.grading.batch import grade_namespace

ROOT = Path(__file__).resolve().parents[1]
INSTRUCTOR = ROOT / "assignments" / "instructor"
STUDENT = ROOT / "assignments" / "student"
NOTEBOOKS = sorted(p.name for p in INSTRUCTOR.glob("*.ipynb"))


def test_there_are_at_least_four_assignments_covering_the_tasks():
    assert len(NOTEBOOKS) >= 4
    tasks = set()
    for name in NOTEBOOKS:
        nb = nbformat.read(INSTRUCTOR / name, as_version=4)
        tasks.update(nb.metadata["transformer_lib"]["tasks"])
    assert {"attention", "masks", "multihead", "loss"} <= tasks <= set(TASKS)


def test_committed_student_notebooks_are_up_to_date():
    states = build(INSTRUCTOR, STUDENT, check=True, log=None)
    stale = {name: state for name, state in states.items() if state != "unchanged"}
    assert not stale, (f"student notebooks out of date: {stale}; run "
                       f"`python -m transformer_lib.assignments build --force` and commit them")


def _run_and_grade(folder, name) -> dict:
    """Execute a notebook's code (all of it, check cells included, without the Colab cell) and
    grade the namespace it leaves: {task: {"score", "total", "feedback", ...}}."""
    nb = nbformat.read(folder / name, as_version=4)
    code = "\n\n".join(c.source for c in nb.cells if c.cell_type == "code"
                        and not c.source.startswith("# Colab setup"))
    namespace: dict = {}
    exec(compile(code, name, "exec"), namespace)  # nothing may raise at top level
    return grade_namespace(namespace, nb.metadata["transformer_lib"]["tasks"])


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_instructor_solutions_score_full_marks(name):
    graded = _run_and_grade(INSTRUCTOR, name)
    assert graded and all(info["score"] == 1.0 for info in graded.values()), graded


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_untouched_student_notebooks_run_and_score_zero(name):
    graded = _run_and_grade(STUDENT, name)
    assert graded and all(info["score"] == 0.0 and info["total"] > 0 for info in graded.values())
    assert all("not implemented yet" in info["feedback"] for info in graded.values())


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_student_notebooks_hold_no_solution_and_no_output(name):
    instructor = nbformat.read(INSTRUCTOR / name, as_version=4)
    student = nbformat.read(STUDENT / name, as_version=4)
    assert len(instructor.cells) == len(student.cells)
    student_text = "\n".join(c.source for c in student.cells)
    assert "### BEGIN SOLUTION" not in student_text and "### END SOLUTION" not in student_text
    solution_lines = []
    for cell in instructor.cells:
        inside = False
        for line in cell.source.splitlines():
            if line.strip() == "### BEGIN SOLUTION":
                inside = True
            elif line.strip() == "### END SOLUTION":
                inside = False
            elif inside and len(line.strip()) > 12:
                solution_lines.append(line.strip())
    assert solution_lines
    student_lines = {line.strip() for line in student_text.splitlines()}
    leaked = [line for line in solution_lines if line in student_lines]
    assert not leaked, leaked
    stubs = [line for c in student.cells if c.cell_type == "code" for line in c.source.splitlines()
             if line.strip() == CODE_STUB[1]]
    assert len(stubs) == sum(c.source.count("### BEGIN SOLUTION") for c in instructor.cells)
    for cell in student.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    # The instructor notebooks are committed executed: every check cell shows its report.
    for cell in instructor.cells:
        if cell.cell_type == "code" and cell.source.startswith("check_"):
            assert "all passed" in str(cell.outputs), f"{name}: {cell.source} has no passing output"


@pytest.mark.parametrize("folder", [INSTRUCTOR, STUDENT])
def test_notebooks_have_the_colab_cell_and_nbgrader_metadata(folder):
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "colab_cell.py"), "check",
                             *sorted(str(p) for p in folder.glob("*.ipynb"))],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    for path in folder.glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        solution_cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
        ids = [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if "nbgrader" in c.metadata]
        assert solution_cells and len(ids) == len(set(ids))


# ------------------------------------------------------------------------------------------------
# The generator
# ------------------------------------------------------------------------------------------------
def test_strip_regions_keeps_indentation_and_drops_hidden_tests():
    source = ("def f(x):\n    \"\"\"Doc.\"\"\"\n    ### BEGIN SOLUTION\n    y = x + 1\n    return y\n"
              "    ### END SOLUTION\n### BEGIN HIDDEN TESTS\nassert f(1) == 2\n### END HIDDEN TESTS\n"
              "print('kept')")
    assert strip_regions(source) == ("def f(x):\n    \"\"\"Doc.\"\"\"\n    # YOUR CODE HERE\n"
                                     "    raise NotImplementedError()\nprint('kept')")
    markdown = "Why?\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION"
    assert strip_regions(markdown, "markdown") == "Why?\nYOUR ANSWER HERE"


@pytest.mark.parametrize("source", [
    "### BEGIN SOLUTION\nx = 1",
    "x = 1\n### END SOLUTION",
    "### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n### END SOLUTION",
    "### BEGIN HIDDEN TESTS\n### END SOLUTION",
])
def test_unbalanced_markers_are_rejected(source):
    with pytest.raises(MarkerError):
        strip_regions(source)


def _instructor_folder(tmp_path):
    src = tmp_path / "instructor"
    src.mkdir()
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION")
    cell.outputs = [nbformat.v4.new_output("stream", text="secret output\n")]
    cell.execution_count = 3
    nb.cells = [cell]
    nbformat.write(nb, src / "a.ipynb")
    return src


def test_build_refuses_to_overwrite_edited_files_unless_forced(tmp_path):
    src, dest = _instructor_folder(tmp_path), tmp_path / "student"
    assert build(src, dest, log=None) == {"a.ipynb": "created"}
    made = (dest / "a.ipynb").read_text()
    assert "return 1" not in made and "secret output" not in made and "NotImplementedError" in made
    assert build(src, dest, log=None) == {"a.ipynb": "unchanged"}
    edited = made.replace("raise NotImplementedError()", "return 1  # a student's answer")
    (dest / "a.ipynb").write_text(edited)
    assert build(src, dest, log=None) == {"a.ipynb": "refused"}
    assert (dest / "a.ipynb").read_text() == edited  # untouched
    assert build(src, dest, check=True, log=None) == {"a.ipynb": "stale"}
    assert main(["build", "--source", str(src), "--dest", str(dest)]) == 1
    assert (dest / "a.ipynb").read_text() == edited
    assert main(["build", "--source", str(src), "--dest", str(dest), "--force"]) == 0
    assert (dest / "a.ipynb").read_text() == made
    assert main(["build", "--source", str(src), "--dest", str(dest), "--check"]) == 0


def test_build_reports_a_missing_folder(tmp_path, capsys):
    assert main(["build", "--source", str(tmp_path / "nope"), "--dest", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_make_student_does_not_modify_its_input():
    nb = nbformat.read(INSTRUCTOR / NOTEBOOKS[0], as_version=4)
    before = nbformat.writes(nb)
    make_student(nb)
    assert nbformat.writes(nb) == before


def test_module_entry_point_runs():
    result = subprocess.run([sys.executable, "-m", "transformer_lib.assignments", "build", "--check",
                             "--source", str(INSTRUCTOR), "--dest", str(STUDENT)],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("unchanged") == len(NOTEBOOKS)
