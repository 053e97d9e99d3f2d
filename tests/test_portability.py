"""scripts/check_portability.py names the failing chapter, cell and capability, and exits non-zero."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_portability.py"


def notebook(path: Path, stored: str) -> Path:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(2 + 2)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=stored)]
    cell.execution_count = 1
    nb.cells = [cell]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)


def test_a_stale_cell_is_reported_with_chapter_cell_and_capability(tmp_path):
    good = notebook(tmp_path / "good.ipynb", "4\n")
    stale = notebook(tmp_path / "stale.ipynb", "5\n")
    result = run("--capability", "default", good, stale)
    assert result.returncode == 1, result.stdout + result.stderr
    fail_lines = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fail_lines) == 1, result.stdout
    assert "[default]" in fail_lines[0] and "stale.ipynb" in fail_lines[0]
    assert "Cell 0 (cell index 0: 'print(2 + 2)')" in fail_lines[0]


def test_an_error_is_reported_by_its_exception_not_by_the_cell_source(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A chapter"),
                nbformat.v4.new_code_cell("# asserted below\nraise ValueError('d_model=10')")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "broken.ipynb")
    result = run("--capability", "default", tmp_path / "broken.ipynb")
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert "cell index 1" in line and "ValueError: d_model=10" in line, line
    assert "asserted below" not in line.split(":", 2)[-1], line


def test_passing_chapters_exit_zero(tmp_path):
    result = run("--capability", "default", "--capability", "native",
                 notebook(tmp_path / "good.ipynb", "4\n"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "default" in result.stdout and "native" in result.stdout


def test_bad_arguments_exit_2(tmp_path):
    assert run("--capability", "sse9").returncode == 2
    result = run(tmp_path / "missing.ipynb")
    assert result.returncode == 2 and "not a notebook file" in result.stderr
