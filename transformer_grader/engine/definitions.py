"""The graded definitions of a notebook, read from its source, and the rules they break.

The test cases never run in the student's kernel: the grader starts a fresh interpreter
(``runner/serve.py``) and hands it only the notebook's *graded definitions*, taken here
from the source with ``ast``:

- the top-level functions and classes a task grades (``Task.names``);
- every top-level binding of a name they use, transitively: the notebook's helper
  functions and classes, its constants (``EPS = 1e-9``) and the imports that bind them;
  a top-level block (``if``, ``for``, ``while``, ``with``, ``try``) that binds one of
  those names is taken whole (``try: import einops`` / ``except ImportError: ...``);
- nothing else: a top-level statement that binds none of those names (a cell that
  patches a module, registers an IPython hook, starts a thread) is not run there.

Cells are read as IPython would run them (magics and ``!`` lines translated); the body
of a cell magic that runs Python (``%%capture``, ``%%time``, ...) is read as Python, so
a graded ``def`` inside ``%%capture`` is found (and the magic is flagged).

What the guards of restricted Python would refuse in graded code (``policy_hits``) is
read from the source with the guards' own table (``runner/rules.py``: ``rules.report``,
and RestrictedPython's compiler with the grader's policy where RestrictedPython is
installed), one ``"why (cell N, line M)"`` each: ``import os``, ``vars()``,
``torch.jit``, a dunder attribute, a star-import, ``torch.load`` without
``weights_only=True``, a module changed, ... Each is a *flag* for the instructor (and a
warning in the notebook's check cell): the score stands, since the guards refuse the
line when it runs and code that needs it fails its cases. What depends on values at run
time (a computed ``getattr``, a private attribute of what may be the student's own
object) only the guards decide. The older deny-list (``_hits_in``: computed names,
``sys.setprofile``, ``ctypes``, IPython's hooks, ...) still reads the rest of the
notebook (``review``): flags only.

This module imports nothing but the
standard library (IPython's input transformer, ``runner/rules.py`` by its path and
RestrictedPython): ``source_check`` runs it in a small
subprocess with limits, so a notebook built to make parsing explode costs that
subprocess only.
"""

from __future__ import annotations

import ast
import re

