"""Loss and accuracy over padded targets (paper section 5.4: label smoothing)."""
from __future__ import annotations

import torch
from torch.nn import functional as F

from ._checks import (
    check_floating,
    check_int,
    check_probability,
    check_tensor,
    check_token_ids,
)


def _flatten(logits, targets, pad_id):
    """Check, then flatten: logits (B, L, V) or (N, V) -> (N, V), targets (B, L) or
    (N,) -> (N,)."""
    check_floating("logits", logits, ndim=(2, 3))
    check_tensor("targets", targets, ndim=logits.dim() - 1)
    check_int("pad_id", pad_id)
    # Padding may use an id outside the vocabulary (ignore_index is often -100).
    vocab_size = logits.size(-1)
    check_token_ids("targets", targets, vocab_size, ignore=pad_id)
    if logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} disagree: "
            f"expected targets of shape {tuple(logits.shape[:-1])}"
        )
    if logits.device != targets.device:
        raise ValueError(f"logits and targets must be on the same device, "
                         f"got {logits.device} and {targets.device}")
    return logits.reshape(-1, logits.size(-1)), targets.reshape(-1)  # (N, V), (N,)


def masked_cross_entropy(logits, targets, pad_id=0, label_smoothing=0.0):
    """Mean cross entropy over the non-padding target tokens, with optional label smoothing.

    logits (B, L, V) or (N, V), targets (B, L) or (N,) -> scalar.

    With smoothing eps, the target distribution puts 1 - eps on the true token and
    spreads eps uniformly over all V classes, so the loss is
    (1 - eps) * NLL + eps * mean_v(-log p_v). Written with log_softmax, it never takes
    log(0) of a finite logit: no infinities even for huge logits.

    It equals ``F.cross_entropy`` with ``ignore_index=pad_id, label_smoothing=eps``
    wherever that is finite, -inf logits (a vocabulary entry masked out) included.
    Padded positions are *dropped* before any arithmetic, so NaN or inf logits there
    change neither the loss nor its gradient (multiplying them by 0 would give NaN).
    Where PyTorch's result is not finite, ours is:
    - inf, as PyTorch's, when the target distribution gives weight to a class of
      probability 0: a true target whose logit is -inf or, with eps > 0, any -inf logit
      (smoothing puts eps / V on it);
    - NaN, as PyTorch's, when a real position's logits hold NaN or +inf, or are all
      -inf;
    - 0 for a batch with no real token, where PyTorch gives NaN (0 / 0).
    """
    check_probability("label_smoothing", label_smoothing)
    logits, targets = _flatten(logits, targets, pad_id)
    real = targets != pad_id  # (N,) True for the tokens that count
    # Padded rows become zeros *before* log_softmax: NaN there would survive * 0.
    logits = logits.masked_fill(~real[:, None], 0.0)
    # Half-precision logits are upcast to float32 for a stable log_softmax; float64 stays float64.
    dtype = torch.promote_types(logits.dtype, torch.float32)
    log_probs = F.log_softmax(logits.to(dtype), dim=-1)  # (N, V)
    safe_targets = targets.masked_fill(~real, 0)  # the pad id may lie outside the vocab
    per_token = -log_probs.gather(1, safe_targets.unsqueeze(1)).squeeze(1)  # (N,) NLL
    if label_smoothing > 0:  # skipped at eps = 0, where 0 * inf (a -inf logit) is NaN
        smooth = -log_probs.mean(dim=-1)  # (N,)
        per_token = (1.0 - label_smoothing) * per_token + label_smoothing * smooth
    per_token = per_token.masked_fill(~real, 0.0)  # (N,) dropped, not multiplied by 0
    return per_token.sum() / real.sum().clamp(min=1)


@torch.no_grad()
def token_accuracy(logits, targets, pad_id=0) -> torch.Tensor:
    """Fraction of non-padding target tokens whose arg-max prediction is right (0 if none)."""
    logits, targets = _flatten(logits, targets, pad_id)
    real = targets != pad_id
    correct = (logits.argmax(dim=-1) == targets) & real
    return correct.sum().float() / real.sum().clamp(min=1).float()
