"""Argument checks shared by the library's public functions and modules.

Every public entry point validates its input here, so that a mistake is reported at
the library's boundary with a message naming the argument, what was expected and what
was given, instead of surfacing later as a cryptic error deep inside torch. The wrong
kind of value (a float for an int, float token ids, float64 input for float32 weights)
raises ``TypeError``; the right kind with a wrong value (a negative size, a shape that
does not fit), ``ValueError``.
"""
from __future__ import annotations

import collections
import math
import weakref
from numbers import Integral, Real

import torch

# --------------------------------------------------------------------------------------
# Plain Python values
# --------------------------------------------------------------------------------------


def check_int(name: str, value, minimum: int | None = None,
              maximum: int | None = None) -> None:
    """Raise unless ``value`` is an int (not bool) in [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")


def check_positive_int(name: str, value) -> None:
    """Raise unless ``value`` is an int >= 1 (bool is rejected)."""
    check_int(name, value, minimum=1)


def check_optional_positive_int(name: str, value) -> None:
    """``None``, or an int >= 1."""
    if value is not None:
        check_positive_int(name, value)


def check_token_id(name: str, value, vocab_size: int) -> None:
    """Raise unless ``value`` (pad_id, bos_id, ...) is an int in [0, vocab_size)."""
    check_int(name, value)
    if not 0 <= value < vocab_size:
        raise ValueError(f"{name} must be in [0, vocab_size={vocab_size}), got {value}")


def check_number(name: str, value, low: float | None = None, high: float | None = None,
                 low_open: bool = False, high_open: bool = False) -> None:
    """Raise unless ``value`` is a finite real number (not bool) between ``low`` and
    ``high``; ``low_open``/``high_open`` exclude the end points."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(
            f"{name} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        left = "(" if low_open or low is None else "["
        right = ")" if high_open or high is None else "]"
        low_text = "-inf" if low is None else f"{low:g}"
        high_text = "inf" if high is None else f"{high:g}"
        raise ValueError(
            f"{name} must be in {left}{low_text}, {high_text}{right}, got {value}")


def check_probability(name: str, value) -> None:
    """Raise unless ``0 <= value < 1`` (a dropout rate, a label-smoothing weight)."""
    check_number(name, value, 0.0, 1.0, high_open=True)


def check_bool(name: str, value) -> None:
    """Raise unless ``value`` is True or False (not 0/1, not a string)."""
    if not isinstance(value, bool):
        raise TypeError(
            f"{name} must be True or False, got {type(value).__name__} {value!r}")


def check_choice(name: str, value, choices) -> None:
    """Raise unless ``value`` is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")


def check_instance(name: str, value, types, expected: str) -> None:
    """Raise ``TypeError`` unless ``isinstance(value, types)``."""
    if not isinstance(value, types):
        raise TypeError(f"{name} must be {expected}, got {type(value).__name__}")


def check_device(name: str, device) -> torch.device | None:
    """None, a ``torch.device`` or a string such as "cpu" or "cuda:0": the device."""
    if device is None or isinstance(device, torch.device):
        return device
    if not isinstance(device, str):
        raise TypeError(f"{name} must be a torch.device, a string or None, "
                        f"got {type(device).__name__}")
    try:
        return torch.device(device)
    except RuntimeError:
        raise ValueError(f"{name} must name a device such as 'cpu' or 'cuda', "
                         f"got {device!r}") from None


def _and(items) -> str:
    """"a", "a and b", "a, b and c"."""
    items = [str(item) for item in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# --------------------------------------------------------------------------------------
# Tensors
# --------------------------------------------------------------------------------------


def check_tensor(name: str, x, ndim: int | tuple[int, ...] | None = None) -> None:
    """Raise ``TypeError`` unless ``x`` is a tensor, ``ValueError`` unless its rank is
    ``ndim``.

    ``ndim`` may be an int (exact rank), a tuple of accepted ranks, or None (any rank).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if ndim is None:
        return
    accepted = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if x.dim() not in accepted:
        want = " or ".join(str(n) for n in accepted)
        raise ValueError(f"{name} must have {want} dimensions, got {x.dim()} "
                         f"(shape {tuple(x.shape)})")


def check_min_rank(name: str, x, min_ndim: int) -> None:
    """Raise unless ``x`` is a tensor with at least ``min_ndim`` dimensions."""
    check_tensor(name, x)
    if x.dim() < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimensions, got {x.dim()} "
            f"(shape {tuple(x.shape)})"
        )


def check_floating(name: str, x, ndim: int | tuple[int, ...] | None = None) -> None:
    """Raise unless ``x`` is a floating-point tensor (of rank ``ndim``, if given)."""
    check_tensor(name, x, ndim)
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")


def check_width(name: str, x: torch.Tensor, expected: int,
                what: str = "d_model") -> None:
    """Raise unless the last dimension of ``x`` is ``expected`` (``what``: its name)."""
    if x.size(-1) != expected:
        raise ValueError(f"{name} must have last dimension {what}={expected}, "
                         f"got {x.size(-1)} (shape {tuple(x.shape)})")


def check_activations(name: str, x, d_model: int) -> None:
    """Raise unless ``x`` is a (B, L, d_model) floating-point tensor."""
    check_floating(name, x, ndim=3)
    check_width(name, x, d_model)


def check_same_size(dim: int, what: str, **tensors: torch.Tensor) -> None:
    """Raise unless the named tensors agree in dimension ``dim`` (``what`` it means)."""
    first, *others = (t.size(dim) for t in tensors.values())
    if any(size != first for size in others):
        sizes = {name: t.size(dim) for name, t in tensors.items()}
        raise ValueError(
            f"{_and(sizes)} must have the same {what}, got {_and(sizes.values())}")


def check_same_dtype_device(**tensors: torch.Tensor) -> None:
    """Raise unless the named tensors share one dtype (``TypeError``) and one device."""
    for attribute, error in (("dtype", TypeError), ("device", ValueError)):
        found = {name: getattr(t, attribute) for name, t in tensors.items()}
        if len(set(found.values())) > 1:
            raise error(f"{_and(found)} must have the same {attribute}, "
                        f"got {_and(found.values())}")


def check_on_device(name: str, x: torch.Tensor, weight: torch.Tensor) -> None:
    """Raise unless tensor ``x`` is on the device of a module's ``weight``."""
    if x.device != weight.device:
        raise ValueError(f"{name} is on {x.device}, but the module's weights are on "
                         f"{weight.device}; move one with .to(device)")


def check_matches_weight(name: str, x: torch.Tensor, weight: torch.Tensor,
                         need_same_dtype: bool = True) -> None:
    """Raise unless ``x`` is a floating tensor on the device of a module's ``weight``
    and, if ``need_same_dtype``, of its dtype. Under ``torch.autocast`` the dtypes may
    differ on purpose."""
    check_floating(name, x)
    check_on_device(name, x, weight)
    if (need_same_dtype and x.dtype != weight.dtype
            and not torch.is_autocast_enabled(x.device.type)):
        raise TypeError(f"{name} has dtype {x.dtype}, but the module's weights are "
                        f"{weight.dtype}; convert the input, or the module with "
                        f".to({x.dtype})")


def check_token_ids(name: str, tokens, vocab_size: int | None = None,
                    ndim: int | tuple[int, ...] | None = None,
                    ignore: int | None = None) -> None:
    """Raise unless ``tokens`` is an integer tensor (of rank ``ndim``) of ids in
    ``[0, vocab_size)``; entries equal to ``ignore`` (a padding id) may lie outside.

    The range check reads the ids' values, and it is made only where that costs
    nothing. Reading a value of a GPU tensor waits for the GPU to finish all queued
    work (a sync), and ``torch.compile`` cannot trace it (a graph break). So the named
    errors are raised in eager mode for CPU tensors; CUDA tensors get an asynchronous
    device assert (a bad id stops the program at the next sync, as PyTorch's embedding
    lookup would, without a wait on every call); compiled code and other devices rely
    on the lookup's own bounds check. A tensor already checked and not modified since
    is not read again (a model checks the same ``src`` at several levels).
    """
    check_tensor(name, tokens, ndim)
    dtype = tokens.dtype
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise TypeError(
            f"{name} must hold integer token ids (torch.int64), got {dtype}")
    if (tokens.numel() == 0 or _is_compiling()
            or _ids_checked(tokens, vocab_size, ignore)):
        return
    ids = tokens if ignore is None else tokens.masked_fill(tokens == ignore, 0)
    if ids.device.type == "cuda":
        low, high = torch.aminmax(ids)  # (), () on the GPU: nothing is read here
        ok = low >= 0 if vocab_size is None else (low >= 0) & (high < vocab_size)
        torch._assert_async(ok, f"{name} holds a token id outside "
                                f"[0, {'inf' if vocab_size is None else vocab_size})")
    elif ids.device.type == "cpu":
        low, high = (int(t) for t in torch.aminmax(ids))  # one pass over the tokens
        if low < 0:
            raise ValueError(f"{name} must be >= 0, got a token id of {low}")
        if vocab_size is not None and high >= vocab_size:
            raise ValueError(
                f"{name} must be < vocab_size={vocab_size}, got a token id of {high}"
            )
    if not tokens.is_inference():  # (inference tensors have no version counter)
        _CHECKED_IDS.append((weakref.ref(tokens), tokens._version, vocab_size, ignore))


# torch.compiler.is_compiling is torch >= 2.3's; the package accepts torch 2.2.
_is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)

