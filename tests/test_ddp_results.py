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


def _runs() -> list[dict]:
    return json.loads(RESULTS.read_text())["runs"]


def _cells():
    return nbformat.read(ROOT / "book" / "13_scaling_out.ipynb", as_version=4).cells


def _markdown() -> str:
    return " ".join(" ".join(c.source.split()) for c in _cells() if c.cell_type == "markdown")


def _output(marker: str) -> str:
    """The stored text output of the one code cell whose source holds ``marker``."""
    cells = [c for c in _cells() if c.cell_type == "code" and marker in c.source]
    assert len(cells) == 1, marker
    return "".join(o.get("text", "") for o in cells[0].outputs)


def test_chapter_13_shows_the_measured_table():
    table = _file_table()
    rows = _chapter_table()
    assert len(rows) == len(table)
    for processes, precision, micro, speed, (low, high), exact, worst in rows:
        key = (processes, precision, micro)
        run = table[key]
        assert speed == round(run["steps_per_second"], 1), key
        assert (low, high) == (round(min(_speeds(key)), 1), round(max(_speeds(key)), 1)), key
        assert exact == round(run["test_exact_match"], 4), key
        lowest = min(r["test_exact_match"] for r in _runs()
                     if (r["processes"], r["precision"], r["accumulate"]) == key)
        assert worst == round(lowest, 4), key


def test_what_chapter_13_says_about_the_table_holds():
    text = _markdown()
    machine = json.loads(RESULTS.read_text())["machine"]
    assert machine["cpus"] == 2
    assert round(machine["load_average_before"]) == 5  # "about 5 before and 7.5 after"
    assert round(machine["load_average_after"], 1) == 7.5
    assert "a load average of about 5 before and 7.5 after" in text
    runs = _runs()
    # "Twenty of the 24 runs end at 99% exact match or more. The four that do not ..."
    short = sorted((r for r in runs if r["test_exact_match"] < 0.99),
                   key=lambda r: -r["test_exact_match"])
    assert (len(runs), len(runs) - len(short)) == (24, 20)
    assert "Twenty of the 24 runs end at 99% exact match or more" in text
    two_bf16 = sorted((r for r in short if (r["processes"], r["precision"], r["accumulate"])
                       == (2, "bf16", 1)), key=lambda r: r["round"])
    assert len(two_bf16) == 2
    assert (f"at {100 * two_bf16[0]['test_exact_match']:.2f}% and "
            f"{100 * two_bf16[1]['test_exact_match']:.2f}%") in text
    for processes, accumulate in ((1, 2), (2, 2)):
        mine = [r for r in short if (r["processes"], r["precision"], r["accumulate"])
                == (processes, "bf16", accumulate)]
        assert len(mine) == 1
        slowest = min(r["steps"] for r in runs if (r["processes"], r["precision"],
                      r["accumulate"]) == (processes, "bf16", accumulate))
        assert mine[0]["steps"] == slowest  # "the slowest runs of ..."
        assert (f"{processes} × bf16 × 2 ({100 * mine[0]['test_exact_match']:.1f}%, "
                f"{mine[0]['steps']} steps)") in text
    # "the three runs of one setting differ by up to 2.4 times (2 × bf16 × 2: 6.2 to 15.2"
    spread = {key: max(_speeds(key)) / min(_speeds(key)) for key in _file_table()}
    widest = max(spread, key=spread.get)
    assert widest == (2, "bf16", 2) and round(spread[widest], 1) == 2.4
    low, high = min(_speeds(widest)), max(_speeds(widest))
    assert f"up to 2.4 times (2 × bf16 × 2: {low:.1f} to {high:.1f} steps per second)" in text
    # "the load rose while they were measured"
    assert machine["load_average_after"] > machine["load_average_before"]

    def speed(round_, processes, precision, accumulate):
        return next(r["steps_per_second"] for r in runs if (
            r["round"], r["processes"], r["precision"], r["accumulate"])
            == (round_, processes, precision, accumulate))

    rounds = sorted({r["round"] for r in runs})
    # "two micro-batches ... slower in every round"
    assert all(speed(i, 1, "fp32", 2) < speed(i, 1, "fp32", 1) for i in rounds)
    # "Two processes took fewer steps per second than one ... in two rounds of three, and
    # more in the first; their median was lower"
    fewer = [speed(i, 2, "fp32", 1) < speed(i, 1, "fp32", 1) for i in rounds]
    assert fewer == [False, True, True]
    medians = {key: run["steps_per_second"] for key, run in _file_table().items()}
    assert medians[(2, "fp32", 1)] < medians[(1, "fp32", 1)]
    # "bf16 was slower than fp32 in 9 of the 12 pairs ... and faster in 3"
    pairs = [(speed(i, p, "bf16", k), speed(i, p, "fp32", k))
             for i in rounds for p in (1, 2) for k in (1, 2)]
    assert len(pairs) == 12 and sum(b < f for b, f in pairs) == 9
    assert "slower than fp32 in 9 of the 12 pairs" in text and "faster in 3" in text
    # "the medians of 2 × bf16 × 2 (13.6 steps per second), 2 × bf16 × 1 (12.7) and
    # 2 × fp32 × 2 (13.5) say nothing": they lie closer together than one setting's runs
    close = [medians[(2, "bf16", 2)], medians[(2, "bf16", 1)], medians[(2, "fp32", 2)]]
    assert (f"2 × bf16 × 2 ({close[0]:.1f} steps per second), 2 × bf16 × 1 "
            f"({close[1]:.1f}) and 2 × fp32 × 2 ({close[2]:.1f})") in text
    assert max(close) / min(close) < min(spread.values())


