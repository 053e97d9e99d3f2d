"""The rules of graded code, in one table read by both sides: the restricted-Python
guards that enforce them while the cases run (``restricted.py``, beside this file) and the
source check that reports them, line by line, before anything runs
(``engine/definitions.py``, the notebook's own check cell).

Graded code is compiled with RestrictedPython, so every attribute access, ``getattr``,
import, item access and iteration in it goes through our guards. What they allow:

- **modules**: only those of ``ALLOWED_MODULES`` (and the library's own parts that the
  task does not ban), imported name by name (no ``*``) or reached as an attribute
  (``torch.nn``); any other module (``torch.sys``, ``dataclasses.sys``,
  ``torch.jit``) is refused, with the reason of ``DENIED_MODULES`` where it has one;
- **attributes**: no dunder (``__self__``, ``__dict__``, ...) except ``SAFE_DUNDERS``
  (``super().__init__()``); a single-underscore attribute only on the student's own
  objects (instances of classes defined in graded code: ``self._cache``); none of
  ``DENIED_ATTRIBUTES`` (frames, code objects, ``ctypes`` views);
- **objects**: none of ``DENIED_OBJECTS`` (``torch.compile``, ``typing.get_type_hints``,
  ...), and none of the task's banned references (``Task.banned``) or their copies;
- **builtins**: ``SAFE_BUILTINS`` only (no ``exec``, ``eval``, ``compile``, ``open``,
  ``globals``, ``vars``, ``breakpoint``, ``__import__``); ``getattr``/``setattr``/
  ``hasattr``/``delattr`` are the guarded ones.

Standard library only: ``definitions.py`` runs isolated (``python -I``) and loads this
file by its path.
"""

from __future__ import annotations

