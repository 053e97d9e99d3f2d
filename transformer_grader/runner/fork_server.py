"""A pristine parent for the cases interpreters of one kernel slot: ``python -P -m
transformer_grader.runner.fork_server``, started by the grader in the sandbox view (limits,
student edition, a private folder of its own), and kept for the batch.

Starting Python and importing PyTorch costs a second or two of CPU per notebook; on a
machine whose cores all run kernels that is the batch's time. So this process imports
what ``serve`` needs once and then, for each notebook, forks a child that is exactly a
fresh ``serve`` interpreter that has just read its request: the child runs the graded
definitions and the cases and sends its frames; this process never runs any of the
student's code, so every child starts from the same clean state.

The grader talks to it over the Unix socket it gets as standard input:

- it says ``READY`` once its imports are done (PyTorch, the runner, and the modules
  the tasks name in ``Task.imports``, given as ``--import NAME``);
- grader -> here: an 8-byte big-endian length and the request (``serve``'s bytes);
- here -> grader: ``FORK`` with the read end of a new pipe (``SCM_RIGHTS``): the child's
  frames come on that pipe alone, and it ends (end of file) when the child and all its
  processes are gone;
- here -> grader, once the child has ended: ``DONE`` then ``1`` (clean) or ``0``
  (something was left behind: the grader then stops this process and starts a new one
  for the next notebook).

Between two notebooks it makes sure the next child inherits nothing from the last:

- every other process of the sandbox is killed (``kill(-1)`` in the sandbox's own PID
  namespace, where only bubblewrap's init and this process remain; this process is the
  subreaper of whatever the child started, so it sees them end);
- the child's folders (its private folder, ``/tmp``, ``/dev/shm``) must hold exactly
  what they held when this process started (the same paths, files of the same size and
  time; empty folders it made are removed), no System V IPC object, no POSIX message
  queue (``/dev/mqueue``) and no key in a keyring (``/proc/keys``) may remain, or it
  reports ``0`` (the children's seccomp filter, ``syscalls``, refuses queues and keys
  in the first place: this is the second look);
- this process is not dumpable (``PR_SET_DUMPABLE`` 0): a child running as the same
  user cannot read or write its memory through ``/proc`` or ``ptrace``. A child that
  signals it (stops or kills it) only makes the grader start a new one: the grader
  waits a few seconds for ``DONE`` and otherwise kills the whole sandbox.

The child closes the socket before anything of the student's exists, so it cannot see
the next request or talk to the grader except through its own frames pipe.
"""

from __future__ import annotations

import fcntl
import importlib
import os
import signal
import socket
import struct
import sys
import time

READY, FORK, DONE = b"READY", b"FORK", b"DONE"
_PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 4, 36
_WATCHED = ("/tmp", "/dev/shm")


def _prctl(option: int, value: int) -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _imports(argv: list[str]) -> list[str]:
    """The modules named by ``--import NAME`` options (the grader's, from the tasks)."""
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--import"]


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _others() -> list[int]:
    """The processes of this PID namespace besides its init (1) and this one."""
    me = os.getpid()
    return [
        int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) not in (1, me)
    ]


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _kill_the_rest(own_namespace: bool, child: int, wait: float = 5.0) -> bool:
    """Kill whatever the last child left running; True once nothing is left."""
    if not own_namespace:  # only its own process group can be found: never clean
        try:
            os.killpg(child, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _reap()
        return False  # (the grader starts a new server: as safe as no server at all)
    deadline = time.monotonic() + wait
    while True:
        try:
            os.kill(-1, signal.SIGKILL)  # all but init and this process
        except ProcessLookupError:
            pass
        _reap()
        if not _others():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)


def _snapshot(folders, log: str) -> set:
    """What ``folders`` hold: every path, and each file's size and time of change (the
    log's apart: the grader empties it for each job)."""
    found = set()
    for folder in folders:
        for top, dirs, files in os.walk(folder):
            found.add(top)
            for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
                path = os.path.join(top, name)
                try:
                    info = os.lstat(path)
                except OSError:
                    info = None
                found.add(
                    path
                    if path == log or info is None
                    else (path, info.st_size, info.st_mtime_ns)
                )
    return found


