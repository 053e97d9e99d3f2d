"""The kernel's half of the file-access report, used only when grading without a
sandbox.

``install(fd)`` adds a Python audit hook (``sys.addaudithook``: it cannot be removed
once added) that reports, as one line each, every file opened, folder listed, file
renamed or removed, process started, socket connected and ``gc`` search made outside the
kernel's private folder and Python's own installation, into the grader's pipe ``fd``.
The grading process judges the lines (``engine/audit.py``). In a sandbox none of this is
needed: the kernel sees no file worth reporting.
"""

from __future__ import annotations

import os
import site
import sys

_PATH_EVENTS = {
    "open": "opened",
    "os.listdir": "listed",
    "os.scandir": "listed",
    "glob.glob": "searched",
    "os.rename": "renamed",
    "os.remove": "removed",
    "os.rmdir": "removed",
    "shutil.rmtree": "removed",
    "os.truncate": "truncated",
    "os.chmod": "changed",
    "os.utime": "changed",
    "os.mkdir": "created",
    "shutil.copyfile": "copied",
    "shutil.move": "moved",
}
_OTHER_EVENTS = {
    "subprocess.Popen": "started a process",
    "os.system": "started a process",
    "os.posix_spawn": "started a process",
    "os.exec": "started a process",
    "os.fork": "started a process",
    "socket.connect": "opened a connection",
    "gc.get_objects": "searched the garbage collector",
    "gc.get_referrers": "searched the garbage collector",
    "gc.get_referents": "searched the garbage collector",
}
MAX_LINES = 5000
PRIVATE_PREFIX = "tt-grade-"


def install(fd: int) -> None:
    """Add the audit hook; it writes ``what<TAB>detail`` lines to ``fd`` (the grader's
    pipe)."""
    write, fsdecode, abspath = os.write, os.fsdecode, os.path.abspath
    private = os.path.dirname(os.getcwd()) + os.sep  # the kernel's private folder
    known = {
        private,
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        os.path.dirname(os.path.dirname(__file__)),
    }
    known.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    known = tuple(os.path.join(p, "") for p in known if p)
    state = {"lines": 0}

    def emit(what: str, detail: str) -> None:
        if state["lines"] >= MAX_LINES:
            return
        state["lines"] += 1
        line = f"{what}\t{detail}".replace("\n", " ")[:500] + "\n"
        try:
            write(fd, line.encode("utf-8", "replace"))
        except OSError:
            pass

    def hook(event, args):
        what = _PATH_EVENTS.get(event)
        if what is not None:
            if not args or isinstance(args[0], int) or args[0] is None:
                return
            try:
                path = abspath(fsdecode(args[0]))
            except Exception:
                return
            if not path.startswith(known) and path + os.sep != private:
                emit(what, path)
            return
        what = _OTHER_EVENTS.get(event)
        if what is not None:
            emit(what, repr(args[:2])[:300] if event != "gc.get_objects" else "")

    sys.addaudithook(hook)
