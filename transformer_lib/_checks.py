"""Argument checks shared by the library's public functions and modules.

Every public entry point validates its input here, so that a mistake is reported at the library's
boundary with a message naming what was expected and what was given, instead of surfacing later as
a cryptic shape error deep inside torch.
"""
from __future__ import annotations

import torch


def check_tensor(name: str, x, ndim: int | tuple[int, ...] | None = None) -> None:
    """Raise ``TypeError`` unless ``x`` is a tensor, ``ValueError`` unless its rank is ``ndim``.

    ``ndim`` may be an int (exact rank), a tuple of accepted ranks, or None (any rank).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if ndim is None:
        return
    accepted = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if x.dim() not in accepted:
        want = " or ".join(str(n) for n in accepted)
        raise ValueError(
            f"{name} must have {want} dimensions, got {x.dim()} (shape {tuple(x.shape)})"
        )


def check_min_rank(name: str, x, min_ndim: int) -> None:
    """Raise unless ``x`` is a tensor with at least ``min_ndim`` dimensions."""
    check_tensor(name, x)
    if x.dim() < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimensions, got {x.dim()} "
            f"(shape {tuple(x.shape)})"
        )


def check_token_ids(name: str, tokens, vocab_size: int | None = None) -> None:
    """Raise unless ``tokens`` is an integer tensor of ids in ``[0, vocab_size)``."""
    check_tensor(name, tokens)
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids (torch.int64), got {tokens.dtype}")
    if tokens.numel() == 0:
        return
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0:
        raise ValueError(f"{name} must be >= 0, got a token id of {low}")
    if vocab_size is not None and high >= vocab_size:
        raise ValueError(
            f"{name} must be < vocab_size={vocab_size}, got a token id of {high}"
        )


def check_mask(mask, target_shape: torch.Size | tuple[int, ...], name: str = "mask") -> None:
    """Check a boolean mask (True = blocked) that must broadcast to ``target_shape``.

    Broadcasting may add or stretch size-1 dimensions of the mask, but must not change
    ``target_shape`` itself: a mask of shape (B, 1, 1, Lk) is fine for scores (B, H, Lq, Lk),
    a mask of shape (B, Lk) is not (it would line up B with Lq).
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of dtype torch.bool, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be bool (True = blocked), got {mask.dtype}; "
            f"convert with `{name} == 0` or `{name}.bool()` after checking its polarity"
        )
    target_shape = tuple(target_shape)
    try:
        shape = tuple(torch.broadcast_shapes(tuple(mask.shape), target_shape))
    except RuntimeError:
        shape = None
    if shape != target_shape:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the attention scores' "
            f"shape {target_shape}"
        )


def check_positive_int(name: str, value) -> None:
    """Raise unless ``value`` is an int >= 1 (bool is rejected)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def check_probability(name: str, value) -> None:
    """Raise unless ``0 <= value < 1``."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")


def check_bool(name: str, value) -> None:
    """Raise ``TypeError`` unless ``value`` is a bool (0 and 1 are rejected)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
