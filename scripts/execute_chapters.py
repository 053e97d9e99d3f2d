"""Execute chapters and store them in one canonical, byte-stable form.

Usage:
    python scripts/execute_chapters.py book/03_masks.ipynb [more ...]   # execute, write in place
    python scripts/execute_chapters.py --all                            # every chapter
    python scripts/execute_chapters.py --check book/03_masks.ipynb      # execute, compare, write nothing

A chapter executed twice in a row must be byte-identical, and opening it in JupyterLab must not
change it. So after executing, this script removes everything that depends on the moment or on a
library's version rather than on the chapter's code (see ``tidy``):
- cell execution timestamps (``metadata.execution``);
- ipywidgets' saved state and the widget views in outputs (their model ids are random; the
  explorers store a PNG of their default state and a plain-text description beside the widget);
- the ``Software`` text chunk that Matplotlib writes into every PNG (its version);
- stream outputs split differently by the kernel's timing (consecutive ones are merged);
- the outputs of cells that nbval skips (``# NBVAL_SKIP``: they need what a build does not have,
  such as internet); this script does not run them either;
- (and it collapses every solution cell: input, and output of solution code, out of sight);
and it writes the kernel metadata that JupyterLab itself would write.

``--check`` reports the cells whose stored outputs differ from a fresh run and exits 1 if any do.
"""
from __future__ import annotations

import argparse
import copy
import os
import struct
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbval.plugin import find_comment_markers, find_metadata_tags

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from transformer_lib.assignments.exercises import SOLUTION_TAG  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# What JupyterLab writes for the python3 kernel of ipykernel (it rewrites anything else on open).
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def _png_without_software(data: str) -> str:
    """A base64 PNG with its tEXt "Software" chunk (Matplotlib's version string) removed."""
    import base64

    raw = base64.b64decode(data)
    signature, position, chunks = raw[:8], 8, []
    while position < len(raw):
        (length,) = struct.unpack(">I", raw[position:position + 4])
        end = position + 12 + length  # length, type, data, CRC
        kind, body = raw[position + 4:position + 8], raw[position + 8:end - 4]
        if not (kind == b"tEXt" and body.startswith(b"Software\0")):
            chunks.append(raw[position:end])
        position = end
    return base64.b64encode(signature + b"".join(chunks)).decode("ascii") + "\n"


def _merge_streams(outputs: list) -> list:
    merged = []
    for output in outputs:
        previous = merged[-1] if merged else None
        if (output.get("output_type") == "stream" and previous is not None
                and previous.get("output_type") == "stream" and previous["name"] == output["name"]):
            previous["text"] += output["text"]
        else:
            merged.append(output)
    return merged


def not_executed(cell) -> bool:
    """Whether nbval skips this cell (``# NBVAL_SKIP``, read by nbval's own parser, or the
    ``nbval-skip`` tag): such a cell needs what a build lacks, so it is not run here."""
    if cell.cell_type != "code":
        return False
    markers = set(find_comment_markers(cell.source)) | set(find_metadata_tags(cell.metadata))
    return ("skip", True) in markers


class _Client(NotebookClient):
    """nbclient's executor, leaving out the cells nbval skips."""

    async def async_execute_cell(self, cell, cell_index, *args, **kwargs):
        if not_executed(cell):
            return cell
        return await super().async_execute_cell(cell, cell_index, *args, **kwargs)


