"""The paper's training recipe: learning-rate schedule (eq. 3) and a training loop."""
from __future__ import annotations

import time

import torch
from torch import nn
from tqdm.auto import tqdm

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


def train(model, batches, optimizer, scheduler=None, *, max_steps=None, max_seconds=None,
          label_smoothing=0.0, clip_grad_norm=None, progress=True, log_every=10, callback=None):
    """Train on ``batches`` (an iterable of (src, tgt) pairs, may be endless) until it is exhausted,
    ``max_steps`` steps are done, or ``max_seconds`` have passed, whichever comes first.

    Shows a tqdm progress bar with the running loss, accuracy and learning rate. ``callback(step,
    history)`` runs every ``log_every`` steps (e.g. for a validation score). Returns the history:
    a dict of lists ``step``, ``loss``, ``acc``, ``lr``, ``seconds`` (one entry per logged step).
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
    try:
        length = len(batches)
    except TypeError:  # a generator, or an endless batcher
        length = None
    if max_steps is None and max_seconds is None and length is None:
        raise ValueError("an endless batch iterator needs max_steps or max_seconds")
    history = {"step": [], "loss": [], "acc": [], "lr": [], "seconds": []}
    total = max_steps if max_steps is not None else length
    bar = tqdm(total=total, disable=not progress, desc="training", unit="step")
    start = time.perf_counter()
    loss_sum = acc_sum = 0.0
    count = step = 0

    def log():  # record the averages since the last log entry
        nonlocal loss_sum, acc_sum, count
        lr = optimizer.param_groups[0]["lr"]
        elapsed = time.perf_counter() - start
        for key, value in zip(history, (step, loss_sum / count, acc_sum / count, lr, elapsed)):
            history[key].append(value)
        bar.set_postfix(loss=f"{loss_sum / count:.3f}", acc=f"{acc_sum / count:.3f}", lr=f"{lr:.2e}")
        loss_sum = acc_sum = 0.0
        count = 0
        if callback is not None:
            callback(step, history)

    for src, tgt in batches:
        loss, acc = train_step(model, src, tgt, optimizer, scheduler, label_smoothing, clip_grad_norm)
        step += 1
        loss_sum, acc_sum, count = loss_sum + loss, acc_sum + acc, count + 1
        bar.update(1)
        done = (max_steps is not None and step >= max_steps) or (
            max_seconds is not None and time.perf_counter() - start >= max_seconds)
        if step % log_every == 0 or done:
            log()
        if done:
            break
    if count > 0:  # the batches ran out between two log entries: log the last steps too
        log()
    bar.close()
    return history
