"""Grade one submitted notebook: run it in its own kernel, in a private folder, then
judge here.

1. The grader builds the cases of the notebook's tasks (the tasks come from the
   assignment, on the instructor's side) with a seed drawn for this run, so the inputs
   cannot be known in advance.
2. A private temporary folder is made; the kernel's working directory is ``work/``
   inside it, holding a copy of the notebook (the original is never opened for writing,
   nor shown to the kernel: it learns no path of the submissions folder). Its
   environment points temporary files, IPython's folder (history, start-up files) and
   Jupyter's configuration there too.
3. The kernel runs the grader's bootstrap cell (imports, not timed), then the notebook's
   code cells under one deadline (``timeout`` seconds; errors do not stop the run, as in
   nbgrader), then the grader's last cell, which runs the cases (``kernel.run_plan``)
   and saves the outputs.
4. Here, the outputs are read as data (``torch.load(weights_only=True)``, with the run's
   nonce) and judged against the references (``verdict.judge_task``). The private folder
   is deleted.

A notebook that is malformed, times out or kills its kernel scores 0 on each of its
tasks (every case counted), with the reason in the feedback.
"""

from __future__ import annotations

import asyncio
import math
import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path

import torch

from . import audit
from .tasks import TASKS
from .verdict import judge_task, plan_cases

_BOOTSTRAP = (
    "import torch, transformer_lib  # the grader's warm-up, not timed\n"
    "from transformer_lib.grading.kernel import bootstrap as _tl_bootstrap\n"
    "_tl_bootstrap({fd})\n"
    "del _tl_bootstrap"
)
_RUNNER = (
    "from transformer_lib.grading.kernel import run_plan as _tl_run_plan\n"
    "_tl_run_plan(globals(), {plan!r}, {out!r}, {nonce!r})"
)
MAX_OUTPUT_BYTES = 256 * 2**20
# Variables that could tell the kernel where the grader (and so the submissions) lives.
_HIDDEN_ENV = ("PWD", "OLDPWD", "JPY_SESSION_NAME", "JPY_PARENT_PID")


def _seconds(value: float) -> int:
    """nbclient's timeouts are whole seconds."""
    return max(1, math.ceil(value))


def _first_line(source: str) -> str:
    lines = [line for line in source.splitlines() if line.strip()]
    return lines[0].strip()[:80] if lines else ""


def kernel_env(private: Path, work: Path) -> dict:
    """The kernel's environment: the grader's, with every per-user place it writes to or
    reads start-up code from moved into the private folder."""
    env = {k: v for k, v in os.environ.items() if k not in _HIDDEN_ENV}
    tmp = work / "tmp"
    tmp.mkdir(exist_ok=True)
    env.update(
        PWD=str(work),
        TMPDIR=str(tmp),
        TEMP=str(tmp),
        TMP=str(tmp),
        IPYTHONDIR=str(private / "ipython"),
        JUPYTER_CONFIG_DIR=str(private / "jupyter"),
        JUPYTER_RUNTIME_DIR=str(private / "runtime"),
        PYTHONNOUSERSITE="1",
    )
    # One thread per kernel: the grader runs --jobs kernels side by side, and the graded
    # tensors are tiny (threads would only wait for each other).
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(name, "1")
    return env


def _load_outputs(path: Path, nonce: str):
    """(report, problem): the kernel's outputs, read as data only, or why they cannot be
    used."""
    if not path.exists():
        return None, "no result came back from the kernel"
    if path.stat().st_size > MAX_OUTPUT_BYTES:
        return None, "the results were too large to read"
    try:
        report = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as error:
        return None, f"the results could not be read ({type(error).__name__})"
    if not isinstance(report, dict) or report.get("nonce") != nonce:
        return (
            None,
            "the results file was not written by the grader's cell (wrong nonce)",
        )
    if not isinstance(report.get("tasks"), dict):
        return None, "the results file holds no tasks"
    return report, ""


def _verdicts(tasks, cases, report, reason: str) -> dict:
    found = report["tasks"] if report else {}
    return {t: judge_task(TASKS[t], cases[t], found.get(t), reason) for t in tasks}


async def grade_notebook(
    source: bytes,
    filename: str,
    tasks,
    *,
    timeout: float = 60.0,
    kernel_name: str = "python3",
    startup_timeout: float = 120.0,
    seed: int | None = None,
    watched=(),
) -> dict:
    """Grade one notebook (its bytes) on ``tasks``; never raises. ``watched``: folders
    the kernel must not touch (the submissions). Returns {"status": "ok" | "crashed:
    ..." | "timed out: ..." | "malformed: ..." | "error while grading: ...", "tasks":
    {task: {"score", "passed", "total", "feedback", "flags"}}, "flags": [...]}."""
    import nbformat

    seed = secrets.randbelow(2**31) if seed is None else seed
    cases = {t: TASKS[t].make_cases(TASKS[t].names, seed) for t in tasks}
    try:
        nb = nbformat.reads(source.decode("utf-8"), as_version=4)
        nbformat.validate(nb)
    except Exception as error:
        first = str(error).splitlines()[0][:200] if str(error) else ""
        status = f"malformed: {type(error).__name__}: {first}"
        return {
            "status": status,
            "tasks": _verdicts(tasks, cases, None, status),
            "flags": [],
        }
    private = Path(tempfile.mkdtemp(prefix="tt-grade-"))
    try:
        work = private / "work"
        work.mkdir()
        (work / Path(filename).name).write_bytes(source)
        channel = audit.Channel()
        status, report, problem = await _execute(
            nb,
            private,
            work,
            tasks,
            cases,
            timeout,
            kernel_name,
            startup_timeout,
            channel,
        )
        lines, early = await asyncio.to_thread(channel.finish)
        found, touched = audit.findings(lines, watched, str(private))
    finally:
        shutil.rmtree(private, ignore_errors=True)
    flags = [f"results: {problem}"] if "nonce" in problem else []
    flags += [f"while it ran, the notebook {f}" for f in found]
    if early:
        flags.append("the notebook closed the grader's audit channel")
    ran_to_the_end = (
        status == "ok" or status.startswith("crashed:") and " in cell " in status
    )
    if (
        report is None and ran_to_the_end
    ):  # the runner ran, yet no usable result came back
        reason = f"grading failed: {problem}"
        status = reason if status == "ok" else f"{status}; {reason}"
    else:  # why the cases that did not run did not run
        reason = "" if ran_to_the_end else status
    graded = _verdicts(tasks, cases, report, reason)
    if touched or early:  # its outputs cannot be trusted to be its own work
        why = (
            "it touched files of other submissions"
            if touched
            else "it closed the grader's audit channel"
        )
        graded = {
            t: judge_task(TASKS[t], cases[t], None, f"{why} while it ran (see flags)")
            for t in tasks
        }
    for verdict in graded.values():
        flags += verdict["flags"]
    return {"status": status, "tasks": graded, "flags": flags}


