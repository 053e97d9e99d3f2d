"""Grade one submitted notebook: run it in sandboxed kernels, run its graded
definitions in fresh sandboxed interpreters, then judge here.

1. The grader builds the cases of the notebook's tasks (the tasks come from the
   instructor's assignment list) with a seed drawn for this run, so the inputs cannot be
   known in advance.
2. The source is read in a bounded subprocess (``source_check``): the graded
   definitions of each task (``definitions``), the references they name (``static``:
   0 on the task), what the guards of graded code would refuse in them (``rules.report``
   through ``definitions.policy_hits``: flags with their lines, the score standing) and
   what the rest of the notebook does that deserves a look (flags). A notebook too large to read is not graded.
3. The tasks are split by what their references are: tasks that ban the same parts of
   the library share a kernel (and a student edition, ``edition``); an assignment whose
   tasks ban different parts (``08_greedy_cache``: the cache may not use the library's
   attention, the decoder needs it) runs once per group.
4. For each group, at the same time and in the same sandbox view, each with a private
   folder of its own: the notebook's kernel runs its code cells under one deadline
   (errors do not stop the run, as in nbgrader), for the status and the student's
   feedback (``kernel``); a fresh interpreter gets the graded definitions and the cases
   over a pipe and sends the raw outputs back (``fresh``).
5. Here, the outputs are read as data (``torch.load(weights_only=True)``), bounded
   (``bounds``) and judged against the references (``verdict.judge_task``), in a
   judging process with its own memory limit when a batch gives one (``judge``). The
   private folders are deleted.

A notebook that is malformed, times out, floods its output or kills its kernel scores 0
on each task that did not run (every case counted), with the reason in the feedback.
"""

from __future__ import annotations

import asyncio
import copy
import os
import secrets
from pathlib import Path

from . import audit, disk, fresh, kernel, source_check, static
from .edition import library_bans
from ..tasks import TASKS
from .verdict import judge_source, judge_task, plan_item, policy_flags


def kernel_groups(tasks) -> list[list[str]]:
    """The tasks, grouped so that one kernel (one student edition) grades each group:
    tasks that leave the same parts of the library out share one."""
    groups: dict[tuple, list[str]] = {}
    for task in tasks:
        groups.setdefault(library_bans(TASKS[task].banned), []).append(task)
    return list(groups.values())


def _malformed(source: bytes):
    """(notebook, "") or (None, why it is not a valid notebook)."""
    import nbformat

    try:
        nb = nbformat.reads(source.decode("utf-8"), as_version=4)
        nbformat.validate(nb)
    except Exception as error:
        first = str(error).splitlines()[0][:200] if str(error) else ""
        return None, f"malformed: {type(error).__name__}: {first}"
    return nb, ""


def _combine(statuses: list[tuple[list[str], str]]) -> str:
    """One status for the notebook from its kernels' (tasks, status)."""
    distinct = list(dict.fromkeys(status for _, status in statuses))
    if len(distinct) == 1:
        return distinct[0]
    return "; ".join(
        f"{'+'.join(group)}: {status}" for group, status in statuses if status != "ok"
    )


async def grade_notebook(
    source: bytes,
    filename: str,
    tasks,
    *,
    sandbox,
    editions,
    slot: int = 0,
    timeout: float = 60.0,
    startup_timeout: float = 120.0,
    seed: int | None = None,
    watched=(),
    judges=None,
    alone: bool = False,
    servers=None,
) -> dict:
    """Grade one notebook (its bytes) on ``tasks``; never raises, except when the batch
    is cancelled. ``sandbox``: the ``Sandbox`` kernels run in; ``editions``: makes the
    student edition for a list of bans (``editions(bans) -> folder``); ``slot``: the
    kernel slot (the sandbox's user); ``watched``: folders a kernel graded without a
    sandbox must not touch; ``judges``: the batch's ``judge.Judges`` (None: judge in
    this process); ``servers``: the batch's ``fork_servers.ForkServers`` (None: a new
    interpreter for the cases); ``alone``: the notebook is graded again with the machine to itself
    (it timed out beside other kernels), so its cases run only after its cells, not
    beside them. Returns {"status": "ok" | "crashed: ..." | "timed out: ..."
    | "stopped: ..." | "malformed: ..." | "error while grading: ...", "tasks": {task:
    {"score", "passed", "total", "feedback", "flags"}}, "flags": [...]}."""
    # never 0: seed 0 is the notebook checks' fixed inputs
    seed = 1 + secrets.randbelow(2**31 - 1) if seed is None else seed
    cases = {t: TASKS[t].make_cases(TASKS[t].names, seed) for t in tasks}
    nb, status = _malformed(source)
    if nb is None:
        verdicts = {t: judge_task(TASKS[t], cases[t], None, status) for t in tasks}
        return {"status": status, "tasks": verdicts, "flags": []}
    groups = kernel_groups(tasks)
    try:
        checked = await asyncio.to_thread(
            source_check.check,
            nb,
            {t: list(TASKS[t].names) for t in tasks},
            [[n for t in group for n in TASKS[t].names] for group in groups],
        )
    except source_check.TooLarge as error:
        status = str(error)
        verdicts = {t: judge_task(TASKS[t], cases[t], None, status) for t in tasks}
        return {"status": status, "tasks": verdicts, "flags": []}
    flags = [f"review: the notebook {what}" for what in checked["review"]]
    statuses, verdicts = [], {}
    for index, group in enumerate(groups):
        status, graded, found = await _grade_group(
            nb,
            source,
            filename,
            group,
            cases,
            sandbox=sandbox,
            edition=editions(library_bans(b for t in group for b in TASKS[t].banned)),
            slot=slot,
            name=f"k{slot}-{secrets.token_hex(4)}-{index}",
            # only what a statement of the notebook is: its cell and its text
            definitions=[
                {"file": str(d["file"]), "source": str(d["source"])}
                for d in checked["groups"][index]
            ],
            timeout=timeout,
            startup_timeout=startup_timeout,
            watched=watched,
            seed=seed,
            judges=judges,
            alone=alone,
            servers=servers,
        )
        statuses.append((group, status))
        verdicts.update(graded)
        flags += found
    for task in tasks:
        used = static.banned_among(checked["tasks"][task]["names"], TASKS[task])
        hits = checked["tasks"][task]["policy"]
        if used:  # a banned reference named in graded code: 0
            verdicts[task] = judge_source(TASKS[task], cases[task], used)
        # what the guards would refuse, read from the source: a flag with its line,
        # the score standing (the guards refused those lines when they ran, so code
        # that needed them failed its cases; a line never run costs nothing)
        verdicts[task]["flags"] += policy_flags(TASKS[task], hits)
    for verdict in verdicts.values():
        flags += verdict["flags"]
    return {"status": _combine(statuses), "tasks": verdicts, "flags": flags}


