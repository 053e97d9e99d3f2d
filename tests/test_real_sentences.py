"""Chapter 14 (real sentences): what it quotes from elsewhere, and what it may store.

- The numbers it shows for longer training (a figure and the prose under it) are those of
  ``benchmarks/results/real_corpus_cpu.json``, and the dictionary version it names is
  the one those results were measured with.
- The Ding dictionary is GPL-2.0-or-later: the stored chapter may hold only a handful of
  its sentences, each where the attribution is printed, and none in the prose.
"""
from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path

import nbformat
import pytest

from conftest import need

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "book" / "14_real_sentences.ipynb"
RESULTS = ROOT / "benchmarks" / "results" / "real_corpus_cpu.json"
DING_FILE = "/usr/share/trans/de-en"
ATTRIBUTION = "Ding dictionary, © Frank Richter, GPL-2.0-or-later"
MOST_PAIRS = 8  # Ding pairs the stored chapter may show (the brief's "a handful")


def _cells():
    return nbformat.read(CHAPTER, as_version=4).cells


def _markdown() -> str:
    return " ".join(" ".join(c.source.split()) for c in _cells() if c.cell_type == "markdown")


def _literals(marker: str) -> dict:
    cells = [c.source for c in _cells() if c.cell_type == "code" and marker in c.source]
    assert len(cells) == 1, f"chapter 14 should have exactly one cell with {marker!r}"
    found = {}
    for node in ast.parse(cells[0]).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id.isupper():  # the literals, not the figure
            found[node.targets[0].id] = ast.literal_eval(node.value)
    return found


def _results() -> dict:
    return json.loads(RESULTS.read_text())


def _output_text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            parts.append(output.text)
        for key, value in output.get("data", {}).items():
            if key.startswith("text/") and isinstance(value, str):
                parts.append(value)
    return "\n".join(parts)


def _quoted_text(cell) -> str:
    """A cell's outputs less the lines that print the model's own translations: a model
    that writes "Where are you?" does not quote the dictionary pair that holds it."""
    return "\n".join(line for line in _output_text(cell).splitlines()
                     if not line.strip().startswith("model:"))


def _cpu_rows() -> list:
    """The CPU rows measured with the library's RECIPE (the file keeps earlier recipes'
    rows too, each with its recipe)."""
    from transformer_lib.translate.presets import RECIPE

    rows = [row for row in _results()["results"]
            if row["device"] == "cpu" and row["recipe"] == RECIPE]
    assert rows, "no row of the results file was measured with the current RECIPE"
    return rows


def _mean(rows, minutes, search: str, key: str) -> float:
    values = [row[search][key] for row in rows if row["minutes"] == minutes]
    assert values, (minutes, search, key)
    return round(sum(values) / len(values), 2)


def test_chapter_14_plots_the_measured_scores():
    literals, rows = _literals("\nMEASURED = {"), _cpu_rows()
    assert literals["CPU_MINUTES"] == sorted({row["minutes"] for row in rows})
    for name, key in (("BLEU", "bleu"), ("chrF", "chrf")):
        expected = [_mean(rows, m, "beam4", key) for m in literals["CPU_MINUTES"]]
        assert literals["MEASURED"][name] == expected, (name, expected)


def test_what_chapter_14_says_about_the_results_holds():
    rows, text = _cpu_rows(), _markdown()
    longest = max(row["minutes"] for row in rows)
    bleu, chrf = (_mean(rows, longest, "beam4", key) for key in ("bleu", "chrf"))
    assert (f"After {longest:g} minutes of two cores, the recipe reaches BLEU {bleu:.1f} "
            f"and chrF {chrf:.1f}") in text
    exact = [row["beam4"]["exact_short"] for row in rows if row["minutes"] == longest]
    total = [row["beam4"]["short_total"] for row in rows if row["minutes"] == longest][0]
    assert f"{min(exact)} of the {total} test sentences of 3 to 6 words" in text


def test_chapter_14_names_the_dictionary_version_of_the_results():
    version = _results()["corpus"]["version"]
    assert f"built with the version `{version}`" in _markdown()


def test_stored_chapter_quotes_only_a_few_attributed_ding_sentences():
    """Every stored output (and the prose) is searched for every sentence of the Ding
    corpus on this machine: at most MOST_PAIRS pairs may appear, only in outputs that
    print the attribution, and none in the Markdown cells."""
    need(os.path.isfile(DING_FILE), f"the Ding dictionary is not installed ({DING_FILE})")
    from transformer_lib.data import load_corpus

    corpus = load_corpus("ding")
    pairs = [pair for name in ("train", "valid", "test") for pair in corpus.split(name)]
    found, problems = set(), []
    for index, cell in enumerate(_cells()):
        text = cell.source if cell.cell_type == "markdown" else _quoted_text(cell)
        here = {pair for pair in pairs if pair[0] in text or pair[1] in text}
        if here and cell.cell_type == "markdown":
            problems.append(f"cell {index}: Ding sentences in the prose: {sorted(here)[:2]}")
        elif here and ATTRIBUTION not in text:
            problems.append(f"cell {index}: Ding sentences without the attribution")
        found |= here
    assert not problems, problems
    assert len(found) <= MOST_PAIRS, f"{len(found)} Ding pairs in the stored chapter"


def test_the_sentence_search_finds_a_quoted_pair():
    # the check above would pass on a chapter it cannot read: it must see stream outputs
    cell = nbformat.v4.new_code_cell("print(pair)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                           text=f"de: Ein Satz.\n({ATTRIBUTION})\n")]
    assert "Ein Satz." in _output_text(cell) and ATTRIBUTION in _output_text(cell)


def test_chapter_14_is_listed_after_chapter_13():
    toc = (ROOT / "_toc.yml").read_text()
    assert re.search(r"book/13_scaling_out\n\s+- file: book/14_real_sentences\n", toc)
