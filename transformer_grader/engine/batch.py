"""Batch grading of a class: every submitted notebook in its own sandboxed kernel, one
CSV row per student.

Before any kernel starts, the arguments and the output path are checked, the sandbox is
tried (``sandbox``: without one the grader refuses, unless ``sandbox=False``, which
every row then records), and every submission is read into memory by the rules of
``collect`` (the instructor's assignment list, regular files only, one notebook per
assignment and student). Grading uses those copies and never writes to the submissions
folder.

Notebooks are graded ``jobs`` at a time. A kernel that crashes, hangs, kills itself or
floods its output costs its own student only, and so does a notebook the grader cannot
even run (its row says why). With ``jobs`` > 1, a notebook that times out is graded
again at the end of the batch, alone (the machine to itself), before its row is
written: a neighbour that keeps every core busy cannot make it time out. Each student's
row is appended to ``NAME.partial.csv`` beside the output as soon as all their
notebooks are done, so an interrupted batch (Ctrl-C, SIGTERM, a crash of the machine)
leaves the rows it finished; at the end the CSV is written atomically (a temporary file
renamed over the target), the partial file is removed, and a summary is printed. On
Ctrl-C or SIGTERM every kernel is stopped, the summary says how far the batch got, and
``KeyboardInterrupt`` is raised.
"""

from __future__ import annotations

import asyncio
import csv
import math
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import disk as _disk
from . import edition as _edition
from . import watch
from .collect import collect
from .fork_servers import ForkServers
from .judge import Judges
from .sandbox import MIN_KERNEL_MEMORY_MB, Limits, Sandbox, SandboxUnavailable
from .submission import grade_notebook
from .text import FEEDBACK_CHARS, FLAG_CHARS, FLAGS, STATUS_CHARS, capped, cell, shown
from ..tasks import ASSIGNMENTS, TASKS

FIXED_COLUMNS = ("student", "status")
END_COLUMNS = ("total", "max_total", "sandbox", "flags", "feedback")
_TEXT_COLUMNS = ("student", "status", "flags", "feedback")


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


def check_limits(limits: Limits) -> Limits:
    """Limits a kernel can start in: ``ValueError`` naming the minimum otherwise."""
    if limits.memory_mb < MIN_KERNEL_MEMORY_MB:
        raise ValueError(
            f"--memory {limits.memory_mb} is too small: a graded kernel needs at least"
            f" {MIN_KERNEL_MEMORY_MB} MB (PyTorch alone takes about 1400 MB of address"
            f" space before any cell runs); the default is {Limits.memory_mb}"
        )
    return limits


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
    names = list(dict.fromkeys(assignments or []))
    if not names:
        raise ValueError(
            "name the assignments the class hands in with --assignment (one of"
            f" {', '.join(ASSIGNMENTS)}; repeat it for several): the grader expects"
            " exactly those, whatever the students' folders hold"
        )
    unknown = [a for a in names if a not in ASSIGNMENTS]
    if unknown:
        raise ValueError(
            f"unknown assignment {unknown[0]!r}; the assignments are "
            f"{', '.join(ASSIGNMENTS)}"
        )
    return names


def partial_path(out: Path) -> Path:
    """Where the rows are kept while the batch runs: ``grades.partial.csv``."""
    return out.with_name(f"{out.stem}.partial{out.suffix or '.csv'}")


