"""Notice when graded code reaches a reference implementation it may not use.

This runs in the student's own process, so it is a courtesy, not a defence: it tells an
honest student who forgot the rule which reference their code reached, in the notebook
checks and in batch grading. A determined notebook can switch it off; what batch grading
rests on is outside the kernel: the student edition of the library, in which the task's
references do not exist (``engine/edition.py``), the sandbox around the kernel
(``engine/sandbox.py``) and the grader's reading of the source (``engine/static.py``).

A task bans some references (``Task.banned``: dotted names such as
``transformer_lib.attention`` or ``torch.nn.functional.cross_entropy``). While a
student's code runs on the grader's inputs, ``Guard`` watches it in two ways:

1. **By the code that runs.** A profiling hook (``sys.setprofile``, and
   ``threading.setprofile`` for threads started meanwhile) sees every Python function
   that starts and every builtin that is called. A banned module is recognised by its
   source file, a banned function or class by its code (file, first line, name), a
   banned builtin by its name. So a wrapper, ``importlib``, a name looked up with
   ``getattr``, a reference saved before grading, even ``importlib.reload`` or a second
   copy of the module loaded from its file, are all seen: they run the same code.
2. **By name.** Banned functions and classes are replaced, in every loaded module and in
   the notebook's namespace, by a tripwire that records the call and raises; they are
   put back after.

Calls to ``sys.setprofile``/``settrace`` (or ``gc.get_objects``, to dig out a hidden
original) while graded code runs are recorded as tampering, and so is a hook that is no
longer installed after a case. A hook that does not see a known call when it is
installed (``sys.setprofile`` replaced) is tampering too. What this cannot see: code
written to switch the hook off without a Python-level call (``ctypes``), a thread started
before grading began, the library's source pasted into the notebook.
"""

from __future__ import annotations

import gc
import importlib
import inspect
import os
import sys
import threading
import types

_TAMPER_BUILTINS = (
    sys.setprofile,
    sys.settrace,
    gc.get_objects,
    gc.get_referrers,
    gc.get_referents,
)
_TAMPER_FUNCTIONS = (threading.setprofile, threading.settrace)


def _sentinel() -> None:
    """Called once when a guard starts: the hook must see it (see
    ``Guard.__enter__``)."""