async def _execute(
    nb, private, work, tasks, cases, timeout, kernel_name, startup_timeout, channel
):
    """Start the kernel, run the cells; return (status, report or None, problem reading
    it)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    plan_path, out_path = private / "plan.pt", private / "outputs.pt"
    nonce = secrets.token_hex(16)
    boot = nbformat.v4.new_code_cell(_BOOTSTRAP.format(fd=channel.fd))
    runner = nbformat.v4.new_code_cell(
        _RUNNER.format(plan=str(plan_path), out=str(out_path), nonce=nonce)
    )
    code_cells = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    nb.cells = [boot, *nb.cells, runner]
    # "immediate": the kernel is killed when done (the outputs are on disk by then),
    # rather than asked to shut down and waited for.
    client = NotebookClient(
        nb,
        timeout=_seconds(timeout),
        kernel_name=kernel_name,
        allow_errors=True,
        startup_timeout=_seconds(startup_timeout),
        shutdown_kernel="immediate",
        resources={"metadata": {"path": str(work)}},
    )
    client.km = client.create_kernel_manager()
    client.km.connection_file = str(private / "kernel.json")

    def write_plan():
        # The inputs exist only from now on: the notebook's cells never saw them.
        torch.save(
            {"tasks": [{"task": t, "cases": plan_cases(cases[t])} for t in tasks]},
            plan_path,
        )

    with open(private / "kernel.log", "wb") as log:
        try:
            async with client.async_setup_kernel(
                env=kernel_env(private, work),
                stdout=log,
                stderr=log,
                pass_fds=() if channel.fd is None else (channel.fd,),
            ):
                channel.launched()
                try:
                    status = await _cells(
                        client,
                        boot,
                        runner,
                        code_cells,
                        write_plan,
                        timeout,
                        startup_timeout,
                    )
                finally:
                    channel.ending_at = time.monotonic()
        except DeadKernelError as error:
            status = f"crashed: the kernel died ({str(error)[:150]})"
        except Exception as error:
            status = f"error while grading: {type(error).__name__}: {str(error)[:150]}"
    if status.startswith(("timed out: still", "error while grading")):
        return status, None, ""
    report, problem = _load_outputs(out_path, nonce)
    return status, report, problem


async def _cells(
    client, boot, runner, code_cells, write_plan, timeout, startup_timeout
) -> str:
    """The grader's bootstrap, the notebook's code cells under one deadline, the
    grader's runner. Cell numbers in messages are the notebook's own (0-based)."""
    from nbclient.exceptions import CellTimeoutError

    # Kernel start and the imports depend on the machine's load, not on the student's
    # code: they come first and do not count against the timeout.
    client.timeout = _seconds(max(startup_timeout, 60.0))
    await client.async_execute_cell(boot, 0)
    if any(o.get("output_type") == "error" for o in boot.get("outputs", [])):
        return "error while grading: the grader's set-up cell failed"
    status = "ok"
    deadline = time.monotonic() + timeout
    for index, cell in code_cells:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return f"timed out: still running after {timeout:g} s (before cell {index})"
        client.timeout = _seconds(remaining)
        try:
            await client.async_execute_cell(cell, index + 1)
        except CellTimeoutError:
            return (
                f"timed out: still running after {timeout:g} s in cell {index} "
                f"({_first_line(cell.source)})"
            )
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if errors and status == "ok":
            err = errors[0]
            status = (
                f"crashed: {err.get('ename')}: {str(err.get('evalue'))[:150]} in cell "
                f"{index} ({_first_line(cell.source)})"
            )
    write_plan()
    limit = max(timeout, 30.0)
    client.timeout = _seconds(limit)
    try:
        await client.async_execute_cell(runner, len(client.nb.cells) - 1)
    except CellTimeoutError:
        return (
            f"timed out: the checks of your functions did not finish in {limit:g} s "
            "(an endless loop?)"
        )
    error = next(
        (o for o in runner.get("outputs", []) if o.get("output_type") == "error"), None
    )
    if error is not None:
        return (
            f"crashed: grading failed ({error.get('ename')}:"
            f" {str(error.get('evalue'))[:150]})"
        )
    return status
