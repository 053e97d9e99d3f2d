"""The fresh interpreter that runs a notebook's test cases: ``python -P -m
transformer_grader.runner.serve``, started by the grader in the notebook's sandbox
view (same limits, same student edition), beside the notebook's own kernel and without
any link to it.

Before any of the student's code exists here, it

1. keeps its standard output for the grader alone (a descriptor of its own; the
   student's ``print`` goes to standard error) and reads the grader's request from
   standard input, as data (``torch.load(weights_only=True)``, at most
   ``MAX_REQUEST_BYTES``): the graded definitions (``definitions``: the notebook's
   graded functions and classes, the helpers, constants and imports they use, and
   nothing else) and, for each task, its cases and the ATen operators it bans;
2. blocks those operators in the dispatcher (``dispatch.block``) and makes the check
   functions placeholders;

then it runs the definitions, each statement compiled as restricted Python under its
cell's name (``restricted``: every attribute access, import, item access and iteration
goes through its guards) with the watch (``Guard``) already on, so that what a
definition does is seen like what a case does; and every case under a ``Guard``
(``plan.run_task``), sending one frame per case on the grader's
pipe. A frame is ``MAGIC``, an 8-byte big-endian length and a ``torch.save``d dict:
``{"task", "found"}`` when a task starts, ``{"task", "index", "output", "hits",
"tampered", "refused"}`` after each case (``refused``: what the guards refused that
reaches no reference, for the instructor's review), ``{"done": True}`` at the end;
before any graded definition runs, ``{"seccomp": why}`` says whether the seccomp filter
(``syscalls``) holds ("" when it does). The grader reads them as
data (``submission``) and judges outside.
"""

from __future__ import annotations

import fcntl
import io
import linecache
import os
import sys

MAGIC = b"TTR1"
MAX_REQUEST_BYTES = 256 * 2**20
_HIGH_FD = 300  # (below RLIMIT_NOFILE) where the grader's pipe is kept, out of the way of the student's files


def _channel() -> int:
    """Keep standard output for the grader: a descriptor of its own; 1 becomes 2."""
    fd = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, _HIGH_FD)
    os.dup2(2, 1)
    return fd


def _read_request(limit: int = MAX_REQUEST_BYTES) -> bytes:
    chunks, size = [], 0
    while True:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise ValueError("the grader's request is too large")
        chunks.append(chunk)


def send(fd: int, item: dict) -> None:
    import torch

    buffer = io.BytesIO()
    torch.save(item, buffer)
    data = buffer.getvalue()
    frame = MAGIC + len(data).to_bytes(8, "big") + data
    view = memoryview(frame)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def define(definitions: list[dict], namespace: dict, compile_graded=None) -> list[str]:
    """Run the graded definitions in ``namespace``; the errors they raised, in words.
    ``compile_graded(source, filename) -> (code, errors)`` compiles them (restricted
    Python); None: plain ``compile`` (code the caller trusts)."""
    errors = []
    trusted = None
    for item in definitions:
        filename, source = str(item["file"]), str(item["source"])
        if item.get("trusted"):
            # the grader's own code, never a notebook's (``submission`` passes only
            # "file" and "source" on): tests use it to stand for code that got past
            # restricted Python; its names join the namespace, its globals are its own
            if trusted is None:
                import builtins

                trusted = {"__builtins__": builtins, "__name__": "__main__"}
            exec(compile(source, filename, "exec"), trusted)
            namespace.update({k: v for k, v in trusted.items() if not k.startswith("__")})
            continue
        linecache.cache[filename] = (
            len(source),
            None,
            [line + "\n" for line in source.splitlines()],
            filename,
        )
        line = source.strip().splitlines()[0][:80] if source.strip() else ""
        if compile_graded is None:
            code, refused = compile(source, filename, "exec"), []
        else:
            try:
                code, refused = compile_graded(source, filename)
            except SyntaxError as error:
                code, refused = None, [f"Line {error.lineno}: {error.msg}"]
        if code is None:
            errors.append(
                f"{filename[1:-1]} ({line}) is not allowed in graded code: "
                + "; ".join(str(r) for r in refused[:3])
            )
            continue
        try:
            exec(code, namespace)
        except BaseException as error:  # noqa: BLE001 - the student's code
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
            errors.append(
                f"{filename[1:-1]} ({line}) raised {type(error).__name__}:"
                f" {str(error)[:200]}"
            )
    return errors


def main() -> int:
    fd = _channel()
    return answer(_read_request(), fd)


def answer(raw: bytes, fd: int) -> int:
    """Run the request ``raw`` (the grader's bytes) and send its frames on ``fd``: the
    whole life of a cases interpreter once it has its request (here, or in a child of
    ``fork_server``)."""
    import torch

    request = torch.load(io.BytesIO(raw), weights_only=True, map_location="cpu")
    from . import dispatch, syscalls
    from .guard import Guard
    from .plan import bootstrap, run_task
    from .restricted import Guards, compile_graded, library_modules

    dispatch.block(sorted({op for item in request["tasks"] for op in item["ops"]}))
    bootstrap(None)
    banned = sorted({b for item in request["tasks"] for b in item["banned"]})
    guards = Guards(banned, library_modules(banned))
    namespace = guards.namespace()
    # the seccomp filter (no exec, no new process, no message queue or key), before any
    # graded code runs; where it cannot load, the grader flags the row with why
    send(fd, {"seccomp": syscalls.install()})
    # The watch starts before any graded definition runs: what a definition does (a
    # table computed, a reference reached) is seen like what a case does.
    with Guard(banned, [namespace]) as watch:
        errors = define(request["definitions"], namespace, compile_graded)
    early_hits, early_tampered = list(watch.hits), list(watch.tampered)
    send(fd, {"defined": errors})
    for item in request["tasks"]:
        mine = set(item["banned"])

        def ours(labels, mine=mine):
            return [h for h in labels if h in mine or h.startswith(tuple(m + "." for m in mine))]

        def save(entry, task=item["task"], ours=ours):
            index = len(entry["outputs"]) - 1
            hits = entry["hits"] + [h for h in dispatch.HITS]
            hits += [h for h in ours(early_hits + guards.hits) if h not in hits]
            send(
                fd,
                {
                    "task": task,
                    "index": index,
                    "output": entry["outputs"][index],
                    "hits": hits,
                    "tampered": entry["tampered"] + early_tampered,
                    "refused": [f"{why} ({where})" for why, where in guards.refused],
                },
            )

        dispatch.HITS.clear()  # what this task's cases reach
        objs = [n for n in item["names"] if n in namespace]
        send(fd, {"task": item["task"], "found": objs})
        run_task(item, namespace, save)
    send(fd, {"done": True})
    return 0


if __name__ == "__main__":
    code = main()
    # No interpreter teardown (PyTorch's takes a few tenths of a second of CPU, per
    # notebook) and no exit handler of anyone's: the grader has what it reads.
    sys.stderr.flush()
    os._exit(code)
