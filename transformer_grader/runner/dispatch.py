"""Banned PyTorch operators blocked where every route ends: PyTorch's dispatcher.

A task's ``Task.ops`` lists ATen operators (``"scaled_dot_product_attention"``,
``"_scaled_dot_product_attention_math"``, ``"cross_entropy_loss"``, ...). ``block(ops)``
registers, through ``torch.library``, a kernel of its own for each of them (and each of
their overloads) in place of PyTorch's: on the ``CompositeImplicitAutograd`` key for an
operator defined by its decomposition, on every backend key it has a kernel for
otherwise. Whatever route the student's code takes to the operator (``F.`` functions,
``torch._C._nn``, ``torch.ops.aten``, ``getattr`` with a computed name, a module such as
``nn.CrossEntropyLoss``, in any thread), the dispatcher calls that kernel, which records
the operator in ``HITS`` and raises ``ReferenceUnavailable``: the operator never
computes anything.

The runner calls ``block`` in its fresh interpreter before any of the student's code
exists there (``runner/serve.py``); the registration lives as long as the process.
Undoing it needs ``torch.library`` or ``torch._C``, which restricted Python does not
allow in graded code (``definitions``).
"""

from __future__ import annotations

import warnings

import torch

from .unavailable import ReferenceUnavailable

HITS: list[str] = []
_LIBRARIES: list = []  # kept alive: a Library's registrations end with it
_BACKENDS = ("CPU", "CUDA", "MPS", "Meta", "XPU")


def _kernel(name: str):
    def blocked(*args, **kwargs):
        if name not in HITS:
            HITS.append(name)
        raise ReferenceUnavailable(
            f"torch.ops.aten.{name} is not available while your work is graded: this"
            " task asks for your own implementation."
        )

    return blocked


def _has(qualified: str, key: str) -> bool:
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key)
    except RuntimeError:  # no such operator (overload) in this PyTorch
        return False


def _overloads(name: str) -> list[str]:
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return []
    try:
        names = packet.overloads()
    except Exception:
        return []
    return [name if o == "default" else f"{name}.{o}" for o in names]


def block(ops) -> list[str]:
    """Block every ATen operator of ``ops`` (and their overloads) in this process;
    returns the ``aten::`` names blocked (an operator this PyTorch lacks is skipped)."""
    if not ops:
        return []
    library = torch.library.Library("aten", "IMPL")
    _LIBRARIES.append(library)
    blocked = []
    with warnings.catch_warnings():  # "overriding a previously registered kernel"
        warnings.simplefilter("ignore")
        for op in ops:
            for overload in _overloads(op):
                qualified = "aten::" + overload
                keys = (
                    ["CompositeImplicitAutograd"]
                    if _has(qualified, "CompositeImplicitAutograd")
                    else [k for k in _BACKENDS if _has(qualified, k)]
                    + (
                        ["CompositeExplicitAutograd"]
                        if _has(qualified, "CompositeExplicitAutograd")
                        else []
                    )
                )
                for key in keys:
                    library.impl(overload, _kernel(op), key)
                if keys:
                    blocked.append(qualified)
    return blocked
