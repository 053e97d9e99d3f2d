"""Judging in worker processes with a memory limit of their own.

Judging computes on what a notebook sent back. ``bounds`` keeps every output small
before a judge sees it; this is the second wall: the judges run in worker processes
(``Judges``: one per kernel slot, started when first needed, kept for the batch), each
under ``RLIMIT_AS`` = ``JUDGE_MEMORY_MB``, with one thread. The grading process only
sends a task's raw outputs there (``torch.save`` bytes: a stride-0 view travels as its
one-element storage) and reads back plain verdicts, so however an output was forged,
neither the grader's memory nor its event loop is where it is computed on.

A worker that fails (its memory limit, a crash) is replaced and the notebook is judged
once more; if it fails again, its tasks score 0 with the reason, and the batch goes on.
The cases are made again in the worker from the notebook's seed (the same seed gives
the same cases, see ``Task.make_cases``).
"""

from __future__ import annotations

import asyncio
import io
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

JUDGE_MEMORY_MB = 2048  # address space of one judging worker (torch alone takes ~650)


def _limit(memory_mb: int) -> None:
    """In a new worker: its memory limit, one thread."""
    try:
        import resource

        cap = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    except (ImportError, ValueError, OSError):  # no resource module (Windows)
        pass
    import torch

    torch.set_num_threads(1)


def judge_payload(data: bytes) -> list[tuple[str, dict]]:
    """In a worker: judge ``data`` (``torch.save`` of {"seed", "items": [(task, entry,
    reason)]}); [(task, verdict)]."""
    import torch

    from ..tasks import TASKS
    from .verdict import judge_task

    payload = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    seed, out = int(payload["seed"]), []
    for name, entry, reason in payload["items"]:
        task = TASKS[name]
        cases = task.make_cases(task.names, seed)
        try:
            verdict = judge_task(task, cases, entry, reason)
        except MemoryError:
            verdict = failed(name, len(cases), "the judge ran out of memory")
        out.append((name, verdict))
    return out


def failed(task: str, total: int, why: str) -> dict:
    """The verdict of a task that could not be judged: 0, with the reason."""
    from ..tasks import TASKS

    title = TASKS[task].title if task in TASKS else task
    return {
        "score": 0.0,
        "passed": 0,
        "total": total,
        "flags": [f"{task}: not judged: {why}"],
        "feedback": f"{title}: 0/{total}: not judged: {why}.",
    }


class Judges:
    """One judging process per kernel slot of a batch (a worker that fails then costs
    only the notebook of its own slot); ``await judges.judge(slot, seed, items,
    totals)`` returns {task: verdict}. Close it at the end of the batch."""

    def __init__(self, slots: int, memory_mb: int = JUDGE_MEMORY_MB):
        self.memory_mb = memory_mb
        self.pools: dict[int, ProcessPoolExecutor] = {}
        self.slots = slots

    def _pool(self, slot: int) -> ProcessPoolExecutor:
        if slot not in self.pools:
            self.pools[slot] = ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_limit,
                initargs=(self.memory_mb,),
            )
        return self.pools[slot]

    async def judge(self, slot: int, seed: int, items, totals: dict) -> dict:
        """Judge ``items`` [(task, entry, reason)] of one notebook in the worker of
        ``slot``; ``totals``: task -> number of cases (for the verdict of a task that
        could not be judged)."""
        import torch

        buffer = io.BytesIO()
        torch.save({"seed": seed, "items": [list(i) for i in items]}, buffer)
        data = buffer.getvalue()
        loop = asyncio.get_running_loop()
        why = ""
        for _ in range(2):
            try:
                pool = self._pool(slot)
                found = await loop.run_in_executor(pool, judge_payload, data)
                return dict(found)
            except BrokenProcessPool:  # replaced, and tried once more
                self.pools.pop(slot).shutdown(wait=False, cancel_futures=True)
                why = "the judging process ended (its memory limit?)"
            except Exception as error:  # the data could not be judged at all
                why = f"{type(error).__name__}: {str(error)[:150]}"
                break
        return {task: failed(task, totals[task], why) for task, _, _ in items}

    def close(self) -> None:
        for pool in self.pools.values():
            pool.shutdown(wait=True, cancel_futures=True)
        self.pools.clear()
