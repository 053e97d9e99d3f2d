"""Attack class: judging that cannot blow up (issue 27, attack 6).

A forged output (a 16384 x 16384 stride-0 tensor of the wrong shape, in a file of a few
kilobytes) used to be made real by the first arithmetic of the judge, in the grader's
memory. Every output is now bounded before any judge computes on it
(``engine/bounds.py``), and judges run in a worker with its own memory limit
(``engine/judge.py``).
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from conftest import honest_attention_function
from transformer_grader.engine import bounds
from transformer_grader.engine.judge import Judges
from transformer_grader.engine.verdict import judge_task, plan_item
from transformer_grader.runner.plan import run_task
from transformer_grader.tasks import TASKS

SEED = 3


def _peak_kb() -> int:
    """This process's peak resident memory so far (VmHWM), in kB."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def _entry(fn=None):
    """The attention task's cases and what an honest notebook sends back."""
    task = TASKS["attention"]
    cases = task.make_cases(task.names, SEED)
    namespace = {"scaled_dot_product_attention": fn or honest_attention_function()}
    return task, cases, run_task(plan_item(task, cases), namespace)


def _forged(entry, value):
    """``entry`` with every case's value replaced by ``value``."""
    outputs = [{"value": value, "mutated": []} for _ in entry["outputs"]]
    return {**entry, "outputs": outputs}


def test_a_huge_stride_zero_output_is_refused_without_being_made_real():
    task, cases, entry = _entry()
    huge = torch.zeros(1).expand(16384, 16384)  # 1 GB once real, 4 bytes here
    before = _peak_kb()
    verdict = judge_task(task, cases, _forged(entry, (huge, huge)))
    assert _peak_kb() - before < 200_000  # not the 1 to 2 GB it used to take
    assert verdict["score"] == 0.0
    assert "refused this case's output before judging" in verdict["feedback"]
    assert "16384, 16384" in verdict["feedback"]
    assert verdict["flags"] and "refused" in verdict["flags"][0]


@pytest.mark.parametrize(
    "value, reason",
    [
        ([[[[[[[[[[[1]]]]]]]]]]], "nested more than"),
        (list(range(20_000)), "items came back"),
        (2**200, "more than 64 bits"),
        ({"x": torch.zeros(3).to_sparse()}, "not a plain CPU tensor"),
        (
            torch.zeros(2).to(torch.float8_e4m3fn)
            if hasattr(torch, "float8_e4m3fn")
            else None,
            "of dtype",
        ),
    ],
)
def test_outputs_that_break_a_bound_fail_with_the_reason(value, reason):
    if value is None:
        pytest.skip("no float8 dtype in this PyTorch")
    out = bounds.bounded({"value": value, "mutated": []})
    assert out.get("refused"), out
    assert reason in out["failed"]


def test_an_honest_broadcast_view_is_judged_as_its_values():
    """A mask returned as ``expand`` (stride 0) is an honest answer: kept, made dense."""
    mask = torch.tensor([True, False, False]).view(1, 1, 1, 3).expand(2, 1, 4, 3)
    out = bounds.bounded({"value": mask, "mutated": []})
    value = out["value"]
    assert torch.equal(value, mask) and value.is_contiguous()


def test_honest_outputs_are_judged_as_before():
    task, cases, entry = _entry()
    verdict = judge_task(task, cases, entry)
    assert verdict["score"] == 1.0 and verdict["flags"] == []


def test_judging_runs_in_a_worker_with_its_own_memory_limit():
    task, cases, entry = _entry()
    huge = torch.zeros(1).expand(16384, 16384)
    items = [("attention", _forged(entry, (huge, huge)), "")]
    honest = [("attention", entry, "")]
    judges = Judges(1)
    try:
        found = asyncio.run(judges.judge(0, SEED, items, {"attention": len(cases)}))
        again = asyncio.run(judges.judge(0, SEED, honest, {"attention": len(cases)}))
    finally:
        judges.close()
    assert found["attention"]["score"] == 0.0
    assert "refused" in found["attention"]["feedback"]
    assert again["attention"]["score"] == 1.0


def test_a_worker_that_dies_costs_its_notebook_only():
    """A worker whose limit is too small (64 MB: below what torch alone maps) is
    replaced once, then the notebook's tasks score 0 with the reason; nothing is
    raised. Each output is 16 MB (within the bounds): reading it needs memory the
    worker cannot have, whatever the worker's heap happened to keep free."""
    task, cases, entry = _entry()
    entry = _forged(entry, torch.zeros(2**21, dtype=torch.float64))
    judges = Judges(1, memory_mb=64)
    try:
        found = asyncio.run(
            judges.judge(0, SEED, [("attention", entry, "")], {"attention": len(cases)})
        )
    finally:
        judges.close()
    assert found["attention"]["score"] == 0.0
    assert "not judged" in found["attention"]["feedback"]


def test_the_grader_runs_under_a_memory_limit_of_its_own():
    import subprocess
    import sys

    code = (
        "import resource\n"
        "from transformer_grader.__main__ import GRADER_MEMORY_MB, limit_grader\n"
        "limit_grader()\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_AS)\n"
        "print(soft == GRADER_MEMORY_MB * 2**20, hard == resource.RLIM_INFINITY)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    # soft: the grader's; hard left open, so kernels may set their own --memory
    assert done.stdout.split() == ["True", "True"]
