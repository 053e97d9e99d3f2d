"""What came back from a kernel, bounded before anything is computed on it.

A case's output is data the notebook controls: a small file can describe a tensor of
16384 x 16384 elements whose storage holds one (stride 0), and the first arithmetic on
it (``.double()``, a difference, a diagnosis) makes it real, in the grader's memory. So
before any judge sees an output, ``bounded`` walks it and checks, from metadata only:

- nesting depth and the number of items (lists, dicts, strings);
- every tensor: a plain strided CPU tensor of a known dtype, at most ``MAX_ELEMENTS``
  elements and ``MAX_TENSOR_BYTES`` once dense, strides not negative, its view inside
  its storage, and the storage itself at most ``MAX_TENSOR_BYTES``;
- all of a case's tensors together: at most ``MAX_CASE_BYTES`` once dense.

An output that passes is made dense (a stride-0 or overlapping view becomes a real
tensor of bounded size, so no later step can blow it up); one that does not becomes
``{"failed": reason}``: the case fails, and the reason is in the student's feedback.
Honest outputs are far below every bound (the largest case output is a few hundred
kilobytes).
"""

from __future__ import annotations

import math

import torch

MAX_DEPTH = 8
MAX_ITEMS = 10_000  # list items, dict entries and strings of one case's output
MAX_STRING = 20_000  # characters of one string
MAX_ELEMENTS = 2**22  # elements of one tensor (4 M: 32 MB in float64)
MAX_TENSOR_BYTES = 64 * 2**20
MAX_CASE_BYTES = 128 * 2**20

_DTYPES = {
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
}


class Refused(ValueError):
    """An output the grader will not judge; the message says why, for the student."""


def _tensor(value: torch.Tensor, budget: list[int]) -> torch.Tensor:
    """``value`` checked (metadata only) and made dense; ``Refused`` if it breaks a
    bound. ``budget``: bytes still allowed for this case (one item list)."""
    if type(value) is not torch.Tensor:
        raise Refused(f"a tensor of type {type(value).__name__} came back")
    if value.layout != torch.strided or value.device.type != "cpu":
        raise Refused("a tensor that is not a plain CPU tensor came back")
    if value.dtype not in _DTYPES:
        raise Refused(f"a tensor of dtype {value.dtype} came back")
    shape, strides = tuple(value.shape), tuple(value.stride())
    if len(shape) > 16:
        raise Refused(f"a tensor with {len(shape)} dimensions came back")
    elements = math.prod(shape)
    if elements > MAX_ELEMENTS:
        raise Refused(
            f"a tensor of shape {list(shape)} ({elements} elements) came back; the"
            f" grader judges at most {MAX_ELEMENTS} elements per tensor"
        )
    size = elements * value.element_size()
    storage = value.untyped_storage().nbytes()
    if size > MAX_TENSOR_BYTES or storage > MAX_TENSOR_BYTES:
        raise Refused(
            f"a tensor of {max(size, storage) // 2**20} MB came back (at most"
            f" {MAX_TENSOR_BYTES // 2**20} MB)"
        )
    if elements and (
        any(s < 0 for s in strides)
        or value.storage_offset() < 0
        or (
            value.storage_offset()
            + sum((n - 1) * s for n, s in zip(shape, strides))
            + 1
        )
        * value.element_size()
        > storage
    ):
        raise Refused("a tensor whose view lies outside its own storage came back")
    budget[0] -= size
    if budget[0] < 0:
        raise Refused(
            f"the tensors of one case came to more than {MAX_CASE_BYTES // 2**20} MB"
        )
    # bounded now: a stride-0 or overlapping view becomes a real, dense tensor
    return value.contiguous() if elements else value.clone()


def _walk(value, depth: int, counts: list[int], budget: list[int]):
    if depth > MAX_DEPTH:
        raise Refused(f"the output is nested more than {MAX_DEPTH} levels deep")
    counts[0] += 1
    if counts[0] > MAX_ITEMS:
        raise Refused(f"the output holds more than {MAX_ITEMS} items")
    if isinstance(value, torch.Tensor):
        return _tensor(value, budget)
    if value is None or isinstance(value, (bool, float)):
        return value
    if isinstance(value, int):
        if value.bit_length() > 64:
            raise Refused("an integer of more than 64 bits came back")
        return value
    if isinstance(value, str):
        if len(value) > MAX_STRING:
            return value[:MAX_STRING] + " [...]"
        return value
    if isinstance(value, (list, tuple)):
        if len(value) > MAX_ITEMS:
            raise Refused(f"a list of {len(value)} items came back")
        return [_walk(v, depth + 1, counts, budget) for v in value]
    if isinstance(value, dict):
        if len(value) > MAX_ITEMS:
            raise Refused(f"a dict of {len(value)} entries came back")
        return {
            str(k)[:200]: _walk(v, depth + 1, counts, budget) for k, v in value.items()
        }
    raise Refused(f"a {type(value).__name__} came back, which is not plain data")


def bounded(output):
    """One case's output (a dict from ``runner.cases.run_case``), checked and made
    dense; ``{"failed": why}`` in its place if it breaks a bound."""
    try:
        return _walk(output, 0, [0], [MAX_CASE_BYTES])
    except Refused as refused:
        return {
            "failed": f"the grader refused this case's output before judging it:"
            f" {refused}.",
            "refused": True,
        }


def bounded_entry(entry):
    """A task's entry (``{"outputs": [...], "hits", "tampered", "found"}``) with every
    case's output bounded; anything else in it is kept only if it is a short list of
    short strings. Not a dict: None (the task did not run)."""
    if not isinstance(entry, dict):
        return None
    outputs = entry.get("outputs")
    outputs = outputs if isinstance(outputs, list) else []
    clean = {"outputs": [bounded(o) for o in outputs[:MAX_ITEMS]]}
    for key in ("hits", "tampered", "found", "refused"):
        items = entry.get(key)
        if isinstance(items, (list, tuple)):
            clean[key] = [str(i)[:300] for i in items[:50]]
    return clean
