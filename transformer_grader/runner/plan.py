"""The grader's warm-up cell in a graded kernel, and the run of one task's cases.

- ``bootstrap(fd)``, the kernel's first cell: it imports what grading needs (so that
  the import time does not count against the notebook's timeout) and makes the
  notebook's check cells (``check_attention(...)``) print a placeholder: no verdict is
  computed in the kernel, and no case runs there. Given the grader's pipe ``fd``
  (grading without a sandbox only), it installs the audit hook that reports file access
  outside the private folder (``audit``).
- ``run_task(item, namespace)``: every case of one task (its graded names, the
  references it may not use, its cases) on the objects ``namespace`` defines, with
  fresh copies of its inputs, under a ``Guard``. Batch grading calls it in the fresh
  interpreter of ``serve``, never in the notebook's kernel; ``verdict.grade_namespace``
  calls it in-process.
"""

from __future__ import annotations

import sys

from .calls import CALLERS
from .cases import run_case
from .guard import Guard
from .placeholders import CHECKS, deferred


def bootstrap(channel_fd: int | None = None) -> None:
    """The grader's first cell: placeholders for the notebook-side checks and, given the
    grader's pipe, the audit hook."""
    if channel_fd is not None:
        from .audit import install

        install(channel_fd)
    for name in CHECKS:
        stub = deferred(name)
        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith(
                "transformer_grader"
            ) and hasattr(module, name):
                setattr(module, name, stub)


def run_task(item: dict, namespace: dict, save=None) -> dict:
    """Run one task of a plan (``{"task", "names", "banned", "cases"}``) on the objects
    ``namespace`` defines. Returns {"found": names, "outputs": [one per case], "hits":
    banned references reached, "tampered": [...]}. ``save(entry)`` is called after every
    case."""
    callers = CALLERS[item["task"]]
    objs = {name: namespace[name] for name in item["names"] if name in namespace}
    entry = {"found": sorted(objs), "outputs": [], "hits": [], "tampered": []}
    with Guard(item["banned"], [namespace]) as guard:
        for case in item["cases"]:
            entry["outputs"].append(
                run_case(
                    callers[case["call"]],
                    objs,
                    case["inputs"],
                    tuple(case["uses"]),
                    tuple(case["args"]),
                )
            )
            guard.check()
            entry["hits"], entry["tampered"] = list(guard.hits), list(guard.tampered)
            if save is not None:
                save(entry)
    entry["hits"], entry["tampered"] = list(guard.hits), list(guard.tampered)
    return entry
