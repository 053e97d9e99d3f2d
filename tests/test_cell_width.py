"""Every code cell of every chapter fits 88 columns: the width of Jupyter's and Colab's
code cells at their usual size, and of the HTML book's code blocks, so that no reader has
to scroll sideways to read a line."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
WIDTH = 88


def too_wide(nb) -> list[str]:
    """'cell N, line M: K columns' for every code line wider than ``WIDTH``."""
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for number, line in enumerate(cell.source.splitlines(), 1):
            if len(line) > WIDTH:
                found.append(f"cell {index}, line {number}: {len(line)} columns")
    return found


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_code_cells_fit_88_columns(path):
    assert too_wide(nbformat.read(path, as_version=4)) == []


def test_the_check_finds_a_wide_line():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("x" * 200),  # prose wraps: not checked
                nbformat.v4.new_code_cell("fits = 1\n" + "y = " + "1 + " * 30 + "1")]
    assert too_wide(nb) == ["cell 1, line 2: 125 columns"]
