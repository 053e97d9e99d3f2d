"""The paper's training recipe: learning-rate schedule (eq. 3) and a training loop.

The loop also runs under ``torchrun`` with a ``DistributedDataParallel`` model, accumulates
gradients over micro-batches, trains in mixed precision, and stops cleanly when asked
(see ``accumulation_step`` and ``train``).
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from itertools import islice

import torch
from torch import nn
from tqdm.auto import tqdm

from . import distributed
from ._checks import (
    check_bool,
    check_instance,
    check_int,
    check_number,
    check_optional_positive_int,
    check_positive_int,
    check_probability,
    check_same_size,
    check_token_ids,
)
from .loss import masked_cross_entropy, token_accuracy
from .precision import autocast, check_precision, grad_scaler
from .stopping import StopFlag


def noam_lr(step: int, d_model: int, warmup: int) -> float:
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)  (paper eq. 3).

    Rises linearly for ``warmup`` steps, then decays as 1/sqrt(step); steps count from 1 (step 0 is
    treated as step 1). Use it as ``LambdaLR(optimizer, lambda s: noam_lr(s + 1, d_model, warmup))``
    with the optimizer's base ``lr=1.0``: LambdaLR multiplies the base rate by this factor and passes
    0 before the first update, so ``s + 1`` gives update k the paper's rate for step k.
    """
    check_int("step", step, minimum=0)
    check_positive_int("d_model", d_model)
    check_positive_int("warmup", warmup)
    step = max(int(step), 1)
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def train_step(model, src, tgt, optimizer, scheduler=None, label_smoothing=0.0, clip_grad_norm=None):
    """One step of teacher forcing on a batch. tgt (B, L) = [BOS, y1, ..., EOS, PAD...].

    The decoder reads tgt[:, :-1] and is trained to predict tgt[:, 1:].
    Returns (loss, token accuracy) as floats.
    """
    _check_step_args(model, src, tgt, optimizer, scheduler, label_smoothing,
                     clip_grad_norm)
    model.train()
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    logits = model(src, tgt_in)  # (B, L-1, V)
    loss = masked_cross_entropy(logits, tgt_out, model.pad_id, label_smoothing)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    acc = token_accuracy(logits.detach(), tgt_out, model.pad_id)
    return loss.item(), acc.item()


def _check_step_args(model, src, tgt, optimizer, scheduler, label_smoothing,
                     clip_grad_norm):
    check_instance("model", model, nn.Module,
                   "an nn.Module with a pad_id (e.g. tl.Transformer)")
    check_int("model.pad_id", getattr(model, "pad_id", None))
    check_token_ids("src", src, ndim=2)
    check_token_ids("tgt", tgt, ndim=2)
    check_same_size(0, "batch size", src=src, tgt=tgt)
    if tgt.size(1) < 2:
        raise ValueError(f"tgt must hold at least 2 tokens per row ([BOS, y1, ...]: "
                         f"the decoder reads tgt[:, :-1] and predicts tgt[:, 1:]), "
                         f"got shape {tuple(tgt.shape)}")
    _check_optimizer(optimizer)
    if scheduler is not None and not callable(getattr(scheduler, "step", None)):
        raise TypeError(f"scheduler must have a step() method (or be None), "
                        f"got {type(scheduler).__name__}")
    check_probability("label_smoothing", label_smoothing)
    if clip_grad_norm is not None:
        check_number("clip_grad_norm", clip_grad_norm, 0.0, low_open=True)


def _check_optimizer(optimizer) -> None:
    check_instance("optimizer", optimizer, torch.optim.Optimizer,
                   "a torch.optim.Optimizer")


# ------------------------------------------------------------------------------------
# Several micro-batches (and several processes) per optimizer step


