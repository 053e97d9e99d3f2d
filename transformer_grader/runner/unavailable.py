"""What the student edition of the library puts where a graded task's reference was.

The grader builds, for every graded kernel, a copy of the library in which the task's
reference functions and classes are replaced by the stand-ins made here
(``engine/edition.py``). Calling one, or making an instance of one, raises
``ReferenceUnavailable`` with the name of what was asked for, so a student who reaches
for the reference learns at once why it is not there; the grader counts it as a use of
the reference.
"""

from __future__ import annotations


class ReferenceUnavailable(RuntimeError):
    """A reference the graded task does not allow was used while the work is graded."""


def _message(label: str) -> str:
    return (
        f"{label} is not available while your work is graded: this task asks for your"
        " own implementation."
    )


def unavailable_function(label: str):
    """A function that raises ``ReferenceUnavailable`` naming ``label``."""

    def unavailable(*args, **kwargs):
        raise ReferenceUnavailable(_message(label))

    unavailable.__name__ = unavailable.__qualname__ = label.rsplit(".", 1)[-1]
    unavailable.__doc__ = _message(label)
    return unavailable


def unavailable_class(label: str) -> type:
    """A class whose instances cannot be made (subclassing it still works, so that
    modules defining subclasses still import)."""

    def __init__(self, *args, **kwargs):
        raise ReferenceUnavailable(_message(label))

    name = label.rsplit(".", 1)[-1]
    return type(name, (), {"__init__": __init__, "__doc__": _message(label)})


def unavailable_names(module: str):
    """A module-level ``__getattr__`` (PEP 562): any other public name of ``module`` is
    a stand-in too, so that ``from module import name`` still imports."""

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return unavailable_function(f"{module}.{name}")

    return __getattr__
