"""One graded kernel: started in its sandbox, fed the notebook's cells and the grader's,
stopped, its outputs read back as data.

The kernel is Jupyter's own Python kernel (ipykernel) from the grader's virtualenv,
started through ``Sandbox.command`` and reached over Jupyter's ``ipc`` transport (Unix
sockets in its private folder: the sandbox has no network). Its cells run with nbclient,
as in nbgrader; two things are added for a kernel that may be hostile:

- **a cap on what it sends**: the grader keeps only the error outputs of the cells (the
  status needs nothing else), a single message larger than ``MAX_MESSAGE_BYTES`` is
  dropped by ZeroMQ before it is read, and a kernel whose output passes
  ``Limits.output_mb`` is stopped: flooding costs its own student only;
- **a cap on what it keeps on disk and in memory**: ``watch`` asks ``disk.overuse`` and
  ``memory.overuse`` a few times a second, and stops a kernel whose private folder grows
  past ``Limits.disk_mb`` or ``Limits.files``, or whose processes together hold more
  than ``Limits.total_memory_mb``;
- **no path of the kernel's followed**: the private folder is the kernel's to change, so
  the grader connects to the kernel's sockets only once they exist as sockets (before
  any of the notebook's code has run) and never reconnects, starts no heartbeat, writes
  its plan under a fresh random name (``O_EXCL | O_NOFOLLOW``) and reads the outputs
  through ``O_NOFOLLOW`` from a regular file of bounded size;
- **no signal handlers of nbclient's**: the batch handles Ctrl-C and SIGTERM itself
  (``batch``), and every kernel is killed when its notebook is done, however it ends.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import os
import secrets
import socket
import stat
import time
from pathlib import Path

import torch
import zmq
import zmq.asyncio
from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionComplete, CellTimeoutError, DeadKernelError
from nbclient.util import ensure_async

from . import disk, memory

MAX_MESSAGE_BYTES = 16 * 2**20
MAX_RESULTS_BYTES = 256 * 2**20
WATCH_PERIOD = 0.25  # seconds between two looks at a kernel's disk and memory
_KEPT_ERROR_CHARS = 4000

_BOOTSTRAP = (
    "import torch, transformer_lib  # the grader's warm-up, not timed\n"
    "from transformer_grader.runner.plan import bootstrap as _tl_bootstrap\n"
    "_tl_bootstrap({fd})\n"
    "del _tl_bootstrap"
)
_RUNNER = (
    "from transformer_grader.runner.plan import run_plan as _tl_run_plan\n"
    "_tl_run_plan(globals(), {plan!r}, {out!r}, {nonce!r})"
)


def _seconds(value: float) -> int:
    """nbclient's timeouts are whole seconds."""
    return max(1, math.ceil(value))


def _first_line(source: str) -> str:
    lines = [line for line in source.splitlines() if line.strip()]
    return lines[0].strip()[:80] if lines else ""


def _size(msg: dict) -> int:
    """The bytes a message carried: its content serialised as JSON (nested data
    counted whole, whatever its shape), its metadata and its binary buffers."""
    total = 200
    for part in ("content", "metadata"):
        try:
            total += len(json.dumps(msg.get(part) or {}, default=str))
        except (TypeError, ValueError, RecursionError):
            total += MAX_MESSAGE_BYTES  # cannot be measured: count it as the largest
    return total + sum(len(b) for b in msg.get("buffers") or [])


_CONTEXT: list = []


