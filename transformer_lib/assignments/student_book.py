"""Check that a student build of the book holds no solution: ``python -m transformer_lib.assignments
verify-student-html HTML_DIR [--book .] [--reference NORMAL_HTML_DIR]``.

For every chapter notebook, the solution text is collected: the prose after ``{solution-start}``,
every code cell (source and printed output) up to ``{solution-end}``, and the body of plain
``{solution}`` directives. Each line long enough to be distinctive (and that does not also occur
outside the solutions of that notebook) is looked for in the chapter's HTML page, after removing
tags and comparing letters and digits only (so syntax highlighting and Markdown formatting do not
hide a match). The student page must contain none of them. Given the normal build (``--reference``),
the check also confirms that those lines *are* found there, which shows the search itself works.
"""
from __future__ import annotations

import html as _html
import re
from pathlib import Path

MIN_CHARS = 15  # shorter lines (after normalisation) are too generic to identify a solution

_FENCE = re.compile(r"^(```+|:::+)\s*\{(solution-start|solution-end|solution)\}[^\n]*$", re.M)


def _norm(text: str) -> str:
    return re.sub(r"[^0-9a-z]", "", text.lower())


def _outputs_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif "data" in out and "text/plain" in out["data"]:
            parts.append(out["data"]["text/plain"])
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


_BARE_FENCE = re.compile(r"^(```+|:::+)\s*$")


def _skip_directive(lines: list[str], i: int) -> int:
    """Index after a start/end directive's own block (its options and closing fence)."""
    i += 1
    while i < len(lines) and not _BARE_FENCE.match(lines[i].strip()):
        i += 1
    return i + 1


def _split_solution_markdown(source: str, inside: bool):
    """Split a markdown cell into (solution text, other text, inside-after).

    ``inside`` says whether a ``{solution-start}`` is open when the cell begins. A plain
    ``{solution}`` block ends at a bare fence of exactly its own opening fence, so a code block
    nested in it (with a shorter fence) stays inside.
    """
    solution, other = [], []
    lines = source.splitlines()
    i = 0
    plain_fence = None  # the opening fence of an open plain {solution}, else None
    while i < len(lines):
        stripped = lines[i].strip()
        match = _FENCE.match(stripped)
        if match and match.group(2) in ("solution-start", "solution-end"):
            inside = match.group(2) == "solution-start"
            i = _skip_directive(lines, i)
            continue
        if match and match.group(2) == "solution":
            plain_fence = match.group(1)
            i += 1
            continue
        if plain_fence is not None and stripped == plain_fence:
            plain_fence = None
            i += 1
            continue
        (solution if inside or plain_fence is not None else other).append(lines[i])
        i += 1
    return "\n".join(solution), "\n".join(other), inside


def solution_snippets(notebook_path) -> list[str]:
    """Distinctive lines of a notebook's solutions (prose, code and outputs)."""
    import nbformat

    from .exercises import to_myst

    # The chapters hold exercises in a portable form; the book's build (and so this check)
    # sees them as sphinx-exercise directives.
    nb = nbformat.from_dict(to_myst(nbformat.read(notebook_path, as_version=4)))
    inside = False
    solution_parts, other_parts = [], []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            sol, other, inside = _split_solution_markdown(cell.source, inside)
            solution_parts.append(sol)
            other_parts.append(other)
        elif cell.cell_type == "code":
            target = solution_parts if inside else other_parts
            target.append(cell.source)
            target.append(_outputs_text(cell))
    outside = _norm("\n".join(other_parts))
    snippets, seen = [], set()
    for part in solution_parts:
        for line in part.splitlines():
            key = _norm(line)
            if len(key) >= MIN_CHARS and key not in outside and key not in seen:
                seen.add(key)
                snippets.append(line.strip())
    return snippets


def page_text(html_path) -> str:
    raw = Path(html_path).read_text(encoding="utf-8", errors="replace")
    raw = re.sub(r"<script.*?</script>", " ", raw, flags=re.S)
    return _norm(_html.unescape(re.sub(r"<[^>]+>", "", raw)))


def check_pages(book_root, html_dir) -> dict[str, dict]:
    """{notebook: {"snippets": n, "found": [lines found in its page]}} for every chapter page."""
    book_root, html_dir = Path(book_root), Path(html_dir)
    report = {}
    for notebook in sorted(book_root.glob("book/*.ipynb")):
        page = html_dir / notebook.relative_to(book_root).with_suffix(".html")
        if not page.exists():
            continue
        snippets = solution_snippets(notebook)
        text = page_text(page)
        report[str(notebook.relative_to(book_root))] = {
            "snippets": len(snippets), "found": [s for s in snippets if _norm(s) in text]}
    return report


def verify(html_dir, book_root=".", reference=None, log=print) -> bool:
    """True when no solution line is found in the student pages (and, with ``reference``, when
    the normal build shows them, so the search is known to work)."""
    log = log or (lambda line: None)
    ok = True
    student = check_pages(book_root, html_dir)
    if not student:
        log(f"no chapter page found under {html_dir}")
        return False
    normal = check_pages(book_root, reference) if reference else {}
    for name, info in student.items():
        line = f"{name}: {info['snippets']} solution lines, {len(info['found'])} in the student page"
        if name in normal:
            line += f", {len(normal[name]['found'])} in the normal page"
            if info["snippets"] and not normal[name]["found"]:
                ok = False
                line += " (the search found nothing in the normal build: cannot verify)"
        if info["found"]:
            ok = False
            line += "  LEAK: " + " | ".join(info["found"][:3])
        log(line)
    return ok
