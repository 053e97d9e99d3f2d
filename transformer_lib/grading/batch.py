"""Batch grading: run every submitted notebook in a fresh kernel, grade it, write one CSV row each.

How a notebook is graded:
1. It is read with nbformat (a file that cannot be read or validated is reported as ``malformed``).
2. A fresh Jupyter kernel starts in the notebook's folder and imports torch and transformer_lib
   (a warm-up, not timed: it depends on the machine's load, not on the student's code). Then the
   notebook's code cells run under one deadline for all of them (``timeout`` seconds). Errors in
   cells do not stop the run (like nbgrader's autograder), so functions defined after a broken
   cell can still be graded; the first error is reported in the ``status`` column as
   ``crashed: ...``. A notebook that does not finish in time is interrupted and reported as
   ``timed out``; its kernel is shut down.
3. In the same kernel, a grading cell looks up the graded names (``TASKS``) in the notebook's
   namespace, runs the checks on them and writes the results as JSON to a temporary file (a file,
   not stdout, so that a notebook that redirects or silences printing cannot break grading).

Which tasks a notebook is graded on: the tasks listed in its metadata
``metadata["transformer_lib"]["tasks"]`` (set in the instructor notebooks, kept in the student ones),
otherwise every task whose names it defines. A task it should have but whose names are missing
scores 0 with a message saying which name is missing.

Students are named after the files: ``SUBMISSIONS/alice.ipynb`` is ``alice``; a sub-folder
``SUBMISSIONS/alice/`` holding several notebooks is one student, ``alice``, graded on all of them.
"""
from __future__ import annotations

import asyncio
import csv
import json
import math
import os
import tempfile
import time
from pathlib import Path

from . import TASKS

COLUMNS = ["student", "status", *TASKS, "total", "max_total", "feedback"]

_GRADING_CELL = '''\
import json as _tl_json
from transformer_lib.grading.batch import grade_namespace as _tl_grade_namespace
with open({path!r}, "w", encoding="utf-8") as _tl_file:
    _tl_json.dump(_tl_grade_namespace(globals(), {tasks!r}), _tl_file)
'''


def grade_namespace(namespace: dict, tasks=None) -> dict:
    """Grade the functions found in ``namespace``: {task: {"score", "passed", "total", "feedback"}}.

    ``tasks``: the tasks to grade (None: every task whose names appear in the namespace).
    """
    import transformer_lib as tl

    if tasks is None:
        tasks = [t for t, (names, _) in TASKS.items() if any(n in namespace for n in names)]
    out = {}
    for task in tasks:
        names, check = TASKS[task]
        present = [n for n in names if n in namespace]
        if not present:
            out[task] = {"score": 0.0, "passed": 0, "total": 0,
                         "feedback": f"{task}: not found: define {' / '.join(names)} in the notebook."}
            continue
        borrowed = [n for n in present if namespace[n] is getattr(tl, n, None)]
        if borrowed:
            out[task] = {"score": 0.0, "passed": 0, "total": 0,
                         "feedback": f"{task}: {', '.join(borrowed)} is the library's own "
                                     f"implementation (transformer_lib.{borrowed[0]}); write your own."}
            continue
        try:
            result = check(namespace)
        except Exception as error:  # a check must not crash; if it does, say so
            out[task] = {"score": 0.0, "passed": 0, "total": 0,
                         "feedback": f"{task}: the checker failed: {type(error).__name__}: {error}"}
            continue
        missing = [n for n in names if n not in namespace]
        feedback = result.feedback()
        if missing:
            feedback += f"\n(not found, not graded: {', '.join(missing)})"
        out[task] = {"score": result.score, "passed": result.passed, "total": result.total,
                     "feedback": feedback}
    return out


def _expected_tasks(nb) -> list[str] | None:
    meta = nb.metadata.get("transformer_lib", {})
    tasks = meta.get("tasks") if isinstance(meta, dict) else None
    if isinstance(tasks, list) and tasks and all(t in TASKS for t in tasks):
        return list(tasks)
    return None


def _seconds(value: float) -> int:
    """nbclient's timeouts are whole seconds."""
    return max(1, math.ceil(value))


def _first_line(source: str) -> str:
    lines = [line for line in source.splitlines() if line.strip()]
    return lines[0].strip()[:80] if lines else ""


_WARM_UP = "import torch, transformer_lib.grading  # warm-up by the grader, not timed"