def _context() -> zmq.asyncio.Context:
    """The ZeroMQ context of every graded kernel's sockets (one per process: making and
    destroying one per kernel costs up to a second each time). Its sockets drop a
    message larger than ``MAX_MESSAGE_BYTES`` before reading it, queue few messages,
    and never reconnect: a socket path the kernel replaced (by a link elsewhere) is not
    followed."""
    if not _CONTEXT:
        context = zmq.asyncio.Context()
        context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        context.setsockopt(zmq.RCVHWM, 64)
        context.setsockopt(zmq.RECONNECT_IVL, -1)
        _CONTEXT.append(context)
    return _CONTEXT[0]


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel command is the sandbox's, whose sockets are
    ``_context``'s, and whose connection file is handed to the kernel's user."""

    def __init__(self, *, argv, hand_over, **kwargs):
        super().__init__(**kwargs)
        self._kernel_spec = KernelSpec(
            argv=list(argv), display_name="graded Python", language="python"
        )
        self._hand_over = hand_over
        self.context = _context()

    def write_connection_file(self, **kwargs):
        written = super().write_connection_file(**kwargs)
        fd = os.open(self.connection_file, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            self._hand_over(fd)
        finally:
            os.close(fd)
        return written

    def client(self, **kwargs):
        kwargs.setdefault("context", self.context)
        return super().client(**kwargs)


class CappedClient(NotebookClient):
    """nbclient's client, keeping only error outputs and stopping a kernel that sends
    more than ``output_cap`` bytes."""

    def __init__(self, nb, *, output_cap: int, **kwargs):
        super().__init__(nb, **kwargs)
        self.output_cap, self.received, self.flooded = output_cap, 0, False

    async def _async_poll_output_msg(self, parent_msg_id, cell, cell_index) -> None:
        while True:
            msg = await ensure_async(self.kc.iopub_channel.get_msg(timeout=None))
            self.received += _size(msg)
            if self.received > self.output_cap and not self.flooded:
                self.flooded = True
                await self.km.provisioner.kill()  # the kernel-alive poll notices
            if msg["parent_header"].get("msg_id") == parent_msg_id:
                try:
                    self.process_message(msg, cell, cell_index)
                except CellExecutionComplete:
                    return

    async def async_start_new_kernel_client(self):
        """Connect once the kernel's sockets exist (no heartbeat, no stdin)."""
        await _sockets_ready(self.km, self.startup_timeout)
        self.kc = self.km.client()
        self.kc.start_channels(hb=False, stdin=False)
        await ensure_async(self.kc.wait_for_ready(timeout=self.startup_timeout))
        self.kc.allow_stdin = False
        return self.kc

    def output(self, outs, msg, display_id, cell_index):
        if msg["msg_type"] != "error":
            return None
        content = msg["content"]
        out = {
            "output_type": "error",
            "ename": str(content.get("ename", ""))[:200],
            "evalue": str(content.get("evalue", ""))[:_KEPT_ERROR_CHARS],
            "traceback": [],
        }
        outs.append(out)
        return out


def _listening(path: str) -> bool:
    """Whether ``path`` is a Unix socket (not a link) that accepts connections."""
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.connect(path)
        return True
    except OSError:
        return False


async def _sockets_ready(km, timeout: float) -> None:
    """Wait until the kernel listens on its sockets (Unix sockets, not links): ZeroMQ
    then connects at the first try, and never tries again."""
    paths = [
        f"{km.ip}-{port}" for port in (km.shell_port, km.iopub_port, km.control_port)
    ]
    deadline = time.monotonic() + timeout
    while True:
        if all(_listening(p) for p in paths):
            return
        if not await km.is_alive():
            raise DeadKernelError("the kernel ended while starting")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the kernel did not start within {timeout:g} s")
        await asyncio.sleep(0.02)


