"""Helpers shared by every task's check: comparing a student's output with the
reference, naming the classic mistake that explains a difference, and making the
(seeded) test inputs.

Everything here runs in the grading process, on plain data that came back from the
student's code.
"""

from __future__ import annotations

import torch

from ._result import Failed


def type_name(x) -> str:
    """The type of a value as the student wrote it (values that could not be sent back
    as data arrive as ``{"__opaque__": "TypeName"}``)."""
    if isinstance(x, dict) and "__opaque__" in x:
        return x["__opaque__"]
    return type(x).__name__


def as_tensor(name: str, x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise Failed(f"{name} should be a torch.Tensor, got {type_name(x)}.")
    return x


def matches(found, expected, atol=1e-5, rtol=1e-4) -> bool:
    """True when ``found`` equals ``expected`` where ``found`` is finite (most of it
    must be)."""
    if not isinstance(found, torch.Tensor) or not isinstance(expected, torch.Tensor):
        return False
    if found.shape != expected.shape:
        return False
    found = found.detach().double()
    expected = expected.detach().double()
    finite = torch.isfinite(found)
    if finite.float().mean() < 0.5:
        return False
    return torch.allclose(found[finite], expected[finite], atol=atol, rtol=rtol)


def compare(
    what: str,
    found,
    expected: torch.Tensor,
    diagnose=None,
    atol=1e-5,
    rtol=1e-4,
    check_dtype=True,
) -> None:
    """Raise ``Failed`` with a student-readable message unless ``found`` equals
    ``expected``."""
    found = as_tensor(what, found)
    if found.shape != expected.shape:
        hint = diagnose(found) if diagnose else None
        raise Failed(
            f"{what}: expected shape {tuple(expected.shape)}, got {tuple(found.shape)}."
            + (f"\n{hint}" if hint else "")
        )
    if check_dtype and found.dtype != expected.dtype:
        raise Failed(
            f"{what}: expected dtype {expected.dtype} (the input's dtype), got"
            f" {found.dtype}. Keep the input's dtype: avoid creating tensors with a"
            " fixed dtype such as torch.tensor(..., dtype=torch.float32)."
        )
    if expected.dtype == torch.bool:
        _compare_bool(what, found, expected, diagnose)
        return
    f64, e64 = found.detach().double().cpu(), expected.detach().double().cpu()
    if torch.allclose(f64, e64, atol=atol, rtol=rtol, equal_nan=False):
        return
    hint = diagnose(found) if diagnose else None
    raise Failed(_difference(what, f64, e64) + (f"\n{hint}" if hint else ""))


def _compare_bool(what, found, expected, diagnose) -> None:
    found, expected = found.detach().cpu(), expected.cpu()
    if torch.equal(found, expected):
        return
    wrong = (found != expected).nonzero()[0].tolist()
    hint = diagnose(found) if diagnose else None
    raise Failed(
        f"{what}: {int((found != expected).sum())} entries differ; "
        f"e.g. at index {tuple(wrong)} expected {bool(expected[tuple(wrong)])}, got "
        f"{bool(found[tuple(wrong)])}." + (f"\n{hint}" if hint else "")
    )


def _difference(what: str, f64: torch.Tensor, e64: torch.Tensor) -> str:
    """Where and how two float tensors of one shape differ, in words."""
    nan = torch.isnan(f64)
    if nan.any() and not torch.isnan(e64).any():
        where = tuple(nan.nonzero()[0].tolist())
        return (
            f"{what}: contains NaN ({int(nan.sum())} entries, e.g. at index {where});"
            f" expected finite numbers (e.g. {e64[where].item():.4g} there)."
        )
    if torch.isinf(f64).any() and not torch.isinf(e64).any():
        return f"{what}: contains inf; expected finite numbers."
    diff = (f64 - e64).abs()
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
    where = tuple(torch.nonzero(diff == diff.max())[0].tolist())
    if f64.dim() == 0:
        return f"{what}: expected {e64.item():.6g}, got {f64.item():.6g}."
    return (
        f"{what}: values differ from the reference (largest difference "
        f"{diff.max().item():.3g} at index {where}: expected {e64[where].item():.4g}, "
        f"got {f64[where].item():.4g})."
    )


def first_match(found, variants, expected) -> str | None:
    """The message of the first variant (message, thunk) whose output matches ``found``.

    A variant that equals ``expected`` on this input (a mask polarity bug, say, when
    there is no mask) cannot explain a difference from it, so it is skipped.
    """
    for message, thunk in variants:
        try:
            candidate = thunk()
        except Exception:
            continue
        if matches(found, candidate) and not matches(candidate, expected):
            return message
    return None


def rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0, dtype=torch.float32, scale=1.0):
    """Seeded standard normal numbers (drawn in float64, so every dtype sees the same
    values)."""
    return (torch.randn(*shape, generator=rng(seed), dtype=torch.float64) * scale).to(
        dtype
    )


def seeded_module(factory, seed: int):
    """``factory()`` with the global RNG seeded, without disturbing the caller's RNG
    state (a check run in a student's notebook must not change the numbers the notebook
    draws next)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return factory()


def token_batch(rng, rows: int, length: int, pad_id: int, lengths=None) -> torch.Tensor:
    """Tokens (rows, length) drawn with ``rng`` (a ``random.Random``): row i holds
    ``lengths[i]`` tokens (not ``pad_id``), then padding."""
    lengths = lengths or [rng.randint(1, length) for _ in range(rows)]
    tokens = []
    for n in lengths:
        row = [rng.choice([t for t in range(1, 30) if t != pad_id]) for _ in range(n)]
        tokens.append(row + [pad_id] * (length - n))
    return torch.tensor(tokens)


def padded_lengths(rng, rows: int, length: int) -> list[int]:
    """``rows`` sequence lengths up to ``length`` (at least 2), drawn with ``rng``: one
    row full, one shorter (so some keys are padding), the rest anything from 1, in a
    drawn order."""
    lengths = [length, rng.randint(1, length - 1)]
    lengths += [rng.randint(1, length) for _ in range(rows - 2)]
    rng.shuffle(lengths)
    return lengths


def listed(numbers) -> str:
    """[5, 2] -> "5 and 2"; [4, 1, 3] -> "4, 1 and 3" (for case titles)."""
    words = [str(n) for n in numbers]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
