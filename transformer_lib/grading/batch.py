"""Batch grading of a class: every submitted notebook in its own kernel, one CSV row per
student.

Layouts of the submissions folder:

- one notebook per student, ``SUBMISSIONS/alice.ipynb``: the student is ``alice``; every
  notebook is graded on the one assignment given with ``--assignment``;
- one folder per student, ``SUBMISSIONS/alice/**/01_attention.ipynb`` (nbgrader's
  ``submitted/`` layout too): each notebook is graded on the assignment its file is
  named after. The class is expected to hand in every assignment found (or those given
  with ``--assignment``); a missing one scores 0.

The tasks of an assignment come from ``tasks.ASSIGNMENTS`` (the instructor's side),
never from the notebook: its metadata is the student's to edit. Before any kernel
starts, the arguments, the output path and the folder are checked, and every notebook is
read into memory: grading uses those copies, so a submission that overwrites a
classmate's file changes nothing but the file (and is flagged: see ``watch``). The CSV
is written at the end, atomically (a temporary file renamed over the target), and a
summary is printed.
"""

from __future__ import annotations

import asyncio
import csv
import math
import os
import tempfile
import time
from pathlib import Path

from . import watch
from .submission import grade_notebook
from .tasks import ASSIGNMENTS

FIXED_COLUMNS = ("student", "status")
END_COLUMNS = ("total", "max_total", "flags", "feedback")


# --------------------------------------------------------------------------------------
# Checking the arguments, before any work
# --------------------------------------------------------------------------------------
def check_timeout(timeout) -> float:
    """A number of seconds > 0 (``ValueError`` otherwise, naming the argument)."""
    try:
        value = float(timeout)
    except (TypeError, ValueError):
        raise ValueError(
            f"timeout must be a number of seconds > 0, got {timeout!r}"
        ) from None
    if isinstance(timeout, bool) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
    return value


def check_jobs(jobs) -> int:
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an int >= 1, got {jobs!r}")
    return jobs


def check_out(out) -> Path:
    """The CSV path must be a file we can create: its folder exists and is writable."""
    path = Path(out)
    if path.is_dir():
        raise ValueError(
            f"--out {str(path)!r} is a folder; give a file name such as grades.csv"
        )
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ValueError(
            f"--out {str(path)!r}: the folder {str(folder)!r} does not exist"
        )
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".grades-check-"):
            pass
    except OSError as error:
        raise ValueError(
            f"--out {str(path)!r}: cannot write in {str(folder)!r} "
            f"({error.strerror or error})"
        ) from None
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"--out {str(path)!r} exists and is not writable")
    return path


def check_assignments(assignments) -> list[str]:
    names = list(assignments or [])
    unknown = [a for a in names if a not in ASSIGNMENTS]
    if unknown:
        raise ValueError(
            f"unknown assignment {unknown[0]!r}; the assignments are "
            f"{', '.join(ASSIGNMENTS)}"
        )
    return names


# --------------------------------------------------------------------------------------
# Who handed in what
# --------------------------------------------------------------------------------------
def collect(folder: Path, assignments: list[str]):
    """[(student, [(assignment, path)])], the expected assignments, and notes on ignored
    files."""
    students, notes = [], []
    flat = sorted(
        p
        for p in folder.iterdir()
        if p.is_file() and p.suffix == ".ipynb" and not p.name.startswith(".")
    )
    if flat and len(assignments) != 1:
        raise ValueError(
            f"{str(folder)!r} holds one notebook per student ({flat[0].name}, ...): say"
            " which assignment they are with --assignment (one of"
            f" {', '.join(ASSIGNMENTS)})"
        )
    for path in flat:
        students.append((path.stem, [(assignments[0], path)]))
    for sub in sorted(
        p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")
    ):
        notebooks = sorted(
            p for p in sub.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts
        )
        matched = [(p.stem, p) for p in notebooks if p.stem in ASSIGNMENTS]
        if not matched and len(assignments) == 1 and len(notebooks) == 1:
            matched = [
                (assignments[0], notebooks[0])
            ]  # alice/whatever.ipynb, one assignment
        for p in notebooks:
            if all(p != q for _, q in matched):
                notes.append(
                    f"{sub.name}: ignored {p.relative_to(sub)} (not named after an "
                    "assignment)"
                )
        if assignments:
            matched = [(a, p) for a, p in matched if a in assignments]
        if matched or notebooks:
            students.append((sub.name, matched))
    expected = assignments or sorted({a for _, work in students for a, _ in work})
    if not any(work for _, work in students):
        raise ValueError(f"no notebooks to grade in {str(folder)!r}")
    return students, expected, notes