async def _grade_group(
    nb,
    source,
    filename,
    group,
    cases,
    *,
    sandbox,
    edition,
    slot,
    name,
    definitions,
    timeout,
    startup_timeout,
    watched,
    seed,
    judges,
    alone=False,
    servers=None,
):
    """Run one kernel for the tasks of ``group`` and, beside it, the fresh interpreter
    that runs their cases: (status, {task: verdict}, flags)."""
    private = sandbox.private_folder(name, slot)
    channel = None if sandbox.confined else audit.Channel()
    try:
        notebook_copy = private / "work" / (Path(filename).name or "notebook.ipynb")
        notebook_copy.write_bytes(source)
        os.chmod(notebook_copy, 0o644)
        if sandbox.as_root:
            os.chown(notebook_copy, sandbox.uid(slot), sandbox.uid(slot))
        cells = kernel.run(
            copy.deepcopy(nb),
            private,
            sandbox=sandbox,
            edition=edition,
            slot=slot,
            timeout=timeout,
            startup_timeout=startup_timeout,
            channel=channel,
        )
        checks = _cases(
            definitions,
            [plan_item(TASKS[t], cases[t]) for t in group],
            sandbox=sandbox,
            edition=edition,
            slot=slot,
            name=f"{name}-cases",
            timeout=timeout,
            startup_timeout=startup_timeout,
            servers=servers,
        )
        if alone:  # the timed cells get the machine to themselves
            try:
                status = await cells
            except BaseException:
                checks.close()  # never started
                raise
            report, problem = await checks
        else:  # side by side: the cases' start-up overlaps the kernel's
            status, (report, problem) = await asyncio.gather(cells, checks)
        found, touched, early = [], False, False
        if channel is not None:
            lines, early = await asyncio.to_thread(channel.finish)
            found, touched = audit.findings(lines, watched, str(private))
    finally:
        disk.remove(private)
    flags = [f"while it ran, the notebook {f}" for f in found]
    unfiltered = (report or {}).get("seccomp")
    if unfiltered:  # the cases ran with the sandbox only (``runner/syscalls.py``)
        from ..runner.syscalls import flag

        flags.append(flag(unfiltered))
    if early:
        flags.append("the notebook closed the grader's audit channel")
    ran_to_the_end = (
        status == "ok" or status.startswith("crashed:") and " in cell " in status
    )
    if not ran_to_the_end:  # the notebook itself did not run: its cases do not count
        report, reason = None, status
    elif problem.startswith(("timed out", "stopped")):
        reason = problem
        status = problem if status == "ok" else f"{status}; {problem}"
    elif problem:  # the cases' interpreter ran, yet not all of it came back
        reason = f"grading failed: {problem}"
        status = reason if status == "ok" else f"{status}; {reason}"
    else:
        reason = ""
    found_tasks = report["tasks"] if report else {}
    if judges is None:
        graded = {
            t: judge_task(TASKS[t], cases[t], found_tasks.get(t), reason)
            for t in group
        }
    else:
        graded = await judges.judge(
            slot,
            seed,
            [(t, found_tasks.get(t), reason) for t in group],
            {t: len(cases[t]) for t in group},
        )
    defined = (report or {}).get("defined") or []
    if defined:  # a definition (a helper, a constant) raised: say so with the cases
        for verdict in graded.values():
            verdict["feedback"] += "\n(while defining: " + "; ".join(defined[:3]) + ")"
    if touched or early:  # its outputs cannot be trusted to be its own work
        why = (
            "it touched files of other submissions"
            if touched
            else "it closed the grader's audit channel"
        )
        graded = {
            t: judge_task(TASKS[t], cases[t], None, f"{why} while it ran (see flags)")
            for t in group
        }
    return status, graded, flags


async def _cases(definitions, items, servers=None, **kwargs) -> tuple[dict | None, str]:
    """``fresh.run`` (or the batch's fork server's), whose own failure costs this
    notebook only."""
    try:
        if servers is not None:
            return await servers.run(definitions, items, **kwargs)
        return await fresh.run(definitions, items, **kwargs)
    except asyncio.CancelledError:
        raise
    except Exception as error:
        return None, f"error while grading: {type(error).__name__}: {str(error)[:150]}"
