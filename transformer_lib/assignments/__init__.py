"""Make student versions of the instructor notebooks: ``python -m transformer_lib.assignments build``.

An instructor notebook holds the reference solution between nbgrader's markers::

    def causal_mask(length):
        ### BEGIN SOLUTION
        ones = torch.ones(length, length, dtype=torch.bool)
        return torch.triu(ones, diagonal=1)[None, None]
        ### END SOLUTION

The student version replaces each such region with ``# YOUR CODE HERE`` and
``raise NotImplementedError()`` at the marker's indentation (in a Markdown cell, with
``YOUR ANSWER HERE``), removes ``### BEGIN HIDDEN TESTS`` ... ``### END HIDDEN TESTS`` regions,
and clears every output. The same markers are nbgrader's, so instructors who use nbgrader can
take the instructor notebooks as they are.

The build never silently overwrites a file a student (or an instructor) may have edited: when a
target exists and differs from what would be written, it refuses, unless ``--force``.
``--check`` writes nothing and exits with status 1 when a student notebook is missing or stale
(the test suite uses it to keep the committed student notebooks up to date).

Usage, from the repository root::

    python -m transformer_lib.assignments build            # assignments/instructor -> assignments/student
    python -m transformer_lib.assignments build --check    # are the student notebooks up to date?
    python -m transformer_lib.assignments build --force    # overwrite targets that differ
    python -m transformer_lib.assignments student-config   # _config.yml -> _config_student.yml
    python -m transformer_lib.assignments verify-student-html _build/student/_build/html
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
BEGIN_HIDDEN = "### BEGIN HIDDEN TESTS"
END_HIDDEN = "### END HIDDEN TESTS"
CODE_STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
MARKDOWN_STUB = ("YOUR ANSWER HERE",)

DEFAULT_SOURCE = Path("assignments") / "instructor"
DEFAULT_DEST = Path("assignments") / "student"

# Cell and notebook metadata kept in the student version (everything else, e.g. execution
# timings and widget state, is dropped).
_KEEP_CELL_METADATA = ("nbgrader", "tags", "mystnb", "editable", "deletable")
_KEEP_NB_METADATA = ("kernelspec", "language_info", "transformer_lib", "colab")


class MarkerError(ValueError):
    """Unbalanced or nested solution markers in an instructor notebook."""


def strip_regions(source: str, cell_type: str = "code", where: str = "cell") -> str:
    """Replace solution regions with the stub and drop hidden-test regions, in one cell's source."""
    out: list[str] = []
    mode = None  # None, "solution" or "hidden"
    for number, line in enumerate(source.splitlines(), start=1):
        marker = line.strip()
        if marker in (BEGIN_SOLUTION, BEGIN_HIDDEN):
            if mode is not None:
                raise MarkerError(f"{where}, line {number}: {marker!r} inside an open region")
            mode = "solution" if marker == BEGIN_SOLUTION else "hidden"
            if mode == "solution":
                indent = line[: len(line) - len(line.lstrip())]
                stub = CODE_STUB if cell_type == "code" else MARKDOWN_STUB
                out.extend(indent + s for s in stub)
            continue
        if marker in (END_SOLUTION, END_HIDDEN):
            expected = "solution" if marker == END_SOLUTION else "hidden"
            if mode != expected:
                raise MarkerError(f"{where}, line {number}: {marker!r} without a matching BEGIN")
            mode = None
            continue
        if mode is None:
            out.append(line)
    if mode is not None:
        raise MarkerError(f"{where}: a {'solution' if mode == 'solution' else 'hidden tests'} "
                          f"region is never closed (missing END marker)")
    return "\n".join(out)


def make_student(nb, name: str = "notebook"):
    """Return the student version of an instructor notebook (an nbformat node; input untouched)."""
    student = copy.deepcopy(nb)
    for index, cell in enumerate(student.cells):
        where = f"{name}, cell {index}"
        if cell.cell_type in ("code", "markdown"):
            cell.source = strip_regions(cell.source, cell.cell_type, where)
        cell.metadata = {k: v for k, v in cell.metadata.items() if k in _KEEP_CELL_METADATA}
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    student.metadata = {k: v for k, v in student.metadata.items() if k in _KEEP_NB_METADATA}
    return student


def render(nb) -> str:
    import nbformat

    return nbformat.writes(nb) + "\n"


def build(source=DEFAULT_SOURCE, dest=DEFAULT_DEST, force: bool = False, check: bool = False,
          log=print) -> dict[str, str]:
    """Write the student version of every ``source/*.ipynb`` to ``dest``.

    Returns {file name: state}, state one of "created", "updated", "unchanged", "refused" (exists
    and differs, no --force), and with ``check=True`` (nothing written) "missing" or "stale".
    """
    import nbformat

    source, dest = Path(source), Path(dest)
    if not source.is_dir():
        raise ValueError(f"instructor folder {str(source)!r} does not exist")
    notebooks = sorted(p for p in source.glob("*.ipynb"))
    if not notebooks:
        raise ValueError(f"no .ipynb files in {str(source)!r}")
    states = {}
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        text = render(make_student(nb, path.name))
        target = dest / path.name
        state = _sync(target, text, check=check, force=force)
        states[path.name] = state
        if log:
            note = {"refused": " (exists and differs; it may hold a student's work: use --force "
                               "to overwrite)",
                    "stale": " (out of date: run python -m transformer_lib.assignments build)",
                    "missing": " (run python -m transformer_lib.assignments build)"}.get(state, "")
            log(f"{state:9} {target}{note}")
    return states


