"""Grading without a sandbox (``--no-sandbox``): which files a submission's kernel
touched outside its private folder, told to the grader at once.

In a sandbox the kernel sees no other submission, no grader and no instructor file, so
there is nothing to report. Without one, the kernel never learns where the submissions
are, but a program can still look for them (the grader's command line is in ``/proc``).
So the grader's first cell installs a Python audit hook (``runner/audit.py``) that
reports every file opened, folder listed, file renamed or removed, process started,
socket connected and ``gc`` search made outside the kernel's private folder. The lines
go into a pipe whose other end only the grading process holds: what was written cannot
be taken back, and a kernel that closes the pipe early is noticed (``Channel``).

The grading process then judges the lines (``findings``): touching the submissions
folder or another submission's private folder scores 0 and is flagged; starting
processes, opening sockets or searching the garbage collector is flagged. What the hook
cannot see: code that works below Python (a C extension, ``ctypes`` calls), and a
process the kernel started that lives on.
"""

from __future__ import annotations

import os
import threading
import time

from ..runner.audit import _PATH_EVENTS, PRIVATE_PREFIX


class Channel:
    """The pipe: ``fd`` goes to the kernel (``pass_fds``); a thread here reads until
    EOF. Where a file descriptor cannot be handed to a child (Windows), there is no
    channel: ``fd`` is None and nothing is reported."""

    def __init__(self):
        self._data = bytearray()
        self._eof_at = None
        self.ending_at = None  # set when the grader starts shutting the kernel down
        self._thread = None
        if os.name != "posix":
            self._read = self.fd = None
            return
        self._read, self.fd = os.pipe()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while True:
            chunk = os.read(self._read, 65536)
            if not chunk:
                self._eof_at = time.monotonic()
                return
            if len(self._data) < 2**21:
                self._data += chunk

    def launched(self) -> None:
        """The kernel holds its end now: close ours, so that EOF means the kernel let
        go."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def finish(self, wait: float = 10.0) -> tuple[list[tuple[str, str]], bool]:
        """(lines as (what, detail), whether the kernel closed the pipe before
        shutdown)."""
        self.launched()
        if self._thread is None:
            return [], False
        self._thread.join(wait)
        early = (
            self._eof_at is not None
            and self.ending_at is not None
            and self._eof_at < self.ending_at
        )
        if not self._thread.is_alive():
            os.close(self._read)
        lines = [
            tuple(line.split("\t", 1))
            for line in self._data.decode("utf-8", "replace").splitlines()
            if "\t" in line
        ]
        return lines, early


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(os.path.join(folder, ""))


def findings(lines, watched, own_private: str) -> tuple[list[str], bool]:
    """(flags in words, whether they cost the notebook its marks). ``watched``: folders
    no kernel has any business in (the submissions)."""
    watched = [os.path.realpath(p) for p in watched]
    own = os.path.realpath(own_private)
    flags, zero, other = [], False, []
    for what, detail in lines:
        if what in _PATH_EVENTS.values():
            real = os.path.realpath(detail)
            elsewhere = (
                PRIVATE_PREFIX in real
                and not _under(real, own)
                and any(part.startswith(PRIVATE_PREFIX) for part in real.split(os.sep))
            )
            if any(_under(real, folder) for folder in watched) or elsewhere:
                where = (
                    "another submission's private folder"
                    if elsewhere
                    else "the submissions"
                )
                flags.append(f"{what} {detail} ({where})")
                zero = True
            elif real.startswith(f"/proc/{os.getpid()}/") and os.path.basename(
                real
            ) not in (
                "stat",
                "status",
            ):  # ipykernel's own
                other.append(
                    f"{what} {detail} (the grader's process)"
                )  # check that we live
        else:
            other.append(f"{what} {detail}".strip())
    flags += list(dict.fromkeys(other))[:5]
    return list(dict.fromkeys(flags))[:10], zero
