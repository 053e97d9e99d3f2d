"""Stored chapter outputs hold nothing that depends on the machine, the moment or a library version.

nbval compares stored outputs with a fresh run, so anything in them that varies between machines
(addresses, paths, timings, versions, random widget ids) makes the book fail somewhere else. Cells
marked ``# NBVAL_IGNORE_OUTPUT`` are exempt (nbval does not compare them), and must say why on the
next line, ``# (why: ...)``.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbval.plugin import find_comment_markers

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}

BUILD = "(this book's build machine)"  # ends a line that prints build-time measurements
FORBIDDEN = {
    "a memory address": re.compile(r"\bat 0x[0-9a-fA-F]{6,}"),
    "a path on this machine": re.compile(r"(/home/|/root/|/tmp/|/work/|site-packages|\\Users\\)"),
    "a progress bar's rate or time": re.compile(r"\d+(\.\d+)?\s?(it/s|s/it)|\[\d\d:\d\d<"),
    "a wall time": re.compile(r"\b\d+(\.\d+)?\s?(ms|µs|us|seconds|sec)\b|\bin \d+(\.\d+)? ?s\b"),
    "a library version": re.compile(r"\b(torch|numpy|matplotlib|Python|ipywidgets|transformers)"
                                    r"[ =]+v?\d+\.\d+\.\d+"),
    "Pygments HTML": re.compile(r'<div class="highlight"|class="sd"'),
}


def ignored(cell) -> bool:
    """Whether nbval skips comparing this cell's outputs (it reads the markers as we do here)."""
    return ("check", False) in set(find_comment_markers(cell.source))


def checked_part(text: str) -> str:
    """``text`` without the lines that print build-time literals (the same on every machine)."""
    return "\n".join(line for line in text.splitlines() if not line.endswith(BUILD))


def texts(output) -> list[str]:
    if output.output_type == "stream":
        return [output.text]
    if output.output_type == "error":
        return ["\n".join(output.traceback)]
    data = output.get("data", {})
    return [value for key, value in data.items() if key.startswith("text/") and isinstance(value, str)]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_stored_outputs_are_machine_independent(path):
    nb = nbformat.read(path, as_version=4)
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if ignored(cell):
            lines = cell.source.splitlines()
            if lines[:1] != ["# NBVAL_IGNORE_OUTPUT"] or not lines[1:2][0].startswith("# (why: "):
                problems.append(f"cell {index}: NBVAL_IGNORE_OUTPUT must be the first line, "
                                "with '# (why: ...)' on the next")
            continue
        if "NBVAL_IGNORE_OUTPUT" in cell.source:  # e.g. '# NBVAL_IGNORE_OUTPUT: why': nbval
            problems.append(f"cell {index}: a marker nbval does not read (it wants the bare line)")
        if "execution" in cell.metadata:
            problems.append(f"cell {index}: execution timestamps stored")
        for output in cell.outputs:
            if "application/vnd.jupyter.widget-view+json" in output.get("data", {}):
                problems.append(f"cell {index}: a widget view (random model id) stored")
            for text in texts(output):
                for what, pattern in FORBIDDEN.items():
                    match = pattern.search(checked_part(text))
                    if match:
                        problems.append(f"cell {index}: {what}: {match.group(0)!r}")
    if "widgets" in nb.metadata:
        problems.append("notebook metadata holds ipywidgets state")
    if nb.metadata.get("kernelspec") != KERNELSPEC:
        problems.append(f"kernelspec {nb.metadata.get('kernelspec')} is not the one JupyterLab writes")
    assert not problems, f"{path.name} (re-execute with scripts/execute_chapters.py):\n" + "\n".join(problems)


def test_the_check_catches_a_timing(tmp_path):
    assert FORBIDDEN["a wall time"].search("trained 120 steps in 3.4 s")
    assert FORBIDDEN["a progress bar's rate or time"].search("50/50 [00:02<00:00, 21.3it/s]")
    assert not FORBIDDEN["a wall time"].search("loss 0.41 after 120 steps")


def test_build_time_literals_are_allowed_but_only_when_labelled():
    literal = "explicit: 1.00 ms   fused: 0.82 ms   (this book's build machine)"
    assert not FORBIDDEN["a wall time"].search(checked_part(literal))
    assert FORBIDDEN["a wall time"].search(checked_part(literal + "\nfused: 2.00 ms (this machine)"))


def test_the_marker_check_agrees_with_nbval():
    code = nbformat.v4.new_code_cell
    assert ignored(code("# NBVAL_IGNORE_OUTPUT\n# (why: timings)\nprint(1)"))
    assert not ignored(code("# NBVAL_IGNORE_OUTPUT: timings\nprint(1)"))  # nbval compares it
    assert not ignored(code("print(1)"))


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # every control character but \t and \n
TAB = "\t"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_markdown_has_no_control_characters(path):
    """A Python string "\\text{...}" written without a raw prefix stores a tab and "ext{":
    the formula renders wrong and nothing else notices. Markdown cells hold no tabs or
    other control characters."""
    nb = nbformat.read(path, as_version=4)
    bad = [(i, repr(m.group()), cell.source[max(0, m.start() - 20):m.end() + 20])
           for i, cell in enumerate(nb.cells) if cell.cell_type == "markdown"
           for m in [CONTROL.search(cell.source) or re.search(TAB, cell.source)] if m]
    assert not bad, bad
