"""A look at the notebook's source, in the grading process: does the graded code name a
PyTorch reference that the task does not allow?

The student edition leaves the library's references out of the sandbox, but PyTorch's
own (``F.scaled_dot_product_attention``, ``F.cross_entropy``,
``nn.TransformerEncoderLayer``, ...) cannot be left out of PyTorch, and the in-kernel
watch (``runner/guard.py``) can be switched off by the code it watches. So the grader
also reads the source, where nothing the notebook does at run time can interfere:

- **the graded code**: the top-level functions and classes the task grades, and the
  notebook's own functions and classes they use (by name, transitively);
- **a banned reference** named in it, through the notebook's imports and aliases
  (``import torch.nn.functional as F``; ``from torch.nn import functional``; ``from
  torch.nn.functional import cross_entropy as ce``), scores the task 0, like a use seen
  at run time;
- **tricks worth a look** anywhere in the notebook (``exec``, ``eval``, ``__import__``,
  ``importlib``, ``ctypes``, ``sys.setprofile``, ``gc.get_objects``, ``torch._C``,
  ``torch.ops``, IPython's input transformers) are flagged for the instructor, without
  changing the score.

This is a heuristic, and says so in the README: a name built at run time
(``getattr(F, "scaled_" + "dot...")``) is not a name in the source. The flags for
tricks are there so that such code does not pass unseen.
"""

from __future__ import annotations

import ast
import sys

from .definitions import _dotted, resolve_alias  # both stdlib only

_TRICKS = {
    "exec": "runs code from a string (exec)",
    "eval": "evaluates code from a string (eval)",
    "compile": "compiles code from a string (compile)",
    "__import__": "imports by a computed name (__import__)",
    "importlib": "imports by a computed name (importlib)",
    "ctypes": "calls C functions directly (ctypes)",
    "sys.setprofile": "changes the interpreter's profile hook (sys.setprofile)",
    "sys.settrace": "changes the interpreter's trace hook (sys.settrace)",
    "threading.setprofile": "changes the threads' profile hook (threading.setprofile)",
    "gc.get_objects": "searches the garbage collector (gc.get_objects)",
    "gc.get_referrers": "searches the garbage collector (gc.get_referrers)",
    "torch._C": "calls PyTorch's C functions directly (torch._C)",
    "torch.ops": "calls PyTorch's operators directly (torch.ops)",
    "input_transformers_cleanup": "rewrites the cells IPython runs",
    "input_transformers_post": "rewrites the cells IPython runs",
}


def _python(source: str) -> ast.Module | None:
    """A code cell as Python (IPython's magics and ``!`` lines translated), or None."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except Exception:
        pass
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


class _Notebook:
    """The notebook's code: its imports (alias -> dotted name), its top-level
    definitions (name -> nodes) and every node, cell by cell."""

    def __init__(self, nb):
        self.aliases: dict[str, str] = {}
        self.defined: dict[str, list[ast.AST]] = {}
        self.trees: list[ast.Module] = []
        for cell in nb.get("cells", []):
            if cell.get("cell_type") != "code":
                continue
            tree = _python(str(cell.get("source", "")))
            if tree is None:
                continue
            self.trees.append(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for a in node.names:
                        if a.asname:
                            self.aliases[a.asname] = a.name
                        else:
                            head = a.name.split(".")[0]
                            self.aliases[head] = head
                elif (
                    isinstance(node, ast.ImportFrom) and node.module and not node.level
                ):
                    for a in node.names:
                        self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            for node in tree.body:
                if isinstance(
                    node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
                ):
                    self.defined.setdefault(node.name, []).append(node)
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = (
                        node.targets if isinstance(node, ast.Assign) else [node.target]
                    )
                    for target in targets:
                        if isinstance(target, ast.Name):
                            self.defined.setdefault(target.id, []).append(node)

    def resolve(self, dotted: str) -> str:
        return resolve_alias(self.aliases, dotted)

    def graded(self, names) -> list[ast.AST]:
        """The definitions of ``names`` and of the notebook's names they use."""
        todo, seen, nodes = list(names), set(), []
        while todo:
            name = todo.pop()
            if name in seen or name not in self.defined:
                continue
            seen.add(name)
            for node in self.defined[name]:
                nodes.append(node)
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Name) and inner.id in self.defined:
                        todo.append(inner.id)
        return nodes


def _object(dotted: str):
    """The object a dotted ``torch...`` name refers to, looked up among the modules the
    grader already imported (nothing is imported here); None if unknown."""
    parts = dotted.split(".")
    if parts[0] != "torch" or "torch" not in sys.modules:
        return None
    obj = sys.modules["torch"]
    for part in parts[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _banned_match(full: str, banned: list[str]) -> str | None:
    """The banned name ``full`` is, or belongs to (a module's class), else None."""
    for name in banned:
        if full == name or full.startswith(name + "."):
            return name
    obj = _object(full)
    if obj is None:
        return None
    for name in banned:
        target = _object(name)
        if target is not None and obj is target:
            return name
        if getattr(obj, "__module__", None) == name:  # a class of a banned module
            return name
    return None


def banned_references(nb, task) -> list[str]:
    """The PyTorch references of ``task.banned`` that its graded code names."""
    banned = [b for b in task.banned if not b.startswith("transformer_lib.")]
    if not banned:
        return []
    notebook, found = _Notebook(nb), []
    for node in notebook.graded(task.names):
        for inner in ast.walk(node):
            if isinstance(inner, (ast.Attribute, ast.Name)) and not isinstance(
                getattr(inner, "ctx", None), ast.Store
            ):
                dotted = _dotted(inner)
                if dotted is None:
                    continue
                hit = _banned_match(notebook.resolve(dotted), banned)
                label = notebook.resolve(dotted)
                if hit and label not in found:
                    found.append(label)
    # a name only contained in a longer one (F, then F.cross_entropy): keep the longest
    return [f for f in found if not any(o.startswith(f + ".") for o in found)]


def banned_among(names: list[str], task) -> list[str]:
    """The PyTorch references of ``task.banned`` among ``names`` (the dotted names the
    graded code reads, aliases resolved: ``definitions.Source.names_used``)."""
    banned = [b for b in task.banned if not b.startswith("transformer_lib.")]
    found = [n for n in names if banned and _banned_match(n, banned)]
    return [f for f in found if not any(o.startswith(f + ".") for o in found)]


def tricks(nb) -> list[str]:
    """What the notebook does that the instructor may want to look at (flags only)."""
    notebook, found = _Notebook(nb), []
    for tree in notebook.trees:
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Name):
                names.append(notebook.resolve(node.id))
            elif isinstance(node, ast.Attribute):
                dotted = _dotted(node)
                if dotted:
                    names.append(notebook.resolve(dotted))
                if node.attr.startswith("input_transformers"):  # get_ipython().x
                    names.append(node.attr)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                module = getattr(node, "module", None) or ""
                names += [module] + [a.name for a in node.names]
            for name in names:
                for key, what in _TRICKS.items():
                    if (
                        name == key or name.startswith(key + ".")
                    ) and what not in found:
                        found.append(what)
    return found