def _sync(target: Path, text: str, *, check: bool, force: bool = True) -> str:
    """Make ``target`` hold ``text``: "unchanged", "created" or "updated"; with ``check`` nothing
    is written ("missing", "stale"); without ``force`` a differing file is kept ("refused")."""
    old = target.read_text(encoding="utf-8") if target.exists() else None
    if old == text:
        return "unchanged"
    if check:
        return "missing" if old is None else "stale"
    if old is not None and not force:
        return "refused"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return "created" if old is None else "updated"


# ------------------------------------------------------------------------------------------------
# The student build of the book: _config_student.yml, derived from _config.yml.
# ------------------------------------------------------------------------------------------------
STUDENT_CONFIG_HEADER = """\
# The STUDENT build of the book: solutions removed, code cells included. Generated from
# _config.yml by `python -m transformer_lib.assignments student-config`; do not edit by hand
# (edit _config.yml, then re-run that command; tests/test_student_build.py checks it is in sync).
# Build with:
#   jupyter-book build . --config _config_student.yml --path-output _build/student
# Differences from _config.yml: hide_solutions (made to work for gated solutions by the
# transformer_lib.assignments.hide_solutions extension), no copied sources (the .ipynb download
# would contain the solutions), no launch buttons (they open the notebooks with solutions).
"""


def student_config(config: dict) -> dict:
    """The student build's configuration, from the main jupyter-book configuration (a dict)."""
    cfg = copy.deepcopy(config)
    if cfg.get("title"):
        cfg["title"] = f"{cfg['title']} (student edition)"
    sphinx = cfg.setdefault("sphinx", {}) or {}
    cfg["sphinx"] = sphinx
    extensions = list(sphinx.get("extra_extensions") or [])
    for name in ("sphinx_exercise", "transformer_lib.assignments.hide_solutions"):
        if name not in extensions:
            extensions.append(name)
    sphinx["extra_extensions"] = extensions
    options = sphinx.setdefault("config", {}) or {}
    sphinx["config"] = options
    options["hide_solutions"] = True
    options["html_copy_source"] = False
    html = cfg.setdefault("html", {}) or {}
    cfg["html"] = html
    html["use_download_button"] = False  # hide the download (.ipynb) button
    cfg.pop("launch_buttons", None)
    return cfg


def write_student_config(main_config="_config.yml", target="_config_student.yml",
                         check: bool = False, log=print) -> str:
    """Write (or with ``check``, compare) the student config. Returns the state."""
    import yaml

    main_config, target = Path(main_config), Path(target)
    config = yaml.safe_load(main_config.read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        raise ValueError(f"{main_config} does not hold a YAML mapping")
    text = STUDENT_CONFIG_HEADER + yaml.safe_dump(student_config(config), sort_keys=False,
                                                  allow_unicode=True, width=100)
    state = _sync(target, text, check=check)
    if log:
        log(f"{state:9} {target}" + (" (run python -m transformer_lib.assignments student-config)"
                                     if state in ("missing", "stale") else ""))
    return state


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m transformer_lib.assignments",
                                     description="Make student versions of instructor notebooks.")
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser("build", help="write student notebooks (solutions removed, outputs cleared)")
    cmd.add_argument("--source", default=str(DEFAULT_SOURCE), help="instructor notebooks folder")
    cmd.add_argument("--dest", default=str(DEFAULT_DEST), help="student notebooks folder")
    cmd.add_argument("--force", action="store_true", help="overwrite targets that differ")
    cmd.add_argument("--check", action="store_true",
                     help="write nothing; exit 1 if a student notebook is missing or stale")
    conf = sub.add_parser("student-config",
                          help="write _config_student.yml (the student book build) from _config.yml")
    conf.add_argument("--config", default="_config.yml", help="the main config (default _config.yml)")
    conf.add_argument("--out", default="_config_student.yml", help="where to write it")
    conf.add_argument("--check", action="store_true", help="write nothing; exit 1 if out of date")
    ver = sub.add_parser("verify-student-html",
                         help="check that a student HTML build contains no solution text or code")
    ver.add_argument("html_dir", help="the student build's HTML folder (e.g. _build/student/_build/html)")
    ver.add_argument("--book", default=".", help="the repository root holding book/*.ipynb")
    ver.add_argument("--reference", default=None,
                     help="the normal build's HTML folder: also confirm the solutions are found there")
    args = parser.parse_args(argv)
    if args.command == "verify-student-html":
        from .student_book import verify

        return 0 if verify(args.html_dir, args.book, args.reference) else 1
    try:
        if args.command == "student-config":
            states = {args.out: write_student_config(args.config, args.out, check=args.check)}
        else:
            states = build(args.source, args.dest, force=args.force, check=args.check)
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    bad = [n for n, s in states.items() if s in ("refused", "missing", "stale")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
