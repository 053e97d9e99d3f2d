"""The watch on what all of a graded kernel's processes hold in memory
(``engine/memory.py``), without a kernel: which processes it counts, how it counts shared
pages, that it stops a kernel once, and that every kernel process is the out-of-memory
killer's first choice. The sandboxed batch with a memory bomb is in
``test_grading_attacks.py``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from transformer_grader.engine import memory
from transformer_grader.engine.kernel import WATCH_PERIOD, watch

MB = 2**20
LAUNCH = Path(memory.__file__).parents[1] / "runner" / "launch.py"

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads Linux's /proc"
)

# A process that holds ``MB`` megabytes (written, so resident), starts ``CHILDREN``
# copies of itself by fork (sharing those pages) and a grandchild, then waits.
HOLDER = """
import os, sys, time
held = b"x" * ({mb} * 2**20)
for _ in range({children}):
    if os.fork() == 0:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        time.sleep(60)
        os._exit(0)
print("ready", flush=True)
time.sleep(60)
"""


def _holder(mb: int, children: int = 0):
    process = subprocess.Popen(
        [sys.executable, "-S", "-c", HOLDER.format(mb=mb, children=children)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stdout.readline().strip() == "ready"
    time.sleep(0.2)  # the forks have run
    return process


def _end(process):
    import os
    import signal

    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def test_the_watch_counts_every_process_below_the_root():
    holder = _holder(8, children=3)
    try:
        found = memory.descendants(holder.pid)
        assert holder.pid in found
        assert len(found) == 1 + 3 + 3  # the children and their own children
    finally:
        _end(holder)


def test_memory_is_counted_and_shared_pages_only_once():
    alone = _holder(300)
    try:
        assert memory.used(alone.pid) > 290 * MB
    finally:
        _end(alone)
    forked = _holder(300, children=4)
    try:
        resident = sum(
            int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * 4096
            for pid in memory.descendants(forked.pid)
        )
        assert resident > 4 * 300 * MB  # each copy shows the shared pages as its own
        assert 290 * MB < memory.used(forked.pid) < 400 * MB  # counted once
    finally:
        _end(forked)


def test_the_watch_stops_the_kernel_past_the_limit():
    stopped = []

    async def stop():
        stopped.append(True)

    async def scenario(root, limit):
        watching = asyncio.create_task(watch(lambda: memory.overuse(root, limit), stop))
        try:
            return await asyncio.wait_for(watching, timeout=8 * WATCH_PERIOD)
        except asyncio.TimeoutError:
            return None

    holder = _holder(200)
    try:
        assert asyncio.run(scenario(holder.pid, 400 * MB)) is None  # below: watching
        assert stopped == []
        found = asyncio.run(scenario(holder.pid, 100 * MB))
    finally:
        _end(holder)
    assert found == "its processes held more than 100 MB of memory"
    assert stopped == [True]


def test_every_kernel_process_is_the_oom_killers_first_choice():
    done = subprocess.run(
        [
            sys.executable,
            str(LAUNCH),
            "NOFILE=256",
            "--",
            "-c",
            "print(open('/proc/self/oom_score_adj').read().strip())",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "1000"