def _write_new(path: Path, data: object, hand_over) -> None:
    """``torch.save(data)`` into a file that did not exist (never through a link), then
    ``hand_over(fd)`` to the kernel's user."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        torch.save(data, handle)
        handle.flush()
        hand_over(handle.fileno())


async def run(
    nb,
    private: Path,
    plan: dict,
    *,
    sandbox,
    edition: Path,
    slot: int,
    timeout: float,
    startup_timeout: float,
    channel=None,
) -> tuple[str, dict | None, str]:
    """Run the notebook ``nb`` (its cells are replaced in place) in a kernel in
    ``private``; ``plan`` (the tasks and cases, written only after the notebook's cells)
    is run last. Returns (status, outputs report or None, why the report is missing)."""
    import nbformat

    nonce = secrets.token_hex(16)
    plan_path = private / f"plan-{secrets.token_hex(8)}.pt"  # a name no one knows yet
    out_path = private / "outputs.pt"
    fd = None if channel is None else channel.fd
    boot = nbformat.v4.new_code_cell(_BOOTSTRAP.format(fd=fd))
    runner = nbformat.v4.new_code_cell(
        _RUNNER.format(plan=str(plan_path), out=str(out_path), nonce=nonce)
    )
    code_cells = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    nb.cells = [boot, *nb.cells, runner]
    argv = sandbox.command(
        private,
        edition,
        slot,
        ["-m", "ipykernel_launcher", "-f", "{connection_file}"],
    )
    km = SandboxedKernelManager(
        argv=argv,
        hand_over=lambda fd: sandbox.hand_over(fd, slot),
        kernel_name="python3",
        transport="ipc",
        ip=str(private / "ipc" / "kernel"),
        connection_file=str(private / "kernel.json"),
    )
    client = CappedClient(
        nb,
        km=km,
        output_cap=sandbox.limits.output_mb * 2**20,
        timeout=_seconds(timeout),
        allow_errors=True,
        startup_timeout=_seconds(startup_timeout),
        store_widget_state=False,
        record_timing=False,
    )

    def write_plan():
        # The inputs exist only from now on: the notebook's cells never saw them.
        _write_new(plan_path, plan, lambda fd: sandbox.hand_over(fd, slot))

    limits, watchers = sandbox.limits, []
    with open(private / "kernel.log", "wb") as log:
        try:
            await client.async_start_new_kernel(
                env=sandbox.outer_env(),
                stdout=log,
                stderr=log,
                pass_fds=() if fd is None else (fd,),
            )
            stop, pid = km.provisioner.kill, km.provisioner.pid
            watchers = [
                asyncio.create_task(watch(look, stop))
                for look in (
                    lambda: disk.overuse(private, limits.disk_mb * 2**20, limits.files),
                    lambda: memory.overuse(pid, limits.total_memory_mb * 2**20),
                )
            ]
            if channel is not None:
                channel.launched()
            try:
                await client.async_start_new_kernel_client()
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
                if channel is not None:
                    channel.ending_at = time.monotonic()
        except DeadKernelError as error:
            status = f"crashed: the kernel died ({str(error)[:150]})"
        except asyncio.CancelledError:
            raise
        except Exception as error:
            status = f"error while grading: {type(error).__name__}: {str(error)[:150]}"
        finally:
            overused = await _stop_watching(watchers)
            await _stop(client, km)
            overused = overused or sandbox.release(private)
    if client.flooded:
        status = (
            f"stopped: its output passed {limits.output_mb} MB (the limit of"
            " one notebook)"
        )
    if overused is not None:
        status = f"stopped: {overused} (the limit of one notebook)"
    if status.startswith(("timed out: still", "error while grading", "stopped")):
        return status, None, ""
    report, problem = _load_outputs(out_path, nonce)
    return status, report, problem


async def watch(look, stop, period: float = WATCH_PERIOD) -> str:
    """Every ``period`` seconds, ask ``look()`` (in a thread: it reads files) whether the
    kernel went over a limit; once it says what, await ``stop()`` (which kills the
    kernel) and return that. Cancel it when the kernel is done."""
    while True:
        await asyncio.sleep(period)
        problem = await asyncio.to_thread(look)
        if problem is not None:
            await stop()
            return problem


async def _stop_watching(watchers) -> str | None:
    """Cancel the watches; what the first one to stop the kernel found, if any."""
    for watcher in watchers:
        watcher.cancel()  # nothing, if it has returned already
    if watchers:
        await asyncio.wait(watchers)  # (a cancelled watch raises nothing here)
    for watcher in watchers:
        if not watcher.cancelled() and watcher.exception() is None:
            return watcher.result()
    return None


async def _stop(client, km) -> None:
    """Kill the kernel (its sandbox and everything in it go with it) and close the
    sockets; never raises."""
    try:
        if km.has_kernel:
            await km.provisioner.kill()
            await km.provisioner.wait()
    except Exception:
        pass
    try:
        if client.kc is not None:
            client.kc.stop_channels()
        await ensure_async(km.cleanup_resources())
    except Exception:
        pass


async def _cells(
    client, boot, runner, code_cells, write_plan, timeout, startup_timeout
) -> str:
    """The grader's bootstrap, the notebook's code cells under one deadline, the
    grader's runner. Cell numbers in messages are the notebook's own (0-based)."""
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


def _read_regular(path: Path, limit: int) -> bytes | None:
    """The bytes of ``path`` if it is a regular file (not a link, a FIFO or a device)
    of at most ``limit`` bytes; None if there is no such file; ValueError if larger."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            return None
        if info.st_size > limit:
            raise ValueError("too large")
        return handle.read(limit + 1)[:limit]


def _load_outputs(path: Path, nonce: str):
    """(report, problem): the kernel's outputs, read as data only, or why they cannot be
    used."""
    try:
        data = _read_regular(path, MAX_RESULTS_BYTES)
    except ValueError:
        return None, "the results were too large to read"
    if data is None:
        return None, "no result came back from the kernel"
    try:
        report = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
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
