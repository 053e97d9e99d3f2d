"""Chapter 13 shows benchmark results it does not compute (timings depend on the machine):
the numbers in the chapter are the ones in benchmarks/results/ddp_cpu.json, and the
chapter's prose about them holds for that file."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "ddp_cpu.json"


def _chapter_table() -> list[tuple]:
    nb = nbformat.read(ROOT / "book" / "13_scaling_out.ipynb", as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code" and "MEASURED = [" in c.source]
    assert len(cells) == 1, "chapter 13 should have exactly one MEASURED cell"
    for node in ast.parse(cells[0]).body:
        if isinstance(node, ast.Assign) and node.targets[0].id == "MEASURED":
            return ast.literal_eval(node.value)
    raise AssertionError("no MEASURED = [...] in the cell")


def _file_table() -> dict:
    runs = json.loads(RESULTS.read_text())["runs"]
    return {(r["processes"], r["precision"], r["accumulate"]): r for r in runs}


def test_chapter_13_shows_the_measured_table():
    table = _file_table()
    rows = _chapter_table()
    assert len(rows) == len(table)
    for processes, precision, micro, speed, exact in rows:
        run = table[(processes, precision, micro)]
        assert speed == round(run["steps_per_second"], 1), (processes, precision, micro)
        assert exact == round(run["test_exact_match"], 4), (processes, precision, micro)


def test_what_chapter_13_says_about_the_table_holds():
    speed = {key: run["steps_per_second"] for key, run in _file_table().items()}
    exact = [run["test_exact_match"] for run in _file_table().values()]
    assert min(exact) >= 0.99  # "every run ends at or near 100%"
    assert speed[(2, "fp32", 1)] < speed[(1, "fp32", 1)]  # two processes: fewer steps/s
    assert speed[(1, "fp32", 2)] < 0.6 * speed[(1, "fp32", 1)]  # two micro-batches: ~half
    assert speed[(1, "bf16", 1)] < speed[(1, "fp32", 1)]  # bf16 slower on this CPU
