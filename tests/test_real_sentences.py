"""Chapter 14 (real sentences): what it quotes from elsewhere, and what it may store.

- What it shows for longer training (tables, a figure) is read from
  ``benchmarks/results/real_corpus_cpu.json`` (schema 2) by functions of the chapter, tested
  here on a small file of known numbers; its stored tables are the file's; the prose
  under them quotes no number of its own; the dictionary version it names is the one
  those results were measured with.
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

from conftest import need

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "book" / "14_real_sentences.ipynb"
RESULTS = ROOT / "benchmarks" / "results" / "real_corpus_cpu.json"
EVERYDAY = ROOT / "benchmarks" / "data" / "everyday_de_en.tsv"
DING_FILE = "/usr/share/trans/de-en"
ATTRIBUTION = "Ding dictionary, © Frank Richter, GPL-2.0-or-later"
MOST_PAIRS = 8  # Ding pairs the stored chapter may show (the brief's "a handful")


def _cells():
    return nbformat.read(CHAPTER, as_version=4).cells


def _markdown() -> str:
    return " ".join(" ".join(c.source.split()) for c in _cells() if c.cell_type == "markdown")


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


def _results_cell():
    cells = [c for c in _cells() if c.cell_type == "code" and "def results_tables(" in c.source]
    assert len(cells) == 1, "chapter 14 should have exactly one cell defining results_tables"
    return cells[0]


def _chapter_functions() -> dict:
    """The functions of the chapter's results cell (``change``, ``spread``, ``final_runs``,
    ``results_tables``), defined as the chapter defines them, without running the rest."""
    import collections

    import numpy as np

    from transformer_lib.translate.presets import RECIPE

    tree = ast.parse(_results_cell().source)
    defs = ast.Module(body=[n for n in tree.body if isinstance(n, ast.FunctionDef)],
                      type_ignores=[])
    namespace = dict(collections=collections, np=np, RECIPE=RECIPE)
    exec(compile(defs, str(CHAPTER), "exec"), namespace)
    return namespace


def _scores(bleu: float, chrf: float) -> dict:
    return dict(bleu=bleu, chrf=chrf, exact_short=1, short_total=400)


def _fake_results() -> dict:
    """A small schema-2 file of invented numbers, laid out as benchmarks/real_corpus.py
    writes it: two search runs on validation, three final runs of 10 minutes."""
    from transformer_lib.translate.presets import RECIPE

    recipe = dict(RECIPE, attention_dropout=None, bpe_dropout=0.0, bidirectional=False,
                  dict_fraction=0.0)

    def row(seed, test=None, **changes):
        out = dict(minutes=10.0, cores=2, seed=seed, device="cpu", budget_s=1200.0,
                   recipe=dict(recipe, **changes), average=1, steps=2000 + seed,
                   valid=dict(greedy=_scores(5.0 + seed, 20.0), beam4=_scores(5.5 + seed, 21.0)))
        if test is not None:
            out["test"] = dict(greedy=_scores(test - 1, 25.0 + seed),
                               beam4=_scores(test, 26.0 + 2 * seed))
        return out

    return dict(kind="real_corpus", schema=2,
                corpus=dict(name="ding", version="v", train=100, valid=10, test=10, extra=0),
                baselines=dict(copy=dict(valid=dict(bleu=0.1, chrf=14.0),
                                         test=dict(bleu=0.2, chrf=15.0)),
                               retrieval=dict(valid=dict(bleu=3.0, chrf=18.0),
                                              test=dict(bleu=2.5, chrf=17.5))),
                results=[row(0, dropout=0.3), row(0, 6.0), row(1, 7.0), row(2, 8.0)])


def test_the_chapters_tables_read_a_schema_2_file():
    """On a file of known numbers: the baselines on both splits, the final runs' test
    scores as mean ± sd [min, max] over seeds, and every run on validation."""
    fn = _chapter_functions()
    text = fn["results_tables"](_fake_results())
    assert "retrieval                3.00  18.00       2.50  17.50" in text
    assert "copy                     0.10  14.00       0.20  15.00" in text
    assert "10 min on 2 cores, recipe, seeds 0,1,2:" in text
    assert "beam 4 BLEU  7.00 ± 1.00 [ 6.00,  8.00]   chrF 28.00 ± 2.00 [26.00, 30.00]" in text
    assert "greedy BLEU  6.00 ± 1.00 [ 5.00,  7.00]   chrF 26.00 ± 1.00 [25.00, 27.00]" in text
    runs = [line for line in text.splitlines() if line.startswith("10 min, seed")]
    assert len(runs) == 4
    # a search run, named by its one change; the final runs by none
    assert [r.split()[-1] for r in runs] == ["dropout=0.3", "recipe", "recipe", "recipe"]
    empty = dict(_fake_results(), results=[])
    assert "(none in this file yet" in fn["results_tables"](empty)


def test_chapter_14_prints_the_results_file():
    """The stored tables are those of benchmarks/results/real_corpus_cpu.json: after
    ``benchmarks/real_corpus.py`` writes a new file, re-execute the chapter."""
    results = _results()
    assert results.get("schema") == 2, (
        f"{RESULTS.name} is schema {results.get('schema')}: the chapter reads schema 2 "
        "(write it with benchmarks/real_corpus.py, then re-execute chapter 14)")
    expected = _chapter_functions()["results_tables"](results)
    assert expected in _output_text(_results_cell()), "re-execute chapter 14"


def test_the_prose_under_the_results_quotes_no_number_of_its_own():
    """The prose about the results file refers to the printed tables: a decimal number in
    it would be one that no test keeps equal to the file."""
    cells = _cells()
    start = next(i for i, c in enumerate(cells) if "def results_tables(" in c.source)
    prose = next(c.source for c in cells[start:] if c.cell_type == "markdown")
    prose = re.sub(r"`[^`]*`", "", prose.partition("## With internet")[0])  # code aside
    assert not re.findall(r"\d+\.\d+", prose), re.findall(r"\d+\.\d+", prose)


def test_chapter_14_names_the_dictionary_version_of_the_results():
    version = _results()["corpus"]["version"]
    assert f"built with the version `{version}`" in _markdown()


def _without_our_sentences(text: str) -> str:
    """``text`` less the project's own everyday sentences (German and references, MIT):
    where Ding happens to hold the same words ("Wie spät ist es?"), printing ours quotes
    nothing of Ding's."""
    from transformer_lib.translate.everyday import load_everyday

    ours = [text for german, references in load_everyday(EVERYDAY)
            for text in (german, *references)]
    for sentence in sorted(ours, key=len, reverse=True):
        text = text.replace(sentence, " ")
    return text


