"""The grader's side: judge what a task's cases gave back, into a score and feedback.

``judge_task`` turns one task's outputs (from ``kernel.run_task``, in a kernel or in
this process) into ``{"score", "passed", "total", "feedback", "flags"}``. Every case is
judged here, against the reference, on the inputs the grader drew; a case that never ran
(a run cut short) fails. ``grade_namespace`` runs both sides in this process (tests,
nbgrader's autograder cells).
"""

from __future__ import annotations

from .bounds import bounded_entry
from ..tasks._result import GradeResult
from ..tasks._task import Case, Task, judge_case
from ..runner.plan import run_task
from ..tasks import TASKS

# What a stand-in of the student edition raises when the reference is used.
_UNAVAILABLE = "ReferenceUnavailable"


def plan_item(task: Task, cases: list[Case]) -> dict:
    """One task of a kernel's plan, as data for ``torch.save``: what the runner needs to
    run the student's half of each case, and no more."""
    return {
        "task": task.name,
        "names": list(task.names),
        "banned": list(task.banned),
        "ops": list(task.ops),
        "imports": list(task.imports),
        "cases": [
            {
                "call": c.call,
                "inputs": c.inputs,
                "uses": list(c.uses),
                "args": list(c.args),
            }
            for c in cases
        ],
    }


def _unavailable_used(outputs: list) -> list[str]:
    """The references a case reached in the student edition (their stand-ins raised)."""
    used = []
    for out in outputs:
        if isinstance(out, dict) and out.get("error_type") == _UNAVAILABLE:
            label = str(out.get("error_message", "")).split(" is not available", 1)[0]
            if label and label not in used:
                used.append(label)
    return used


def _short(labels) -> str:
    labels = [str(label) for label in labels]
    return ", ".join(labels[:3]) + (
        f" and {len(labels) - 3} more" if len(labels) > 3 else ""
    )


def judge_task(
    task: Task, cases: list[Case], entry: dict | None, missing_reason: str = ""
) -> dict:
    """Score one task. ``entry`` is what ``run_task`` returned (None: the task never
    ran, for ``missing_reason``). A task whose code reached a banned reference, or
    interfered with the grader's watch, scores 0 whatever its outputs. Every output
    is bounded (``bounds``) before any judge computes on it."""
    total = len(cases)
    entry = bounded_entry(entry)
    if entry is None:
        why = missing_reason or "not graded"
        return {
            "score": 0.0,
            "passed": 0,
            "total": total,
            "flags": [],
            "feedback": f"{task.title}: 0/{total}: {why}.",
        }
    outputs = entry["outputs"]
    refused = [
        o["failed"] for o in outputs if isinstance(o, dict) and o.get("refused")
    ]
    hits = [str(h) for h in entry.get("hits") or []]
    hits += [h for h in _unavailable_used(outputs) if h not in hits]
    tampered = [str(t) for t in entry.get("tampered") or []]
    if tampered:
        return {
            "score": 0.0,
            "passed": 0,
            "total": total,
            "flags": [f"{task.name}: {t}" for t in tampered],
            "feedback": (
                f"{task.title}: 0/{total}: your code interfered with the grader "
                f"({'; '.join(tampered)})."
            ),
        }
    if hits:
        return {
            "score": 0.0,
            "passed": 0,
            "total": total,
            "flags": [f"{task.name}: used {_short(hits)}"],
            "feedback": (
                f"{task.title}: 0/{total}: your code used {_short(hits)} while it "
                "was graded. This task asks for your own implementation: do not "
                f"call {task.rules}."
            ),
        }
    result = GradeResult(task.title)
    for index, case in enumerate(cases):
        if index < len(outputs):
            judge_case(result, case, outputs[index])
        else:
            result.add(case.name, False, missing_reason or "this case did not run.")
    found = entry.get("found") or []
    feedback = result.feedback()
    absent = [n for n in task.names if n not in found]
    if absent and len(absent) < len(task.names):
        feedback += f"\n(not found: {', '.join(absent)})"
    flags = [f"{task.name}: {refused[0]}"] if refused else []
    # what the guards of restricted Python refused (no reference reached): for review
    flags += [
        f"{task.name}: graded code was refused: {r}"
        for r in (entry.get("refused") or [])[:5]
    ]
    return {
        "score": result.score,
        "passed": result.passed,
        "total": result.total,
        "feedback": feedback,
        "flags": flags,
    }


def judge_source(task: Task, cases: list[Case], used: list[str]) -> dict:
    """Score 0: the graded code names references the task bans (``static``)."""
    total = len(cases)
    return {
        "score": 0.0,
        "passed": 0,
        "total": total,
        "flags": [f"{task.name}: its code names {_short(used)}"],
        "feedback": (
            f"{task.title}: 0/{total}: your code uses {_short(used)}. This task asks"
            f" for your own implementation: do not call {task.rules}."
        ),
    }


def policy_flags(task: Task, hits: list[str]) -> list[str]:
    """Flags (no score change) for what the guards of graded code would refuse in the
    graded code, read from its source (``definitions.policy_hits``): a rule broken that
    reaches no reference is for the instructor's review. 0 is only for what reaches a
    reference: a banned name in the source (``judge_source``) or a hit while the cases
    ran (``judge_task``)."""
    flags = [f"{task.name}: the grader would refuse its graded code: {h}" for h in hits[:5]]
    if len(hits) > 5:
        flags.append(f"{task.name}: and {len(hits) - 5} more lines the grader would refuse")
    return flags


def grade_namespace(namespace: dict, tasks=None, seed: int = 0) -> dict:
    """Grade the objects found in ``namespace``, in this process: {task: verdict}.

    ``tasks``: the tasks to grade (None: every task with a name in the namespace). Both
    halves run here, the student's half under a ``Guard``: meant for code you trust not
    to attack the grader (tests, the author's own notebook); batch grading keeps them in
    separate processes.
    """
    if tasks is None:
        tasks = [
            name
            for name, task in TASKS.items()
            if any(n in namespace for n in task.names)
        ]
    out = {}
    for name in tasks:
        task = TASKS[name]
        cases = task.make_cases(task.names, seed)
        entry = run_task(plan_item(task, cases), namespace)
        out[name] = judge_task(task, cases, entry)
    return out