def resolve(dotted: str):
    """The object a dotted name refers to (module, class, function or builtin), or
    None."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:
            continue
        for part in parts[cut:]:
            obj = getattr(obj, part, None)
            if obj is None:
                return None
        return obj
    return None


def _code_key(code: types.CodeType, real) -> tuple:
    return real(code.co_filename), code.co_firstlineno, code.co_name


def _functions_of(cls) -> list[types.FunctionType]:
    found = []
    for value in vars(cls).values():
        for item in (getattr(value, "__func__", value), getattr(value, "fget", None)):
            item = inspect.unwrap(item) if callable(item) else item
            if isinstance(item, types.FunctionType):
                found.append(item)
    return found


class Guard:
    """``with Guard(banned) as guard: ...``; afterwards ``guard.hits`` lists the banned
    references that were reached (labels such as
    ``transformer_lib.attention.masked_softmax``) and ``guard.tampered`` what interfered
    with the watch."""

    def __init__(self, banned=(), namespaces=()):
        self.hits: list[str] = []
        self.tampered: list[str] = []
        self._namespaces = list(namespaces)
        self._real_paths: dict[str, str] = {}
        self._files: dict[str, str] = {}  # real path of a banned module -> its name
        self._codes: dict[tuple, str] = {}  # code key -> label
        self._builtins: dict[str, str] = {}  # builtin name -> label
        self._poison: dict[int, tuple[object, str]] = {}  # id -> (object, label)
        self._cache: dict[types.CodeType, str | None] = {}
        self._restore: list[tuple[dict, str, object]] = []
        self._hook = (
            self._profile
        )  # one bound method, so that it can be compared by identity
        self._previous = (None, None)
        self._active = False
        for dotted in banned:
            self._ban(dotted)
        for function in _TAMPER_FUNCTIONS:
            self._codes[_code_key(function.__code__, self._real)] = (
                f"TAMPER:threading.{function.__name__}"
            )
        self._codes[_code_key(_sentinel.__code__, self._real)] = "SENTINEL"

    # -- what is banned ----------------------------------------------------------------
    def _real(self, path: str) -> str:
        real = self._real_paths.get(path)
        if real is None:
            real = self._real_paths[path] = os.path.realpath(path) if path else path
        return real

    def _ban(self, dotted: str) -> None:
        obj = resolve(dotted)
        if obj is None:  # not in this version of torch, say: nothing to watch
            return
        if isinstance(obj, types.ModuleType):
            path = getattr(obj, "__file__", None)
            if path:
                self._files[self._real(path)] = obj.__name__
            # PyTorch's modules are watched by their file only: their classes are used
            # inside PyTorch itself, which a tripwire in their place could break.
            if not obj.__name__.startswith("transformer_lib."):
                return
            for name, value in vars(obj).items():
                if (inspect.isfunction(value) or inspect.isclass(value)) and getattr(
                    value, "__module__", None
                ) == obj.__name__:
                    self._poison[id(value)] = (value, f"{obj.__name__}.{name}")
        elif inspect.isclass(obj):
            for function in _functions_of(obj):
                label = f"{dotted}.{function.__name__}"
                self._codes[_code_key(function.__code__, self._real)] = label
        elif isinstance(obj, types.FunctionType):
            function = inspect.unwrap(obj)
            self._codes[_code_key(function.__code__, self._real)] = dotted
            self._poison[id(obj)] = (obj, dotted)
        elif isinstance(obj, types.BuiltinFunctionType):
            self._builtins[obj.__name__] = dotted
            self._poison[id(obj)] = (obj, dotted)

    def _classify(self, code: types.CodeType) -> str | None:
        path = self._real(code.co_filename)
        module = self._files.get(path)
        if module is not None:
            return f"{module}.{getattr(code, 'co_qualname', code.co_name)}"
        return self._codes.get((path, code.co_firstlineno, code.co_name))

    # -- watching ----------------------------------------------------------------------
    def _profile(self, frame, event, arg):
        if not self._active:
            return
        if event == "call":
            code = frame.f_code
            try:
                label = self._cache[code]
            except KeyError:
                label = self._cache[code] = self._classify(code)
            if label is not None:
                self._record(label)
        elif event == "c_call":
            label = self._builtins.get(getattr(arg, "__name__", None))
            if label is not None:
                self._record(label)
            elif any(arg is item for item in _TAMPER_BUILTINS):
                self._record(
                    f"TAMPER:{getattr(arg, '__module__', '') or 'sys'}.{arg.__name__}"
                )

    def _record(self, label: str) -> None:
        if label.startswith("TAMPER:"):
            what = f"called {label[7:]} while being graded"
            if what not in self.tampered:
                self.tampered.append(what)
        elif label not in self.hits:
            self.hits.append(label)

    def _tripwire(self, label: str):
        def tripwire(*args, **kwargs):
            self._record(label)
            raise RuntimeError(
                f"{label} is not available while your code is graded: "
                "write your own implementation."
            )

        tripwire.__name__ = label.rsplit(".", 1)[-1]
        return tripwire

    def _lay_tripwires(self) -> None:
        if not self._poison:
            return
        dicts = [
            vars(m)
            for m in list(sys.modules.values())
            if isinstance(getattr(m, "__dict__", None), dict)
        ]
        for namespace in dicts + self._namespaces:
            for key, value in list(namespace.items()):
                hit = self._poison.get(id(value))
                if hit is not None and hit[0] is value:
                    namespace[key] = self._tripwire(hit[1])
                    self._restore.append((namespace, key, value))

    def check(self) -> None:
        """After each case: the hook must still be installed (re-install it if not)."""
        if sys.getprofile() is not self._hook:
            what = "switched off the grader's watch (sys.setprofile) while being graded"
            if what not in self.tampered:
                self.tampered.append(what)
            sys.setprofile(self._hook)

    def __enter__(self) -> "Guard":
        self._previous = (sys.getprofile(), threading.getprofile())
        self._lay_tripwires()
        self._active = True
        threading.setprofile(self._hook)
        sys.setprofile(self._hook)
        _sentinel()
        if "SENTINEL" in self.hits:
            self.hits.remove("SENTINEL")
        else:
            self.tampered.append(
                "the grader's watch (sys.setprofile) does not work in this "
                "kernel (was sys.setprofile replaced?)"
            )
        return self

    def __exit__(self, *exc) -> None:
        self._active = False
        sys.setprofile(self._previous[0])
        threading.setprofile(self._previous[1])
        for namespace, key, value in reversed(self._restore):
            namespace[key] = value
        self._restore.clear()