# --------------------------------------------------------------------------------------
# Grading
# --------------------------------------------------------------------------------------
def grade_folder(
    folder,
    out=None,
    timeout: float = 60.0,
    kernel_name: str = "python3",
    jobs: int = 2,
    assignments=None,
    seed: int | None = None,
    log=print,
) -> list[dict]:
    """Grade every student in ``folder`` (``jobs`` notebooks at a time, each in its own
    kernel); write the CSV to ``out`` (if given); return the rows, one per student,
    sorted by name.

    Everything is checked before the first kernel starts: ``ValueError`` for a missing
    folder, an empty one, a bad ``timeout``/``jobs``/``out``/``assignments``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(
            f"submissions folder {str(folder)!r} does not exist or is not a folder"
        )
    timeout, jobs = check_timeout(timeout), check_jobs(jobs)
    out = check_out(out) if out is not None else None
    students, expected, notes = collect(folder, check_assignments(assignments))
    for note in notes:
        if log:
            log(note)
    work = [
        (student, assignment, path)
        for student, items in students
        for assignment, path in items
    ]
    sources = {
        path: path.read_bytes() for _, _, path in work
    }  # graded from these copies
    started = time.monotonic()
    outcomes = asyncio.run(
        _grade_all(work, sources, folder, out, timeout, kernel_name, jobs, seed, log)
    )
    tasks = [t for a in expected for t in ASSIGNMENTS[a]]
    rows = [_row(student, items, expected, outcomes) for student, items in students]
    if out is not None:
        write_csv(out, rows, tasks)
    if log:
        log(summary(rows, tasks, len(work), time.monotonic() - started))
    return rows


async def _grade_all(work, sources, folder, out, timeout, kernel_name, jobs, seed, log):
    gate = asyncio.Semaphore(jobs)
    roots, shallow = watch.watched_places(folder)
    ignore = [str(out)] if out is not None else []
    state = {
        "last": watch.snapshot(roots, shallow, ignore),
        "active": set(),
        "since": set(),
    }

    def look(key) -> None:
        """Files changed since the last look: blame the runs active meanwhile."""
        now = watch.snapshot(roots, shallow, ignore)
        found = watch.changes(state["last"], now)
        state["last"] = now
        blamed, state["since"] = state["since"] | {key}, set(state["active"])
        if found:
            shown = "; ".join(found[:5]) + (
                f" and {len(found) - 5} more" if len(found) > 5 else ""
            )
            for other in blamed:
                others = sorted(f"{s} ({p.name})" for s, _, p in blamed - {other})
                company = (
                    f" (running at the same time: {', '.join(others)})"
                    if others
                    else ""
                )
                flags.setdefault(other, []).append(
                    f"files outside its private folder changed while it ran{company}:"
                    f" {shown}"
                )

    outcomes, flags = {}, {}

    async def one(key):
        student, assignment, path = key
        async with gate:
            state["active"].add(key)
            state["since"].add(key)
            begun = time.monotonic()
            outcome = await grade_notebook(
                sources[path],
                path.name,
                ASSIGNMENTS[assignment],
                timeout=timeout,
                kernel_name=kernel_name,
                seed=seed,
                watched=[folder],
            )
            state["active"].discard(key)
            outcomes[key] = outcome
            look(key)
            if log:
                log(
                    f"{student} ({path.name}): {outcome['status']} "
                    f"[{time.monotonic() - begun:.1f} s]"
                )

    await asyncio.gather(*(one(key) for key in work))
    for key, found in flags.items():
        outcomes[key]["flags"] += found
    return outcomes


def _row(student, items, expected, outcomes) -> dict:
    statuses, scores, feedback, flags = [], {}, [], []
    several = len(expected) > 1 or len(items) > 1
    for assignment in expected:
        mine = [(a, p) for a, p in items if a == assignment]
        if not mine:
            statuses.append(f"{assignment}: not submitted")
            for task in ASSIGNMENTS[assignment]:
                scores.setdefault(task, 0.0)
            feedback.append(
                f"{assignment}: not submitted (0 on"
                f" {', '.join(ASSIGNMENTS[assignment])})"
            )
            continue
        for a, path in mine:
            outcome = outcomes[(student, a, path)]
            prefix = f"{path.name}: " if several else ""
            statuses.append(prefix + outcome["status"])
            if outcome["status"] != "ok":
                feedback.append(prefix + outcome["status"])
            flags += [prefix + f for f in outcome["flags"]]
            for task, verdict in outcome["tasks"].items():
                if task not in scores or verdict["score"] > scores[task]:
                    scores[task] = verdict["score"]
                feedback.append(verdict["feedback"])
    row = {"student": student, "status": "; ".join(statuses)}
    for task, score in scores.items():
        row[task] = f"{score:.3f}"
    row["total"] = f"{sum(scores.values()):.3f}"
    row["max_total"] = str(len(scores))
    row["flags"] = "\n".join(dict.fromkeys(flags))
    row["feedback"] = "\n".join(feedback)
    return row


def write_csv(out: Path, rows, tasks) -> None:
    """Write the rows atomically: a temporary file in the same folder, renamed over
    ``out``."""
    columns = [*FIXED_COLUMNS, *tasks, *END_COLUMNS]
    handle = tempfile.NamedTemporaryFile(
        "w",
        dir=out.parent or ".",
        prefix=".grades-",
        suffix=".csv",
        delete=False,
        newline="",
        encoding="utf-8",
    )
    try:
        with handle:
            writer = csv.DictWriter(handle, fieldnames=columns, restval="")
            writer.writeheader()
            writer.writerows(rows)
        os.replace(handle.name, out)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise


def summary(rows, tasks, notebooks: int, seconds: float) -> str:
    """A few lines for the end of a run: counts, mean per task, who is flagged."""
    lines = [f"graded {len(rows)} students ({notebooks} notebooks) in {seconds:.1f} s"]
    for task in tasks:
        values = [float(r[task]) for r in rows if r.get(task)]
        if values:
            full = sum(v == 1.0 for v in values)
            lines.append(
                f"  {task:12} mean {sum(values) / len(values):.3f}, full marks {full}/"
                f"{len(values)}"
            )
    problems = [
        r["student"]
        for r in rows
        if any(
            s.split(": ", 1)[-1].startswith(
                ("crashed", "timed out", "malformed", "error", "grading")
            )
            for s in r["status"].split("; ")
        )
    ]
    if problems:
        lines.append(f"  did not run cleanly: {', '.join(problems)}")
    flagged = [r["student"] for r in rows if r["flags"]]
    lines.append(f"  flagged: {', '.join(flagged) if flagged else 'none'}")
    return "\n".join(lines)
