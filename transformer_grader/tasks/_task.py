"""Tasks and cases: how a check is split between the student's process and the grader's.

A check is a list of ``Case``s. Each case has two halves:

- ``call`` runs on the student's side: it names one of the task's callers
  (``runner/calls.py``), which feeds the case's inputs (fresh copies, every time) to the
  student's code; ``runner.cases.run_case`` returns what came out as plain data:
  tensors, numbers, strings, lists and dicts. It decides nothing.
- ``judge`` runs on the grader's side. It compares that data with the reference
  implementation on the same inputs and raises ``Failed`` with a message for the
  student, naming the classic mistake when it recognises one. A case passes only when
  its judge accepts the data.

``check_attention(fn)`` and friends run both halves in one process (feedback in a
notebook). Batch grading runs ``call`` in the student's sandboxed kernel, where only the
runner exists, and ``judge`` in the grading process, so nothing a notebook does to its
own kernel can change how its outputs are judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ._result import Failed, GradeResult
from ..runner.cases import run_case


@dataclass
class Case:
    """One test case: ``name`` (shown to the student), ``call`` (a key of the task's
    ``callers``), ``inputs`` (tensors and plain values), ``judge(inputs, outputs)``
    (raises ``Failed``), ``uses`` (the graded names it needs), ``args`` (input keys
    handed to the student's code: changing one of them in place is a mistake)."""

    name: str
    call: str
    inputs: dict
    judge: Callable[[dict, object], None]
    uses: tuple[str, ...] = ()
    args: tuple[str, ...] = ()


@dataclass
class Task:
    """A graded task: the names a notebook defines, how to test them, what they may not
    use.

    ``make_cases(present, seed)`` builds the cases for the graded names in ``present``;
    ``seed`` 0 gives the fixed inputs of the notebook checks, batch grading draws a
    fresh one per run. ``banned``: dotted names of the reference implementations that
    graded code must not reach (see ``guard``). ``rules``: the same in words, for the
    student. ``ops``: the ATen operators those references end in, blocked in the
    dispatcher while the cases run in batch grading (``runner/dispatch.py``), whatever
    route the code takes to them. ``imports``: modules its cases import on first use
    that cost much (an optimizer's first construction imports PyTorch's compiler stack,
    about 1.2 s): the batch's fork servers import them once (``runner/fork_server.py``),
    not every notebook's cases.
    """

    name: str
    title: str
    names: tuple[str, ...]
    callers: dict[str, Callable[[dict, dict], object]]
    make_cases: Callable[[tuple[str, ...], int], list[Case]]
    banned: tuple[str, ...] = ()
    rules: str = ""
    ops: tuple[str, ...] = ()
    imports: tuple[str, ...] = ()
    notes: dict = field(default_factory=dict)


# --------------------------------------------------------------------------------------
# The grader's side: judge what came back.
# --------------------------------------------------------------------------------------
def returned(outputs, inputs: dict | None = None):
    """The value the student's code returned, or ``Failed`` for what went wrong
    instead."""
    if not isinstance(outputs, dict):
        raise Failed("no result came back for this case.")
    if outputs.get("missing"):
        names = " / ".join(str(n) for n in outputs["missing"])
        raise Failed(f"not found: define {names} in the notebook.")
    if "failed" in outputs:
        raise Failed(str(outputs["failed"]))
    if "error" in outputs:
        raise Failed(str(outputs["error"]))
    mutated = outputs.get("mutated") or []
    if mutated:
        name = str(mutated[0])
        others = (
            f" (also: {', '.join(map(str, mutated[1:]))})" if len(mutated) > 1 else ""
        )
        raise Failed(
            f"Your function changed its input {name} in place{others}; it must not"
            f" modify its inputs (avoid in-place ops like {name}.mul_(),"
            f" {name}.masked_fill_(...) or {name} /= ...)."
        )
    if "value" not in outputs:
        raise Failed("no result came back for this case.")
    return outputs["value"]


def judge_case(result: GradeResult, case: Case, outputs) -> bool:
    """Add the case's verdict to ``result``. Only ``Failed`` is a student's mistake; any
    other exception here means the data could not be checked, which fails the case
    too."""
    try:
        case.judge(case.inputs, outputs)
    except Failed as failure:
        result.add(case.name, False, str(failure))
    except Exception as error:
        result.add(
            case.name,
            False,
            f"could not check this case ({type(error).__name__}: {str(error)[:200]}).",
        )
    else:
        result.add(case.name, True, "")
    return result.cases[-1][1]


def check_function(task: Task, name: str, fn) -> GradeResult:
    """The notebook check of a task with one function to write: refuse what is not
    callable, else ``run_check`` with ``fn`` as ``name``."""
    result = GradeResult(task.title)
    if not callable(fn):
        result.add(
            "is a function", False, f"Expected a function, got {type(fn).__name__}."
        )
        return result
    return run_check(task, {name: fn}, result)


def run_check(
    task: Task, objs: dict, result: GradeResult | None = None, seed: int = 0
) -> GradeResult:
    """Both halves in this process: the notebook checks (``check_attention(fn)``,
    ...)."""
    result = result or GradeResult(task.title)
    present = tuple(name for name in task.names if objs.get(name) is not None)
    objs = {name: objs[name] for name in present}
    for case in task.make_cases(present, seed):
        caller = task.callers[case.call]
        outputs = run_case(caller, objs, case.inputs, case.uses, case.args)
        judge_case(result, case, outputs)
    result.warnings += notebook_warnings(task.names)
    return result


def notebook_warnings(names, cells=None) -> list[str]:
    """What the batch grader would refuse in the graded code of ``names`` (the rules of
    ``runner/rules.py``, read from the source as the grader reads it), one warning per
    line: "the grader would refuse In [N], line M: it ...". ``cells``: (execution count,
    source) pairs; None: the IPython history of the running notebook (none outside
    IPython). A cell run again later (the same names defined) counts once, as its last
    run. Never raises: a warning that cannot be computed is left out."""
    try:
        if cells is None:
            from IPython import get_ipython

            shell = get_ipython()
            if shell is None:
                return []
            history = shell.user_ns.get("In") or []
            cells = [(i, str(s)) for i, s in enumerate(history) if s]
        from ..engine import definitions

        cells = _last_runs(list(cells))
        hits = definitions.Source(cells).policy_hits(list(names))
    except Exception:  # noqa: BLE001 - a warning is a courtesy, never a failure
        return []
    out = []
    for hit in hits:
        why, _, where = hit.rpartition(" (")
        where = where.rstrip(")").replace("cell ", "In [", 1).replace(", line", "], line", 1)
        out.append(f"the grader would refuse {where}: your code {why}"
                   " (the cases that need this line would fail when graded)")
    return out


def _last_runs(cells):
    """``cells`` less those a later cell runs again (it defines the same top-level
    functions and classes)."""
    import ast

    def defined(source):
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return frozenset()
        return frozenset(
            n.name for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        )

    names = [defined(s) for _, s in cells]
    return [
        cell
        for i, cell in enumerate(cells)
        if not names[i] or not any(names[i] <= later for later in names[i + 1:])
    ]
