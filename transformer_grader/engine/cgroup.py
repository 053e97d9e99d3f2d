"""A memory cgroup per kernel, where the grader may make one (as root, with the cgroup
v1 memory controller mounted writable, or cgroup v2 with the memory controller).

The memory watch (``memory``) adds up what it can see from ``/proc`` a few times a
second; a cgroup is the kernel's own count of every page a group of processes charged:
mapped memory, page cache, ``memfd`` and ``/dev/shm`` files, the sandbox's in-memory
``/tmp``, System V shared memory. With a cgroup, a kernel's processes together cannot
pass ``Limits.total_memory_mb`` even between two looks: Linux's out-of-memory killer
then ends a process *of that group*, never a classmate's kernel or the grader.

Measured where this was written (a Linux 6.18 VM, cgroup v1 memory controller at
``/sys/fs/cgroup/memory``): as root, ``mkdir`` there works and a 100 MB group kills a
process holding memfds past it; an unprivileged user cannot make one (no delegation),
so there only the watch counts (``memory``: mapped memory, memfds held open, the
sandbox's in-memory folders).

The command is wrapped so that the shell that becomes bubblewrap enters the group
before it starts anything: ``sh -c 'echo $$ > cgroup.procs && exec "$@"'``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_V1 = Path("/sys/fs/cgroup/memory")
_V2 = Path("/sys/fs/cgroup")
_FOUND: list = []


def _root() -> tuple[Path, int] | None:
    """(folder where groups are made, cgroup version), or None if none can be made."""
    if _FOUND:
        return _FOUND[0]
    found = None
    if os.name == "posix" and os.geteuid() == 0:
        candidates = [(_V1, 1)]
        controllers = _V2 / "cgroup.subtree_control"
        try:
            if "memory" in controllers.read_text().split():
                candidates.append((_V2, 2))
        except OSError:
            pass
        for folder, version in candidates:
            probe = folder / f"tt-grade-probe-{os.getpid()}"
            try:
                probe.mkdir()
                limit = "memory.limit_in_bytes" if version == 1 else "memory.max"
                ok = (probe / limit).exists()
                probe.rmdir()
            except OSError:
                continue
            if ok:
                found = (folder, version)
                break
    _FOUND.append(found)
    return found


def available() -> bool:
    return _root() is not None


class MemoryGroup:
    """The cgroup of one kernel: ``wrap(command)`` puts it in, ``went_over()`` says
    whether the out-of-memory killer acted in it, ``remove()`` deletes it."""

    def __init__(self, name: str, limit_bytes: int):
        root = _root()
        if root is None:
            raise RuntimeError("no memory cgroup can be made here")
        folder, self.version = root
        self.path = folder / name
        self.limit = limit_bytes
        self.path.mkdir()
        if self.version == 1:
            (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))
            swap = self.path / "memory.memsw.limit_in_bytes"  # RAM and swap together
            if swap.exists():
                swap.write_text(str(limit_bytes))
        else:
            (self.path / "memory.max").write_text(str(limit_bytes))
            (self.path / "memory.swap.max").write_text("0")

    def wrap(self, command: list[str]) -> list[str]:
        procs = str(self.path / "cgroup.procs")
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs, *command]

    def went_over(self) -> bool:
        """Whether a process of the group was killed for the group's limit."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            for line in (self.path / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and int(value) > 0:
                    return True
        except (OSError, ValueError):
            pass
        return False

    def remove(self, wait: float = 5.0) -> bool:
        """Delete the group once its processes are gone (they were killed); False if
        some were still ending after ``wait`` seconds."""
        deadline = time.monotonic() + wait
        while True:
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.05)
