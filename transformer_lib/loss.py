"""Loss and accuracy over padded targets (paper section 5.4: label smoothing)."""
from __future__ import annotations

import torch
from torch.nn import functional as F

from ._checks import check_tensor, check_token_ids


def _flatten(logits, targets):
    check_tensor("logits", logits, ndim=(2, 3))
    check_tensor("targets", targets, ndim=logits.dim() - 1)
    check_token_ids("targets", targets, logits.size(-1))
    if logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} disagree: "
            f"expected targets of shape {tuple(logits.shape[:-1])}"
        )
    return logits.reshape(-1, logits.size(-1)), targets.reshape(-1)  # (N, V), (N,)


def masked_cross_entropy(logits, targets, pad_id=0, label_smoothing=0.0):
    """Mean cross entropy over the non-padding target tokens, with optional label smoothing.

    logits (B, L, V) or (N, V), targets (B, L) or (N,) -> scalar.

    With smoothing eps, the target distribution puts 1 - eps on the true token and spreads eps
    uniformly over all V classes, so the loss is (1 - eps) * NLL + eps * mean_v(-log p_v). Written
    with log_softmax, it never takes log(0): no infinities even for huge logits. This equals
    ``F.cross_entropy(logits, targets, ignore_index=pad_id, label_smoothing=eps)``, except that a
    batch with no real token gives 0 (PyTorch gives NaN from 0 / 0).
    """
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
    logits, targets = _flatten(logits, targets)
    # Half-precision logits are upcast to float32 for a stable log_softmax; float64 stays float64.
    dtype = torch.promote_types(logits.dtype, torch.float32)
    log_probs = F.log_softmax(logits.to(dtype), dim=-1)  # (N, V)
    nll = -log_probs.gather(1, targets.unsqueeze(1)).squeeze(1)  # (N,)
    smooth = -log_probs.mean(dim=-1)  # (N,)
    per_token = (1.0 - label_smoothing) * nll + label_smoothing * smooth  # (N,)
    real = (targets != pad_id).to(per_token.dtype)  # (N,) 1 for real tokens, 0 for padding
    return (per_token * real).sum() / real.sum().clamp(min=1.0)


@torch.no_grad()
def token_accuracy(logits, targets, pad_id=0) -> torch.Tensor:
    """Fraction of non-padding target tokens whose arg-max prediction is right (0 if none)."""
    logits, targets = _flatten(logits, targets)
    real = targets != pad_id
    correct = (logits.argmax(dim=-1) == targets) & real
    return correct.sum().float() / real.sum().clamp(min=1).float()
