"""The seccomp filter of a cases interpreter (issue 37, item 3): what the process that
runs graded code may not ask the kernel for, whatever Python it reaches.

Restricted Python (``restricted.py``) keeps graded code away from ``os``, ``ctypes`` and
``subprocess``; this filter is what holds if it ever does not. Loaded with
``pyseccomp`` (ctypes bindings of the system's ``libseccomp.so.2``, pinned in
``requirements.txt``; Debian's ``python3-seccomp`` is not installable in a virtualenv),
once the runner has read its request and before any graded definition runs, it answers
``EPERM`` (an ``OSError`` the student sees, never a killed process) to

- ``execve``, ``execveat``: no program started;
- ``fork``, ``vfork``, and ``clone`` without ``CLONE_THREAD``: no new process (threads
  stay: PyTorch's intra-op pool is threads); ``clone3``, whose flags a filter cannot
  read, answers ``ENOSYS``, so that the C library falls back to ``clone``, which the
  filter can read;
- ``mq_open``, ``add_key``, ``keyctl``, ``request_key``: no POSIX message queue and no
  key in a keyring, the two places a warm fork server's children could leave a message
  for the next notebook's child (the parent checks both before it reuses itself).

The filter is inherited by everything the process starts (nothing, now) and cannot be
lifted (``no_new_privs``). Where ``libseccomp`` is missing or the kernel refuses the
filter, ``install`` says why and the cases run without it: the bubblewrap sandbox (own
PID, IPC, user and network namespaces, limits) still holds every notebook apart, and the
grader flags each of its rows (``flag``), so the instructor knows which rows were graded
with one wall fewer. (A grader that ran without the sandbox refuses unless told; the
filter is a second wall inside it, not a reason to refuse a whole batch.)
"""

from __future__ import annotations

import errno

CLONE_THREAD = 0x00010000
DENIED = ("execve", "execveat", "fork", "vfork", "mq_open", "add_key", "keyctl",
          "request_key")


def install() -> str:
    """Load the filter into this process: '' once it holds, else why it could not."""
    try:
        import ctypes.util

        if ctypes.util.find_library("seccomp") is None:
            return "libseccomp (libseccomp.so.2) is not installed"
        import pyseccomp as sc
    except Exception as error:  # noqa: BLE001 - any failure is a reason, said
        return f"pyseccomp could not load: {type(error).__name__}: {str(error)[:100]}"
    try:
        rules = sc.SyscallFilter(sc.ALLOW)
        eperm = sc.ERRNO(errno.EPERM)
        for name in DENIED:
            rules.add_rule(eperm, name)
        # a new process: clone without CLONE_THREAD (a thread sets it)
        rules.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
        rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        rules.load()
    except Exception as error:  # noqa: BLE001
        return f"the kernel refused the filter: {type(error).__name__}: {str(error)[:100]}"
    return ""


def flag(why: str) -> str:
    """The row's flag for cases that ran without the filter."""
    return f"its cases ran without the seccomp filter ({why}); the sandbox still held"
