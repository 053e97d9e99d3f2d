"""Tests of the assignments: instructor notebooks, the student-version generator, the committed
student notebooks (up to date, no solution inside), and what the checks say about both versions."""
from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import transformer_lib

from transformer_lib.assignments import (
    CODE_STUB,
    MarkerError,
    build,
    main,
    make_student,
    strip_regions,
)
from transformer_grader import ASSIGNMENTS, TASKS
from transformer_grader.runner.guard import resolve
from transformer_grader.nbgrader import points
from transformer_grader.engine.verdict import grade_namespace

ROOT = Path(__file__).resolve().parents[1]
INSTRUCTOR = ROOT / "assignments" / "instructor"
STUDENT = ROOT / "assignments" / "student"
NOTEBOOKS = sorted(p.name for p in INSTRUCTOR.glob("*.ipynb"))


def test_the_grader_s_assignment_list_is_the_instructor_notebooks():
    """Batch grading takes each assignment's tasks from ASSIGNMENTS (never from a submission's
    metadata): it must say what the instructor notebooks say, and cover every task."""
    assert sorted(ASSIGNMENTS) == [name[:-len(".ipynb")] for name in NOTEBOOKS]
    for name in NOTEBOOKS:
        nb = nbformat.read(INSTRUCTOR / name, as_version=4)
        assert tuple(nb.metadata["transformer_lib"]["tasks"]) == ASSIGNMENTS[name[:-6]], name
    assert {t for tasks in ASSIGNMENTS.values() for t in tasks} == set(TASKS)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_setup_cell_hands_out_no_reference_of_the_task(name):
    """The locked setup cell imports the checks and, at most, library pieces the task allows."""
    nb = nbformat.read(INSTRUCTOR / name, as_version=4)
    setup = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "setup")
    assert "import transformer_lib as tl" not in setup.source and "tl." not in setup.source
    banned = [resolve(d) for t in ASSIGNMENTS[name[:-6]] for d in TASKS[t].banned]
    banned_modules = {b.__name__ for b in banned if isinstance(b, type(transformer_lib))}
    for line in setup.source.splitlines():
        if line.startswith("from transformer_lib import "):
            for imported in line.split(" import ")[1].split(","):
                obj = getattr(transformer_lib, imported.strip())
                assert obj.__module__ not in banned_modules, (name, imported)
                assert obj not in banned, (name, imported)


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
    return grade_namespace(namespace, ASSIGNMENTS[name[:-len(".ipynb")]])


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_instructor_solutions_score_full_marks(name):
    graded = _run_and_grade(INSTRUCTOR, name)
    assert graded and all(info["score"] == 1.0 for info in graded.values()), graded


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_untouched_student_notebooks_run_and_score_zero(name):
    graded = _run_and_grade(STUDENT, name)
    assert graded and all(info["score"] == 0.0 and info["total"] > 0 for info in graded.values())
    assert all("not implemented yet" in info["feedback"] for info in graded.values())


def _solution_lines(nb) -> list[str]:
    """The lines between the solution markers (long enough to be telling)."""
    found = []
    for cell in nb.cells:
        inside = False
        for line in cell.source.splitlines():
            if line.strip() == "### BEGIN SOLUTION":
                inside = True
            elif line.strip() == "### END SOLUTION":
                inside = False
            elif inside and len(line.strip()) > 12:
                found.append(line.strip())
    return found


def _assert_no_solution(instructor, student) -> None:
    assert len(instructor.cells) == len(student.cells)
    student_text = "\n".join(c.source for c in student.cells)
    assert "### BEGIN SOLUTION" not in student_text and "### END SOLUTION" not in student_text
    solution_lines = _solution_lines(instructor)
    assert solution_lines
    student_lines = {line.strip() for line in student_text.splitlines()}
    leaked = [line for line in solution_lines if line in student_lines]
    assert not leaked, leaked
    for cell in student.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], cell.source


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_student_notebooks_hold_no_solution_and_no_output(name):
    instructor = nbformat.read(INSTRUCTOR / name, as_version=4)
    student = nbformat.read(STUDENT / name, as_version=4)
    _assert_no_solution(instructor, student)
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


# ------------------------------------------------------------------------------------------------
# nbgrader
# ------------------------------------------------------------------------------------------------
def test_nbgrader_generate_assignment_accepts_the_instructor_notebooks(tmp_path):
    """The real nbgrader makes the student versions of our instructor notebooks (in a course
    folder of its own): they hold no solution, no output, and the same cells as our build."""
    course = tmp_path / "course"
    source = course / "source" / "ps1"
    source.mkdir(parents=True)
    for name in NOTEBOOKS:
        shutil.copy(INSTRUCTOR / name, source / name)
    (course / "nbgrader_config.py").write_text(
        'c = get_config()\nc.CourseDirectory.course_id = "tested-transformer"\n', encoding="utf-8")
    # nbgrader runs the `alembic` command: it must be on PATH (it is in an activated venv).
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent),
                                                  os.environ.get("PATH", "")]))
    result = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", "ps1"],
                            cwd=course, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for name in NOTEBOOKS:
        released = nbformat.read(course / "release" / "ps1" / name, as_version=4)
        instructor = nbformat.read(INSTRUCTOR / name, as_version=4)
        _assert_no_solution(instructor, released)
        ours = nbformat.read(STUDENT / name, as_version=4)
        assert [c.source for c in released.cells] == [c.source for c in ours.cells], name


def test_nbgrader_autograder_cells_get_points(capsys):
    """The documented autograder test cell: points(task, globals(), out_of=...) evaluates to the
    points (nbgrader's partial credit), prints the feedback and writes nothing to stderr."""
    nb = nbformat.read(INSTRUCTOR / "04_loss.ipynb", as_version=4)
    namespace: dict = {}
    code = "\n\n".join(c.source for c in nb.cells if c.cell_type == "code"
                        and not c.source.startswith(("# Colab setup", "check_")))
    exec(compile(code, "04_loss", "exec"), namespace)
    assert points("loss", namespace, out_of=10) == 10.0
    out = capsys.readouterr()
    assert "all 11 cases passed" in out.out and out.err == ""
    namespace["masked_cross_entropy"] = transformer_lib.masked_cross_entropy  # borrowed
    assert points("loss", namespace, out_of=10) == 0.0
    with pytest.raises(ValueError, match="task must be one of"):
        points("nothing", namespace)
