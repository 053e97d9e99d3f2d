"""One graded kernel: started in its sandbox, fed the notebook's cells, stopped; what it
says becomes the notebook's status.

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
  any of the notebook's code has run) and does not reconnect (see ``_context``), and
  starts no heartbeat;
- **nothing of the verdict**: the kernel runs the notebook's cells for the student's
  feedback (errors, the status) and nothing else; the test cases run in a fresh
  interpreter of their own (``fresh``), and nothing the kernel sends or writes is read
  as a result;
- **no signal handlers of nbclient's**: the batch handles Ctrl-C and SIGTERM itself
  (``batch``), and every kernel is killed when its notebook is done, however it ends.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import socket
import stat
import time
from pathlib import Path

import zmq
import zmq.asyncio
from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionComplete, CellTimeoutError, DeadKernelError
from nbclient.util import ensure_async

from . import disk, memory

MAX_MESSAGE_BYTES = 16 * 2**20
RECONNECT_IVL_MS = 2**31 - 1  # a reconnection later than any grading (see _context)
WATCH_PERIOD = 0.25  # seconds between two looks at a kernel's disk and memory
_KEPT_ERROR_CHARS = 4000

_BOOTSTRAP = (
    "import torch, transformer_lib  # the grader's warm-up, not timed\n"
    "from transformer_grader.runner.plan import bootstrap as _tl_bootstrap\n"
    "_tl_bootstrap({fd})\n"
    "del _tl_bootstrap"
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
    and do not reconnect while a notebook is graded: a socket path the kernel replaced
    (by a link elsewhere) is not followed.

    "Do not reconnect" is a retry after ``RECONNECT_IVL_MS`` (24.8 days, ZeroMQ's
    largest), not ZeroMQ's "never" (-1). With "never", a kernel that dies while the
    grader reads one of its messages makes ZeroMQ cut that message's frames short, and
    libzmq aborts the whole grader (``Assertion failed: !_more (src/fq.cpp)``): a
    notebook that floods its output and exits did so in 2 of 3 batches. With a retry
    pending, the frames already received stay readable to the end."""
    if not _CONTEXT:
        context = zmq.asyncio.Context()
        context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        context.setsockopt(zmq.RCVHWM, 64)
        context.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
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


async def run(
    nb,
    private: Path,
    *,
    sandbox,
    edition: Path,
    slot: int,
    timeout: float,
    startup_timeout: float,
    channel=None,
) -> str:
    """Run the notebook ``nb`` (its cells are replaced in place) in a kernel in
    ``private``. Returns its status: "ok", "crashed: ...", "timed out: ...",
    "stopped: ..." or "error while grading: ..."."""
    import nbformat

    fd = None if channel is None else channel.fd
    boot = nbformat.v4.new_code_cell(_BOOTSTRAP.format(fd=fd))
    code_cells = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    nb.cells = [boot, *nb.cells]
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
                    client, boot, code_cells, timeout, startup_timeout
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
    return status


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


async def _cells(client, boot, code_cells, timeout, startup_timeout) -> str:
    """The grader's bootstrap, then the notebook's code cells under one deadline. Cell
    numbers in messages are the notebook's own (0-based)."""
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
    return status