# Modules graded code may import or reach. A name covers exactly that module; ``.*``
# covers its submodules too. The library's own modules are added per task (the parts it
# does not ban), by the runner.
ALLOWED_MODULES = (
    "torch",
    "torch.nn",
    "torch.nn.functional",
    "torch.nn.init",
    "torch.nn.utils",
    "torch.nn.parameter",
    "torch.linalg",
    "torch.fft",
    "torch.special",
    "torch.func",
    "torch.cuda",
    "torch.backends",
    "torch.backends.mps",
    "torch.backends.cuda",
    "torch.optim",
    "torch.optim.lr_scheduler",
    "torch.testing",
    "math",
    "cmath",
    "numpy",
    "numpy.linalg",
    "numpy.random",
    "numpy.fft",
    "einops",
    "typing",
    "collections",
    "collections.abc",
    "itertools",
    "functools",
    "dataclasses",
    "copy",
    "warnings",
    "abc",
    "enum",
    "numbers",
    "random",
    "statistics",
    "time",
    "re",
    "operator",
    "__future__",
    "transformer_lib",
)
# modules that graded code may never reach, with why (checked before the allowlist)
DENIED_MODULES = {
    "torch.jit": "compiles code where the grader cannot watch it (torch.jit)",
    "torch.fx": "traces and rewrites code (torch.fx)",
    "torch.export": "compiles code where the grader cannot watch it (torch.export)",
    "torch.multiprocessing": "starts processes (torch.multiprocessing)",
    "torch.distributed": "starts processes and connections (torch.distributed)",
    "torch.library": "changes PyTorch's operators (torch.library)",
    "torch.ops": "calls PyTorch's operators directly (torch.ops)",
    "torch.overrides": "changes how PyTorch functions dispatch (torch.overrides)",
    "torch.utils": "reaches PyTorch's utilities (torch.utils: data loaders start processes)",
    "torch.serialization": "reaches PyTorch's pickling (torch.serialization)",
    "torch.hub": "loads code through torch.hub",
    "torch.package": "imports code through torch.package",
    "subprocess": "starts processes (subprocess)",
    "multiprocessing": "starts processes (multiprocessing)",
    "threading": "starts threads outside the watch (threading)",
    "ctypes": "calls C functions directly (ctypes)",
    "pickle": "runs code while unpickling (pickle)",
    "marshal": "loads code objects (marshal)",
    "sys": "reaches the interpreter (sys)",
    "os": "reaches the operating system (os)",
    "importlib": "imports by a computed name (importlib)",
    "builtins": "reaches the unrestricted builtins (builtins)",
    "gc": "searches the garbage collector (gc)",
    "inspect": "reads the interpreter's frames (inspect)",
    "types": "builds functions and code objects (types)",
    "IPython": "uses IPython's machinery (IPython)",
    "transformer_grader": "reaches the grader itself",
    "transformer_lib.grading": "reaches the grader itself",
}
# dunder attributes that graded code may use (every other dunder is refused)
SAFE_DUNDERS = frozenset({"__init__", "__name__", "__qualname__", "__doc__"})
# dunder methods a graded class may define
SAFE_DUNDER_METHODS = frozenset(
    {
        "__init__", "__call__", "__repr__", "__str__", "__len__", "__getitem__",
        "__iter__", "__contains__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__",
        "__ge__", "__hash__", "__post_init__", "__bool__", "__enter__", "__exit__",
    }
)
# attributes refused on anything, with why
DENIED_ATTRIBUTES = {
    name: "reads the interpreter's frames or code objects"
    for name in (
        "tb_frame", "tb_next", "f_back", "f_builtins", "f_code", "f_globals",
        "f_locals", "f_trace", "co_code", "gi_frame", "gi_code", "gi_yieldfrom",
        "cr_await", "cr_frame", "cr_code", "cr_origin", "ag_await", "ag_frame",
        "ag_code",
    )
}
DENIED_ATTRIBUTES.update(
    {
        "ctypes": "reaches C memory through ctypes (an array's .ctypes)",
        "compile": "compiles code where the grader cannot watch it (.compile)",
        "attrgetter": "reaches attributes by a name the guards do not see",
        "methodcaller": "calls methods by a name the guards do not see",
        "format_map": "formats with attribute access the guards do not see",
    }
)
# objects (dotted names) graded code may never reach, with why
DENIED_OBJECTS = {
    "torch.compile": "compiles code where the grader cannot watch it (torch.compile)",
    "torch.cond": "compiles code where the grader cannot watch it (torch.cond)",
    "torch.while_loop": "compiles code where the grader cannot watch it (torch.while_loop)",
    "typing.get_type_hints": "evaluates strings as code (typing.get_type_hints)",
    "typing.ForwardRef": "evaluates strings as code (typing.ForwardRef)",
    "torch.set_default_device": "changes where every tensor is made (torch.set_default_device)",
}
# builtins graded code has (anything else, ``exec`` or ``open`` say, is not defined)
SAFE_BUILTINS = (
    "None", "False", "True", "Ellipsis", "NotImplemented",
    "abs", "all", "any", "bool", "bytes", "callable", "chr", "classmethod", "complex",
    "dict", "divmod", "enumerate", "filter", "float", "format", "frozenset", "hash",
    "id", "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max", "min",
    "next", "object", "ord", "pow", "print", "property", "range", "repr", "reversed",
    "round", "set", "slice", "sorted", "staticmethod", "str", "sum", "super", "tuple",
    "zip", "type", "getattr", "setattr", "hasattr", "delattr",
    "bin", "hex", "oct", "ascii", "bytearray",
    # exceptions and warnings: an honest `except OSError:` must not fail
    "ArithmeticError", "AssertionError", "AttributeError", "BaseException",
    "Exception", "FloatingPointError", "ImportError", "IndexError", "KeyError",
    "LookupError", "MemoryError", "NameError", "NotImplementedError", "OverflowError",
    "RuntimeError", "RuntimeWarning", "StopIteration", "TypeError", "UserWarning",
    "ValueError", "Warning", "ZeroDivisionError", "DeprecationWarning", "OSError",
    "FileNotFoundError", "ModuleNotFoundError", "RecursionError", "UnicodeError",
    "FutureWarning", "PendingDeprecationWarning",
)
# builtins that are absent on purpose, with why (the source check names them)
DENIED_BUILTINS = {
    "exec": "runs code from a string (exec)",
    "eval": "evaluates code from a string (eval)",
    "compile": "compiles code from a string (compile)",
    "open": "opens a file or a descriptor (open)",
    "__import__": "imports by a computed name (__import__)",
    "breakpoint": "starts a debugger (breakpoint)",
    "globals": "reaches the notebook's names by a computed name (globals)",
    "locals": "reaches names by a computed name (locals)",
    "vars": "reaches attributes by a computed name (vars)",
    "dir": "lists an object's insides (dir)",
    "input": "waits for input that never comes (input)",
    "memoryview": "reaches raw memory (memoryview)",
}