def _tidy(folders, log: str, pristine: set) -> bool:
    """Remove the empty folders a child made (PyTorch makes
    ``/tmp/torchinductor_<user>`` when a training step imports its compiler); True if
    the folders then hold exactly what they held at the start."""
    now = _snapshot(folders, log)
    made = sorted(
        (p for p in now - pristine if isinstance(p, str)),
        key=lambda p: p.count(os.sep),
        reverse=True,
    )
    for path in made:
        try:
            os.rmdir(path)  # only an empty folder goes; anything else stays, and shows
        except OSError:
            return False
    return (_snapshot(folders, log) if made else now) == pristine


def _no_ipc() -> bool:
    for kind in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{kind}") as handle:
                if len(handle.read().strip().splitlines()) > 1:  # a header, then objects
                    return False
        except OSError:
            pass
    return True


def _no_queue(folder: str = "/dev/mqueue") -> bool:
    """No POSIX message queue in the sandbox's IPC namespace (the sandbox mounts its
    ``mqueue`` file system there; where it is not mounted there is nothing to list, and
    the children's seccomp filter refuses ``mq_open`` anyway)."""
    try:
        return not os.listdir(folder)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _no_key(path: str = "/proc/keys") -> bool:
    """No key in a keyring this process can see (``/proc/keys``: the keyrings
    themselves, empty, are fine; any other type is something a child added)."""
    try:
        with open(path) as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:  # a kernel without keys: nothing to keep
        return True
    except OSError:
        return False
    for line in lines:
        fields = line.split()
        if len(fields) < 8 or fields[7] != "keyring":
            return False
    return True


def _child(sock: socket.socket, read_end: int, write_end: int, raw: bytes) -> None:
    """In the forked child: become a fresh ``serve`` with its request; never returns."""
    code = 1
    try:
        sock.close()
        os.close(read_end)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.setpgid(0, 0)
        from .serve import _HIGH_FD, answer

        fd = fcntl.fcntl(write_end, fcntl.F_DUPFD_CLOEXEC, _HIGH_FD)
        os.close(write_end)
        code = answer(raw, fd)
    except BaseException:  # noqa: BLE001 - reported on standard error, then gone
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stderr.flush()
        finally:
            os._exit(code)


def main() -> int:
    sock = socket.socket(fileno=0)
    os.dup2(2, 1)  # nothing this process prints may go anywhere but its log
    import torch  # noqa: F401 - the cost every child would otherwise pay

    from . import dispatch, plan, restricted, serve  # noqa: F401 - likewise

    restricted.rules.policy()  # RestrictedPython's transformer, built once
    restricted.library_modules(())  # (imports the library's package list)

    # what the tasks' cases would import on first use, in every child (``Task.imports``:
    # an optimizer's first construction imports PyTorch's compiler stack, ~1.2 s of CPU)
    for name in _imports(sys.argv[1:]):
        importlib.import_module(name)

    if not (_prctl(_PR_SET_DUMPABLE, 0) and _prctl(_PR_SET_CHILD_SUBREAPER, 1)):
        return 1  # without both, a child could reach this process or escape its end
    # bubblewrap's init is 1 and this is 2: then kill(-1) reaches only the sandbox
    own_namespace = os.getpid() == 2 and "--sandboxed" in sys.argv
    work = os.getcwd()
    private = os.path.dirname(work)  # work/, ipc/ and the log: all its child may write
    log = os.path.join(private, "runner.log")
    folders = (private, *_WATCHED)
    pristine = _snapshot(folders, log)
    sock.sendall(READY)
    while True:
        try:
            size = struct.unpack(">Q", _recv_exactly(sock, 8))[0]
            if size > serve.MAX_REQUEST_BYTES:
                return 1
            raw = _recv_exactly(sock, size)
        except EOFError:  # the grader is done with this slot
            return 0
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:
            _child(sock, read_end, write_end, raw)
        os.close(write_end)
        del raw
        socket.send_fds(sock, [FORK], [read_end])
        os.close(read_end)
        try:
            os.waitpid(child, 0)
        except ChildProcessError:
            pass
        clean = _kill_the_rest(own_namespace, child)
        clean = clean and _tidy(folders, log, pristine) and _no_ipc()
        clean = clean and _no_queue() and _no_key()
        sock.sendall(DONE + (b"1" if clean else b"0"))


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)
