"""The notebook's source read in a small subprocess with limits, never in the grader.

Parsing is not free: IPython's input transformer and ``ast`` on one 4 MB cell of
``x = [a, a, ...]`` take gigabytes and minutes. So the grader hands the code cells to
``python -I .../engine/definitions.py`` (through ``runner/launch.py``:
``MEMORY_MB`` of address space, ``CPU_SECONDS`` of CPU time, ``WALL_SECONDS`` in all),
which answers in JSON (``definitions.main``). Code cells holding more than
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
_DEFINITIONS = str(Path(__file__).resolve().parent / "definitions.py")
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
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1"}
    # by path, isolated (-I): only the standard library and IPython, not the grader's
    # packages (importing them would import PyTorch: seconds per notebook)
    command = [sys.executable, _LAUNCH, *limits, "--", "-I", _DEFINITIONS]
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
