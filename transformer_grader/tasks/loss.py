"""The check of the loss: ``masked_cross_entropy(logits, targets, pad_id=0,
label_smoothing=0.0)``, the mean over non-padding tokens; with smoothing eps the target
puts 1 - eps on the true class and eps / V on every class; finite for extreme logits.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from transformer_lib import loss as _loss
from ._ops import CROSS_ENTROPY_OPS
from ._helpers import as_tensor, compare, first_match, randn
from ._result import Failed, GradeResult
from ._task import Case, Task, check_function, returned
from ..runner.calls import CALLERS

NAME = "masked_cross_entropy"

MISTAKES = {
    "smoothing_inf": (
        "label smoothing produced inf: with confident logits some probabilities"
        " underflow to 0, log(0) = -inf, and smoothing gives every class (even those) a"
        " weight eps / V, so the loss becomes inf. Use F.log_softmax(logits, dim=-1),"
        " which stays finite, instead of torch.log(torch.softmax(...))."
    ),
    "pad_included": (
        "Padding tokens were included in the mean: average only over positions where"
        " targets != pad_id (e.g. ignore_index=pad_id, or weight each token by a"
        " non-pad mask)."
    ),
    "sum_not_mean": (
        "You returned the sum over tokens; the loss is the mean over the non-padding"
        " tokens."
    ),
    "per_sequence_mean": (
        "You averaged each sequence first and then averaged the sequences; the course"
        " (and F.cross_entropy) averages over all non-padding tokens of the batch at"
        " once."
    ),
    "smoothing_ignored": (
        "label_smoothing had no effect: with smoothing eps the target distribution puts"
        " 1 - eps on the true token and eps / V on every class, i.e. loss = (1 - eps) *"
        " NLL + eps * mean over classes of -log p."
    ),
    "smoothing_v_minus_1": (
        "You spread eps over the V - 1 wrong classes; the course (like PyTorch's"
        " label_smoothing) spreads eps uniformly over all V classes, the true one"
        " included: loss = (1 - eps) * NLL + eps * mean over classes of -log p."
    ),
}


def _loss_variants(logits, targets, pad_id, eps):
    v = logits.size(-1)
    flat, tflat = logits.reshape(-1, v).double(), targets.reshape(-1)
    logp = F.log_softmax(flat, dim=-1)
    nll = -logp.gather(1, tflat[:, None]).squeeze(1)
    real = (tflat != pad_id).double()
    per = (1 - eps) * nll + eps * (-logp.mean(-1))
    true_logp = logp.gather(1, tflat[:, None]).squeeze(1)
    per_v1 = (1 - eps) * nll + eps / max(v - 1, 1) * (-(logp.sum(-1)) + true_logp)
    out = [
        (MISTAKES["pad_included"], lambda: per.mean()),
        (MISTAKES["sum_not_mean"], lambda: (per * real).sum()),
    ]
    if targets.dim() == 2:
        shape = targets.shape
        rows = (per * real).reshape(shape).sum(1) / real.reshape(shape).sum(1).clamp(
            min=1
        )
        out.append((MISTAKES["per_sequence_mean"], lambda: rows.mean()))
    if eps > 0:
        nll_only = (nll * real).sum() / real.sum().clamp(min=1)
        smoothed_v1 = (per_v1 * real).sum() / real.sum().clamp(min=1)
        out += [
            (MISTAKES["smoothing_ignored"], lambda: nll_only),
            (MISTAKES["smoothing_v_minus_1"], lambda: smoothed_v1),
        ]
    return out


def _judge(inputs, outputs):
    logits, targets = inputs["logits"], inputs["targets"]
    pad_id, eps, grad = inputs["pad_id"], inputs["eps"], inputs["grad"]
    out = returned(outputs)
    expected = _loss.masked_cross_entropy(logits, targets, pad_id, eps)
    found = as_tensor("loss", out["loss"])
    if found.dim() != 0:
        raise Failed(
            "The loss should be a scalar (a 0-dim tensor), got shape "
            f"{tuple(found.shape)}. Average over the non-padding tokens."
        )
    if torch.isinf(found) and torch.isfinite(expected):
        raise Failed(
            f"loss: expected {expected.item():.6g}, got inf.\n"
            + (
                MISTAKES["smoothing_inf"]
                if eps > 0
                else (
                    "log(0) = -inf: use F.log_softmax(logits, dim=-1) (or"
                    " F.cross_entropy) instead of torch.log(torch.softmax(...))."
                )
            )
        )
    if torch.isnan(found) and not (targets != pad_id).any():
        raise Failed(
            "loss: expected 0 when every target is padding, got NaN: dividing by the "
            "number of real tokens computes 0/0 here. Divide by "
            "real.sum().clamp(min=1) instead."
        )

    def diagnose(f):
        return first_match(
            f.reshape(()), _loss_variants(logits, targets, pad_id, eps), expected
        )

    compare("loss", found.double(), expected.double(), diagnose, atol=1e-5, rtol=1e-4)
    if found.dtype != expected.dtype:
        raise Failed(f"loss: expected dtype {expected.dtype}, got {found.dtype}.")
    if grad:
        if not out.get("requires_grad"):
            raise Failed(
                "The loss is not connected to the logits through autograd (did you "
                "use .item(), .detach() or torch.no_grad()?)."
            )
        g = out.get("grad")
        if not isinstance(g, torch.Tensor) or not torch.isfinite(g).all():
            raise Failed(
                "The gradient with respect to the logits is missing or not finite."
            )


def _case(name, logits, targets, pad_id=0, eps=0.0, grad=False) -> Case:
    inputs = dict(logits=logits, targets=targets, pad_id=pad_id, eps=eps, grad=grad)
    return Case(name, "loss", inputs, _judge, uses=(NAME,), args=("logits", "targets"))


def make_cases(present, seed: int = 0) -> list[Case]:
    s = seed
    logits = randn(2, 5, 7, seed=s + 21, scale=2.0)
    targets = torch.tensor([[3, 1, 4, 1, 5], [2, 6, 0, 0, 0]])
    t3 = torch.tensor(
        [[0, 1, 4, 3, 5], [2, 0, 3, 3, 3]]
    )  # 3 is padding here, 0 a real token
    confident = randn(2, 4, 6, seed=s + 23, scale=100.0)
    nc = randn(5, 2, 7, seed=s + 21, scale=2.0).transpose(
        0, 1
    )  # (2, 5, 7), non-contiguous
    return [
        _case(
            "random logits (B=2, L=5, V=7), padded targets, no smoothing",
            logits,
            targets,
        ),
        _case("label smoothing 0.1", logits, targets, eps=0.1),
        _case(
            "flat logits (N, V) and targets (N,), smoothing 0.2",
            logits.reshape(10, 7),
            targets.reshape(10),
            eps=0.2,
        ),
        _case("pad_id=3 (0 is then a real token)", logits, t3, pad_id=3),
        _case(
            "batch of 1, length 1",
            randn(1, 1, 5, seed=s + 22),
            torch.tensor([[2]]),
            eps=0.1,
        ),
        _case(
            "a fully padded sequence in the batch",
            logits,
            torch.tensor([[3, 1, 4, 1, 5], [0, 0, 0, 0, 0]]),
            eps=0.1,
        ),
        _case(
            "every target is padding: loss 0, not NaN",
            logits,
            torch.zeros(2, 5, dtype=torch.long),
        ),
        _case(
            "very confident logits (scale 100) with label smoothing 0.1: finite loss",
            confident,
            confident.argmax(-1).clamp(min=1),
            eps=0.1,
        ),
        _case(
            "float64 logits (the loss stays float64)", logits.double(), targets, eps=0.1
        ),
        _case("non-contiguous logits", nc, targets, eps=0.1),
        _case("a scalar with a finite gradient", logits, targets, eps=0.1, grad=True),
    ]


TASK = Task(
    name="loss",
    title="check_loss",
    names=(NAME,),
    callers=CALLERS["loss"],
    make_cases=make_cases,
    ops=CROSS_ENTROPY_OPS,
    banned=(
        "transformer_lib.loss",
        "torch.nn.functional.cross_entropy",
        "torch._C._nn.cross_entropy_loss",
        "torch.nn.CrossEntropyLoss",
    ),
    rules=(
        "the library's loss (transformer_lib.loss) and PyTorch's cross entropy "
        "(F.cross_entropy, nn.CrossEntropyLoss); F.log_softmax and F.nll_loss are fine"
    ),
)


def check_loss(fn) -> GradeResult:
    """Check ``fn(logits, targets, pad_id=0, label_smoothing=0.0) -> scalar`` against
    ``transformer_lib.masked_cross_entropy``: mean over non-padding tokens; with
    smoothing eps the target puts 1 - eps on the true class and eps / V on every class;
    finite for extreme logits.
    """
    return check_function(TASK, NAME, fn)
