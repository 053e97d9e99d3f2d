"""The student's side of the checks of ``nn.Module`` classes (multi-head attention, the
encoder layer, the cached attention): facts about the student's module, and the grader's
weights copied in.

The judge decides from the facts (plain data); ``layer_problem`` is its half.
"""

from __future__ import annotations

import torch
from torch import nn


def _holds_module(value, depth=0) -> bool:
    """True if a plain list/tuple/dict (possibly nested) holds an nn.Module."""
    if depth > 3:
        return False
    if isinstance(value, nn.Module):
        return depth > 0
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_module(x, depth + 1) for x in value)
    return False


def python_lists_of_modules(module: nn.Module) -> list[str]:
    """Attribute names (anywhere in the module tree) holding a plain list/tuple/dict of
    modules."""
    found = []
    for prefix, sub in module.named_modules():
        for name, value in vars(sub).items():
            if not name.startswith("_") and _holds_module(value):
                found.append(f"{prefix + '.' if prefix else ''}{name}")
    return found


def module_facts(student, layers) -> dict:
    """What the judge needs to know about the student's module: is it one, its parameter
    count, lists of modules, and for each named layer its class and weight/bias shapes
    (None if absent).
    """
    facts = {
        "type": type(student).__name__,
        "is_module": isinstance(student, nn.Module),
    }
    if not facts["is_module"]:
        return facts
    facts["parameters"] = sum(p.numel() for p in student.parameters())
    facts["lists"] = python_lists_of_modules(student)
    facts["linears"] = [
        n for n, m in student.named_modules() if isinstance(m, nn.Linear)
    ]
    facts["layers"] = {}
    for path in layers:
        layer = student
        for part in path.split("."):
            layer = getattr(layer, part, None)
        if not isinstance(layer, nn.Module):
            facts["layers"][path] = None
            continue
        weight, bias = getattr(layer, "weight", None), getattr(layer, "bias", None)
        facts["layers"][path] = {
            "linear": isinstance(layer, nn.Linear),
            "weight": list(weight.shape) if isinstance(weight, torch.Tensor) else None,
            "bias": list(bias.shape) if isinstance(bias, torch.Tensor) else None,
        }
    return facts


def load_weights(student, weights: dict) -> None:
    """Copy ``weights`` ({"q_proj.weight": tensor, ...}) into the student's module; a
    parameter the module lacks (a layer without bias) is skipped: the judge zeroes the
    reference's.
    """
    with torch.no_grad():
        for path, value in weights.items():
            *parents, leaf = path.split(".")
            layer = student
            for part in parents:
                layer = getattr(layer, part)
            target = getattr(layer, leaf, None)
            if isinstance(target, torch.Tensor):
                target.copy_(value)


def layer_problem(facts: dict, expected: dict, what: str) -> str | None:
    """(The grader's side.) Why the grader's weights cannot be copied into the student's
    module: ``expected`` maps a layer's path to its (weight shape, bias shape); None
    when all fit.
    """
    if not facts.get("is_module"):
        return f"Expected an nn.Module, got {facts.get('type')}."
    problems = []
    for path, (weight, bias) in expected.items():
        layer = facts["layers"].get(path)
        if not layer:
            problems.append(f"{path} is missing")
        elif layer["weight"] != list(weight) or layer["bias"] != list(bias):
            problems.append(
                f"{path} has weight {layer['weight']} and bias {layer['bias']}, "
                f"expected {list(weight)} and {list(bias)}"
            )
    if not problems:
        return None
    text = (
        f"The checker copies its weights into {what}; it needs these layers (as in "
        "transformer_lib): "
        + ", ".join(expected)
        + ". Problems: "
        + "; ".join(problems)
        + "."
    )
    if facts.get("lists"):
        text += (
            "\nFound layers kept in a plain Python list/dict:"
            f" {', '.join(facts['lists'])}."
        )
    return text
