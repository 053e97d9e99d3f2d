"""Helpers for the batch-grading tests: classes of made-up students written to a folder,
snapshots of files that must not change, and the processes a batch must not leave.

Not a test module: ``test_grading_batch.py`` and ``test_grading_attacks.py`` import it.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import nbformat

from conftest import HONEST_ATTENTION, need
from transformer_grader.engine.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[1]
STUDENT = ROOT / "assignments" / "student"
INSTRUCTOR = ROOT / "assignments" / "instructor"
LIBRARY = ROOT / "transformer_lib"


def need_sandbox() -> None:
    """Skip (fail in CI) where bubblewrap cannot run."""
    need(
        Sandbox.problem_without_trying() is None,
        f"no sandbox here: {Sandbox.problem_without_trying()}",
    )


def instructor(assignment: str = "01_attention"):
    return nbformat.read(INSTRUCTOR / f"{assignment}.ipynb", as_version=4)


def student(*cells: str, assignment: str = "01_attention", tasks=None):
    """The untouched student version of ``assignment`` with ``cells`` appended."""
    nb = nbformat.read(STUDENT / f"{assignment}.ipynb", as_version=4)
    nb = copy.deepcopy(nb)
    nb.cells += [nbformat.v4.new_code_cell(c) for c in cells]
    if tasks is not None:
        nb.metadata["transformer_lib"]["tasks"] = tasks
    return nb


def buggy():
    """Attention without the scale: a real student's partly right work."""
    return student(HONEST_ATTENTION.replace(" / math.sqrt(q.size(-1))", ""))


def write(folder: Path, files: dict) -> None:
    """``files``: relative path -> a notebook (written as one) or bytes."""
    for relative, content in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            nbformat.write(content, path)


def snapshot(*roots: Path) -> dict:
    """(size, mtime, ctime, inode) of every file and folder under ``roots``, caches
    included: any write, rename or ``chmod`` shows."""
    found = {}
    for root in roots:
        for folder, dirs, files in os.walk(root):
            for name in dirs + files:
                path = os.path.join(folder, name)
                st = os.lstat(path)
                found[path] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    return found


def processes(marker: str) -> list[str]:
    """Command lines of running processes that contain ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                line = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if marker in line:
            found.append(f"{pid}: {line[:200]}")
    return found


def grader_processes() -> list[str]:
    """Sandboxes and kernels of a grading batch (their command lines name the batch's
    private folders, ``tt-grade-...``)."""
    return processes("tt-grade-")


def grade_args(folder, out, *options, assignment: str = "01_attention") -> list[str]:
    """The arguments of ``python -m transformer_grader`` that grade ``folder`` on
    ``assignment`` into ``out``, then ``options``."""
    return [
        "grade",
        str(folder),
        "--assignment",
        assignment,
        "--out",
        str(out),
        *options,
    ]


def run_cli(args: list[str], env: dict | None = None, timeout: float = 600):
    """``python -m transformer_grader ARGS`` in a child process; returns the
    completed process (``returncode``, ``stdout``, ``stderr``) and the grader's own peak
    memory in MB (its ``VmHWM``, read while it runs; kernels not included)."""
    import tempfile
    import time

    out_file, err_file = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    child = subprocess.Popen(
        [sys.executable, "-m", "transformer_grader", *args],
        stdout=out_file,
        stderr=err_file,
        text=True,
        env=env,
        cwd=ROOT,
    )
    peak, started = 0, time.monotonic()
    while child.poll() is None:
        try:
            with open(f"/proc/{child.pid}/status") as handle:
                for line in handle:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
        except OSError:
            pass
        if time.monotonic() - started > timeout:
            child.kill()
        time.sleep(0.05)
    child.wait()
    out_file.seek(0)
    err_file.seek(0)
    done = subprocess.CompletedProcess(
        child.args, child.returncode, out_file.read(), err_file.read()
    )
    return done, peak / 1024


def grade_restricted(nb, tasks, seed: int = 5) -> dict:
    """Grade ``nb`` on ``tasks`` in this process the way the cases interpreter does
    (``runner/serve.py``): its graded definitions compiled as restricted Python and run
    through the guards, then every case, then the judge. Fast (no sandbox, no kernel):
    for the rules of graded code. Returns {task: verdict} and "defined": the
    definitions' errors."""
    from transformer_grader.engine import definitions, source_check
    from transformer_grader.engine.verdict import judge_task, plan_item
    from transformer_grader.runner.plan import run_task
    from transformer_grader.runner.restricted import Guards, compile_graded, library_modules
    from transformer_grader.runner.serve import define
    from transformer_grader.tasks import TASKS

    source = definitions.Source(source_check.code_cells(nb))
    names = [n for t in tasks for n in TASKS[t].names]
    banned = sorted({b for t in tasks for b in TASKS[t].banned})
    guards = Guards(banned, library_modules(banned))
    namespace = guards.namespace()
    out = {"defined": define(source.definitions(names), namespace, compile_graded)}
    for task in tasks:
        cases = TASKS[task].make_cases(TASKS[task].names, seed)
        entry = run_task(plan_item(TASKS[task], cases), namespace)
        entry["hits"] += [h for h in guards.hits if h not in entry["hits"]]
        entry["refused"] = [f"{why} ({where})" for why, where in guards.refused]
        out[task] = judge_task(TASKS[task], cases, entry)
        if out["defined"]:  # as submission._grade_group says it
            out[task]["feedback"] += "\n(while defining: " + "; ".join(out["defined"][:3]) + ")"
    return out
