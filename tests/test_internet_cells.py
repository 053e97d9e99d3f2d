"""Chapter cells that need internet: marked, announced, never run by the build, harmless offline.

A chapter may end with a few cells that download a pretrained model (chapter 12 loads
Helsinki-NLP/opus-mt-en-de). Nothing here can reach the Hugging Face Hub, so such a cell
- starts with ``# NBVAL_SKIP`` (nbval skips it) and carries the ``needs-internet`` tag;
- is neither run nor given outputs by ``scripts/execute_chapters.py``;
- follows a Markdown note that says it needs internet and is not run when the book is built;
- run offline, prints a short message instead of a traceback.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbval.plugin import find_comment_markers

from conftest import need

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import execute_chapters  # noqa: E402

CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
TAG = "needs-internet"
NOTE = ("Needs internet", "not run when the book is built")


def _internet_cells(nb):
    return [i for i, cell in enumerate(nb.cells) if TAG in cell.metadata.get("tags", [])]


def test_some_chapter_has_internet_cells():
    counts = {path.name: len(_internet_cells(nbformat.read(path, as_version=4)))
              for path in CHAPTERS}
    assert counts.get("12_real_weights.ipynb", 0) >= 3, counts
    assert counts.get("14_real_sentences.ipynb", 0) >= 2, counts


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_internet_cells_are_marked_announced_and_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    tagged = _internet_cells(nb)
    skipped = [i for i, cell in enumerate(nb.cells) if execute_chapters.not_executed(cell)]
    assert skipped == tagged, "NBVAL_SKIP is for cells that need internet, and only those"
    for i in tagged:
        cell = nb.cells[i]
        assert cell.source.splitlines()[0] == "# NBVAL_SKIP", f"cell {i}: marker not first"
        assert cell.outputs == [] and cell.execution_count is None, f"cell {i}: outputs stored"
    if tagged:
        before = [c for c in nb.cells[:tagged[0]] if c.cell_type == "markdown"][-1]
        text = " ".join(before.source.replace(">", " ").replace("*", "").split())
        assert all(words in text for words in NOTE), (
            "the Markdown cell before the first internet cell must say "
            f"{' and '.join(map(repr, NOTE))}")


def test_not_executed_reads_the_markers_as_nbval_does():
    code = nbformat.v4.new_code_cell
    for source, tags, skipped in [("# NBVAL_SKIP\nprint(1)", [], True),
                                  ("print(1)\n  #  NBVAL_SKIP", [], True),
                                  ("# NBVAL_SKIP: needs internet\nprint(1)", [], False),
                                  ("print(1)", ["nbval-skip"], True),
                                  ("print(1)", [TAG], False)]:
        cell = code(source, metadata={"tags": tags})
        assert execute_chapters.not_executed(cell) is skipped, source
        assert (("skip", True) in set(find_comment_markers(source))) is (skipped and not tags)
    assert not execute_chapters.not_executed(nbformat.v4.new_markdown_cell("# NBVAL_SKIP"))


def test_execute_script_neither_runs_nor_stores_skipped_cells(tmp_path):
    code = nbformat.v4.new_code_cell
    skipped = code("# NBVAL_SKIP\nopen('ran.txt', 'w').write('ran')\nprint('ran')",
                   execution_count=7,
                   outputs=[nbformat.v4.new_output("stream", name="stdout", text="old\n")])
    nb = nbformat.v4.new_notebook(cells=[code("print('before')"), skipped,
                                         code("print('after')")])
    path = tmp_path / "chapter.ipynb"
    nbformat.write(nb, path)
    fresh = execute_chapters.execute(path, timeout=120)
    assert not (tmp_path / "ran.txt").exists(), "the NBVAL_SKIP cell was executed"
    first, middle, last = fresh.cells
    assert middle.outputs == [] and middle.execution_count is None
    assert [o.text for o in first.outputs] == ["before\n"]
    assert [o.text for o in last.outputs] == ["after\n"]
    assert last.execution_count == 2  # the kernel never saw the skipped cell


# The chapters with internet cells, and the model their first such cell downloads.
DOWNLOADS = {"12_real_weights.ipynb": "Helsinki-NLP/opus-mt-en-de",
             "14_real_sentences.ipynb": "Helsinki-NLP/opus-mt-de-en"}


@pytest.mark.parametrize("name", sorted(DOWNLOADS))
def test_internet_cells_print_a_message_offline(name):
    """A chapter's imports, then its internet cells, as one script with HF_HUB_OFFLINE=1:
    a clear message, no traceback (as in scripts/check_colab.py's Colab-like run)."""
    need(_has("transformers"), "transformers is not installed")
    nb = nbformat.read(ROOT / "book" / name, as_version=4)
    imports = next(c.source for c in nb.cells[1:] if c.cell_type == "code")
    # without the Jupyter-only lines (%matplotlib inline), which plain Python cannot read
    imports = "\n".join(line for line in imports.splitlines() if not line.startswith("%"))
    script = "\n\n".join([imports] + [nb.cells[i].source for i in _internet_cells(nb)])
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT / "book",
                         env=dict(os.environ, HF_HUB_OFFLINE="1", MPLBACKEND="Agg"),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith(f"needs internet: could not download {DOWNLOADS[name]} ("), \
        run.stdout
    assert lines[1:] == ["skipped: the model was not loaded (see above)"] * (
        len(_internet_cells(nb)) - 1), run.stdout


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
