"""The student build of the book: _config_student.yml is in sync with _config.yml, and a real
jupyter-book build with it (of a tiny book in a temporary folder, to stay fast) contains the
exercises but no solution: neither the prose nor the code cells of gated solutions, nor plain
{solution} directives, nor the notebook sources."""
from __future__ import annotations

import subprocess
from pathlib import Path

import nbformat
import pytest
import yaml

from conftest import need, tool
from transformer_lib.assignments import student_config, write_student_config
from transformer_lib.assignments.student_book import (
    _split_solution_markdown,
    check_pages,
    solution_snippets,
    verify,
)

ROOT = Path(__file__).resolve().parents[1]


def test_student_config_is_in_sync_with_the_main_config():
    state = write_student_config(ROOT / "_config.yml", ROOT / "_config_student.yml", check=True,
                                 log=None)
    assert state == "unchanged", ("_config_student.yml is out of date: run "
                                  "`python -m transformer_lib.assignments student-config`")


def test_student_config_hides_solutions_sources_and_launch_buttons():
    main = yaml.safe_load((ROOT / "_config.yml").read_text())
    student = yaml.safe_load((ROOT / "_config_student.yml").read_text())
    options = student["sphinx"]["config"]
    assert options["hide_solutions"] is True and options["html_copy_source"] is False
    assert "transformer_lib.assignments.hide_solutions" in student["sphinx"]["extra_extensions"]
    assert "launch_buttons" not in student
    # Everything else is the main config's.
    assert student["exclude_patterns"] == main["exclude_patterns"]
    assert student["parse"] == main["parse"]
    assert student_config({"title": "T"})["sphinx"]["config"]["hide_solutions"] is True


MAIN_CONFIG = {
    "title": "Tiny",
    "only_build_toc_files": True,
    "execute": {"execute_notebooks": "off"},
    "parse": {"myst_enable_extensions": ["dollarmath", "colon_fence"]},
    "sphinx": {"extra_extensions": ["sphinx_exercise", "sphinx_togglebutton",
                                    "transformer_lib.assignments.exercises"]},
}
SOLUTION = {"tags": ["solution"], "jupyter": {"source_hidden": True}}

NOTEBOOK_CELLS = [
    ("markdown", "# Tiny chapter\n\nVisible teaching text."),
    ("code", "print('visible code 1234')"),
    # the chapters' portable form (transformer_lib.assignments.exercises), converted at build time
    ("markdown", "<!-- exercise: tiny-ex1 -->\n**Exercise.** Exercise text: add the two numbers."),
    ("markdown", "<details>\n<summary><b>Solution</b></summary>\n<!-- solution: tiny-ex1 -->\n\n"
                 "Gated solution prose: unicorn explanation.\n\n</details>", SOLUTION),
    ("code", "# @title Solution code\ngated_solution_value = 40 + 2\n"
             "print('gated solution output', gated_solution_value)", SOLUTION),
    ("markdown", "```{exercise}\n:label: tiny-ex2\n\nSecond exercise text.\n```"),
    ("markdown", "```{solution} tiny-ex2\n:class: dropdown\n\nPlain solution prose: zebra answer.\n```"),
    ("markdown", "Text after the solutions stays visible."),
]


def _tiny_book(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "intro.md").write_text("# Tiny book\n\nThe introduction.\n")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for kind, source, *metadata in NOTEBOOK_CELLS:
        cell = (nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell)(source)
        cell.metadata.update(*metadata)
        if kind == "code":
            cell.outputs = [nbformat.v4.new_output("stream", text=source.split("print(")[1][:-1] + "\n")]
        nb.cells.append(cell)
    (folder / "book").mkdir()
    nbformat.write(nb, folder / "book" / "chapter.ipynb")  # in book/, as in the repository
    (folder / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: book/chapter\n")
    (folder / "_config.yml").write_text(yaml.safe_dump(MAIN_CONFIG))
    (folder / "_config_student.yml").write_text(yaml.safe_dump(student_config(MAIN_CONFIG)))


def test_student_build_has_exercises_but_no_solutions(tmp_path):
    jupyter_book = tool("jupyter-book")
    need(jupyter_book, "jupyter-book is not installed (pip install -r requirements.txt)")
    book = tmp_path / "tiny"
    _tiny_book(book)
    builds = {
        "normal": [jupyter_book, "build", ".", "--path-output", str(tmp_path / "normal"), "-W"],
        "student": [jupyter_book, "build", ".", "--config", "_config_student.yml",
                    "--path-output", str(tmp_path / "student"), "-W"],
    }
    running = {name: subprocess.Popen(cmd, cwd=book, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)
               for name, cmd in builds.items()}  # both at once, to save time
    for name, process in running.items():
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, f"{name} build failed:\n{output[-3000:]}"
    normal_html = tmp_path / "normal" / "_build" / "html"
    student_html = tmp_path / "student" / "_build" / "html"
    normal = (normal_html / "book" / "chapter.html").read_text()
    student = (student_html / "book" / "chapter.html").read_text()
    secrets = ["unicorn explanation", "gated_solution_value", "gated solution output",
               "zebra answer"]
    for text in secrets:
        assert text in normal, f"{text!r} missing from the normal build: the test cannot see it"
        assert text not in student, f"{text!r} leaked into the student build"
    for text in ["Visible teaching text", "visible code 1234", "Exercise text: add the two numbers",
                 "Second exercise text", "Text after the solutions stays visible"]:
        assert text in student, f"{text!r} should stay in the student build"
    # No copy of the notebook (which holds the solutions) anywhere in the student site.
    assert not list(student_html.rglob("*.ipynb")) and not (student_html / "_sources").exists()
    for path in student_html.rglob("*"):
        if path.is_file() and path.suffix in {".html", ".js", ".txt", ".json"}:
            content = path.read_text(errors="replace")
            assert "unicorn" not in content and "gated_solution_value" not in content, path
    # The line-by-line verifier agrees, and finds every solution line in the normal build.
    snippets = solution_snippets(book / "book" / "chapter.ipynb")
    assert len(snippets) >= 3
    assert len(check_pages(book, normal_html)["book/chapter.ipynb"]["found"]) == len(snippets)
    assert verify(student_html, book, normal_html, log=None)
    assert not verify(normal_html, book, log=None)  # the normal build does show solutions


def test_a_code_block_inside_a_plain_solution_stays_inside():
    source = ("intro\n````{solution} ex1\nsolution line one\n```python\nx = 1\n```\n"
              "solution line two\n````\nafter")
    solution, other, inside = _split_solution_markdown(source, False)
    assert "solution line two" in solution and "x = 1" in solution
    assert other.split() == ["intro", "after"] and not inside
