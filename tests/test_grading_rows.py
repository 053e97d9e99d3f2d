"""Attack class: rows that cannot collide or lie (issue 27, attacks 10 and 11).

Without a kernel: how the submissions folder becomes students (``collect``), how a row
is made from what a notebook sent back (``batch._row``) and written (``batch._Table``).
The same attacks, graded for real in a sandbox, are in ``test_grading_hostile.py``.
"""

from __future__ import annotations

import csv
import unicodedata

import nbformat

from classroom import INSTRUCTOR, student
from transformer_grader.engine import batch, collect
from transformer_grader.engine.text import cell, shown

A1 = "01_attention"


def _write(path, nb):
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def _outcome(feedback="Attention: 1/1", status="ok", flags=(), score=1.0):
    verdict = {"score": score, "passed": 1, "total": 1, "feedback": feedback}
    verdict["flags"] = []
    return {"status": status, "tasks": {"attention": verdict}, "flags": list(flags)}


def _csv(tmp_path, rows):
    table = batch._Table(tmp_path / "g.csv", ["attention"])
    for row in rows:
        table.append(row)
    table.finish(rows)
    with open(tmp_path / "g.csv", newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))  # Python's csv, its default field limit


def test_a_notebook_and_a_folder_of_one_name_are_two_flagged_rows(tmp_path):
    subs = tmp_path / "subs"
    _write(subs / "alice.ipynb", nbformat.read(INSTRUCTOR / f"{A1}.ipynb", 4))
    _write(subs / "alice" / f"{A1}.ipynb", student())
    students, _ = collect.collect(subs, [A1])
    names = [s.name for s in students]
    assert names == ["alice.ipynb", "alice/"] or names == ["alice/", "alice.ipynb"]
    for one in students:
        assert A1 in one.notebooks  # neither dropped
        assert any("two sources for the student alice" in f for f in one.flags)
    rows = [
        batch._row(s, [A1], {(s.name, A1): _outcome(score=float(i))}, True)
        for i, s in enumerate(students)
    ]
    assert {r["student"] for r in rows} == set(names)  # two rows, two scores kept
    assert {r["attention"] for r in rows} == {"0.000", "1.000"}


def test_names_that_look_alike_are_graded_apart_and_flagged(tmp_path):
    subs = tmp_path / "subs"
    nfc = unicodedata.normalize("NFC", "zoé")
    nfd = unicodedata.normalize("NFD", "zoé")
    assert nfc != nfd
    for name in (nfc, nfd, "Bob", "bob"):
        _write(subs / f"{name}.ipynb", student())
    students, _ = collect.collect(subs, [A1])
    assert len(students) == 4
    for one in students:
        assert any("names that look alike" in f for f in one.flags), one.name


def test_escaping_for_spreadsheets_is_injective(tmp_path):
    assert cell("=1+1") != cell("'=1+1")
    rows = []
    for name in ("=1+1", "'=1+1"):
        row = batch._row(
            collect.Student(name, source=name), [A1], {(name, A1): _outcome()}, True
        )
        rows.append(row)
    written = _csv(tmp_path, rows)
    assert [w["student"] for w in written] == ["'=1+1", "''=1+1"]


def test_bidi_and_control_characters_are_shown_escaped(tmp_path):
    name = "bob\u202e000.0"
    status = "crashed: \x1b]0;pwned\x07\x1b[2K\rattention,1.000 in cell 3"
    one = collect.Student(name, source=name)
    outcome = _outcome("Attention: \x1b[31mred", status)
    row = batch._row(one, [A1], {(name, A1): outcome}, True)
    assert row["student"] == "bob\\u202e000.0"
    for value in row.values():
        assert not any(
            unicodedata.category(c) in ("Cc", "Cf") and c != "\n" for c in value
        ), value
    assert "\\x1b]0;pwned\\x07" in row["status"]
    # injective: a name that spells the escape is shown otherwise
    assert shown("bob\\u202e000.0") != shown(name)


def test_a_megabyte_of_feedback_is_capped_and_the_csv_stays_readable(tmp_path):
    huge = "x" * 2**20
    flags = [f"flag {i}: " + "y" * 5000 for i in range(100)]
    one = collect.Student("alice", source="alice.ipynb")
    row = batch._row(
        one,
        [A1],
        {("alice", A1): _outcome(huge, "crashed: " + huge, flags)},
        True,
    )
    assert len(row["feedback"]) < 3000
    assert "more characters]" in row["feedback"]
    assert len(row["flags"]) < 31 * 450 and "more flags" in row["flags"]
    (written,) = _csv(tmp_path, [row])
    assert written["student"] == "alice" and written["attention"] == "1.000"