def accumulate_gradients(model, micro_batches, label_smoothing=0.0, precision="fp32",
                         scaler=None):
    """Forward and backward passes over ``micro_batches`` (a list of (src, tgt) pairs),
    adding into every parameter's ``.grad``. Afterwards ``.grad`` holds the gradient of the
    mean loss over *every* real target token of the step: of all the micro-batches and,
    for a ``DistributedDataParallel`` model, of all the ranks.

    Returns three tensors: this rank's summed token losses and correct predictions, and
    the step's number of real target tokens, all ranks together.

    Why the weights: ``masked_cross_entropy`` is a mean over one micro-batch's non-pad
    tokens, and micro-batches (and ranks) hold different numbers of tokens. Averaging
    their means would give a token in a short micro-batch more say than one in a long
    micro-batch, and the step would differ from one big batch. So each mean is multiplied
    by its token count n_i, which gives back the *sum* of its token losses, and divided
    by the step's token count T: the sum over all micro-batches is the big batch's mean.
    DDP averages the gradients over the W ranks (it divides their sum by W), so each
    rank's losses are also multiplied by W; T is summed over the ranks first (one
    all-reduce of one number). The first K-1 backward passes of a DDP model run in
    ``no_sync()``: their gradients add up locally, and the gradient all-reduce happens
    once, during the last backward pass.
    """
    if not isinstance(micro_batches, (list, tuple)) or not micro_batches:
        raise ValueError(f"micro_batches must be a non-empty list of (src, tgt) pairs, "
                         f"got {micro_batches!r:.60}")
    module = distributed.unwrap(model)
    pad = module.pad_id
    device = next(module.parameters()).device
    check_precision(precision, device)
    parallel = distributed.is_parallel(model)
    world = distributed.world_size(model)
    model.train()
    counts = [(tgt[:, 1:] != pad).sum() for _, tgt in micro_batches]  # real tokens each
    total = torch.stack(counts).sum()
    if parallel:
        distributed.all_reduce_sum(total)  # every rank's tokens
    loss_sum = correct = 0
    last = len(micro_batches) - 1
    for i, ((src, tgt), n) in enumerate(zip(micro_batches, counts)):
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
        sync = nullcontext() if i == last or not parallel else model.no_sync()
        with sync:
            with autocast(precision, device):
                logits = model(src, tgt_in)  # (B_i, L-1, V)
                mean = masked_cross_entropy(logits, tgt_out, pad, label_smoothing)
            # mean * n_i: the sum of this micro-batch's token losses; / T: its share of
            # the step's mean; * W: undoes DDP's division by the number of ranks.
            weight = n.to(mean.dtype) * world / total.clamp(min=1).to(mean.dtype)
            loss = mean * weight
            (scaler.scale(loss) if scaler is not None else loss).backward()
        with torch.no_grad():
            loss_sum = loss_sum + mean.detach().double() * n
            hits = (logits.argmax(dim=-1) == tgt_out) & (tgt_out != pad)
            correct = correct + hits.sum()
    return loss_sum, correct, total


def accumulation_step(model, micro_batches, optimizer, scheduler=None, label_smoothing=0.0,
                      clip_grad_norm=None, precision="fp32", scaler=None):
    """One optimizer step on a list of (src, tgt) micro-batches, equal to one step on all of
    them as one batch (``accumulate_gradients`` says why). ``model`` may be wrapped in
    ``DistributedDataParallel``: then each rank passes its own micro-batches, and the step
    is the step on all ranks' micro-batches together. ``precision`` is "fp32", "bf16" or
    "fp16" (``tl.precision``); a ``scaler`` (GradScaler, for fp16) scales the loss.

    Returns (loss, token accuracy) of the whole step, all ranks together, as floats.
    """
    if not isinstance(micro_batches, (list, tuple)) or not micro_batches:
        raise ValueError(f"micro_batches must be a non-empty list of (src, tgt) pairs, "
                         f"got {micro_batches!r:.60}")
    module = distributed.unwrap(model)
    for pair in micro_batches:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise TypeError(f"each micro-batch must be a (src, tgt) pair, got "
                            f"{type(pair).__name__}")
        _check_step_args(module, *pair, optimizer, scheduler, label_smoothing,
                         clip_grad_norm)
    optimizer.zero_grad(set_to_none=True)
    loss_sum, correct, tokens = accumulate_gradients(model, micro_batches, label_smoothing,
                                                     precision, scaler)
    if clip_grad_norm is not None:
        if scaler is not None:
            scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
        torch.nn.utils.clip_grad_norm_(module.parameters(), clip_grad_norm)
    if scaler is not None:
        scaler.step(optimizer)  # skipped if a gradient overflowed
        scaler.update()
    else:
        optimizer.step()
    if scheduler is not None:
        scheduler.step()
    stats = torch.stack([loss_sum.double(), correct.double()])
    if distributed.is_parallel(model):
        distributed.all_reduce_sum(stats)  # for the log: the whole step's loss and accuracy
    loss, acc = (stats / tokens.clamp(min=1).double()).tolist()
    return loss, acc


class RunClock:
    """Seconds of training used so far, across interruptions: ``used`` (by the runs before a
    resume) plus the time since ``start()``. Call it to read it.

    Under DDP, ``train`` sets ``agreed`` before each step to rank 0's reading, and the clock
    reads that: a learning-rate schedule that follows the clock then gives every rank the
    same rate, and a time budget ends at the same step on every rank.
    """

    def __init__(self, used: float = 0.0, timer=time.perf_counter):
        check_number("used", used, 0.0)
        if not callable(timer):
            raise TypeError(f"timer must be callable, got {type(timer).__name__}")
        self.used = float(used)
        self.timer = timer  # time.perf_counter (wall), or time.process_time (CPU time)
        self.agreed: float | None = None
        self._start: float | None = None

    def start(self) -> None:
        self._start = self.timer()

    def local(self) -> float:
        """This process's own reading."""
        if self._start is None:
            return self.used
        return self.used + self.timer() - self._start

    def __call__(self) -> float:
        return self.agreed if self.agreed is not None else self.local()


