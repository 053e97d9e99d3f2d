"""The book's exercises: plain Markdown in the notebooks, sphinx-exercise directives in the HTML.

A chapter is read in JupyterLab (with jupyterlab-myst), in Colab (plain Markdown only), on GitHub
and as the HTML book. MyST directives read well in only some of these, so the notebooks hold a
portable form that reads cleanly everywhere, with the solution out of sight at first, and the
book's build turns it into sphinx-exercise's directives (numbered exercises, solutions in
dropdowns, removed from the student build). The portable form:

- the exercise: a Markdown cell that starts with a label comment::

      <!-- exercise: ch03-ex1 -->
      **Exercise.** The statement ...

- its solution: a Markdown cell tagged ``solution`` and collapsed (``jupyter.source_hidden``), whose
  prose sits in a ``<details>`` element (Colab and GitHub show it closed)::

      <details>
      <summary><b>Solution</b></summary>
      <!-- solution: ch03-ex1 -->

      The prose ...

      </details>

  then any code cells tagged ``solution``, collapsed as well (and, in Colab, shown as a form whose
  code is hidden: their first line is ``# @title Solution code``). The solution ends at the first
  cell without the tag.

``to_myst`` does the conversion on a notebook's JSON; ``setup`` registers it with Sphinx, which
runs it on every notebook before myst-nb parses it.
"""
from __future__ import annotations

import json
import re

SOLUTION_TAG = "solution"
COLAB_TITLE = "# @title Solution code"
_EXERCISE = re.compile(r"\A\s*<!-- exercise: (\S+) -->[ \t]*\n?")
_SOLUTION = re.compile(r"<!-- solution: (\S+) -->")
_LEAD = re.compile(r"\A\s*\*\*Exercise\.?\*\*\s*")  # the "**Exercise.**" the notebook shows
_HTML_LINE = re.compile(r"^\s*(<details>|</details>|<summary>.*</summary>)\s*$")


def _text(source) -> str:
    """A cell's source, which raw notebook JSON may store as a list of lines."""
    return "".join(source) if isinstance(source, list) else source


def _fence(body: str) -> str:
    """A backtick fence longer than any backtick run in ``body``, so none can close it early."""
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    return "`" * max(3, longest + 1)


def _tags(cell) -> list:
    return cell.get("metadata", {}).get("tags", [])


def exercise_label(cell) -> str | None:
    """The label of an exercise cell in the portable form, else None."""
    match = _EXERCISE.match(_text(cell["source"])) if cell["cell_type"] == "markdown" else None
    return match[1] if match else None


def solution_label(cell) -> str | None:
    """The label of the solution that this Markdown cell opens, else None."""
    if cell["cell_type"] != "markdown" or SOLUTION_TAG not in _tags(cell):
        return None
    match = _SOLUTION.search(_text(cell["source"]))
    return match[1] if match else None


def _exercise_directive(label: str, source: str) -> str:
    body = _LEAD.sub("", _EXERCISE.sub("", source, count=1), count=1).strip()
    fence = _fence(body)
    return f"{fence}{{exercise}}\n:label: {label}\n\n{body}\n{fence}"


def _solution_start(label: str, source: str) -> str:
    lines = [line for line in _SOLUTION.sub("", source).splitlines()
             if not _HTML_LINE.match(line)]
    return f"```{{solution-start}} {label}\n:class: dropdown\n```\n" + "\n".join(lines).strip()


def _markdown_cell(cell_id: str, source: str) -> dict:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": source}


def to_myst(nb: dict) -> dict:
    """The notebook (a JSON dict, changed in place and returned) with exercises as directives."""
    cells, open_label = [], None
    for cell in nb["cells"]:
        continues = open_label is not None and SOLUTION_TAG in _tags(cell) \
            and cell["cell_type"] == "code"
        if open_label is not None and not continues:  # the solution ends before this cell
            cells.append(_markdown_cell(f"{open_label}-end", "```{solution-end}\n```"))
            open_label = None
        label = exercise_label(cell)
        if label is not None:
            cell["source"] = _exercise_directive(label, _text(cell["source"]))
        label = solution_label(cell)
        if label is not None:
            cell["source"] = _solution_start(label, _text(cell["source"]))
            open_label = label
        if continues:
            source = _text(cell["source"])
            if source.startswith(COLAB_TITLE):
                cell["source"] = source[len(COLAB_TITLE):].lstrip("\n")
        cells.append(cell)
    if open_label is not None:
        cells.append(_markdown_cell(f"{open_label}-end", "```{solution-end}\n```"))
    nb["cells"] = cells
    return nb


def _convert_source(app, docname, source) -> None:
    """Sphinx's source-read event: convert a notebook's exercises before myst-nb reads it."""
    if not str(app.env.doc2path(docname)).endswith(".ipynb"):
        return
    nb = json.loads(source[0])
    source[0] = json.dumps(to_myst(nb), ensure_ascii=False)


def setup(app):
    app.connect("source-read", _convert_source)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
