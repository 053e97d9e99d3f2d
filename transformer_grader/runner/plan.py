"""The grader's two cells in a graded kernel: the warm-up before the notebook's cells,
and the run of the plan after them.

- ``bootstrap(fd)`` first: it imports what grading needs (so that the import time does
  not count against the notebook's timeout) and makes the notebook's check cells
  (``check_attention(...)``) print a placeholder: no verdict is computed in the kernel.
  Given the grader's pipe ``fd`` (grading without a sandbox only), it installs the audit
  hook that reports file access outside the private folder (``audit``).
- ``run_plan(namespace, plan, out, nonce)`` last: the plan, written by the grader only
  now with inputs drawn for this run, lists each task's graded names, the references it
  may not use and its cases. Every case runs on the objects the notebook defined, with
  fresh copies of its inputs, under a ``Guard``; what came out is saved with
  ``torch.save`` to ``out`` after every case (a run cut short keeps what it did), with
  the run's nonce.

The grading process loads the outputs with ``torch.load(weights_only=True)`` (data only,
no code) and judges them there.
"""

from __future__ import annotations

import os
import sys

import torch

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


def _save(report: dict, path: str) -> None:
    partial = f"{path}.partial"
    torch.save(report, partial)
    os.replace(partial, path)


def run_plan(namespace: dict, plan_path: str, out_path: str, nonce: str) -> None:
    """The grader's last cell: run every case of the plan, save the outputs after each
    one."""
    plan = torch.load(plan_path, weights_only=True)
    report = {"nonce": nonce, "tasks": {}, "done": False}
    for item in plan["tasks"]:

        def save(entry, name=item["task"]):
            report["tasks"][name] = entry
            _save(report, out_path)

        save(run_task(item, namespace, save))
    report["done"] = True
    _save(report, out_path)