# outside graded code: the grader's internals (a check cell's import is fine)
_REVIEW_PREFIXES = (
    "torch._",
    "torch.ops",
    "torch.library",
    "torch.overrides",
    "torch.utils._python_dispatch",
    "torch.utils.cpp_extension",
    "torch.jit._",
    "transformer_lib.grading.runner",
    "transformer_grader.runner",
    "transformer_grader.engine",
)
# dotted names (after the notebook's aliases are resolved) that are hits, with why
_DENIED_NAMES = {
    "torch.ops": "calls PyTorch's operators directly (torch.ops)",
    "torch._C": "calls PyTorch's C functions directly (torch._C)",
    "torch.library": "changes PyTorch's operators (torch.library)",
    "torch.overrides": "changes how PyTorch functions dispatch (torch.overrides)",
    "torch.utils._python_dispatch": "uses a dispatch mode",
    "torch.utils.cpp_extension": "compiles C++ code (torch.utils.cpp_extension)",
    "torch.package": "imports code through torch.package",
    "torch.hub": "loads code through torch.hub",
    "torch.serialization": "reaches PyTorch's pickling (torch.serialization)",
    "sys.modules": "reaches modules by a computed name (sys.modules)",
    "sys.setprofile": "changes the interpreter's profile hook (sys.setprofile)",
    "sys.settrace": "changes the interpreter's trace hook (sys.settrace)",
    "threading.setprofile": "changes the threads' profile hook (threading.setprofile)",
    "threading.settrace": "changes the threads' trace hook (threading.settrace)",
    "gc.get_objects": "searches the garbage collector (gc.get_objects)",
    "gc.get_referrers": "searches the garbage collector (gc.get_referrers)",
    "sys._getframe": "reads the interpreter's frames (sys._getframe)",
    "operator.attrgetter": "reaches attributes by a computed name (operator.attrgetter)",
    "operator.methodcaller": "calls methods by a computed name (operator.methodcaller)",
    "exec": "runs code from a string (exec)",
    "eval": "evaluates code from a string (eval)",
    "compile": "compiles code from a string (compile)",
    "__import__": "imports by a computed name (__import__)",
    "vars": "reaches attributes by a computed name (vars)",
    "globals": "reaches the notebook's names by a computed name (globals)",
    "locals": "reaches names by a computed name (locals)",
    "breakpoint": "starts a debugger (breakpoint)",
    "get_ipython": "uses IPython's machinery (get_ipython)",
    "__builtins__": "reaches the builtins directly (__builtins__)",
    "TorchDispatchMode": "uses a dispatch mode (TorchDispatchMode)",
    "TorchFunctionMode": "uses a dispatch mode (TorchFunctionMode)",
}
# attributes (on anything) that are hits
_DENIED_ATTRIBUTES = {
    "__dict__": "reaches an object's attributes by a computed name (__dict__)",
    "__globals__": "reaches a function's module (__globals__)",
    "__builtins__": "reaches the builtins directly (__builtins__)",
    "__code__": "changes or reads a function's code (__code__)",
    "__closure__": "reads a function's closure (__closure__)",
    "__subclasses__": "searches the class hierarchy (__subclasses__)",
    "__getattribute__": "reaches attributes by a computed name (__getattribute__)",
    "__setattr__": "sets attributes by a computed name (__setattr__)",
    "__delattr__": "deletes attributes by a computed name (__delattr__)",
    "__torch_dispatch__": "uses a dispatch mode (__torch_dispatch__)",
    "__torch_function__": "overrides PyTorch's functions (__torch_function__)",
    "__import__": "imports by a computed name (__import__)",
    "__loader__": "reaches a module's loader (__loader__)",
    "f_globals": "reads the interpreter's frames (f_globals)",
    "f_locals": "reads the interpreter's frames (f_locals)",
    "f_back": "reads the interpreter's frames (f_back)",
    "tb_frame": "reads the interpreter's frames (tb_frame)",
    "gi_frame": "reads the interpreter's frames (gi_frame)",
    "events": "uses IPython's machinery (events)",
    "__self__": "reaches the module of a builtin function (__self__)",
    "__objclass__": "reaches a method's class (__objclass__)",
    "__reduce__": "reaches pickling helpers (__reduce__)",
    "__reduce_ex__": "reaches pickling helpers (__reduce_ex__)",
    "__mro__": "searches the class hierarchy (__mro__)",
    "__bases__": "searches the class hierarchy (__bases__)",
    "__base__": "searches the class hierarchy (__base__)",
    "f_code": "reads the interpreter's frames (f_code)",
    "cr_frame": "reads the interpreter's frames (cr_frame)",
    "ag_frame": "reads the interpreter's frames (ag_frame)",
    "input_transformers_cleanup": "rewrites the cells IPython runs",
    "input_transformers_post": "rewrites the cells IPython runs",
}
_NAME_FUNCTIONS = ("getattr", "setattr", "delattr", "hasattr")
# imports flagged anywhere in the notebook (graded code follows runner/rules.py's
# ALLOWED_MODULES, the one table of modules, instead)
_REVIEW_IMPORTS = {
    "ctypes": "calls C functions directly (ctypes)",
    "importlib": "imports by a computed name (importlib)",
    "gc": "searches the garbage collector (gc)",
    "inspect": "reads the interpreter's frames (inspect)",
    "IPython": "uses IPython's machinery (IPython)",
    "ipykernel": "uses the kernel's machinery (ipykernel)",
    "zmq": "talks on the kernel's sockets (zmq)",
}
# cell magics whose body is Python that runs (read as such); the others are flagged only
_PYTHON_CELL_MAGICS = ("capture", "time", "timeit", "prun")
_QUIET_CELL_MAGICS = ("time", "timeit")  # show the code's output: not worth a flag
_CELL_MAGIC = re.compile(r"\A\s*%%([A-Za-z_]\w*)[^\n]*(?:\n|\Z)")


def _transform(source: str) -> str:
    """The cell as IPython runs it; plain Python (most cells) is left as it is, without
    importing IPython."""
    try:
        ast.parse(source)
        return source
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(source)
    except Exception:
        return source


def resolve_alias(aliases: dict, dotted: str) -> str:
    """``F.softmax`` -> ``torch.nn.functional.softmax`` through the notebook's import
    aliases (alias -> dotted module name); a name with no alias is returned as it is."""
    head, _, rest = dotted.partition(".")
    full = aliases.get(head)
    if full is None:
        return dotted
    return f"{full}.{rest}" if rest else full


