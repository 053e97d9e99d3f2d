"""The chapters' exercises: a portable form in the notebooks, sphinx-exercise directives in the book.

Every chapter's exercises must be in the portable form (so they read cleanly in Colab and
JupyterLab, solutions collapsed), and ``to_myst`` must turn them into the directives the HTML book
and its student build rely on.
"""
from __future__ import annotations

import copy
import re
from pathlib import Path

import nbformat
import pytest

from transformer_lib.assignments.exercises import (
    COLAB_TITLE,
    SOLUTION_TAG,
    exercise_label,
    solution_label,
    to_myst,
)

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))


def _portable_notebook():
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    cells = [
        md("# Title"),
        md("<!-- exercise: t-ex1 -->\n**Exercise.** Add `1` and $x$:\n\n```python\n1 + x\n```"),
        md("<details>\n<summary><b>Solution</b></summary>\n<!-- solution: t-ex1 -->\n\n"
           "The answer is prose.\n\n</details>",
           metadata={"tags": [SOLUTION_TAG], "jupyter": {"source_hidden": True}}),
        code(f"{COLAB_TITLE}\nprint(1 + 2)",
             metadata={"tags": [SOLUTION_TAG], "jupyter": {"source_hidden": True}}),
        code("print('not a solution')"),
        md("<!-- exercise: t-ex2 -->\n**Exercise.** Second."),
        md("<details>\n<summary><b>Solution</b></summary>\n<!-- solution: t-ex2 -->\n\nOnly prose."
           "\n\n</details>", metadata={"tags": [SOLUTION_TAG]}),
    ]
    return nbformat.v4.new_notebook(cells=cells)


def test_to_myst_makes_directives_and_closes_each_solution():
    cells = to_myst(_portable_notebook())["cells"]
    sources = [cell["source"] for cell in cells]
    assert sources[1] == "````{exercise}\n:label: t-ex1\n\nAdd `1` and $x$:\n\n```python\n1 + x\n```\n````"
    assert sources[2] == "```{solution-start} t-ex1\n:class: dropdown\n```\nThe answer is prose."
    assert sources[3] == "print(1 + 2)"  # Colab's form title is not part of the book's code
    assert sources[4] == "```{solution-end}\n```"  # before the first cell without the tag
    assert sources[5] == "print('not a solution')"
    assert sources[-1] == "```{solution-end}\n```"  # a solution at the very end is closed too
    assert len(cells) == 9


def test_to_myst_reads_raw_json_with_list_sources():
    nb = _portable_notebook()
    raw = nbformat.writes(nb)  # on disk, sources are lists of lines
    import json

    cells = to_myst(json.loads(raw))["cells"]
    assert cells[1]["source"].startswith("````{exercise}\n:label: t-ex1")


def test_a_markdown_cell_without_the_solution_tag_does_not_open_a_solution():
    cell = nbformat.v4.new_markdown_cell("<!-- solution: x -->\ntext")
    assert solution_label(cell) is None
    assert exercise_label(nbformat.v4.new_markdown_cell("see <!-- exercise: x --> later")) is None


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_exercises_are_portable_and_solutions_collapsed(path):
    nb = nbformat.read(path, as_version=4)
    leftovers = [i for i, cell in enumerate(nb.cells)
                 if re.search(r"^[`:]{3,}\{(exercise|solution[-a-z]*)\}", cell.source, re.M)]
    assert not leftovers, f"MyST exercise directives in cells {leftovers}: use the portable form"
    exercises = [exercise_label(c) for c in nb.cells if exercise_label(c)]
    solutions = [solution_label(c) for c in nb.cells if solution_label(c)]
    assert exercises, "every chapter has exercises"
    assert solutions == exercises, "each exercise is followed by its solution"
    for i, cell in enumerate(nb.cells):
        if SOLUTION_TAG in cell.metadata.get("tags", []):
            assert cell.metadata.get("jupyter", {}).get("source_hidden"), f"cell {i} is not collapsed"
            if cell.cell_type == "markdown":
                assert cell.source.startswith("<details>") and cell.source.endswith("</details>")
            else:
                assert cell.source.startswith(COLAB_TITLE + "\n"), f"cell {i}: no Colab form title"
                assert cell.metadata.get("cellView") == "form"
                assert cell.metadata["jupyter"].get("outputs_hidden"), f"cell {i}: output in view"


def test_to_myst_leaves_a_notebook_without_exercises_alone():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Plain")])
    assert to_myst(copy.deepcopy(nb)) == nb
