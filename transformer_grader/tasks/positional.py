"""The check of the sinusoidal table: ``sinusoidal_table(max_len, d_model) -> (max_len,
d_model)``, PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(same
angle).
"""

from __future__ import annotations

import random

import torch

from transformer_lib.positional import sinusoidal_table as _ref_table
from ._helpers import as_tensor, compare, first_match
from ._result import Failed, GradeResult
from ._task import Case, Task, check_function, returned
from ..runner.calls import CALLERS

NAME = "sinusoidal_table"

MISTAKES = {
    "sin_cos_swapped": (
        "sin and cos are swapped: even columns (0, 2, 4, ...) hold sin, odd columns"
        " hold cos."
    ),
    "exponent_i": (
        "The frequencies use i / d_model instead of 2i / d_model: the pair of columns"
        " (2i, 2i+1) shares the frequency 1 / 10000^(2i / d_model)."
    ),
    "concatenated_halves": (
        "You concatenated [all sines | all cosines]; the paper interleaves them: column"
        " 2i is sin, column 2i + 1 is cos, with the same frequency."
    ),
    "positions_from_1": (
        "Positions start at 1; they start at 0 (the first row of the table is sin(0)=0,"
        " cos(0)=1)."
    ),
}


def _table_variant(max_len, d_model, kind):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    if kind == "positions_from_1":
        pos = pos + 1
    i2 = torch.arange(0, d_model, 2, dtype=torch.float64)
    exponent = (i2 / 2 if kind == "exponent_i" else i2) / d_model
    angles = pos / 10000.0**exponent
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    n_cos = d_model // 2
    if kind == "concatenated_halves":  # (max_len, d_model)
        return torch.cat([torch.sin(angles), torch.cos(angles[:, :n_cos])], dim=1)
    first, second = (
        (torch.cos, torch.sin) if kind == "sin_cos_swapped" else (torch.sin, torch.cos)
    )
    table[:, 0::2] = first(angles)
    table[:, 1::2] = second(angles[:, :n_cos])
    return table


def _judge(inputs, outputs):
    max_len, d_model = inputs["max_len"], inputs["d_model"]
    if (
        isinstance(outputs, dict)
        and outputs.get("error_type") in ("RuntimeError", "IndexError")
        and d_model % 2
    ):
        raise Failed(
            f"Your code raised {outputs['error_type']}:"
            f" {outputs.get('error_message')}\nWith an odd d_model={d_model} there are"
            f" {d_model // 2 + 1} sine columns but only {d_model // 2} cosine columns:"
            " use angles[:, :d_model // 2] for the cosines."
        )
    expected = _ref_table(max_len, d_model)
    found = as_tensor("table", returned(outputs))

    def diagnose(f):
        return first_match(
            f.double(),
            [
                (MISTAKES[k], lambda k=k: _table_variant(max_len, d_model, k))
                for k in (
                    "sin_cos_swapped",
                    "exponent_i",
                    "concatenated_halves",
                    "positions_from_1",
                )
            ],
            expected,
        )

    if found.shape == expected.shape and found.dtype.is_floating_point:
        found = found.float() if found.dtype != torch.float32 else found
    compare("table", found, expected, diagnose, atol=1e-4, rtol=1e-4)


def make_cases(present, seed: int = 0) -> list[Case]:
    """The sizes are the point of these cases (the table has no random input): ``seed``
    0 gives the notebook checks' sizes, any other seed draws them (the same kinds: two
    tables, a single position, one sin/cos pair, an odd ``d_model``)."""
    if seed == 0:
        sizes = (
            (50, 16, ""),
            (100, 64, ""),
            (1, 4, " (a single position)"),
            (10, 2, " (one sin/cos pair)"),
            (12, 7, " (odd d_model: the last column is a sine)"),
        )
    else:
        rng = random.Random(seed)
        sizes = (
            (rng.randint(20, 80), 2 * rng.randint(4, 16), ""),
            (rng.randint(81, 160), 2 * rng.randint(17, 48), ""),
            (1, 2 * rng.randint(2, 8), " (a single position)"),
            (rng.randint(5, 30), 2, " (one sin/cos pair)"),
            (rng.randint(5, 30), 2 * rng.randint(2, 8) + 1, " (odd d_model: the last"
             " column is a sine)"),
        )
    return [
        Case(
            f"max_len={max_len}, d_model={d_model}{label}",
            "table",
            dict(max_len=max_len, d_model=d_model),
            _judge,
            uses=(NAME,),
        )
        for max_len, d_model, label in sizes
    ]


TASK = Task(
    name="positional",
    title="check_positional",
    names=(NAME,),
    callers=CALLERS["positional"],
    make_cases=make_cases,
    banned=("transformer_lib.positional",),
    rules="the library's positional encoding (transformer_lib.positional)",
)


def check_positional(fn) -> GradeResult:
    """Check ``fn(max_len, d_model) -> (max_len, d_model)`` against
    ``tl.sinusoidal_table``: PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1]
    = cos(same angle)."""
    return check_function(TASK, NAME, fn)