async def _run_notebook(path: Path, timeout: float, kernel_name: str, startup_timeout: float) -> dict:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    try:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    except Exception as error:
        first = str(error).splitlines()[0][:200] if str(error) else ""
        return {"status": f"malformed: {type(error).__name__}: {first}", "tasks": {}}
    tasks = _expected_tasks(nb)
    # Cell numbers in messages are the notebook's own (0-based); the grader's two cells (warm-up
    # first, grading last) are added around them.
    code_cells = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    with tempfile.TemporaryDirectory() as tmp:
        result_path = os.path.join(tmp, "result.json")
        warm_up = nbformat.v4.new_code_cell(_WARM_UP)
        grading = nbformat.v4.new_code_cell(_GRADING_CELL.format(path=result_path, tasks=tasks))
        nb.cells = [warm_up, *nb.cells, grading]
        client = NotebookClient(nb, timeout=_seconds(timeout), kernel_name=kernel_name, allow_errors=True,
                                startup_timeout=_seconds(startup_timeout),
                                resources={"metadata": {"path": str(path.parent)}})
        status = "ok"
        try:
            async with client.async_setup_kernel():
                # Kernel start and the library import depend on the machine's load, not on the
                # student's code: they are done first and not counted against the timeout.
                client.timeout = _seconds(max(startup_timeout, 60.0))
                await client.async_execute_cell(warm_up, 0)
                deadline = time.monotonic() + timeout
                for index, cell in code_cells:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return {"status": f"timed out: still running after {timeout:g} s "
                                          f"(before cell {index})", "tasks": {}}
                    client.timeout = _seconds(remaining)
                    try:
                        await client.async_execute_cell(cell, index + 1)
                    except CellTimeoutError:
                        return {"status": f"timed out: still running after {timeout:g} s in cell "
                                          f"{index} ({_first_line(cell.source)})", "tasks": {}}
                    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
                    if errors and status == "ok":
                        err = errors[0]
                        status = (f"crashed: {err.get('ename')}: {str(err.get('evalue'))[:150]} "
                                  f"in cell {index} ({_first_line(cell.source)})")
                client.timeout = _seconds(max(timeout, 30.0))  # the checks themselves
                try:
                    await client.async_execute_cell(grading, len(nb.cells) - 1)
                except CellTimeoutError:
                    return {"status": f"timed out: the checks of your functions did not finish in "
                                      f"{max(timeout, 30.0):g} s (an endless loop?)", "tasks": {}}
        except DeadKernelError as error:
            return {"status": f"crashed: the kernel died ({str(error)[:150]})", "tasks": {}}
        except Exception as error:
            return {"status": f"error while grading: {type(error).__name__}: {str(error)[:150]}",
                    "tasks": {}}
        try:
            with open(result_path, encoding="utf-8") as handle:
                graded = json.load(handle)
        except (OSError, ValueError):
            err = next((o for o in grading.get("outputs", []) if o.get("output_type") == "error"), None)
            why = f"{err.get('ename')}: {err.get('evalue')}" if err else "no result"
            return {"status": f"crashed: grading failed ({why[:200]})", "tasks": {}}
    if tasks is None and not graded and status == "ok":
        status = "ok (no graded function found)"
    return {"status": status, "tasks": graded}


def run_notebook(path, timeout: float = 60.0, kernel_name: str = "python3",
                 startup_timeout: float = 120.0) -> dict:
    """Execute one notebook in a fresh kernel and grade it; never raises.

    Returns {"status": "ok" | "crashed: ..." | "timed out: ..." | "malformed: ...",
    "tasks": {task: {"score", "passed", "total", "feedback"}}}.
    """
    return asyncio.run(_run_notebook(Path(path), timeout, kernel_name, startup_timeout))


def _students(folder: Path) -> list[tuple[str, list[Path]]]:
    entries = []
    for item in sorted(folder.iterdir()):
        if item.name.startswith("."):
            continue
        if item.is_file() and item.suffix == ".ipynb":
            entries.append((item.stem, [item]))
        elif item.is_dir():
            notebooks = sorted(p for p in item.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
            if notebooks:
                entries.append((item.name, notebooks))
    return entries


def grade_folder(folder, out=None, timeout: float = 60.0, kernel_name: str = "python3",
                 jobs: int = 2, log=print) -> list[dict]:
    """Grade every student in ``folder`` (``jobs`` notebooks at a time, each in its own kernel);
    write the CSV to ``out`` (if given); return the rows, one per student, sorted by name."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"submissions folder {str(folder)!r} does not exist or is not a folder")
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an int >= 1, got {jobs!r}")
    students = _students(folder)
    work = [(student, nb_path) for student, notebooks in students for nb_path in notebooks]

    async def run_all():
        gate = asyncio.Semaphore(jobs)

        async def one(student, nb_path):
            async with gate:
                started = time.monotonic()
                outcome = await _run_notebook(nb_path, timeout, kernel_name, 120.0)
                if log:
                    log(f"{student} ({nb_path.name}): {outcome['status']} "
                        f"[{time.monotonic() - started:.1f} s]")
                return outcome

        return await asyncio.gather(*(one(s, p) for s, p in work))

    outcomes = dict(zip(work, asyncio.run(run_all()))) if work else {}
    rows = []
    for student, notebooks in students:
        statuses, scores, feedback = [], {}, []
        for nb_path in notebooks:
            outcome = outcomes[(student, nb_path)]
            prefix = f"{nb_path.name}: " if len(notebooks) > 1 else ""
            statuses.append(prefix + outcome["status"])
            if outcome["status"] != "ok":
                feedback.append(prefix + outcome["status"])
            for task, info in outcome["tasks"].items():
                if task not in scores or info["score"] > scores[task]:
                    scores[task] = info["score"]
                feedback.append(info["feedback"])
        row = {"student": student, "status": "; ".join(statuses)}
        for task in TASKS:
            row[task] = f"{scores[task]:.3f}" if task in scores else ""
        row["total"] = f"{sum(scores.values()):.3f}"
        row["max_total"] = str(len(scores))
        row["feedback"] = "\n".join(feedback)
        rows.append(row)
    if out is not None:
        with open(out, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    return rows