def _dotted(node) -> str | None:
    """``a.b.c`` for an attribute chain on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


# top-level blocks whose bodies bind names of the notebook's (module) scope
_BLOCKS = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)
_BLOCKS += (ast.TryStar,) if hasattr(ast, "TryStar") else ()


def _target_names(target) -> list[str]:
    return [inner.id for inner in ast.walk(target) if isinstance(inner, ast.Name)]


def _bound_names(node) -> list[str]:
    """The top-level names a statement binds; a block (``if``, ``for``, ``while``,
    ``with``, ``try``) binds what the statements of its bodies bind, its loop and
    ``as`` targets and the names of its ``except ... as`` clauses (a function's or a
    class's body is its own scope: only its name counts)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [
            a.asname or a.name.split(".")[0] for a in node.names if a.name != "*"
        ]
    if isinstance(node, _BLOCKS):
        names = []
        if isinstance(node, (ast.For, ast.AsyncFor)):
            names += _target_names(node.target)
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    names += _target_names(item.optional_vars)
        bodies = [getattr(node, f, []) for f in ("body", "orelse", "finalbody")]
        for handler in getattr(node, "handlers", []):
            if handler.name:
                names.append(handler.name)
            bodies.append(handler.body)
        for body in bodies:
            for statement in body:
                names += _bound_names(statement)
        return names
    targets = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    names = []
    for target in targets:
        names += _target_names(target)
    return names


def _used_names(node) -> set[str]:
    """The notebook-level names a top-level statement reads: at its own level every
    name it reads; inside its functions and classes only the names that are global
    there (``symtable``'s scopes), so a function's local never pulls in a top-level
    binding of the same name (issue 37: an exploratory cell that reused a local's
    name)."""
    import symtable

    try:
        table = symtable.symtable(ast.unparse(node), "<graded>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {
            inner.id
            for inner in ast.walk(node)
            if isinstance(inner, ast.Name) and not isinstance(inner.ctx, ast.Store)
        }
    found: set[str] = set()
    todo = [(table, True)]
    while todo:
        scope, top = todo.pop()
        for symbol in scope.get_symbols():
            if symbol.is_referenced() and (top or symbol.is_global()):
                found.add(symbol.get_name())
        todo.extend((child, False) for child in scope.get_children())
    return found


def _narrowed(node, needed: set):
    """An import statement reduced to the names of it that graded code needs
    (``import time, torch`` -> ``import torch``), at the same place; the statement
    itself when it needs all of them."""
    kept = [
        a
        for a in node.names
        if a.name != "*" and (a.asname or a.name.split(".")[0]) in needed
    ]
    if len(kept) == len(node.names):
        return node
    if isinstance(node, ast.Import):
        narrowed = ast.Import(names=kept)
    else:
        narrowed = ast.ImportFrom(module=node.module, names=kept, level=node.level)
    narrowed.narrowed = True
    return ast.copy_location(narrowed, node)


_RULES = None
_PLACE = re.compile(r"\(cell (\d+), line (\d+)\)$")


def _place(hit: str) -> tuple:
    """(cell, line) of a hit ending "(cell N, line M)", for sorting; (inf, inf) when
    it has none."""
    found = _PLACE.search(hit)
    return (int(found.group(1)), int(found.group(2))) if found else (float("inf"),) * 2


def _rules():
    """``runner/rules.py`` (the table the guards enforce), imported as part of the
    package or, when this file runs on its own (``python -I definitions.py``), loaded by
    its path."""
    global _RULES
    if _RULES is None:
        if __package__:
            from ..runner import rules
        else:
            import importlib.util
            from pathlib import Path

            path = Path(__file__).resolve().parents[1] / "runner" / "rules.py"
            spec = importlib.util.spec_from_file_location("_graded_rules", path)
            rules = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(rules)
        _RULES = rules
    return _RULES