STEPS_40 = ROOT / "benchmarks" / "results" / "ddp_cpu_40_steps.json"


def test_chapter_13_prints_the_measured_step_times():
    """BUILD_MS (the stored output of the timing cell) is the median of the 40-step runs
    of benchmarks/ddp.py, and the prose about them holds for that file."""
    measured = json.loads(STEPS_40.read_text())
    assert measured["steps"] == 40 and measured["train_size"] == 2000
    cells = [c.source for c in _cells() if c.cell_type == "code" and "BUILD_MS = {" in c.source]
    assert len(cells) == 1
    build_ms = next(ast.literal_eval(node.value) for node in ast.parse(cells[0]).body
                    if isinstance(node, ast.Assign) and node.targets[0].id == "BUILD_MS")
    medians = {m["processes"]: round(m["ms_per_step"], 1) for m in measured["medians"]}
    assert build_ms == medians
    one = [r["ms_per_step"] for r in measured["runs"] if r["processes"] == 1]
    text = _markdown()
    assert (f"at a load average of about {measured['machine']['load_average_before']:.0f} "
            f"on its two cores, and the three runs of one process took {min(one):.0f} to "
            f"{max(one):.0f} ms per step") in text


def test_chapter_13_quotes_its_outputs():
    """Numbers in the prose that come from the chapter's own (compared) outputs."""
    text = _markdown()
    formats = _output("torch.finfo(dtype)")
    assert "smallest normal  6.1e-05" in formats and "$6.1 \\cdot 10^{-5}$" in text
    assert "3.5e-08 in float16: 5.96e-08" in formats
    assert "2.9e-08 in float16: 0" in formats
    assert "about $3 \\cdot 10^{-8}$" in text
    assert "$3.5 \\cdot 10^{-8}$ becomes $6 \\cdot 10^{-8}$, $2.9 \\cdot 10^{-8}$ becomes 0" in text
    scaler = _output("GradScaler(")
    assert "factor 65,536 at first, x0.5 after an overflow, x2.0 after 2,000 steps" in scaler
    assert "(65,536 at first)" in text and "after 2,000 steps in a row" in text
    assert "halves the factor" in text and "doubles the factor" in text