def test_our_own_sentences_are_not_counted_as_quotes():
    assert _without_our_sentences("Ich bin müde. (I am tired. / I'm tired.)").strip(
        " ()/") == ""
    # a Ding-like sentence of its own stays
    assert "Der Hund schläft." in _without_our_sentences("Der Hund schläft. Ich bin müde.")


def test_stored_chapter_quotes_only_a_few_attributed_ding_sentences():
    """Every stored output (and the prose) is searched for every sentence of the Ding
    corpus on this machine: at most MOST_PAIRS pairs may appear, only in outputs that
    print the attribution, and none in the Markdown cells. The project's own everyday
    sentences are taken out first (a few of them are also Ding sentences)."""
    need(os.path.isfile(DING_FILE), f"the Ding dictionary is not installed ({DING_FILE})")
    from transformer_lib.data import load_corpus

    corpus = load_corpus("ding")
    pairs = [pair for name in ("train", "valid", "test") for pair in corpus.split(name)]
    found, problems = set(), []
    for index, cell in enumerate(_cells()):
        text = cell.source if cell.cell_type == "markdown" else _quoted_text(cell)
        text = _without_our_sentences(text)
        here = {pair for pair in pairs if pair[0] in text or pair[1] in text}
        if here and cell.cell_type == "markdown":
            problems.append(f"cell {index}: Ding sentences in the prose: {sorted(here)[:2]}")
        elif here and ATTRIBUTION not in text:
            problems.append(f"cell {index}: Ding sentences without the attribution")
        found |= {german for german, _ in here}  # one German sentence with two
        # translations in the dictionary is one example shown
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