def tidy(nb: nbformat.NotebookNode, language_info: dict | None = None) -> nbformat.NotebookNode:
    """The canonical stored form of an executed notebook (see the module docstring)."""
    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    if language_info is not None:
        nb.metadata["language_info"] = language_info
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if SOLUTION_TAG in cell.metadata.get("tags", []):
            # A solution starts out of sight: collapsed in Lab, a form in Colab (CONTRIBUTING.md).
            cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
            if cell.cell_type == "code":
                cell.metadata["jupyter"]["outputs_hidden"] = True
                cell.metadata["cellView"] = "form"
        if cell.cell_type != "code":
            continue
        if not_executed(cell):  # not run: no outputs, not even stale ones
            cell.outputs, cell.execution_count = [], None
            continue
        outputs = []
        for output in cell.outputs:
            data = output.get("data")
            if data is not None:
                data.pop(WIDGET_VIEW, None)
                if "image/png" in data:
                    data["image/png"] = _png_without_software(data["image/png"])
                if not data:
                    continue
            outputs.append(output)
        cell.outputs = _merge_streams(outputs)
    return nb


def execute(path: Path, timeout: int = 900) -> nbformat.NotebookNode:
    """Run the notebook at ``path`` in a fresh kernel, in its folder, every cell but those nbval
    skips; tidy the result."""
    nb = nbformat.read(path, as_version=4)
    client = _Client(nb, timeout=timeout, kernel_name="python3",
                     resources={"metadata": {"path": str(path.parent)}}, record_timing=False)
    client.execute()
    return tidy(nb, language_info=nb.metadata.get("language_info"))


def writes(nb: nbformat.NotebookNode) -> str:
    """The notebook as JupyterLab saves it (nbformat's JSON, indent 1, sorted keys, final newline)."""
    text = nbformat.writes(nb, version=nbformat.NO_CONVERT)
    return text if text.endswith("\n") else text + "\n"


def differing_cells(stored: nbformat.NotebookNode, fresh: nbformat.NotebookNode) -> list[str]:
    """Which cells differ between two tidied notebooks, as short descriptions."""
    problems = []
    if len(stored.cells) != len(fresh.cells):
        return [f"{len(stored.cells)} cells stored, {len(fresh.cells)} after execution"]
    for index, (old, new) in enumerate(zip(stored.cells, fresh.cells)):
        if nbformat.writes(nbformat.v4.new_notebook(cells=[old])) != \
                nbformat.writes(nbformat.v4.new_notebook(cells=[new])):
            first_line = (old.source.splitlines() or [""])[0][:60]
            problems.append(f"cell {index} ({old.cell_type}: {first_line!r}) differs")
    if stored.metadata != fresh.metadata:
        problems.append("notebook metadata differs")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Execute chapters and store them canonically.")
    parser.add_argument("notebooks", nargs="*", type=Path, help="chapters to execute")
    parser.add_argument("--all", action="store_true", help="every chapter in book/")
    parser.add_argument("--check", action="store_true",
                        help="compare a fresh run with the stored notebook; write nothing")
    args = parser.parse_args(argv)
    paths = CHAPTERS if args.all else args.notebooks
    if not paths:
        parser.error("name the chapters to execute, or pass --all")
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")
    capability = os.environ.get("ATEN_CPU_CAPABILITY", "native")
    # The kernels inherit it: chapters that time the reader's machine print the build
    # machine's times instead (a time can never equal a stored one). conftest.py does the
    # same for nbval.
    os.environ["BOOK_STORED_OUTPUTS"] = "1"
    failed = 0
    for path in paths:
        start = time.perf_counter()
        try:
            fresh = execute(path)
        except Exception as error:  # a failing cell: say which chapter, keep going
            print(f"FAILED {path} (ATEN_CPU_CAPABILITY={capability}): {error}", file=sys.stderr)
            failed += 1
            continue
        seconds = time.perf_counter() - start
        if args.check:
            problems = differing_cells(nbformat.read(path, as_version=4), fresh)
            status = "identical" if not problems else "DIFFERS"
            print(f"{path}: {status} after a fresh run ({seconds:.1f} s)")
            for problem in problems:
                print(f"    {problem}")
            failed += bool(problems)
        else:
            before = path.read_text()
            path.write_text(writes(fresh))
            change = "unchanged" if path.read_text() == before else "written"
            print(f"{path}: executed in {seconds:.1f} s, {change}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
