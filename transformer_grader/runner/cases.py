"""Run one case on the student's code and send back plain data (the student's half of a
case; the grader's half, the judge, lives with each task's cases).

``run_case`` feeds fresh copies of the case's inputs to the student's code through the
task's caller (``calls``) and returns what came out as data that
``torch.load(weights_only=True)`` reads back: tensors, numbers, strings, lists, dicts.
It decides nothing and never raises.
"""

from __future__ import annotations

import numbers
import traceback

import torch

NOT_IMPLEMENTED = (
    "not implemented yet: your code still raises NotImplementedError (replace "
    "`raise NotImplementedError()` with your solution)."
)


class Failed(Exception):
    """Raised inside a case to report a failure in words (the message is shown to the
    student): by a caller when the result cannot be used, by a judge when it is
    wrong."""


def describe_exception(error: BaseException) -> str:
    """One short paragraph for a student: the exception, and the line of *their* code
    that raised."""
    text = f"Your code raised {type(error).__name__}: {error}"
    frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if not any(
            package in f.filename.replace("\\", "/")
            for package in ("transformer_lib", "transformer_grader")
        )
        and "/torch/" not in f.filename.replace("\\", "/")
    ]
    if frames:
        last = frames[-1]
        where = f"line {last.lineno}" + (f": {last.line.strip()}" if last.line else "")
        text += f"\n(at {where})"
    hint = _hint_for(str(error))
    return text + (f"\nHint: {hint}" if hint else "")


def _hint_for(message: str) -> str:
    if "view size is not compatible" in message:
        return (
            "`.view()` needs a contiguous tensor; the inputs here are non-contiguous"
            " (e.g. a transposed tensor). Use `.reshape()` or call `.contiguous()`"
            " first."
        )
    if "expected scalar type" in message or "must have the same dtype" in message:
        return (
            "keep the input's dtype: do not create new tensors with a fixed dtype"
            " (float32); use Python numbers or `dtype=x.dtype`."
        )
    return ""


def fresh(value):
    """A deep copy of the tensors in ``value`` (strides kept: a non-contiguous input
    stays so)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: fresh(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(fresh(v) for v in value)
    return value


def export(value, depth: int = 0):
    """``value`` as plain data that ``torch.load(weights_only=True)`` reads back:
    detached CPU tensors (subclasses stripped), numbers, strings, None, lists and dicts.
    Anything else becomes ``{"__opaque__": type name}``, so the judge can say what was
    returned instead."""
    if depth > 6:
        return {"__opaque__": type(value).__name__}
    if isinstance(value, torch.Tensor):
        tensor = value.detach()
        if type(tensor) is not torch.Tensor:
            tensor = tensor.as_subclass(torch.Tensor)
        if tensor.layout != torch.strided:
            tensor = tensor.to_dense()
        return tensor.to("cpu", copy=True)
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [export(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): export(v, depth + 1) for k, v in value.items()}
    return {"__opaque__": type(value).__name__}


def _changed(after, before) -> bool:
    if not isinstance(after, torch.Tensor) or after.shape != before.shape:
        return True
    if after.dtype != before.dtype:
        return True
    if torch.equal(after, before):
        return False
    return not (
        before.is_floating_point()
        and torch.allclose(after, before, rtol=0.0, atol=0.0, equal_nan=True)
    )


def run_case(caller, objs: dict, inputs: dict, uses=(), args=()) -> dict:
    """Run one case on the student's code with ``caller(objs, inputs)``; never raises.
    Returns {"value": ...} or {"error": text} / {"failed": text} / {"missing":
    [names]}, plus "mutated": [input names].
    """
    missing = [name for name in uses if name not in objs]
    if missing:
        return {"missing": missing, "mutated": []}
    given = fresh(inputs)
    try:
        out = {"value": export(caller(objs, given))}
    except Failed as failure:  # the caller found the result unusable (e.g. not a pair)
        out = {"failed": str(failure)}
    except NotImplementedError:
        out = {"error": NOT_IMPLEMENTED, "not_implemented": True}
    except (Exception, SystemExit) as error:  # the student's code crashed: report it
        out = {
            "error": describe_exception(error),
            "error_type": type(error).__name__,
            "error_message": str(error)[:1000],
        }
    out["mutated"] = [
        name
        for name in args
        if isinstance(inputs.get(name), torch.Tensor)
        and _changed(given[name], inputs[name])
    ]
    return out
