"""What batch grading runs inside a submission's kernel: the student's side only.

The grader sends two cells of its own around the notebook's cells:

- ``bootstrap(fd)`` first (before any cell of the notebook): the notebook's check cells
  (``check_attention(...)``) then only print that the grader checks outside the kernel,
  so the kernel never computes a verdict, and never runs a reference for them; and an
  audit hook reports file access outside the private folder into the grader's pipe
  ``fd`` (``audit``).
- ``run_plan(namespace, plan, out, nonce)`` last: the plan (written by the grader only
  now, with inputs drawn for this run) lists each task's cases; every case runs on the
  functions the notebook defined, under a ``Guard``, with fresh copies of its inputs.
  What came out is saved with ``torch.save`` to ``out``, after every case, with the
  run's nonce (a number only this cell holds: a file the notebook wrote itself does not
  carry it).

Nothing here compares with a reference: the grading process loads the outputs with
``torch.load(weights_only=True)`` (data only, no code) and judges them (``verdict``).
"""

from __future__ import annotations

import os

import torch

from ._task import run_case
from .guard import Guard
from .tasks import TASKS


class _Deferred:
    """What a check cell shows while batch grading: the checks run outside the
    kernel."""

    def __init__(self, name: str):
        self.name = name
        self.score = 0.0

    def __bool__(
        self,
    ) -> bool:  # a cell with `assert check_loss(...)` must not crash the run
        return True

    def __repr__(self) -> str:
        return (
            f"{self.name}: not run here (the grader checks your code outside this"
            " kernel)"
        )


def _deferred(name: str):
    def check(*args, **kwargs):
        return _Deferred(name)

    check.__name__ = name
    return check


def bootstrap(channel_fd: int | None = None) -> None:
    """The grader's first cell: replace the notebook-side checks by placeholders and,
    given the grader's pipe, install the audit hook that reports file access outside the
    private folder.
    """
    import sys

    from .. import grading
    from .audit import install

    if channel_fd is not None:
        install(channel_fd)
    for name in grading.CHECKS:
        stub = _deferred(name)
        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith(
                "transformer_lib.grading"
            ) and hasattr(module, name):
                setattr(module, name, stub)


def run_task(task, cases: list[dict], namespace: dict, save=None) -> dict:
    """Run one task's cases on the objects ``namespace`` defines. Returns {"found":
    names, "outputs": [one per case], "hits": banned references reached, "tampered":
    [...]}. ``save(entry)`` is called after every case (so a run cut short keeps what it
    did).
    """
    objs = {name: namespace[name] for name in task.names if name in namespace}
    entry = {"found": sorted(objs), "outputs": [], "hits": [], "tampered": []}
    with Guard(task.banned, [namespace]) as guard:
        for case in cases:
            entry["outputs"].append(
                run_case(
                    task,
                    case["call"],
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

        save(run_task(TASKS[item["task"]], item["cases"], namespace, save))
    report["done"] = True
    _save(report, out_path)
