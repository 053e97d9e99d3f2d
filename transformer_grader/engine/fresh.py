"""The grader's half of the fresh interpreter that runs a notebook's test cases
(``runner/serve.py`` is the other half).

The notebook's own kernel runs every cell, for the student's feedback; nothing it does
decides a grade. The cases run in another process, started by the grader in the same
sandbox view (same limits, same student edition, a private folder of its own that the
kernel cannot see), at the same time as the kernel, so that its start-up (Python and
PyTorch) costs no wall time of its own on a machine with a free core:

- its standard input carries the request, written by the grader and closed: the graded
  definitions (extracted from the source, ``definitions``), each task's cases (fresh
  inputs, drawn for this notebook) and the ATen operators each task bans;
- its standard output carries the frames of ``runner/serve.py`` back, read here with a
  bound on their total size (``MAX_RESULTS_BYTES``) as data only
  (``torch.load(weights_only=True)``);
- a deadline (start-up, then ``max(timeout, 30)`` seconds for the definitions and the
  cases) and the same watches as a kernel (memory of all its processes, its private
  folder) stop it; standard error goes to a log in its private folder. (It runs at the
  kernel's priority: niced, it crawled on a machine shared with other work, and the
  batch took twice as long.)

No nonce, no file the kernel can write, nothing on the kernel's Jupyter channels enters
the verdict.
"""

from __future__ import annotations

import asyncio
import io
import time

import torch

from . import disk, memory
from ..runner.serve import MAGIC

MAX_RESULTS_BYTES = 256 * 2**20
_MODULE = "transformer_grader.runner.serve"


def request_bytes(definitions: list[dict], tasks: list[dict]) -> bytes:
    buffer = io.BytesIO()
    torch.save({"definitions": definitions, "tasks": tasks}, buffer)
    return buffer.getvalue()


class _Frames:
    """The runner's frames, read from its standard output, assembled into a report
    ``{"tasks": {task: {"found", "outputs", "hits", "tampered", "refused"}}, "defined": [...],
    "seccomp": why the filter is missing ("" when it holds, None when unsaid), "done": bool}``."""

    def __init__(self, limit: int = MAX_RESULTS_BYTES):
        self.limit, self.read = limit, 0
        self.report = {"tasks": {}, "defined": [], "seccomp": None, "done": False}
        self.problem = ""
        self.defined_at = None

    def add(self, item) -> None:
        if not isinstance(item, dict):
            raise ValueError("a frame that is not a dict")
        report = self.report
        if "seccomp" in item:
            report["seccomp"] = str(item["seccomp"])[:300]
        elif "defined" in item:
            report["defined"] = [str(e) for e in item["defined"] or []][:50]
            self.defined_at = time.monotonic()
        elif item.get("done"):
            report["done"] = True
        elif "found" in item:
            report["tasks"][str(item["task"])] = {
                "found": [str(n) for n in item["found"]],
                "outputs": [],
                "hits": [],
                "tampered": [],
                "refused": [],
            }
        else:
            entry = report["tasks"][str(item["task"])]
            if item["index"] != len(entry["outputs"]):
                raise ValueError("frames out of order")
            entry["outputs"].append(item["output"])
            entry["hits"] = [str(h) for h in item.get("hits") or []]
            entry["tampered"] = [str(t) for t in item.get("tampered") or []]
            entry["refused"] = [str(r) for r in item.get("refused") or []]

    async def consume(self, stream) -> None:
        while True:
            try:
                head = await stream.readexactly(len(MAGIC) + 8)
            except asyncio.IncompleteReadError as end:
                if end.partial:
                    raise ValueError("a frame cut short") from None
                return
            if head[: len(MAGIC)] != MAGIC:
                raise ValueError("not a frame of the runner's")
            size = int.from_bytes(head[len(MAGIC) :], "big")
            self.read += len(head) + size
            if self.read > self.limit:
                raise ValueError("the results were too large to read")
            data = await stream.readexactly(size)
            self.add(torch.load(io.BytesIO(data), weights_only=True, map_location="cpu"))
            if self.report["done"]:  # nothing after the end is read
                return


async def run(
    definitions: list[dict],
    tasks: list[dict],
    *,
    sandbox,
    edition,
    slot: int,
    name: str,
    timeout: float,
    startup_timeout: float,
) -> tuple[dict | None, str]:
    """Run ``tasks`` (plan items, with their ``ops``) on ``definitions`` in a fresh
    sandboxed interpreter. Returns (report or None, why it is missing or incomplete)."""
    private = sandbox.private_folder(name, slot)
    argv = sandbox.command(private, edition, slot, ["-P", "-m", _MODULE])
    frames, limits = _Frames(), sandbox.limits
    try:
        with open(private / "runner.log", "wb") as log:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                # unsandboxed, the environment bwrap would set inside (the edition)
                env=sandbox.outer_env()
                if sandbox.confined
                else sandbox.kernel_env(private, edition),
                limit=2**20,
            )

            watchers = watch_cases(process, private, limits)
            try:
                problem = await _talk(
                    process, frames, request_bytes(definitions, tasks), timeout,
                    startup_timeout,
                )
            finally:
                kill(process)
                await process.wait()
                from .kernel import _stop_watching

                overused = await _stop_watching(watchers)
                overused = overused or sandbox.release(private)
    finally:
        disk.remove(private)
    if overused is not None:
        return None, f"stopped: the checks of your functions: {overused}"
    return frames.report, problem


def kill(process) -> None:
    """Kill ``process`` (a sandbox: everything in it goes too), if it still runs."""
    try:
        process.kill()
    except ProcessLookupError:
        pass


def watch_cases(process, private, limits) -> list:
    """The watches of a cases interpreter (``process``, its ``private`` folder): its
    folder's size and files, the memory of all its processes; each kills it once over
    its limit. Stop them with ``kernel._stop_watching``."""
    from .kernel import watch

    async def stop():
        kill(process)

    return [
        asyncio.create_task(watch(look, stop))
        for look in (
            lambda: disk.overuse(private, limits.disk_mb * 2**20, limits.files),
            lambda: memory.overuse(process.pid, limits.total_memory_mb * 2**20),
        )
    ]


async def _talk(process, frames, request, timeout, startup_timeout) -> str:
    """Write the request, read the frames until the end or the deadline."""

    async def feed():
        try:
            process.stdin.write(request)
            await process.stdin.drain()
            process.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass

    feeding = asyncio.create_task(feed())
    try:
        return await read_frames(frames, process.stdout, timeout, startup_timeout)
    finally:
        feeding.cancel()
        await asyncio.gather(feeding, return_exceptions=True)


async def read_frames(frames, stream, timeout, startup_timeout) -> str:
    """Read the frames of ``stream`` into ``frames`` until the end or the deadline
    (``startup_timeout`` and then ``max(timeout, 30)`` seconds for the definitions, that
    much again from then on for the cases); "" or what went wrong, in words."""
    reading = asyncio.create_task(frames.consume(stream))
    limit = max(timeout, 30.0)
    started = time.monotonic()
    try:
        while not reading.done():
            if frames.defined_at is None:
                deadline = started + startup_timeout + limit
            else:
                deadline = frames.defined_at + limit
            left = deadline - time.monotonic()
            if left <= 0:
                return (
                    f"timed out: the checks of your functions did not finish in"
                    f" {limit:g} s (an endless loop?)"
                )
            await asyncio.wait([reading], timeout=min(left, 1.0))
        error = reading.exception()
        if error is not None:
            return f"the results could not be read ({error})"
        if not frames.report["done"]:
            return "the checks of your functions ended early (the process died)"
        return ""
    finally:
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
