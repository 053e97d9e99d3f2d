"""Our checks as nbgrader autograder tests: the points of a task, as a cell's value.

In an nbgrader course, add after a task's check cell an *autograder tests* cell
(nbgrader metadata ``"grade": true, "points": 10``, locked) holding::

    from transformer_grader.nbgrader import points
    points("attention", globals(), out_of=10)

nbgrader gives a test cell partial credit when its value is a number (``nbgrader
autograde``): the cell prints the feedback and evaluates to ``out_of`` times the task's
score. The cases run on a fresh seed, with the same ``Guard`` as batch grading (a graded
function that reaches the reference scores 0). Note that nbgrader runs these cells
*inside the student's kernel*, where a determined student can change what they compute:
for marks that cannot be forged, grade the collected ``submitted/`` folder with ``python
-m transformer_grader grade``.
"""

from __future__ import annotations

import contextlib
import io
import secrets
import warnings

from .tasks import TASKS
from .engine.verdict import grade_namespace


def points(
    task: str, namespace: dict, out_of: float = 1.0, seed: int | None = None
) -> float:
    """Grade ``task`` on the objects ``namespace`` defines; print the feedback, return
    the points."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    seed = secrets.randbelow(2**31) if seed is None else seed
    # nbgrader gives 0 to a test cell that writes to stderr: keep warnings and stray
    # output out.
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        verdict = grade_namespace(namespace, [task], seed=seed)[task]
    print(verdict["feedback"])
    return round(float(out_of) * verdict["score"], 4)
