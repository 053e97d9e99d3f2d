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

Memory that no process maps counts too: ``memfd_create`` files and files on an
in-memory file system (``/dev/shm``, the sandbox's ``/tmp``) held open by one of its
processes (their allocated blocks, each file once, found through ``/proc/PID/fd``),
and what the sandbox's own in-memory ``/tmp`` and ``/dev/shm`` hold (``statvfs``
through ``/proc/PID/root``; never the grader's own folders). Pages that are both
mapped and held open count twice: the error is on the notebook's side. Where the
grader runs as root, each kernel is also in a memory cgroup of its own (``cgroup``),
which counts every page, System V shared memory included.
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


def _held_files(pid: int, seen: set) -> int:
    """Blocks of the in-memory files ``pid`` holds open that no folder shows: memfds,
    and files in a ``/dev/shm`` that is not the sandbox's own (which ``_sandbox_tmpfs``
    counts whole); each (device, inode) once across calls sharing ``seen``."""
    total = 0
    folder = f"/proc/{pid}/fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    for name in names:
        path = f"{folder}/{name}"
        try:
            target = os.readlink(path)
            if not (
                target.startswith("/memfd:")
                or target.startswith("/dev/shm/")
                and not _private_mount(pid, "/dev/shm")
            ):
                continue
            info = os.stat(path)  # the open file itself, whatever its name now
        except OSError:
            continue
        key = (info.st_dev, info.st_ino)
        if key not in seen:
            seen.add(key)
            total += info.st_blocks * 512
    return total


def _private_mount(pid: int, target: str) -> bool:
    """Whether ``target``'s top folder, seen from ``pid``, is another mount than the
    grader's own (a sandbox's tmpfs, not the host's /tmp)."""
    top = "/" + target.strip("/").split("/")[0]
    try:
        return os.stat(f"/proc/{pid}/root{top}").st_dev != os.stat(top).st_dev
    except OSError:
        return False


def _sandbox_tmpfs(pids) -> int:
    """Bytes used in the sandbox's own in-memory ``/tmp`` and ``/dev/shm`` (once per
    mount), seen through a kernel process's root."""
    total, seen = 0, set()
    for pid in pids:
        for top in ("/tmp", "/dev/shm"):
            if not _private_mount(pid, top):
                continue
            try:
                where = f"/proc/{pid}/root{top}"
                device = os.stat(where).st_dev
                if device in seen:
                    continue
                seen.add(device)
                fs = os.statvfs(where)
            except OSError:
                continue
            total += (fs.f_blocks - fs.f_bfree) * fs.f_frsize
    return total


def used(root: int) -> int:
    """Bytes held by ``root`` and its descendants together: their memory, the
    in-memory files they hold open, and the sandbox's in-memory folders."""
    pids, seen = descendants(root), set()
    mapped = sum(_process_bytes(pid) for pid in pids)
    held = sum(_held_files(pid, seen) for pid in pids)
    return mapped + held + _sandbox_tmpfs(pids)


def overuse(root: int, max_bytes: int) -> str | None:
    """None while ``root`` and its descendants hold at most ``max_bytes`` together;
    else what went over."""
    if used(root) > max_bytes:
        return f"its processes held more than {max_bytes // 2**20} MB of memory"
    return None
