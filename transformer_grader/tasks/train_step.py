"""The check of one training step: ``train_step(model, src, tgt, optimizer, scheduler,
label_smoothing=0.0) -> float`` (the loss before the update).

tgt (B, L) = [BOS, y1, ..., EOS, PAD, ...]: the decoder reads tgt[:, :-1] and learns to
predict tgt[:, 1:] (teacher forcing); the loss is the label-smoothed cross entropy over
the non-padding targets (``model.pad_id``); then zero the old gradients, backpropagate,
update, and advance the schedule. The grader runs the student's step on a small
``Transformer`` (seeded weights, no dropout) with SGD and a ``LambdaLR`` schedule, its
parameters' ``.grad`` already holding stale numbers (as after an earlier step), and
compares the losses and the updated weights with the library's ``train_step`` on the
same model.
"""

from __future__ import annotations

import warnings

import torch
from torch.nn import functional as F

from transformer_lib.loss import masked_cross_entropy
from transformer_lib.model import Transformer
from transformer_lib.training import train_step as _ref_step
from ._helpers import rng, seeded_module, type_name
from ._result import Failed, GradeResult
from ._task import Case, Task, check_function, returned
from ..runner.calls import CALLERS, schedule
from ..runner.calls import training_setup as setup

NAME = "train_step"
BOS, EOS = 1, 2

MISTAKES = {
    "ts_no_shift": (
        "The targets are not shifted: the decoder reads tgt[:, :-1] (starting with BOS)"
        " and is trained to predict tgt[:, 1:], the next token at each position."
        " Feeding tgt itself and predicting tgt lets every position copy its own input."
    ),
    "ts_shift_reversed": (
        "The shift goes the wrong way: the decoder input is tgt[:, :-1] (it starts with"
        " BOS) and the target is tgt[:, 1:]."
    ),
    "ts_pad_in_loss": (
        "Padding counts in your loss: average only over target positions that are not"
        " model.pad_id (ignore_index=model.pad_id, or masked_cross_entropy(...,"
        " pad_id))."
    ),
    "ts_no_smoothing": (
        "label_smoothing had no effect: pass it to the loss (F.cross_entropy(...,"
        " label_smoothing=label_smoothing) or masked_cross_entropy(...,"
        " label_smoothing))."
    ),
    "ts_no_zero_grad": (
        "The old gradients were not cleared: .backward() adds to .grad, so call "
        "optimizer.zero_grad() before loss.backward() in every step."
    ),
    "ts_scheduler_first": (
        "scheduler.step() came before optimizer.step(): the update then uses the next"
        " step's learning rate (PyTorch warns about this order). Update first, then"
        " advance the schedule."
    ),
    "ts_no_scheduler_step": (
        "The schedule never advanced: call scheduler.step() once after every"
        " optimizer.step()."
    ),
    "ts_no_optimizer_step": (
        "The weights did not change: call optimizer.step() after loss.backward()."
    ),
}

CONFIG = dict(
    src_vocab_size=13,
    tgt_vocab_size=13,
    d_model=16,
    num_heads=2,
    num_encoder_layers=1,
    num_decoder_layers=1,
    d_ff=32,
    dropout=0.0,
    max_len=32,
)


# --------------------------------------------------------------------------------------
# The grader's side
# --------------------------------------------------------------------------------------
def step_variant(model, src, tgt, optimizer, scheduler, label_smoothing=0.0, bug=None):
    """One training step with one classic mistake (``bug``) or none."""
    model.train()
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    if bug == "ts_no_shift":
        tgt_in = tgt_out = tgt
    elif bug == "ts_shift_reversed":
        tgt_in, tgt_out = tgt[:, 1:], tgt[:, :-1]
    logits = model(src, tgt_in)
    if bug == "ts_pad_in_loss":
        loss = F.cross_entropy(
            logits.flatten(0, 1), tgt_out.flatten(), label_smoothing=label_smoothing
        )
    else:
        eps = 0.0 if bug == "ts_no_smoothing" else label_smoothing
        loss = masked_cross_entropy(logits, tgt_out, model.pad_id, eps)
    if bug != "ts_no_zero_grad":
        optimizer.zero_grad()
    loss.backward()
    if bug == "ts_scheduler_first":
        scheduler.step()
    if bug != "ts_no_optimizer_step":
        optimizer.step()
    if bug not in ("ts_scheduler_first", "ts_no_scheduler_step"):
        scheduler.step()
    return loss.item()


def _run(inputs, bug=None, reference=False):
    model, optimizer, scheduler = setup(inputs["config"], inputs["weights"])
    losses = []
    for _ in range(inputs["steps"]):
        if reference:
            loss, _ = _ref_step(
                model,
                inputs["src"],
                inputs["tgt"],
                optimizer,
                scheduler,
                label_smoothing=inputs["eps"],
            )
        else:
            loss = step_variant(
                model,
                inputs["src"],
                inputs["tgt"],
                optimizer,
                scheduler,
                inputs["eps"],
                bug,
            )
        losses.append(loss)
    return losses, model.state_dict(), optimizer.param_groups[0]["lr"]


