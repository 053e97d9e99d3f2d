"""The training loop every corpus shares: optimizer, schedule, budget, resume and stop.

A corpus (number words, Ding, a TSV, Multi30k) decides only what goes in: a model and
an endless batcher of (src, tgt) id tensors. ``fit`` does the rest, the same way for all:

- Adam with the paper's betas (0.9, 0.98) and eps 1e-9, eq. 3's warm-up times a
  ``lr_factor``, then either eq. 3's 1/sqrt(step) tail (``decay="noam"``) or a straight
  line down to zero exactly where the budget ends (``decay="linear"``, ``LinearDecay``);
- a budget in steps and/or seconds, on the wall clock or on the process's CPU time
  (``clock="cpu"``: neighbours on a shared machine do not count);
- DDP under torchrun (``tl.distributed``), gradient accumulation, mixed precision;
- a ``StopFlag`` that ends the run after the current step, and ``resume``: a checkpoint's
  training state from which the run continues bit for bit on the CPU.

``fit`` returns the history, the metrics and the training state a checkpoint needs.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from .. import distributed
from .._checks import check_positive_int
from ..checkpoint import restore_training, training_state
from ..stopping import StopFlag
from ..training import RunClock, noam_lr, train

EXIT_STOPPED = 75  # EX_TEMPFAIL: not a failure; the same command with --resume continues
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


class LinearDecay:
    """A learning-rate schedule for ``LambdaLR`` that ends with the budget: eq. 3's
    warm-up times ``lr_factor`` up to its peak at step ``warmup``, then a straight line
    down to zero where the budget ends, after ``steps`` updates or ``seconds`` on
    ``clock``, whichever comes first.

    A budget in seconds is a number of steps that nobody knows in advance (it depends on
    the machine), so the line is drawn in time: the clock starts at the first call (when
    ``LambdaLR`` is built), and the rate falls with the fraction of the budget used.
    """

    def __init__(self, d_model: int, lr_factor: float, warmup: int,
                 steps: int | None = None, seconds: float | None = None,
                 clock=time.perf_counter):
        if steps is None and seconds is None:
            raise ValueError("LinearDecay needs a budget: steps or seconds (or both)")
        self.peak = lr_factor * noam_lr(warmup, d_model, warmup)
        self.warmup, self.steps, self.seconds = warmup, steps, seconds
        self.clock, self.start = clock, None

    def used(self, step: int) -> float:
        """Fraction of the budget used after ``step`` updates (0 to 1)."""
        if self.start is None:
            self.start = self.clock()
        fractions = [step / self.steps] if self.steps else []
        if self.seconds:
            fractions.append((self.clock() - self.start) / self.seconds)
        return min(max(fractions), 1.0)

    def __call__(self, step: int) -> float:
        # LambdaLR passes the updates done so far; the coming update is number step + 1.
        warm = min(1.0, (step + 1) / self.warmup)
        return self.peak * warm * (1.0 - self.used(step))


def make_optimizer(model, lr_factor: float = 1.0, warmup: int = 200,
                   steps: int | None = None, seconds: float | None = None):
    """Adam with the paper's betas and eps. Without a budget, eq. 3's schedule times
    ``lr_factor``; with one (``steps`` and/or ``seconds``), its warm-up and peak, then
    ``LinearDecay`` to zero where the budget ends."""
    d_model = model.config["d_model"]
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    if steps is None and seconds is None:
        def schedule(step):
            return lr_factor * noam_lr(step + 1, d_model, warmup)
    else:
        schedule = LinearDecay(d_model, lr_factor, warmup, steps, seconds)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    return optimizer, scheduler


def check_batch_size(batch_size: int, processes: int, accumulate: int) -> None:
    """Raise ValueError unless each of the ``processes * accumulate`` micro-batches of a
    step can get at least one example."""
    check_positive_int("batch_size", batch_size)
    if batch_size < processes * accumulate:
        raise ValueError(
            f"batch_size={batch_size} is the whole step's batch, cut into {processes} "
            f"process(es) x {accumulate} micro-batch(es): it must be at least "
            f"{processes * accumulate}")


# Settings that entered a run's record later: a checkpoint saved without one is not refused.
_LATER_SETTINGS = ("threads", "deterministic")
# Recipe knobs that entered it later: a checkpoint saved without one ran with it off.
_LATER_DEFAULTS = {"bpe_dropout": 0.0, "bidirectional": False, "dict_tag": False,
                   "dict_fraction": 0.0}


class ResumeMismatch(ValueError):
    """A checkpoint cannot be resumed with these settings (``check_resumable``)."""


def check_resumable(checkpoint: dict, run: dict) -> None:
    """Raise ResumeMismatch (a ValueError) unless ``checkpoint`` (a loaded resumable
    checkpoint) was saved by a run with the settings ``run``: a run continues only with the
    settings it started with."""
    saved = checkpoint["training"].get("run", {})
    saved = {**{k: v for k, v in _LATER_DEFAULTS.items() if k in run}, **saved}
    different = [f"{key}: saved {saved.get(key)!r}, now {value!r}"
                 for key, value in run.items() if saved.get(key) != value
                 and not (key in _LATER_SETTINGS and key not in saved)]
    if different:
        raise ResumeMismatch("the checkpoint was saved by a run with other settings, so "
                             "it cannot be continued with these: " + "; ".join(different))


@dataclass
class Fit:
    """What ``fit`` returns: the history (``step``, ``loss``, ``acc``, ``lr``, ``seconds``,
    the resumed run's entries first), ``metrics`` (``steps``, ``train_seconds``), the
    ``training`` state a checkpoint needs to resume, and whether a stop ended the run."""

    history: dict
    metrics: dict = field(default_factory=dict)
    training: dict | None = None
    stopped: bool = False


def fit(model, batcher, run: dict, *, steps: int | None, max_seconds: float | None,
        lr_factor: float, warmup: int, decay: str = "linear", label_smoothing: float = 0.0,
        seed: int = 0, world: distributed.World | None = None, accumulate: int = 1,
        precision: str = "fp32", scaler=None, resume: dict | None = None,
        stop: StopFlag | None = None, progress: bool = True, log_every: int = 20,
        callback=None, extra_history: dict | None = None, clock: str = "wall",
        clip_grad_norm: float | None = None) -> Fit:
    """Train ``model`` (already seeded, built and on its device) on ``batcher`` (a
    ``BucketBatcher``: endless, with ``state_dict``) for ``steps`` and/or ``max_seconds``.

    ``run`` is the run's settings (plain values): saved with the training state, and a
    ``resume`` checkpoint must have been saved with the same ones (``check_resumable``).
    ``clock`` "wall" or "cpu" (process CPU time: all threads together) measures
    ``max_seconds``. ``callback(step, history)`` runs every ``log_every`` steps (rank 0
    may validate there, into ``extra_history``: lists that join the history and the saved
    state). The other arguments are ``tl.train``'s.
    """
    if steps is None and max_seconds is None:
        raise ValueError("give steps or max_seconds (or both)")
    if decay not in ("linear", "noam"):
        raise ValueError(f"decay must be 'linear' or 'noam', got {decay!r}")
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {sorted(CLOCKS)}, got {clock!r}")
    world = world if world is not None else distributed.World()
    budget = dict(steps=steps, seconds=max_seconds) if decay == "linear" else {}
    optimizer, scheduler = make_optimizer(model, lr_factor, warmup, **budget)
    timer = RunClock(timer=CLOCKS[clock])  # seconds of training, across interruptions
    schedule = scheduler.lr_lambdas[0]
    if isinstance(schedule, LinearDecay):  # a time budget runs on the run's clock
        schedule.clock, schedule.start = timer, 0.0
    if world.rank > 0:  # dropout: each rank draws its own masks
        torch.manual_seed(int(np.random.SeedSequence([seed, world.rank]).generate_state(1)[0]))
    # The CPU thread count is a setting too: some CPU kernels (the fused LayerNorm's
    # backward among them) add in an order that depends on it, so a resumed run is bit
    # for bit the uninterrupted one only with as many threads as before. So is the choice
    # of deterministic algorithms (tl.set_seed), without which a CUDA run is not.
    run = {**run, "threads": torch.get_num_threads(),
           "deterministic": torch.are_deterministic_algorithms_enabled()}
    start_step, past = 0, {}
    if resume is not None:
        check_resumable(resume, run)
        model.load_state_dict(resume["state_dict"])
        saved = resume["training"]
        exact = restore_training(saved, optimizer, scheduler, scaler, batcher, world)
        if not exact and world.is_main:
            print(f"note: resumed on {world.size} processes, saved on {len(saved['rng'])}: "
                  f"the run continues with the same batches and schedule, but not bit for bit")
        start_step, timer.used, past = saved["step"], saved["seconds"], saved["history"]
    history = train(distributed.wrap(model, world),
                    distributed.micro_batches(batcher, world, accumulate, model.pad_id),
                    optimizer, scheduler, max_steps=steps, max_seconds=max_seconds,
                    label_smoothing=label_smoothing, progress=progress and world.is_main,
                    log_every=log_every, callback=callback, accumulate=accumulate,
                    precision=precision, scaler=scaler, start_step=start_step, clock=timer,
                    stop=stop, clip_grad_norm=clip_grad_norm)
    history = {key: list(past.get(key, [])) + values for key, values in history.items()}
    history.update(extra_history or {})
    step = history["step"][-1] if history["step"] else start_step
    metrics = {"train_seconds": timer(), "steps": step}
    stopped = stop is not None and stop.stopped
    state = {**training_state(model, optimizer, scheduler, scaler, batcher, step, timer(),
                              history), "run": run}
    return Fit(history, metrics, training=state, stopped=stopped)
