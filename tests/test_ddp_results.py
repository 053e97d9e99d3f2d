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
    """Each setting's medians over the rounds (the chapter shows those)."""
    medians = json.loads(RESULTS.read_text())["medians"]
    return {(r["processes"], r["precision"], r["accumulate"]): r for r in medians}


def _speeds(key) -> list[float]:
    runs = json.loads(RESULTS.read_text())["runs"]
    return [r["steps_per_second"] for r in runs
            if (r["processes"], r["precision"], r["accumulate"]) == key]


def test_chapter_13_shows_the_measured_table():
    table = _file_table()
    rows = _chapter_table()
    assert len(rows) == len(table)
    for processes, precision, micro, speed, (low, high), exact in rows:
        key = (processes, precision, micro)
        run = table[key]
        assert speed == round(run["steps_per_second"], 1), key
        assert (low, high) == (round(min(_speeds(key)), 1), round(max(_speeds(key)), 1)), key
        assert exact == round(run["test_exact_match"], 4), key


def test_what_chapter_13_says_about_the_table_holds():
    speed = {key: run["steps_per_second"] for key, run in _file_table().items()}
    exact = [run["test_exact_match"] for run in _file_table().values()]
    machine = json.loads(RESULTS.read_text())["machine"]
    assert machine["cpus"] == 2
    assert round(machine["load_average_before"]) == 5  # "about 5 before and 7.5 after"
    assert round(machine["load_average_after"], 1) == 7.5
    assert min(exact) >= 0.98  # "at or near 99%" (the medians)
    base = _speeds((1, "fp32", 1))
    assert max(base) > 1.3 * min(base)  # "vary from round to round by a third and more"
    assert max(speed.values()) == speed[(1, "fp32", 1)]  # "no setting beat one process"
    assert speed[(2, "fp32", 1)] < speed[(1, "fp32", 1)]  # two processes: fewer steps/s
    assert speed[(1, "fp32", 2)] < 0.8 * speed[(1, "fp32", 1)]  # two micro-batches: slower
    assert speed[(1, "bf16", 1)] < speed[(1, "fp32", 1)]  # bf16 slower on this CPU