# The last token tensors check_token_ids passed: (weak reference, version counter,
# vocab_size, ignore). Transformer.forward, encode, decode, the embeddings and the masks
# all check the same src, and a decoding loop passes the same src at every step.
_CHECKED_IDS: collections.deque = collections.deque(maxlen=8)


def _ids_checked(tokens: torch.Tensor, vocab_size: int | None, ignore: int | None) -> bool:
    """Whether these very ids, unmodified (same version), passed a check at least as
    strict: a vocabulary no larger, and the same ``ignore`` id or none."""
    if tokens.is_inference():
        return False
    for ref, version, checked_vocab, checked_ignore in tuple(_CHECKED_IDS):
        if (ref() is tokens and version == tokens._version
                and checked_ignore in (None, ignore)
                and (vocab_size is None
                     or checked_vocab is not None and checked_vocab <= vocab_size)):
            return True
    return False


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    """The shape that ``shapes`` broadcast to, or None if they do not: what
    ``torch.broadcast_shapes`` computes, at a fraction of its cost (it runs in every
    attention call)."""
    rank = max(map(len, shapes))
    result = []
    for sizes in zip(*((1,) * (rank - len(s)) + tuple(s) for s in shapes)):
        wider = {n for n in sizes if n != 1}
        if len(wider) > 1:
            return None
        result.append(wider.pop() if wider else 1)
    return tuple(result)


def check_mask(mask, target_shape: torch.Size | tuple[int, ...], name: str = "mask",
               device: torch.device | None = None) -> None:
    """Check a boolean mask (True = blocked) that must broadcast to ``target_shape``.

    Broadcasting may add or stretch size-1 dimensions of the mask, but must not change
    ``target_shape`` itself: a mask of shape (B, 1, 1, Lk) is fine for scores
    (B, H, Lq, Lk), a mask of shape (B, Lk) is not (it would line up B with Lq).
    ``device``: where the scores are.
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of dtype torch.bool, "
                        f"got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be bool (True = blocked), got {mask.dtype}; "
            f"convert with `{name} == 0` or `{name}.bool()` after checking its polarity"
        )
    target_shape = tuple(target_shape)
    # Broadcasting leaves target_shape unchanged: each mask size is 1 or the target's.
    fits = mask.dim() <= len(target_shape) and all(
        m == 1 or m == t for m, t in zip(reversed(mask.shape), reversed(target_shape)))
    if not fits:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the attention "
            f"scores' shape {target_shape}"
        )
    if device is not None and mask.device != device:
        raise ValueError(
            f"{name} is on {mask.device}, but the attention scores are on {device}")
