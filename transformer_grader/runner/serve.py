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

then it runs the definitions, each statement compiled under its cell's name, and every
case under a ``Guard`` (``plan.run_task``), sending one frame per case on the grader's
pipe. A frame is ``MAGIC``, an 8-byte big-endian length and a ``torch.save``d dict:
``{"task", "found"}`` when a task starts, ``{"task", "index", "output", "hits",
"tampered"}`` after each case, ``{"done": True}`` at the end. The grader reads them as
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


def define(definitions: list[dict], namespace: dict) -> list[str]:
    """Run the graded definitions in ``namespace``; the errors they raised, in words."""
    errors = []
    for item in definitions:
        filename, source = str(item["file"]), str(item["source"])
        linecache.cache[filename] = (
            len(source),
            None,
            [line + "\n" for line in source.splitlines()],
            filename,
        )
        try:
            exec(compile(source, filename, "exec"), namespace)
        except BaseException as error:  # noqa: BLE001 - the student's code
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
            line = source.strip().splitlines()[0][:80] if source.strip() else ""
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
    from . import dispatch
    from .plan import bootstrap, run_task

    dispatch.block(sorted({op for item in request["tasks"] for op in item["ops"]}))
    bootstrap(None)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    errors = define(request["definitions"], namespace)
    send(fd, {"defined": errors})
    for item in request["tasks"]:

        def save(entry, task=item["task"]):
            index = len(entry["outputs"]) - 1
            send(
                fd,
                {
                    "task": task,
                    "index": index,
                    "output": entry["outputs"][index],
                    "hits": entry["hits"] + [h for h in dispatch.HITS],
                    "tampered": entry["tampered"],
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