def train(model, batches, optimizer, scheduler=None, *, max_steps=None, max_seconds=None,
          label_smoothing=0.0, clip_grad_norm=None, progress=True, log_every=10, callback=None,
          accumulate=1, precision="fp32", scaler=None, start_step=0, clock=None, stop=None):
    """Train on ``batches`` (an iterable of (src, tgt) pairs, may be endless) until it is exhausted,
    ``max_steps`` steps are done, or ``max_seconds`` have passed, whichever comes first.

    Shows a tqdm progress bar with the running loss, accuracy and learning rate. ``callback(step,
    history)`` runs every ``log_every`` steps (e.g. for a validation score). Returns the history:
    a dict of lists ``step``, ``loss``, ``acc``, ``lr``, ``seconds`` (one entry per logged step).

    Beyond one process and one batch per step:

    - ``model`` may be a ``DistributedDataParallel`` (``tl.distributed.wrap``) under torchrun:
      each rank passes its own ``batches`` (its share of every global batch), and before
      each step the ranks agree whether to stop and how much time is used. Show the
      progress bar on rank 0 only.
    - ``accumulate=K``: each optimizer step reads K consecutive batches and weighs them by
      their tokens, as one batch of all of them (``accumulation_step``).
    - ``precision``: "fp32", "bf16" or "fp16" (``tl.precision``); fp16 scales the loss
      with ``scaler`` (a ``torch.amp.GradScaler``, made here if None).
    - Resuming: ``start_step`` steps are already done (``max_steps`` counts from the start of
      the run) and ``clock`` (a ``RunClock``) holds the seconds already used.
    - ``stop``: a ``StopFlag``; once it is due, the loop ends before the next step and sets
      ``stop.stopped``.

    With none of these (one process, K=1, fp32), each step is ``train_step``.
    """
    if not hasattr(batches, "__iter__"):
        raise TypeError(f"batches must be an iterable of (src, tgt) pairs, "
                        f"got {type(batches).__name__}")
    _check_optimizer(optimizer)
    check_optional_positive_int("max_steps", max_steps)
    if max_seconds is not None:
        check_number("max_seconds", max_seconds, 0.0, low_open=True)
    check_bool("progress", progress)
    check_positive_int("log_every", log_every)
    if callback is not None and not callable(callback):
        raise TypeError(
            f"callback must be callable (or None), got {type(callback).__name__}")
    check_positive_int("accumulate", accumulate)
    check_int("start_step", start_step, minimum=0)
    check_instance("clock", clock, (RunClock, type(None)), "a RunClock (or None)")
    check_instance("stop", stop, (StopFlag, type(None)), "a StopFlag (or None)")
    module = distributed.unwrap(model)
    device = next(module.parameters()).device
    check_precision(precision, device)
    try:
        length = len(batches)
    except TypeError:  # a generator, or an endless batcher
        length = None
    if max_steps is None and max_seconds is None and length is None:
        raise ValueError("an endless batch iterator needs max_steps or max_seconds")
    if scaler is None:
        scaler = grad_scaler(precision, device)
    parallel = distributed.is_parallel(model)
    plain = not parallel and accumulate == 1 and precision == "fp32" and scaler is None
    clock = clock if clock is not None else RunClock()
    history = {"step": [], "loss": [], "acc": [], "lr": [], "seconds": []}
    total = max_steps if max_steps is not None else length
    # Redrawn at most every 2 s: in a notebook each redraw is a message to the front end,
    # and a client that reads them only when the cell ends (nbval) drops what overflows.
    bar = tqdm(total=total, initial=start_step, disable=not progress, desc="training",
               unit="step", mininterval=2.0)
    clock.start()
    loss_sum = acc_sum = 0.0
    count, step = 0, start_step

    def log():  # record the averages since the last log entry
        nonlocal loss_sum, acc_sum, count
        lr = optimizer.param_groups[0]["lr"]
        for key, value in zip(history, (step, loss_sum / count, acc_sum / count, lr, clock())):
            history[key].append(value)
        bar.set_postfix(loss=f"{loss_sum / count:.3f}", acc=f"{acc_sum / count:.3f}",
                        lr=f"{lr:.2e}", refresh=False)  # shown at the bar's next redraw
        loss_sum = acc_sum = 0.0
        count = 0
        if callback is not None:
            callback(step, history)

    iterator = iter(batches)
    while max_steps is None or step < max_steps:
        wants_stop = stop is not None and stop.due(step)
        if parallel:  # every rank takes the same decision, with rank 0's clock
            wants_stop, clock.agreed = distributed.agree(wants_stop, clock.local())
        if wants_stop:
            if stop is not None:
                stop.stopped = True
            break
        if max_seconds is not None and clock() >= max_seconds:
            break
        group = list(islice(iterator, accumulate))
        if not group:  # the batches ran out
            break
        if plain:
            loss, acc = train_step(model, *group[0], optimizer, scheduler, label_smoothing,
                                   clip_grad_norm)
        else:
            loss, acc = accumulation_step(model, group, optimizer, scheduler, label_smoothing,
                                          clip_grad_norm, precision, scaler)
        step += 1
        loss_sum, acc_sum, count = loss_sum + loss, acc_sum + acc, count + 1
        bar.update(1)
        if step % log_every == 0:
            log()
    if count > 0:  # the run ended between two log entries: log the last steps too
        log()
    bar.close()
    return history