# --------------------------------------------------------------------------------------
# Grading
# --------------------------------------------------------------------------------------
def grade_folder(
    folder,
    out=None,
    timeout: float = 60.0,
    jobs: int = 2,
    assignments=None,
    seed: int | None = None,
    log=print,
    sandbox: bool = True,
    limits: Limits = Limits(),
) -> list[dict]:
    """Grade every student in ``folder`` on ``assignments`` (the instructor's list) and
    write the CSV to ``out`` (if given); return the rows, one per student, sorted by
    name.

    Everything is checked before the first kernel starts: ``ValueError`` for a missing
    or empty folder, a bad ``timeout``/``jobs``/``out``/``assignments``;
    ``SandboxUnavailable`` (a ``ValueError``'s sibling: a ``RuntimeError``) if
    ``sandbox`` is True and no sandbox can run here."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(
            f"submissions folder {str(folder)!r} does not exist or is not a folder"
        )
    timeout, jobs = check_timeout(timeout), check_jobs(jobs)
    limits = check_limits(limits)
    out = check_out(out) if out is not None else None
    expected = check_assignments(assignments)
    if sandbox:
        reason = Sandbox.problem_without_trying()
        if reason:
            raise SandboxUnavailable(reason)
    students, notes = collect(folder, expected)
    for note in notes:
        if log:
            log(shown(note))
    tasks = [t for a in expected for t in ASSIGNMENTS[a]]
    root = Path(tempfile.mkdtemp(prefix="tt-grade-")).resolve()
    try:
        box = Sandbox(root, limits) if sandbox else Sandbox.unsandboxed(root, limits)
        editions = _Editions(root)
        if sandbox:
            first = ASSIGNMENTS[expected[0]][0]
            reason = box.problem(editions(_edition.library_bans(TASKS[first].banned)))
            if reason:
                raise SandboxUnavailable(reason)
        table = _Table(out, tasks) if out is not None else None
        judges = Judges(jobs)
        run = _Run(
            students, expected, folder, box, editions, timeout, seed, log, table, judges
        )
        if box.confined and sys.platform.startswith("linux"):
            # one warm parent per slot forks each notebook's cases interpreter
            run.servers = ForkServers(box)
        started = time.monotonic()
        interrupted = False
        try:
            asyncio.run(_grade_all(run, jobs))
        except (KeyboardInterrupt, asyncio.CancelledError):
            interrupted = True
        finally:
            judges.close()
            box.release_all()
        finished = [run.rows[s.name] for s in students if s.name in run.rows]
        seconds = time.monotonic() - started
        graded = len(run.outcomes)
        if interrupted:
            if log:
                log(
                    summary(finished, tasks, graded, seconds, sandbox)
                    + f"\n  INTERRUPTED: {len(finished)} of {len(students)} students"
                    " graded"
                    + (
                        f"; their rows are in {table.partial} ({out} was not written)"
                        if table
                        else ""
                    )
                )
            raise KeyboardInterrupt("grading was interrupted")
        if table is not None:
            table.finish(finished)
        if log:
            log(summary(finished, tasks, graded, seconds, sandbox))
        return finished
    finally:
        _remove(root)


def _remove(root: Path) -> None:
    _disk.remove(root)


class _Editions:
    """The student editions of a batch, built once per set of bans."""

    def __init__(self, root: Path):
        self.root, self.built = root, {}

    def __call__(self, bans) -> Path:
        key = tuple(sorted(bans))
        if key not in self.built:
            self.built[key] = _edition.build(
                self.root / f"edition-{len(self.built)}", key
            )
        return self.built[key]


@dataclass
class _Run:
    """One batch: what it grades and how, and the outcomes and rows found so far."""

    students: list
    expected: list
    folder: Path
    box: Sandbox
    editions: _Editions
    timeout: float
    seed: int | None
    log: object
    table: _Table | None
    judges: Judges
    servers: ForkServers | None = None  # None: a new interpreter per notebook's cases
    outcomes: dict = field(default_factory=dict)  # (student, assignment) -> outcome
    rows: dict = field(default_factory=dict)  # student -> row


class _Slots:
    """The kernel slots of a batch, handed to the notebooks waiting for one. A slot that
    comes free goes to a waiting notebook of the assignment it graded last, else to the
    first one waiting: the slot's warm cases servers (one per student edition,
    ``fork_servers``) then serve one assignment after another instead of starting again
    for every notebook."""

    def __init__(self, count: int):
        self.free = list(range(count))
        self.last: dict[int, str] = {}  # slot -> the assignment it graded last
        self.waiting: list = []  # [(assignment, future)], in the order they asked

    async def get(self, assignment: str) -> int:
        if self.free and not self.waiting:
            same = [s for s in self.free if self.last.get(s) == assignment]
            slot = (same or self.free)[0]
            self.free.remove(slot)
            self.last[slot] = assignment
            return slot
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((assignment, future))
        return await future

    def put(self, slot: int) -> None:
        self.waiting = [(a, f) for a, f in self.waiting if not f.done()]  # cancelled
        if not self.waiting:
            self.free.append(slot)
            return
        same = [w for w in self.waiting if w[0] == self.last.get(slot)]
        assignment, future = (same or self.waiting)[0]
        self.waiting.remove((assignment, future))
        self.last[slot] = assignment
        future.set_result(slot)


async def _grade_all(run: _Run, jobs: int):
    """Grade every notebook of ``run``, ``jobs`` at a time; a student's row is made (and
    appended to the partial CSV) as soon as all their notebooks are graded."""
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    stopped = []

    def stop() -> None:
        stopped.append(True)
        main.cancel()

    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(signum, stop)
        except (NotImplementedError, RuntimeError):  # Windows, or not the main thread
            pass
    slots = _Slots(jobs)
    table = run.table
    ignore = [] if table is None else [str(table.out), str(table.partial)]
    watching = None if run.box.confined else _Watch(run.folder, ignore)
    left = {s.name: len(s.notebooks) for s in run.students}

    def student_done(student) -> None:
        run.rows[student.name] = _row(
            student, run.expected, run.outcomes, run.box.confined
        )
        if table is not None:
            table.append(run.rows[student.name])

    for student in run.students:
        if not student.notebooks:
            student_done(student)

    async def attempt(student, assignment, slot, alone=False) -> dict:
        """Grade one notebook in kernel slot ``slot``; its outcome."""
        path, source = student.notebooks[assignment]
        key = (student.name, assignment)
        if watching:
            watching.started(key)
        try:
            outcome = await grade_notebook(
                source,
                Path(path).name,
                ASSIGNMENTS[assignment],
                sandbox=run.box,
                editions=run.editions,
                slot=slot,
                timeout=run.timeout,
                seed=run.seed,
                watched=[run.folder],
                judges=run.judges,
                alone=alone,
                servers=run.servers,
            )
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the grader's own failure: this notebook only
            outcome = _failed(ASSIGNMENTS[assignment], error)
        if stopped:  # a kernel stopped by the interruption did not crash
            raise asyncio.CancelledError
        if watching:
            outcome["flags"] += watching.ended(key)
        return outcome

    again = []  # (student, assignment, seconds so far): timed out beside other kernels

    def finished(student, assignment, outcome, seconds) -> None:
        run.outcomes[(student.name, assignment)] = outcome
        if run.log:
            path = student.notebooks[assignment][0]
            status = capped(shown(outcome["status"]), STATUS_CHARS)
            run.log(
                f"{shown(student.name)} ({shown(path)}): {status} [{seconds:.1f} s]"
            )
        left[student.name] -= 1
        if left[student.name] == 0:
            student_done(student)

    async def one(student, assignment):
        slot = await slots.get(assignment)
        begun = time.monotonic()
        try:
            outcome = await attempt(student, assignment, slot)
        finally:
            slots.put(slot)
        if jobs > 1 and outcome["status"].startswith("timed out"):
            # A kernel beside it may have kept every core busy (a notebook may run
            # many processes): time is judged with the machine to itself, at the end.
            again.append((student, assignment, time.monotonic() - begun))
        else:
            finished(student, assignment, outcome, time.monotonic() - begun)

    async def one_alone(student, assignment, seconds):
        if run.log:
            path = student.notebooks[assignment][0]
            run.log(
                f"{shown(student.name)} ({shown(path)}): timed out with other kernels"
                " running; graded again alone"
            )
        begun = time.monotonic()
        outcome = await attempt(student, assignment, 0, alone=True)
        finished(student, assignment, outcome, seconds + time.monotonic() - begun)

    try:
        await asyncio.gather(*(one(s, a) for s in run.students for a in s.notebooks))
        for student, assignment, seconds in again:  # one at a time: all slots are free
            await one_alone(student, assignment, seconds)
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None
    finally:
        if run.servers is not None:
            try:
                await run.servers.close()
            except BaseException:  # interrupted again: --die-with-parent ends them
                pass
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.remove_signal_handler(signum)
            except (NotImplementedError, RuntimeError):
                pass
    if stopped:
        raise KeyboardInterrupt


def _failed(tasks, error) -> dict:
    reason = f"error while grading: {type(error).__name__}: {str(error)[:150]}"
    return {
        "status": reason,
        "tasks": {
            t: {
                "score": 0.0,
                "passed": 0,
                "total": 0,
                "flags": [],
                "feedback": f"{t}: not graded ({reason}).",
            }
            for t in tasks
        },
        "flags": [],
    }


class _Watch:
    """Grading without a sandbox only: snapshots of the places a kernel could change
    (``watch``), and who was running when something changed."""

    def __init__(self, folder, ignore):
        self.roots, self.shallow = watch.watched_places(folder)
        self.ignore = ignore
        self.last = watch.snapshot(self.roots, self.shallow, ignore)
        self.active, self.since = set(), set()

    def started(self, key) -> None:
        self.active.add(key)
        self.since.add(key)

    def ended(self, key) -> list[str]:
        self.active.discard(key)
        now = watch.snapshot(self.roots, self.shallow, self.ignore)
        found = watch.changes(self.last, now)
        self.last = now
        blamed, self.since = self.since | {key}, set(self.active)
        if not found:
            return []
        listed = "; ".join(found[:5]) + (
            f" and {len(found) - 5} more" if len(found) > 5 else ""
        )
        others = sorted(f"{s} ({a})" for s, a in blamed - {key})
        company = f" (running at the same time: {', '.join(others)})" if others else ""
        return [
            f"files outside its private folder changed while it ran{company}: {listed}"
        ]


def _row(student, expected, outcomes, confined: bool) -> dict:
    statuses, scores, feedback = [], {}, []
    flags = list(student.flags)
    several = len(expected) > 1
    for assignment in expected:
        prefix = f"{assignment}: " if several else ""
        tasks = ASSIGNMENTS[assignment]
        outcome = outcomes.get((student.name, assignment))
        if outcome is None:
            why = capped(
                shown(student.problems.get(assignment, "not submitted")), STATUS_CHARS
            )
            statuses.append(f"{assignment}: {why}")
            for task in tasks:
                scores[task] = 0.0
            feedback.append(f"{assignment}: {why} (0 on {', '.join(tasks)})")
            continue
        status = capped(shown(outcome["status"]), STATUS_CHARS)
        statuses.append(prefix + status)
        if outcome["status"] != "ok":
            feedback.append(prefix + status)
        flags += [prefix + f for f in outcome["flags"]]
        for task in tasks:
            verdict = outcome["tasks"].get(task)
            scores[task] = verdict["score"] if verdict else 0.0
            if verdict:
                text = shown(verdict["feedback"], newlines=True)
                feedback.append(capped(text, FEEDBACK_CHARS))
    # Everything a notebook chose is shown escaped and capped: no control character
    # reaches the CSV or a terminal, and every cell stays far below what Python's csv
    # module reads by default (131072 characters).
    kept = [capped(shown(f), FLAG_CHARS) for f in dict.fromkeys(flags)]
    if len(kept) > FLAGS:
        kept = kept[:FLAGS] + [f"... and {len(kept) - FLAGS} more flags"]
    row = {"student": shown(student.name), "status": "; ".join(statuses)}
    for task, score in scores.items():
        row[task] = f"{score:.3f}"
    row["total"] = f"{sum(scores.values()):.3f}"
    row["max_total"] = str(len(scores))
    row["sandbox"] = "bubblewrap" if confined else "none (--no-sandbox)"
    row["flags"] = "\n".join(kept)
    row["feedback"] = "\n".join(feedback)
    return row


def _cell(value: str) -> str:
    """A text cell a spreadsheet shows as text (``text.cell``: injective)."""
    return cell(value)


class _Table:
    """The CSV: rows appended to the partial file as students finish, the final file
    written atomically at the end."""

    def __init__(self, out: Path, tasks):
        self.out, self.partial = out, partial_path(out)
        self.columns = [*FIXED_COLUMNS, *tasks, *END_COLUMNS]
        with open(self.partial, "w", newline="", encoding="utf-8") as handle:
            csv.DictWriter(handle, fieldnames=self.columns).writeheader()

    def _safe(self, row: dict) -> dict:
        return {k: _cell(v) if k in _TEXT_COLUMNS else v for k, v in row.items()}

    def append(self, row: dict) -> None:
        with open(self.partial, "a", newline="", encoding="utf-8") as handle:
            csv.DictWriter(handle, fieldnames=self.columns, restval="").writerow(
                self._safe(row)
            )
            handle.flush()
            os.fsync(handle.fileno())

    def finish(self, rows) -> None:
        write_csv(self.out, [self._safe(r) for r in rows], self.columns)
        self.partial.unlink(missing_ok=True)


def write_csv(out: Path, rows, columns) -> None:
    """Write the rows atomically: a temporary file in the same folder, renamed over
    ``out``."""
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


def summary(rows, tasks, notebooks: int, seconds: float, sandboxed: bool = True) -> str:
    """A few lines for the end of a run: counts, mean per task, who is flagged."""
    how = "each in its own sandbox" if sandboxed else "WITHOUT a sandbox (--no-sandbox)"
    lines = [
        f"graded {len(rows)} students ({notebooks} notebooks, {how}) in {seconds:.1f} s"
    ]
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
                (
                    "crashed",
                    "timed out",
                    "malformed",
                    "error",
                    "grading",
                    "stopped",
                    "not graded",
                    "several notebooks",
                )
            )
            for s in r["status"].split("; ")
        )
    ]
    if problems:
        lines.append(f"  did not run cleanly: {', '.join(problems)}")
    flagged = [r["student"] for r in rows if r["flags"]]
    lines.append(f"  flagged: {', '.join(flagged) if flagged else 'none'}")
    return "\n".join(lines)
