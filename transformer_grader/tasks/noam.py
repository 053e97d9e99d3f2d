"""The check of the learning-rate schedule: ``noam_lr(step, d_model, warmup) -> float``,
lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (paper eq. 3), step 0 treated
as step 1.
"""

from __future__ import annotations

import math
import random

import torch

from transformer_lib.training import noam_lr as _ref_noam
from ._helpers import type_name
from ._result import Failed, GradeResult
from ._task import Case, Task, check_function, returned
from ..runner.calls import CALLERS

NAME = "noam_lr"

MISTAKES = {
    "noam_max": (
        "You took the max of the two terms; the schedule is their min: step *"
        " warmup^-1.5 while warming up (it is the smaller one then), step^-0.5"
        " afterwards."
    ),
    "noam_no_scale": (
        "The factor d_model^-0.5 is missing: lrate = d_model^-0.5 * min(step^-0.5, "
        "step * warmup^-1.5)."
    ),
    "noam_warmup_exponent": (
        "The warm-up slope uses the wrong power of warmup: it is step * warmup^-1.5, so"
        " that the two terms meet at step = warmup."
    ),
    "noam_step_zero": (
        "Step 0 breaks the formula (0^-0.5 divides by zero): treat step 0 as step 1,"
        " e.g. step = max(step, 1). LambdaLR calls the schedule with 0 before the first"
        " update."
    ),
}


def noam_variant(step, d_model, warmup, bug=None):
    step = max(step, 1)
    scale = 1.0 if bug == "noam_no_scale" else d_model**-0.5
    slope = warmup**-0.5 if bug == "noam_warmup_exponent" else warmup**-1.5
    pick = max if bug == "noam_max" else min
    return scale * pick(step**-0.5, step * slope)


def _as_float(name, value) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.reshape(()))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise Failed(f"{name} should be a number (a float), got {type_name(value)}.")


# --------------------------------------------------------------------------------------
# The grader's side
# --------------------------------------------------------------------------------------
def _judge(inputs, outputs):
    if isinstance(outputs, dict) and outputs.get("error_type") == "ZeroDivisionError":
        raise Failed(f"{outputs['error']}\n{MISTAKES['noam_step_zero']}")
    found = returned(outputs)
    d_model, warmup = inputs["d_model"], inputs["warmup"]
    steps = (
        inputs["steps"]
        if "steps" in inputs
        else [s + 1 for s in range(inputs["updates"])]
    )
    if not isinstance(found, list) or len(found) != len(steps):
        raise Failed(f"expected {len(steps)} learning rates, got {type_name(found)}.")
    values = [_as_float("the learning rate", v) for v in found]
    for step, value in zip(steps, values):
        expected = _ref_noam(step, d_model, warmup)
        if math.isclose(value, expected, rel_tol=1e-6, abs_tol=1e-12):
            continue
        hint = next(
            (
                MISTAKES[bug]
                for bug in MISTAKES
                if bug != "noam_step_zero"
                and all(
                    math.isclose(v, noam_variant(s, d_model, warmup, bug), rel_tol=1e-6)
                    for s, v in zip(steps, values)
                )
            ),
            None,
        )
        if hint is None and (step == 0 or not math.isfinite(value)):
            hint = MISTAKES["noam_step_zero"]
        raise Failed(
            f"step {step} (d_model={d_model}, warmup={warmup}): expected "
            f"{expected:.6g}, got {value:.6g}." + (f"\n{hint}" if hint else "")
        )


def _values(name, steps, d_model=512, warmup=4000) -> Case:
    return Case(
        name,
        "values",
        dict(steps=list(steps), d_model=d_model, warmup=warmup),
        _judge,
        uses=(NAME,),
    )


def make_cases(present, seed: int = 0) -> list[Case]:
    """The schedule has no random input: ``seed`` 0 gives the notebook checks' sizes and
    steps; any other seed draws them (the same kinds of cases: warm-up, the peak, the
    decay, step 0, another size, inside ``LambdaLR``)."""
    if seed == 0:
        d, warm = 512, 4000
        early, late = (1, 2, 10, 100, 1000), (8000, 10**5, 10**6)
        d_model, warmup = 64, 10
        lam_d, lam_w, updates = 16, 5, 12
    else:
        rng = random.Random(seed)
        d, warm = 64 * rng.randint(2, 16), 100 * rng.randint(10, 80)
        early = tuple(sorted(rng.sample(range(1, warm), 5)))
        late = tuple(sorted(rng.sample(range(2 * warm, 300 * warm), 3)))
        d_model, warmup = 32 * rng.randint(1, 8), rng.randint(5, 25)
        lam_d, lam_w, updates = 8 * rng.randint(1, 8), rng.randint(3, 8), rng.randint(10, 16)
    shown = ", ".join(str(s) for s in early)
    return [
        _values(
            f"warm-up: steps {shown} (d_model={d}, warmup={warm})", early, d, warm
        ),
        _values(
            f"the peak: step = warmup = {warm}", (warm - 1, warm, warm + 1), d, warm
        ),
        _values(
            "decay after warm-up: steps "
            + ("8000, 10^5, 10^6" if seed == 0 else ", ".join(str(s) for s in late)),
            late,
            d,
            warm,
        ),
        _values("step 0 is treated as step 1 (no division by zero)", (0, 1), d, warm),
        _values(
            f"other sizes: d_model={d_model}, warmup={warmup}, steps 1 to 30",
            range(1, 31),
            d_model,
            warmup,
        ),
        Case(
            "in LambdaLR(optimizer, lambda s: noam_lr(s + 1, d_model, warmup)) with"
            f" lr=1.0: the rates of the first {updates} updates (d_model={lam_d},"
            f" warmup={lam_w})",
            "lambda_lr",
            dict(d_model=lam_d, warmup=lam_w, updates=updates),
            _judge,
            uses=(NAME,),
        ),
    ]

TASK = Task(
    name="noam",
    title="check_noam",
    names=(NAME,),
    callers=CALLERS["noam"],
    make_cases=make_cases,
    banned=("transformer_lib.training",),
    rules=(
        "the library's training module (transformer_lib.training: noam_lr, train_step,"
        " train)"
    ),
)


def check_noam(fn) -> GradeResult:
    """Check ``fn(step, d_model, warmup) -> float`` against
    ``transformer_lib.noam_lr``."""
    return check_function(TASK, NAME, fn)