class Cell:
    """One code cell read as Python: its index, the Python source (magics translated),
    its tree (None: not Python) and the cell magic it starts with (or "")."""

    def __init__(self, index: int, source: str):
        self.index, self.magic = index, ""
        match = _CELL_MAGIC.match(source)
        if match:
            self.magic = match.group(1)
            if self.magic in _PYTHON_CELL_MAGICS:
                source = source[match.end() :]
        self.source = _transform(source)
        try:
            self.tree = ast.parse(self.source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            self.tree = None
        self.lines = self.source.splitlines()

    def where(self, node) -> str:
        return f"cell {self.index}, line {getattr(node, 'lineno', '?')}"

    def fragment(self, node) -> str:
        """The statement's own text (decorators included), at its own line numbers."""
        if getattr(node, "narrowed", False):  # an import reduced to what is needed
            return "\n" * (node.lineno - 1) + ast.unparse(node)
        start = min(
            [node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]
        )
        first, last = start - 1, node.end_lineno - 1
        col = node.col_offset if start == node.lineno else 0
        lines = self.lines[first : last + 1]
        if not lines:
            return ast.unparse(node)
        if first == last:
            lines = [lines[0][col : node.end_col_offset]]
        else:
            lines = [lines[0][col:], *lines[1:-1], lines[-1][: node.end_col_offset]]
        text = "\n".join(lines)
        try:  # exactly this statement, nothing else from the same lines
            tree = ast.parse(text)
            same = len(tree.body) == 1 and type(tree.body[0]) is type(node)
        except SyntaxError:
            same = False
        if not same:
            text = ast.unparse(node)
        return "\n" * first + text


class Source:
    """A notebook's code cells (``sources``: one string per code cell, with the cell's
    index), read once."""

    def __init__(self, sources: list[tuple[int, str]]):
        self.cells = [Cell(i, s) for i, s in sources]
        self.aliases: dict[str, str] = {}
        self.bindings: dict[str, list[tuple[Cell, ast.stmt]]] = {}
        self.order: dict[int, int] = {}  # id(statement) -> position in the notebook
        position = 0
        for cell in self.cells:
            if cell.tree is None:
                continue
            for node in ast.walk(cell.tree):
                if isinstance(node, ast.Import):
                    for a in node.names:
                        alias = a.asname or a.name.split(".")[0]
                        self.aliases[alias] = a.name if a.asname else alias
                elif isinstance(node, ast.ImportFrom) and node.module:
                    for a in node.names:
                        if a.name != "*":
                            name = a.asname or a.name
                            self.aliases[name] = f"{node.module}.{a.name}"
            for node in cell.tree.body:
                self.order[id(node)] = position
                position += 1
                for name in _bound_names(node):
                    self.bindings.setdefault(name, []).append((cell, node))
                if isinstance(node, ast.ImportFrom) and any(
                    a.name == "*" for a in node.names
                ):
                    self.bindings.setdefault("*", []).append((cell, node))

    def resolve(self, dotted: str) -> str:
        return resolve_alias(self.aliases, dotted)

    # -- the graded definitions ----------------------------------------------------
    def graded(self, names) -> list[tuple[Cell, ast.stmt]]:
        """Every top-level binding of ``names`` and of the notebook's names they use
        (transitively), in the notebook's order."""
        todo, seen, chosen = list(names), set(), {}
        imported: dict[int, set] = {}  # import statement -> the names of it needed
        for cell, node in self.bindings.get("*", []):
            chosen[id(node)] = (cell, node)
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            for cell, node in self.bindings.get(name, []):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    imported.setdefault(id(node), set()).add(name)
                if id(node) in chosen:
                    continue
                chosen[id(node)] = (cell, node)
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    todo.extend(_used_names(node) - seen)
        found = sorted(chosen.values(), key=lambda pair: self.order[id(pair[1])])
        return [
            (cell, _narrowed(node, imported[id(node)]) if id(node) in imported else node)
            for cell, node in found
        ]

    def definitions(self, names) -> list[dict]:
        """What the fresh interpreter runs: one ``{"file", "source"}`` per statement."""
        return [
            {"file": f"<cell {cell.index}>", "source": cell.fragment(node)}
            for cell, node in self.graded(names)
        ]

    def names_used(self, names) -> list[str]:
        """The dotted names (aliases resolved) that the graded code reads."""
        found = []
        for _, node in self.graded(names):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Attribute, ast.Name)) and not isinstance(
                    getattr(inner, "ctx", None), ast.Store
                ):
                    dotted = _dotted(inner)
                    if dotted is not None:
                        full = self.resolve(dotted)
                        if full not in found:
                            found.append(full)
        return found

    # -- the policy ----------------------------------------------------------------
    def _hits_in(self, cell: Cell, node) -> list[str]:
        """The older deny-list's hits in ``node`` (a statement outside graded code, read
        for review): an import is a hit only when it reaches PyTorch's internals, the
        grader or one of ``_REVIEW_IMPORTS``."""
        hits = []

        def hit(inner, what):
            entry = f"{what} ({cell.where(inner)})"
            if entry not in hits:
                hits.append(entry)

        membership = set()  # `"x" in sys.modules`: reading, not reaching
        for inner in ast.walk(node):
            if isinstance(inner, ast.Compare) and all(
                isinstance(op, (ast.In, ast.NotIn)) for op in inner.ops
            ):
                membership.update(id(c) for c in inner.comparators)
        for inner in ast.walk(node):
            if isinstance(inner, (ast.Import, ast.ImportFrom)):
                if isinstance(inner, ast.ImportFrom):
                    modules = [inner.module or ""] if not inner.level else ["."]
                    modules += [f"{inner.module}.{a.name}" for a in inner.names]
                else:
                    modules = [a.name for a in inner.names]
                for module in modules:
                    head = module.split(".")[0]
                    denied = module.startswith(_REVIEW_PREFIXES) or (
                        head in _REVIEW_IMPORTS
                    )
                    if denied and module and not module.endswith(".*"):
                        what = _REVIEW_IMPORTS.get(head)
                        hit(inner, f"imports {module}" + (f": {what}" if what else ""))
                        break
            elif isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name):
                if inner.func.id in _NAME_FUNCTIONS and (
                    len(inner.args) < 2
                    or not (
                        isinstance(inner.args[1], ast.Constant)
                        and isinstance(inner.args[1].value, str)
                    )
                ):
                    hit(inner, f"calls {inner.func.id} with a computed name")
            if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)) or (
                isinstance(inner, ast.Name)
            ):  # a method or class attribute named like one: `def __torch_function__`
                named = getattr(inner, "name", None) or getattr(inner, "id", "")
                if named.startswith("__torch_") and named in _DENIED_ATTRIBUTES:
                    hit(inner, _DENIED_ATTRIBUTES[named])
            if isinstance(inner, ast.Attribute):
                if inner.attr in _DENIED_ATTRIBUTES:
                    hit(inner, _DENIED_ATTRIBUTES[inner.attr])
                if isinstance(inner.ctx, (ast.Store, ast.Del)):
                    base = _dotted(inner.value)
                    if base is not None and base.split(".")[0] in self.aliases:
                        hit(inner, f"changes the module {self.resolve(base)}")
            if isinstance(inner, (ast.Attribute, ast.Name)) and id(
                inner
            ) not in membership:
                dotted = _dotted(inner)
                if dotted is None:
                    continue
                full = self.resolve(dotted)
                # PyTorch reached again through a module that holds it
                # (``F.torch._C``, ``np.torch``): each suffix from a ``torch`` is
                # checked as if written so
                parts = full.split(".")
                for start in [0] + [i for i, p in enumerate(parts) if p == "torch"]:
                    here = ".".join(parts[start:])
                    for key, what in _DENIED_NAMES.items():
                        if here == key or here.startswith(key + "."):
                            hit(inner, what)
                    if here.startswith("torch._") and not here.startswith("torch._C"):
                        hit(inner, f"uses PyTorch's internals ({here.split('.')[1]})")

        return hits

    def policy_hits(self, names) -> list[str]:
        """What the guards of restricted Python would refuse in the graded code of
        ``names``, read from the source with the guards' own table (``runner/rules.py``:
        ``rules.report`` and RestrictedPython's compiler with our policy), one
        ``"why (cell N, line M)"`` each. Flags for the instructor and warnings for the
        student (the check cell): the score is what the cases give, since the guards
        refuse these lines when they run."""
        rules = _rules()
        graded = self.graded(names)
        bound: set = set()
        for _, node in graded:
            bound |= rules.bound_names(node)
        hits: list[str] = []
        for cell, node in graded:
            found = rules.report(node, self.aliases, cell.where, bound)
            for line, why in rules.compile_errors(cell.fragment(node), f"<cell {cell.index}>"):
                found.append(f"would not compile as graded code: {why}"
                             f" (cell {cell.index}, line {line if line else '?'})")
            hits += [h for h in found if h not in hits]
        return sorted(hits, key=_place)

    def review(self) -> list[str]:
        """The policy's hits anywhere in the notebook, and cell magics (flags only)."""
        found = []
        for cell in self.cells:
            if cell.magic and cell.magic not in _QUIET_CELL_MAGICS:
                found.append(f"runs a cell magic %%{cell.magic} (cell {cell.index})")
            if cell.tree is None:
                continue
            for node in cell.tree.body:
                found += [h for h in self._hits_in(cell, node) if h not in found]
        return found


def main() -> int:
    """``python -I definitions.py``: the request of ``source_check.check`` (JSON) on
    standard input, the answer (JSON) on standard output."""
    import json
    import sys

    request = json.loads(sys.stdin.buffer.read())
    source = Source([(int(i), str(s)) for i, s in request["cells"]])
    out = {"review": source.review(), "tasks": {}, "groups": []}
    for task, names in request["tasks"].items():
        out["tasks"][task] = {
            "names": source.names_used(names),
            "policy": source.policy_hits(names),
            "found": [n for n in names if n in source.bindings],
        }
    for names in request["groups"]:
        out["groups"].append(source.definitions(names))
    sys.stdout.write(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
