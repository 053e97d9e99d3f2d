"""The student edition of the library: what a graded kernel imports as
``transformer_lib``.

A notebook graded for a task must not reach the task's reference. Watching for it from
inside the kernel cannot be trusted (the kernel runs the student's code, which can
switch any watch off), so the reference is simply not there: the grader writes a copy of
the library in which

- every reference the graded tasks ban (``Task.banned``, the ``transformer_lib.*``
  names) is replaced by a stand-in that raises ``ReferenceUnavailable`` when used: a
  banned module loses all its functions and classes, a banned function or class only
  itself (``runner/unavailable.py``);
- beside it, the grader (``transformer_grader``) is reduced to the runner
  (``transformer_grader/runner/``) and placeholders for the checks: no case generator,
  no judge, no reference variant;
- the assignment builder is left out.

Everything the task allows stays, unchanged (``Transformer`` for a training step, the
library's ``MultiHeadAttention`` for an encoder layer). The copy is compiled once by
the grader, so kernels import it from bytecode that no kernel can write, and the sandbox
shows it read-only in place of the installed library.
"""

from __future__ import annotations

import ast
import compileall
import importlib
import inspect
import shutil
import types
from pathlib import Path

import transformer_lib

PACKAGE = Path(transformer_lib.__file__).resolve().parent
GRADER = Path(__file__).resolve().parent.parent  # transformer_grader/
_LEFT_OUT = ("assignments", "__pycache__")
_STANDINS = "transformer_grader.runner.unavailable"

_GRADING_INIT = '''"""transformer_grader while your work is graded: the checks run
outside this kernel, so here they only print a placeholder (``runner/placeholders.py``).
"""

from .runner.placeholders import CHECKS, deferred

for _name in CHECKS:
    globals()[_name] = deferred(_name)
del _name
'''
_NBGRADER = '''"""nbgrader's autograder cells while your work is graded: no points
here."""

from .runner.placeholders import points  # noqa: F401
'''


def library_bans(banned) -> tuple[str, ...]:
    """The ``transformer_lib.*`` names of a task's ``banned`` list (PyTorch's own
    references cannot be left out of PyTorch; the runner's guard and the grader's source
    check look for those)."""
    return tuple(sorted({b for b in banned if b.startswith("transformer_lib.")}))


def _split(dotted: str) -> tuple[types.ModuleType, str | None]:
    """(module, object name or None) for a banned name of the library."""
    try:
        return importlib.import_module(dotted), None
    except ImportError:
        module, _, name = dotted.rpartition(".")
        return importlib.import_module(module), name


def _module_file(root: Path, module: types.ModuleType) -> Path:
    relative = Path(*module.__name__.split(".")[1:])
    if Path(module.__file__).name == "__init__.py":
        return root / relative / "__init__.py"
    return root / relative.with_suffix(".py")


def _standin_call(label: str, obj) -> str:
    kind = "unavailable_class" if inspect.isclass(obj) else "unavailable_function"
    return f"{kind}({label!r})"


def _standin_module(module: types.ModuleType) -> str:
    """The source of a module whose every function and class is a stand-in."""
    names = sorted(
        name
        for name, value in vars(module).items()
        if (inspect.isclass(value) or callable(value))
        and getattr(value, "__module__", None) == module.__name__
    )
    lines = [
        f'"""``{module.__name__}`` is not available while your work is graded.',
        "",
        "The graded task asks for your own implementation, so the grader's copy of the",
        'library leaves this module out."""',
        "",
        f"from {_STANDINS} import (",
        "    unavailable_class,",
        "    unavailable_function,",
        "    unavailable_names,",
        ")",
        "",
    ]
    for name in names:
        value = getattr(module, name)
        label = f"{module.__name__}.{name}"
        lines.append(f"{name} = {_standin_call(label, value)}")
    lines += ["", f"__getattr__ = unavailable_names({module.__name__!r})", ""]
    return "\n".join(lines)


def _without_objects(source: str, module: str, names: set[str]) -> str:
    """``source`` with the top-level functions and classes in ``names`` replaced by
    stand-ins."""
    tree = ast.parse(source)
    body, found = [], set()
    for node in tree.body:
        defined = isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        )
        if defined and node.name in names:
            found.add(node.name)
            kind = (
                "unavailable_class"
                if isinstance(node, ast.ClassDef)
                else "unavailable_function"
            )
            label = f"{module}.{node.name}"
            body.append(ast.parse(f"{node.name} = {kind}({label!r})").body[0])
        else:
            body.append(node)
    missing = names - found
    if missing:
        raise ValueError(
            f"cannot leave {', '.join(sorted(missing))} out of {module}: not defined"
            " at its top level"
        )
    # after the docstring and `from __future__` imports, which must come first
    at = 0
    while at < len(body) and (
        isinstance(body[at], ast.ImportFrom)
        and body[at].module == "__future__"
        or at == 0
        and isinstance(body[at], ast.Expr)
        and isinstance(getattr(body[at], "value", None), ast.Constant)
    ):
        at += 1
    body.insert(
        at,
        ast.parse(
            f"from {_STANDINS} import unavailable_class, unavailable_function"
        ).body[0],
    )
    tree.body = body
    return ast.unparse(tree) + "\n"


def build(folder, banned) -> Path:
    """Write the student edition for ``banned`` (dotted names; those outside the
    library are ignored) into ``folder``, which must not exist yet; return the folder
    to put on ``sys.path`` (it holds ``transformer_lib/`` and
    ``transformer_grader/``)."""
    folder = Path(folder)
    root = folder / "transformer_lib"
    shutil.copytree(
        PACKAGE, root, ignore=shutil.ignore_patterns(*_LEFT_OUT, "*.pyc", ".*")
    )
    grader = folder / "transformer_grader"
    shutil.copytree(
        GRADER / "runner",
        grader / "runner",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"),
    )
    (grader / "__init__.py").write_text(_GRADING_INIT, encoding="utf-8")
    (grader / "nbgrader.py").write_text(_NBGRADER, encoding="utf-8")

    objects: dict[str, tuple[types.ModuleType, set[str]]] = {}
    for dotted in library_bans(banned):
        module, name = _split(dotted)
        if name is None:
            _module_file(root, module).write_text(
                _standin_module(module), encoding="utf-8"
            )
        else:
            objects.setdefault(module.__name__, (module, set()))[1].add(name)
    for name, (module, names) in objects.items():
        path = _module_file(root, module)
        if path.read_text(encoding="utf-8").startswith('"""``'):
            continue  # the whole module is already left out
        path.write_text(
            _without_objects(path.read_text(encoding="utf-8"), name, names),
            encoding="utf-8",
        )
    for tree in (root, grader):
        if not compileall.compile_dir(str(tree), quiet=1):
            raise RuntimeError(f"the student edition in {tree} does not compile")
    return folder
