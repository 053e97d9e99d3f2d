"""The notebook's source read in a small subprocess with limits, never in the grader.

Parsing is not free: IPython's input transformer and ``ast`` on one 4 MB cell of
``x = [a, a, ...]`` take gigabytes and minutes. So the grader hands the code cells to
``python -P -m transformer_grader.engine.source_check`` (through ``runner/launch.py``:
``MEMORY_MB`` of address space, ``CPU_SECONDS`` of CPU time, ``WALL_SECONDS`` in all),
which runs ``definitions.check`` and answers in JSON. Code cells holding more than
``MAX_SOURCE_CHARS`` characters in all are not even sent. A notebook over any of these
bounds is "not graded: too large to check" (0 on its tasks); the grader itself never
parses it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

MAX_SOURCE_CHARS = 2 * 2**20
MEMORY_MB = 1024
CPU_SECONDS = 30
WALL_SECONDS = 90
MAX_ANSWER_BYTES = 64 * 2**20
TOO_LARGE = "not graded: too large to check"
_LIBRARY = str(Path(__file__).resolve().parents[2])
_LAUNCH = str(Path(__file__).resolve().parents[1] / "runner" / "launch.py")


class TooLarge(ValueError):
    """The notebook's source is over the bounds of the check (the message says which)."""


def code_cells(nb) -> list[tuple[int, str]]:
    """(index, source) of each code cell, in the notebook's order."""
    found = []
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") == "code":
            source = cell.get("source", "")
            if isinstance(source, list):  # a notebook read as plain JSON
                source = "".join(str(line) for line in source)
            found.append((index, str(source)))
    return found


def check(nb, tasks: dict, groups: list) -> dict:
    """``definitions.check`` on ``nb``'s code cells, in a bounded subprocess; ``tasks``
    maps each task to its graded names, ``groups`` lists the name lists that need
    definitions of their own (one per kernel group). Raises ``TooLarge``."""
    cells = code_cells(nb)
    if sum(len(s) for _, s in cells) > MAX_SOURCE_CHARS:
        raise TooLarge(f"{TOO_LARGE} (its code passes {MAX_SOURCE_CHARS} characters)")
    request = json.dumps({"cells": cells, "tasks": tasks, "groups": groups})
    limits = [f"AS={MEMORY_MB * 2**20}", f"CPU={CPU_SECONDS}", "CORE=0"]
    env = {"PYTHONPATH": _LIBRARY, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    env.update({"PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"})
    command = [sys.executable, _LAUNCH, *limits, "--", "-P", "-m", __name__]
    try:
        done = subprocess.run(
            command,
            input=request.encode("utf-8"),
            capture_output=True,
            timeout=WALL_SECONDS,
            env=env,
        )
    except subprocess.TimeoutExpired:
        raise TooLarge(f"{TOO_LARGE} (reading it took over {WALL_SECONDS} s)") from None
    if done.returncode != 0 or len(done.stdout) > MAX_ANSWER_BYTES:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        why = "memory" if any("MemoryError" in line for line in said) else "time"
        raise TooLarge(
            f"{TOO_LARGE} (reading it went over the check's {why} limit)"
            if done.returncode != 0
            else f"{TOO_LARGE} (its definitions are too large)"
        )
    return json.loads(done.stdout)


def main() -> int:
    from .definitions import Source

    request = json.loads(sys.stdin.buffer.read(4 * MAX_SOURCE_CHARS))
    source = Source([(int(i), str(s)) for i, s in request["cells"]])
    out = {"review": source.review(), "tasks": {}, "groups": []}
    for task, names in request["tasks"].items():
        out["tasks"][task] = {
            "names": source.names_used(names),
            "policy": source.policy_hits(names),
            "found": [n for n in names if n in source.bindings],
        }
    for names in request["groups"]:
        out["groups"].append(source.definitions(names))
    sys.stdout.write(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
