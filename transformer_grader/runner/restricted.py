"""Graded code as restricted Python: the guards every attribute access, import, item
access and iteration of the graded definitions goes through, in the cases interpreter.

The graded definitions are compiled with RestrictedPython (``rules.compile_graded``),
which rewrites ``a.b`` into ``_getattr_(a, "b")``, ``a[i]`` into ``_getitem_(a, i)``,
``for x in y`` into ``for x in _getiter_(y)``, ``a.b = v`` into
``_write_(a, "b").b = v``, and runs them with the builtins of ``rules.SAFE_BUILTINS``
and an ``__import__`` of ours. ``Guards`` holds those functions. The rules are the table
of ``rules.py`` (the source check reports the same ones):

- a module is handed out only if it is allowed (``rules.ALLOWED_MODULES``, and the
  library's parts the task does not ban), imported or reached as an attribute;
- a dunder attribute only if it is one of ``rules.SAFE_DUNDERS``; a single-underscore
  attribute only on the student's own objects (instances of classes defined by graded
  code, and those classes);
- the task's banned references are never handed out: by identity, by class hierarchy
  (a subclass of a banned class), by name (a class or function named like one, outside
  graded code) and by source file (anything defined in a banned module's file). Such a
  refusal is a *hit*: the task scores 0, with the name;
- ``torch.load`` only with ``weights_only=True``; ``numpy.load`` never with
  ``allow_pickle=True``; ``str.format`` formats through the guards.

Any other refusal raises ``NotAllowed`` in the student's code (its case fails, with the
reason and the line) and is kept in ``refused`` for the instructor's flags.

Why this holds where a deny-list did not: graded code holds no reference to anything
that did not come through a guard, and the guards hand out no module, frame, code
object or private attribute that leads back to the unrestricted interpreter.
"""

from __future__ import annotations

import builtins
import importlib
import operator
import os
import string
import sys
import types

import torch

from . import rules
from .guard import resolve as _resolve
from .unavailable import ReferenceUnavailable


class NotAllowed(RuntimeError):
    """Graded code did something the rules of graded code refuse (``rules``)."""


_FAST = frozenset(
    {
        torch.Tensor, torch.nn.Parameter, int, float, bool, str, type(None), tuple, list,
        dict, torch.Size, torch.dtype, torch.device, bytes, complex, slice, range,
    }
)
_IOPS = {
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul,
    "/=": operator.itruediv, "%=": operator.imod, "**=": operator.ipow,
    "<<=": operator.ilshift, ">>=": operator.irshift, "|=": operator.ior,
    "^=": operator.ixor, "&=": operator.iand, "//=": operator.ifloordiv,
    "@=": operator.imatmul,
}
_DANGEROUS_TYPES = (types.FrameType, types.CodeType, types.TracebackType)
_MISSING = object()
_STANDINS = "transformer_grader.runner.unavailable"


