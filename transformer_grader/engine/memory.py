"""What all of a kernel's processes hold in memory together, watched while it runs.

``RLIMIT_AS`` bounds each process of a kernel (``Limits.memory_mb``) and
``RLIMIT_NPROC`` their number, but not their sum: a notebook that forks a hundred
processes of 3 GB each would exhaust the machine, and the Linux out-of-memory killer
could then end a classmate's kernel or the grader. Two defences:

- every kernel process asks to be the OOM killer's first choice (``oom_score_adj``
  1000, set by ``runner/launch.py`` before the student's code runs; raising it needs no
  privilege, lowering it back does), so the grader is never picked before a kernel;
- ``overuse`` adds up the memory of all the kernel's processes (the descendants of the
  process the grader started; a process that detaches is adopted by the sandbox's
  first process, itself a descendant; ``kernel.watch`` asks a few times a second), and
  the kernel is stopped once the sum passes ``Limits.total_memory_mb``.

Memory is counted as the proportional set size (PSS, from ``/proc/PID/smaps_rollup``):
a page shared by n processes counts 1/n in each, so the copies of the kernel that a
``fork`` makes (a ``DataLoader``'s workers) cost only what they change. Where a
process's PSS cannot be read, its resident size is used instead.
"""

from __future__ import annotations

import os

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _parents() -> dict[int, int]:
    """pid -> parent pid, for every process this one can see."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                text = handle.read()
        except OSError:  # ended while we looked
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = text[text.rfind(b")") + 2 :].split()
        found[int(name)] = int(fields[1])
    return found


def descendants(root: int) -> list[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending += children.get(pid, [])
    return found


def _process_bytes(pid: int) -> int:
    """The memory of one process: its PSS, else its resident size, else 0 (gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as handle:
            for line in handle:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def used(root: int) -> int:
    """Bytes held by ``root`` and its descendants together."""
    return sum(_process_bytes(pid) for pid in descendants(root))


def overuse(root: int, max_bytes: int) -> str | None:
    """None while ``root`` and its descendants hold at most ``max_bytes`` together;
    else what went over."""
    if used(root) > max_bytes:
        return f"its processes held more than {max_bytes // 2**20} MB of memory"
    return None