def module_allowed(name: str, extra=()) -> bool:
    """Whether graded code may reach the module ``name`` (``extra``: more allowed names,
    the library's parts a task allows)."""
    if module_denied(name) is not None:
        return False
    return name in ALLOWED_MODULES or name in extra or name.startswith(
        tuple(m + "." for m in ("einops",))
    )


def module_denied(name: str) -> str | None:
    """Why the module ``name`` (or a package above it) is denied, or None."""
    for denied, why in DENIED_MODULES.items():
        if name == denied or name.startswith(denied + "."):
            return why
    return None


# --------------------------------------------------------------------------------------
# Compiling graded code: RestrictedPython's transformer, adapted to graded PyTorch
# --------------------------------------------------------------------------------------
_INPLACE = {
    "Add": "+=", "Sub": "-=", "Mult": "*=", "Div": "/=", "Mod": "%=", "Pow": "**=",
    "LShift": "<<=", "RShift": ">>=", "BitOr": "|=", "BitXor": "^=", "BitAnd": "&=",
    "FloorDiv": "//=", "MatMult": "@=",
}
_POLICY = None


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def policy():
    """The RestrictedPython policy for graded code (a ``RestrictingNodeTransformer``).

    RestrictedPython's own rules, with what graded PyTorch needs: names may start with
    one underscore (``_helper``), but no dunder name except ``__name__``, and no name of
    the form ``_x_`` (the guards' own); every attribute, load or store, goes to the
    guards with its name (``_getattr_(obj, "x")``, ``_write_(obj, "x").x = v``), which
    decide at run time (a dunder or private attribute is refused *when it runs*, so dead
    code costs nothing); ``print`` is the plain one; ``x.a += 1`` and ``x[i] += 1`` go
    through the guards too; ``nonlocal`` and annotated assignments are allowed;
    ``match`` (class patterns read attributes unguarded), ``async`` and ``except*``
    are not."""
    global _POLICY
    if _POLICY is not None:
        return _POLICY
    import ast

    from RestrictedPython.transformer import RestrictingNodeTransformer, copy_locations

    def call(name, *args):
        return ast.Call(func=ast.Name(name, ast.Load()), args=list(args), keywords=[])

    def index_expr(node):
        """A subscript's index as a plain expression (``a:b`` -> ``slice(a, b, None)``)."""
        if isinstance(node, ast.Slice):
            parts = [p if p is not None else ast.Constant(None)
                     for p in (node.lower, node.upper, node.step)]
            return call("slice", *parts)
        if isinstance(node, ast.Tuple):
            return ast.Tuple([index_expr(e) for e in node.elts], ast.Load())
        return node

    class GradedPolicy(RestrictingNodeTransformer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.classes: list[str] = []

        def check_name(self, node, name, allow_magic_methods=False):
            if name is None:
                return
            if _dunder(name):
                if name == "__name__" or (
                    allow_magic_methods
                    and name in SAFE_DUNDER_METHODS
                    and getattr(node, "col_offset", 0) != 0
                ):
                    return
                self.error(node, f'"{name}" is a dunder name, which graded code may not use.')
            elif name.startswith("_") and name.endswith("_") and name != "_":
                self.error(node, f'"{name}" is a name reserved for the grader\'s guards.')

        def visit_Name(self, node):
            node = self.node_contents_visit(node)
            self.check_name(node, node.id)
            return node

        def _mangled(self, attr):
            if attr.startswith("__") and not attr.endswith("__") and self.classes:
                return f"_{self.classes[-1].lstrip('_')}{attr}"
            return attr

        def visit_Attribute(self, node):
            attr = self._mangled(node.attr)
            node = self.node_contents_visit(node)
            if isinstance(node.ctx, ast.Load):
                new = call("_getattr_", node.value, ast.Constant(attr))
                copy_locations(new, node)
                return new
            node.value = call("_write_", node.value, ast.Constant(attr))
            copy_locations(node.value, node)
            node.attr = attr
            return node

        def visit_AugAssign(self, node):
            target = node.target
            if isinstance(target, ast.Name):
                return super().visit_AugAssign(node)
            op = ast.Constant(_INPLACE[type(node.op).__name__])
            target.value = self.visit(target.value)
            value = self.visit(node.value)
            if isinstance(target, ast.Attribute):
                new = call("_augattr_", target.value, ast.Constant(self._mangled(target.attr)), op, value)
            else:
                new = call("_augitem_", target.value, index_expr(self.visit(target.slice)), op, value)
            statement = ast.copy_location(ast.Expr(new), node)
            return ast.fix_missing_locations(statement)

        def visit_ClassDef(self, node):
            self.classes.append(node.name)
            try:
                return super().visit_ClassDef(node)
            finally:
                self.classes.pop()

        def visit_Nonlocal(self, node):
            return self.node_contents_visit(node)

        def visit_AnnAssign(self, node):
            return self.node_contents_visit(node)

        def visit_Match(self, node):
            self.error(node, "match statements are not allowed in graded code (their"
                       " class patterns read attributes the guards do not see).")

    _POLICY = GradedPolicy
    return _POLICY


def compile_graded(source: str, filename: str):
    """(code, errors): ``source`` compiled as graded code; ``errors`` (lines of text)
    say why it could not be (then code is None). Needs RestrictedPython."""
    from RestrictedPython import compile_restricted_exec

    result = compile_restricted_exec(source, filename=filename, policy=policy())
    return result.code, list(result.errors)


# --------------------------------------------------------------------------------------
# The same rules, read from the source: what the guards would refuse, line by line
# --------------------------------------------------------------------------------------
# attribute names that are modules graded code may not reach, whatever they hang on
# (``torch.sys``, ``dataclasses.sys``): the top-level names of ``DENIED_MODULES``
_DENIED_TOP = frozenset(
    m for m in DENIED_MODULES if "." not in m and m not in ("transformer_grader",)
)


_ALL_BUILTINS = frozenset(dir(__import__("builtins")))
# names a notebook has that graded code does not, with why
_OTHER_NAMES = {
    "get_ipython": "uses IPython's machinery (get_ipython), which graded code does not have",
    "__builtins__": "reaches the builtins directly (__builtins__)",
}


def _chain(node):
    """``a.b.c`` for an attribute chain on a name, else None."""
    parts = []
    while _is(node, "Attribute"):
        parts.append(node.attr)
        node = node.value
    if _is(node, "Name"):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _is(node, kind: str) -> bool:
    return type(node).__name__ == kind


def _resolved(aliases: dict, dotted: str) -> str:
    head, _, rest = dotted.partition(".")
    full = aliases.get(head)
    if full is None:
        return dotted
    return f"{full}.{rest}" if rest else full


def _dotted_why(full: str) -> str | None:
    """Why the dotted name ``full`` (aliases resolved) would be refused, or None: a
    denied module or object, checked from its start and again from each ``torch`` in it
    (``F.torch.jit`` is ``torch.jit``)."""
    parts = full.split(".")
    starts = [0] + [i for i, p in enumerate(parts) if p == "torch" and i]
    for start in starts:
        here = parts[start:]
        for cut in range(1, len(here) + 1):
            name = ".".join(here[:cut])
            why = DENIED_OBJECTS.get(name) or module_denied(name)
            if why is not None and (cut > 1 or start == 0 or name in DENIED_MODULES):
                return why
    return None


def report(tree, aliases: dict, where, bound=()) -> list[str]:
    """What the guards of graded code would refuse in ``tree`` (an ``ast`` of graded
    code), read from the source: ``"why (where)"`` lines, ``where(node)`` saying where.
    ``aliases``: the notebook's imports (alias -> dotted name); ``bound``: the names the
    graded code binds (a local ``open`` is not the builtin).

    The same table as the guards (``restricted.Guards``): modules allowed and denied,
    dunder and denied attributes, denied objects and builtins, star imports,
    ``torch.load`` without ``weights_only=True``, a module changed. What depends on a
    value at run time (a computed ``getattr``, a private attribute of an object that may
    be the student's own) is left to the guards: they decide when the line runs."""
    import ast

    found: list[str] = []

    def say(node, why):
        entry = f"{why} ({where(node)})"
        if entry not in found:
            found.append(entry)

    def module_why(name: str) -> str | None:
        if name.startswith("transformer_lib"):
            if name.startswith(("transformer_lib.grading", "transformer_lib.assignments")):
                return "reaches the grader itself"
            return None  # the task's banned parts: the static check of banned names
        why = module_denied(name)
        if why is not None:
            return why
        if module_allowed(name):
            return None
        return f"reaches the module {name}, which graded code may not use"

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                why = module_why(alias.name)
                if why is not None:
                    say(node, f"imports {alias.name}: {why}")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                say(node, "imports relatively")
                continue
            module = node.module or ""
            why = module_why(module)
            if why is not None:
                say(node, f"imports {module}: {why}")
                continue
            for alias in node.names:
                if alias.name == "*":
                    say(node, f"imports * from {module}")
                    continue
                full = f"{module}.{alias.name}"
                why = _dotted_why(full) or (
                    f"reaches the module {alias.name}" if alias.name in _DENIED_TOP else None
                )
                if why is None and alias.name.startswith("_") and not module.startswith(
                    "__future__"
                ):
                    why = f"reads the private attribute {alias.name} of {module}"
                if why is not None:
                    say(node, f"imports {full}: {why}")
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in bound:
                continue
            if node.id in DENIED_BUILTINS:
                say(node, f"calls {node.id}: {DENIED_BUILTINS[node.id]}")
            elif node.id in _OTHER_NAMES:
                say(node, _OTHER_NAMES[node.id])
            elif node.id not in SAFE_BUILTINS and node.id in _ALL_BUILTINS:
                say(node, f"uses the builtin {node.id}, which graded code does not have")
        elif isinstance(node, ast.Attribute):
            attr, load = node.attr, isinstance(node.ctx, ast.Load)
            verb = "reads" if load else "sets"
            if _dunder(attr) and attr not in SAFE_DUNDERS:
                say(node, f"{verb} the dunder attribute {attr}")
            elif attr in DENIED_ATTRIBUTES:
                say(node, DENIED_ATTRIBUTES[attr])
            base = _chain(node.value)
            head = base.split(".")[0] if base else None
            if head is None or head not in aliases or head in bound - set(aliases):
                continue
            full = _resolved(aliases, f"{base}.{attr}")
            why = _dotted_why(full)
            if why is not None:
                say(node, why)
            elif attr in _DENIED_TOP:
                say(node, f"reaches the module {attr} through an attribute (.{attr})")
            elif attr[:1] == "_" and not _dunder(attr):
                say(node, f"reads the private attribute {attr} of {_resolved(aliases, base)}")
            if not load and ("." not in base or module_allowed(_resolved(aliases, base))):
                say(node, f"changes the module {_resolved(aliases, base)}")
        elif isinstance(node, ast.Call):
            name = _chain(node.func)
            full = _resolved(aliases, name) if name else ""
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            if full in ("torch.load",) and not (
                isinstance(keywords.get("weights_only"), ast.Constant)
                and keywords["weights_only"].value is True
            ):
                say(node, "calls torch.load without weights_only=True (unpickling runs code)")
            if full in ("numpy.load",) and "allow_pickle" in keywords and not (
                isinstance(keywords["allow_pickle"], ast.Constant)
                and not keywords["allow_pickle"].value
            ):
                say(node, "calls numpy.load with allow_pickle (unpickling runs code)")
            if name == "type" and len(node.args) != 1 and "type" not in bound:
                say(node, "builds a class with type(name, bases, dict)")
    return found


def bound_names(tree) -> set:
    """Every name ``tree`` binds anywhere (assignments, arguments, definitions,
    imports): a name bound there is not the builtin of the same name."""
    import ast

    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(a.asname or a.name.split(".")[0] for a in node.names)
    return names


def compile_errors(source: str, filename: str) -> list[tuple[int | None, str]]:
    """(line, why) for each reason RestrictedPython's compiler (with our policy) refuses
    ``source``; [] when it compiles or RestrictedPython is missing here."""
    import re

    try:
        _, errors = compile_graded(source, filename)
    except ImportError:
        return []
    except SyntaxError as error:
        return [(error.lineno, error.msg)]
    found = []
    for text in errors:
        match = re.match(r"Line (\d+): (.*)", str(text), re.S)
        if match:
            found.append((int(match.group(1)), match.group(2).strip()))
        else:
            found.append((None, str(text)))
    return found