def _where() -> str:
    """The graded line being run (the innermost frame of a ``<cell N>``)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith("<cell "):
            return f"{name[1:-1]}, line {frame.f_lineno}"
        frame = frame.f_back
    return "graded code"


def _real(path) -> str:
    return os.path.realpath(path) if path else ""


class Guards:
    """The run-time guards of one cases interpreter: ``banned`` (dotted names: the
    references its tasks may not reach), ``library`` (the ``transformer_lib`` modules
    graded code may import). ``hits`` lists the banned references graded code reached
    for, ``refused`` the other refusals (``(why, where)``)."""

    def __init__(self, banned=(), library=()):
        self.hits: list[str] = []
        self.refused: list[tuple[str, str]] = []
        self.student: tuple[type, ...] = ()
        self._library = frozenset(library)
        self._banned_ids: dict[int, tuple[object, str]] = {}
        self._banned_classes: list[tuple[type, str]] = []
        self._banned_names: dict[str, str] = {}
        self._banned_modules: dict[str, str] = {}  # module name -> label
        self._banned_files: dict[str, str] = {}  # real path -> label
        self._denied: dict[int, tuple[object, str]] = {}
        self._cache: dict[int, tuple[object, tuple | None]] = {}
        for dotted in banned:
            self._ban(dotted)
        for dotted, why in rules.DENIED_OBJECTS.items():
            obj = _resolve(dotted)
            if obj is not None:
                self._denied[id(obj)] = (obj, why)
        self._wrapped = {id(torch.load): (torch.load, self._torch_load)}
        try:
            import numpy

            self._wrapped[id(numpy.load)] = (numpy.load, self._numpy_load)
        except ImportError:  # pragma: no cover - numpy comes with the book
            pass

    # -- what is banned ----------------------------------------------------------------
    def _ban(self, dotted: str) -> None:
        obj = _resolve(dotted)
        if obj is None:
            # a module left out of the student edition: refused by its name
            self._banned_modules[dotted] = dotted
            return
        if isinstance(obj, types.ModuleType):
            self._banned_modules[obj.__name__] = dotted
            path = getattr(obj, "__file__", None)
            if path:
                self._banned_files[_real(path)] = dotted
            return
        self._banned_ids[id(obj)] = (obj, dotted)
        name = getattr(obj, "__name__", None)
        if name:
            self._banned_names[name] = dotted
        if isinstance(obj, type):
            self._banned_classes.append((obj, dotted))

    def _verdict(self, value) -> tuple | None:
        """None (fine), ("hit", label) or ("rule", why) for a value graded code would
        get."""
        hit = self._banned_ids.get(id(value))
        if hit is not None and hit[0] is value:
            return ("hit", hit[1])
        denied = self._denied.get(id(value))
        if denied is not None and denied[0] is value:
            return ("rule", denied[1])
        if isinstance(value, types.ModuleType):
            return self._module_verdict(value.__name__)
        if isinstance(value, _DANGEROUS_TYPES):
            return ("rule", "reaches the interpreter's frames or code objects")
        kind = type(value)
        if getattr(kind, "__module__", "").startswith(("ctypes", "_ctypes")):
            return ("rule", "reaches C memory through ctypes")
        if isinstance(value, type):
            if self.student and issubclass(value, self.student):
                return None
            for cls, label in self._banned_classes:
                if issubclass(value, cls):
                    return ("hit", label)
            return self._origin_verdict(value, value.__module__, value.__name__)
        if isinstance(value, types.MethodType):
            return self._verdict(value.__func__)
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
            code = getattr(value, "__code__", None)
            if code is not None and code.co_filename.startswith("<cell "):
                return None  # graded code's own
            return self._origin_verdict(
                value, getattr(value, "__module__", None) or "", value.__name__
            )
        return None

    def _origin_verdict(self, value, module: str, name: str) -> tuple | None:
        if module == _STANDINS:  # the student edition's stand-in: it says so itself
            return None
        for banned in self._banned_modules:
            if module == banned or module.startswith(banned + "."):
                return ("hit", f"{module}.{name}")
        label = self._banned_names.get(name)
        if label is not None:
            return ("hit", label)
        if self._banned_files:
            source = sys.modules.get(module)
            path = _real(getattr(source, "__file__", None))
            if path in self._banned_files:
                return ("hit", self._banned_files[path])
        return None

    def _module_verdict(self, name: str) -> tuple | None:
        for banned, label in self._banned_modules.items():
            if name == banned or name.startswith(banned + "."):
                return ("hit", label)
        why = rules.module_denied(name)
        if why is not None:
            return ("rule", why)
        if name in self._library or rules.module_allowed(name):
            return None
        return ("rule", f"reaches the module {name}, which graded code may not use")

    def check(self, value):
        """``value`` if graded code may have it (or its guarded stand-in); else a
        refusal."""
        if type(value) in _FAST:
            return value
        key = id(value)
        wrapped = self._wrapped.get(key)
        if wrapped is not None and wrapped[0] is value:
            return wrapped[1]
        cacheable = not isinstance(value, types.MethodType)
        if cacheable:
            cached = self._cache.get(key)
            if cached is not None and cached[0] is value:
                verdict = cached[1]
            else:
                verdict = self._verdict(value)
                if isinstance(value, (type, types.ModuleType, types.FunctionType,
                                      types.BuiltinFunctionType)):
                    self._cache[key] = (value, verdict)
        else:
            verdict = self._verdict(value)
        if verdict is None:
            return value
        if verdict[0] == "hit":
            self._hit(verdict[1])
        self._refuse(verdict[1])

    def _hit(self, label: str) -> None:
        if label not in self.hits:
            self.hits.append(label)
        raise ReferenceUnavailable(
            f"{label} is not available while your work is graded: this task asks for"
            " your own implementation."
        )

    def _refuse(self, why: str) -> None:
        where = _where()
        if (why, where) not in self.refused:
            self.refused.append((why, where))
        raise NotAllowed(f"graded code may not do this: it {why} ({where})")

    def is_student(self, obj) -> bool:
        if not self.student:
            return False
        if isinstance(obj, type):
            return issubclass(obj, self.student)
        return isinstance(obj, self.student)

    # -- the hooks RestrictedPython's code calls ---------------------------------------
    def getattr(self, obj, name, default=_MISSING):
        if type(name) is not str:
            raise TypeError(f"attribute name must be a string, got {type(name).__name__}")
        if name[:1] == "_":
            if _dunder(name):
                if name not in rules.SAFE_DUNDERS:
                    self._refuse(f"reads the dunder attribute {name}")
            elif not self.is_student(obj):
                self._refuse(
                    f"reads the private attribute {name} of {type(obj).__name__}"
                    " (private attributes only on your own objects)"
                )
        elif name in rules.DENIED_ATTRIBUTES:
            self._refuse(rules.DENIED_ATTRIBUTES[name])
        try:
            value = getattr(obj, name)
        except AttributeError:
            if default is _MISSING:
                raise
            return default
        if name == "format" and type(obj) is str:
            return _Formatter(self).bound(obj)
        return self.check(value)

    def hasattr(self, obj, name) -> bool:
        try:
            self.getattr(obj, name)
        except (AttributeError, NotAllowed, ReferenceUnavailable):
            return False
        return True

    def write(self, obj, name=None):
        if name is not None:
            if _dunder(name):
                self._refuse(f"sets the dunder attribute {name}")
            if name[:1] == "_" and not self.is_student(obj):
                self._refuse(f"sets the private attribute {name} of {type(obj).__name__}")
            if name in rules.DENIED_ATTRIBUTES:
                self._refuse(rules.DENIED_ATTRIBUTES[name])
        if isinstance(obj, types.ModuleType):
            self._refuse(f"changes the module {obj.__name__}")
        if isinstance(obj, type) and not self.is_student(obj):
            self._refuse(f"changes the class {obj.__name__}")
        if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType)):
            code = getattr(obj, "__code__", None)
            if code is None or not code.co_filename.startswith("<cell "):
                self._refuse(f"changes the function {obj.__name__}")
        return obj

    def setattr(self, obj, name, value) -> None:
        if type(name) is not str:
            raise TypeError(f"attribute name must be a string, got {type(name).__name__}")
        setattr(self.write(obj, name), name, value)

    def delattr(self, obj, name) -> None:
        if type(name) is not str:
            raise TypeError(f"attribute name must be a string, got {type(name).__name__}")
        delattr(self.write(obj, name), name)

    def getitem(self, obj, key):
        value = obj[key]
        return value if type(value) in _FAST else self.check(value)

    def getiter(self, obj):
        if type(obj) in (range, str, bytes, torch.Size, torch.Tensor):
            return iter(obj)
        return self._checked(iter(obj))

    def _checked(self, iterator):
        check = self.check
        for item in iterator:
            yield item if type(item) in _FAST else check(item)

    def iter(self, obj, *sentinel):
        return iter(obj, *sentinel) if sentinel else self.getiter(obj)

    def inplace(self, op, x, y):
        return _IOPS[op](x, y)

    def augattr(self, obj, name, op, value) -> None:
        result = _IOPS[op](self.getattr(obj, name), value)
        setattr(self.write(obj, name), name, result)

    def augitem(self, obj, key, op, value) -> None:
        result = _IOPS[op](self.getitem(obj, key), value)
        self.write(obj)[key] = result

    def type(self, *args):
        if len(args) != 1:
            self._refuse("builds a class with type(name, bases, dict)")
        return type(args[0])

    def import_(self, name, globals=None, locals=None, fromlist=(), level=0):
        if level:
            self._refuse("imports relatively")
        if not isinstance(name, str):
            raise TypeError("module name must be a string")
        verdict = self._module_verdict(name)
        if verdict is not None:
            if verdict[0] == "hit":
                self._hit(verdict[1])
            self._refuse(f"imports {name}: {verdict[1]}" if "module" not in verdict[1]
                         else verdict[1])
        module = importlib.import_module(name)
        if not fromlist:
            top = name.split(".")[0]
            return self.check(sys.modules[top])
        found = {}
        for item in fromlist:
            if item == "*":
                self._refuse(f"imports * from {name}")
            try:
                value = self.getattr(module, item)
            except AttributeError:  # a submodule not imported yet
                self.import_(f"{name}.{item}")
                value = self.check(sys.modules[f"{name}.{item}"])
            found[item] = value
        return types.SimpleNamespace(**found)

    def metaclass(self):
        """What ``class X(...):`` builds with in graded code: the bases' own metaclass,
        and the class recorded as the student's (its private attributes are theirs)."""
        guards = self

        class StudentClass:
            def __prepare__(self, name, bases, **kwargs):
                meta = _winner(bases)
                return meta.__prepare__(name, bases, **kwargs)

            def __call__(self, name, bases, namespace, **kwargs):
                for base in bases:
                    guards.check(base)
                cls = _winner(bases)(name, bases, namespace, **kwargs)
                guards.student = guards.student + (cls,)
                return cls

        return StudentClass()

    # -- stand-ins ---------------------------------------------------------------------
    def _torch_load(self, *args, weights_only=None, **kwargs):
        if weights_only is not True:
            self._refuse("calls torch.load without weights_only=True (unpickling runs code)")
        return torch.load(*args, weights_only=True, **kwargs)

    def _numpy_load(self, *args, allow_pickle=False, **kwargs):
        import numpy

        if allow_pickle:
            self._refuse("calls numpy.load with allow_pickle=True (unpickling runs code)")
        return numpy.load(*args, allow_pickle=False, **kwargs)

    # -- the namespace ------------------------------------------------------------------
    def namespace(self) -> dict:
        """The globals graded code runs in."""
        from RestrictedPython.Guards import (
            guarded_iter_unpack_sequence,
            guarded_unpack_sequence,
        )

        safe = {name: getattr(builtins, name) for name in rules.SAFE_BUILTINS
                if hasattr(builtins, name)}
        safe.update(
            {
                "__build_class__": builtins.__build_class__,
                "__import__": self.import_,
                "getattr": self.getattr,
                "setattr": self.setattr,
                "hasattr": self.hasattr,
                "delattr": self.delattr,
                "iter": self.iter,
                "type": self.type,
            }
        )
        return {
            "__builtins__": safe,
            "__name__": "__main__",
            "__metaclass__": self.metaclass(),
            "_getattr_": self.getattr,
            "_getitem_": self.getitem,
            "_getiter_": self.getiter,
            "_write_": self.write,
            "_inplacevar_": self.inplace,
            "_augattr_": self.augattr,
            "_augitem_": self.augitem,
            "_apply_": lambda f, *a, **k: f(*a, **k),
            "_unpack_sequence_": guarded_unpack_sequence,
            "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        }


def _dunder(name: str) -> bool:
    return len(name) > 4 and name[:2] == "__" and name[-2:] == "__"


def _winner(bases) -> type:
    meta = type
    for base in bases:
        kind = type(base)
        if issubclass(kind, meta):
            meta = kind
    return meta


class _Formatter(string.Formatter):
    """``str.format`` whose fields (``{0.attr}``, ``{x[key]}``) go through the
    guards."""

    def __init__(self, guards: Guards):
        self._guards = guards

    def bound(self, text: str):
        return lambda *args, **kwargs: self.vformat(text, args, kwargs)

    def get_field(self, field_name, args, kwargs):
        import _string

        first, rest = _string.formatter_field_name_split(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attr, key in rest:
            obj = self._guards.getattr(obj, key) if is_attr else self._guards.getitem(obj, key)
        return obj, first


def library_modules(banned) -> list[str]:
    """The ``transformer_lib`` modules graded code may import: all of the library's,
    less those ``banned`` names (and the grading and assignments parts)."""
    import pkgutil

    try:
        import transformer_lib
    except ImportError:  # pragma: no cover
        return []
    names = ["transformer_lib"]
    for info in pkgutil.iter_modules(transformer_lib.__path__):
        names.append(f"transformer_lib.{info.name}")
    return [
        n
        for n in names
        if n not in banned
        and not n.startswith(("transformer_lib.grading", "transformer_lib.assignments"))
    ]


def compile_graded(source: str, filename: str):
    """``rules.compile_graded``: (code, errors)."""
    return rules.compile_graded(source, filename)