def _close(losses, params, expected_losses, expected_params) -> bool:
    if not all(
        abs(a - b) <= 1e-5 + 1e-4 * abs(b) for a, b in zip(losses, expected_losses)
    ):
        return False
    return all(
        isinstance(params.get(k), torch.Tensor)
        and params[k].shape == v.shape
        and torch.allclose(params[k].double(), v.double(), atol=1e-5, rtol=1e-4)
        for k, v in expected_params.items()
    )


def _diagnose(inputs, losses, params) -> str | None:
    for bug, message in MISTAKES.items():
        try:
            with warnings.catch_warnings():  # the variants' own order warnings
                warnings.simplefilter("ignore")
                v_losses, v_params, _ = _run(inputs, bug)
        except Exception:
            continue
        if _close(losses, params, v_losses, v_params):
            return message
    return None


def _judge(inputs, outputs):
    out = returned(outputs)
    raw = out["losses"]
    losses = []
    for value in raw:
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = float(value.reshape(()))
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise Failed(
                "train_step should return the loss as a number, got"
                f" {type_name(value)}."
            )
        losses.append(float(value))
    params = out["params"]
    expected_losses, expected_params, expected_lr = _run(inputs, reference=True)
    if _close(losses, params, expected_losses, expected_params):
        if abs(out["lr"] - expected_lr) > 1e-12:
            stuck = abs(out["lr"] - 0.1 * schedule(0)) <= 1e-12
            raise Failed(
                f"learning rate after {inputs['steps']} step(s): expected "
                f"{expected_lr:.6g}, got {out['lr']:.6g}."
                + (f"\n{MISTAKES['ts_no_scheduler_step']}" if stuck else "")
            )
        return
    hint = _diagnose(inputs, losses, params)
    shown = ", ".join(f"{v:.6g}" for v in losses)
    wanted = ", ".join(f"{v:.6g}" for v in expected_losses)
    if all(abs(a - b) <= 1e-5 + 1e-4 * abs(b) for a, b in zip(losses, expected_losses)):
        what = "the losses are right, but the updated weights differ from the reference"
    else:
        what = f"losses: expected {wanted}, got {shown}"
    raise Failed(f"{what}." + (f"\n{hint}" if hint else ""))


def _batch(seed, src_lengths, tgt_lengths, pad_id):
    """Random words (never 0..2, BOS, EOS or the padding id), padding after each
    length."""
    gen = rng(seed)
    words = torch.tensor(
        [t for t in range(CONFIG["tgt_vocab_size"]) if t not in (0, 1, 2, pad_id)]
    )
    src = torch.full((len(src_lengths), max(src_lengths)), pad_id)
    tgt = torch.full((len(tgt_lengths), max(tgt_lengths) + 2), pad_id)
    for b, (n_src, n_tgt) in enumerate(zip(src_lengths, tgt_lengths)):
        src[b, :n_src] = words[torch.randint(len(words), (n_src,), generator=gen)]
        sentence = words[torch.randint(len(words), (n_tgt,), generator=gen)]
        tgt[b, : n_tgt + 2] = torch.cat(
            [torch.tensor([BOS]), sentence, torch.tensor([EOS])]
        )
    return src, tgt


def _case(name, seed, src_lengths, tgt_lengths, eps, steps, pad_id=0) -> Case:
    config = dict(CONFIG, pad_id=pad_id)
    model = seeded_module(lambda: Transformer(**config), seed)
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    src, tgt = _batch(seed, src_lengths, tgt_lengths, pad_id)
    inputs = dict(
        config=config, weights=weights, src=src, tgt=tgt, eps=eps, steps=steps
    )
    return Case(name, "step", inputs, _judge, uses=(NAME,), args=("src", "tgt"))


def make_cases(present, seed: int = 0) -> list[Case]:
    s = seed
    return [
        _case(
            "one step, label smoothing 0.1, a padded batch (B=3): the loss and the"
            " updated weights",
            s + 41,
            (5, 3, 4),
            (4, 2, 3),
            0.1,
            1,
        ),
        _case(
            "two steps in a row: old gradients cleared, the schedule advanced once per"
            " update",
            s + 42,
            (5, 3, 4),
            (4, 2, 3),
            0.1,
            2,
        ),
        _case(
            "no label smoothing, pad_id=3 (0 is a real token then)",
            s + 43,
            (4, 2),
            (3, 1),
            0.0,
            1,
            pad_id=3,
        ),
        _case(
            "batch of 1 without padding, smoothing 0.2, two steps",
            s + 44,
            (4,),
            (3,),
            0.2,
            2,
        ),
    ]


TASK = Task(
    name="train_step",
    title="check_train_step",
    names=(NAME,),
    callers=CALLERS["train_step"],
    make_cases=make_cases,
    banned=("transformer_lib.training",),
    imports=("torch._dynamo",),  # torch.optim's first optimizer imports it
    rules=(
        "the library's training module (transformer_lib.training: train_step, train,"
        " noam_lr); the model, masked_cross_entropy and F.cross_entropy are fine"
    ),
)


def check_train_step(fn) -> GradeResult:
    """Check ``fn(model, src, tgt, optimizer, scheduler, label_smoothing=0.0) -> float``
    against the library's ``train_step`` on the same small model."""
    return check_function(TASK, NAME, fn)
