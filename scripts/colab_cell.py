"""Keep the Colab setup cell of every chapter identical, from one definition.

Usage:
    python scripts/colab_cell.py sync book/03_masks.ipynb [more notebooks ...]
    python scripts/colab_cell.py check book/*.ipynb      # exit 1 if any cell is missing or stale

The cell installs transformer_lib from the repository only when the notebook runs in Google Colab;
anywhere else it does nothing. It is tagged ``remove-cell``, so the HTML book does not show it.
A chapter that reads a system file (chapter 14: Debian's German-English dictionary) also
installs its Debian package there, with apt, unless the file is already present (``APT``).
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat

# The one place where the repository and the branch/tag that Colab installs from are set.
REPOSITORY = "https://github.com/tested-transformer/tested-transformer"
REF = "main"

SOURCE = f'''# Colab setup: in Google Colab, install transformer_lib (and the few packages Colab
# lacks). Anywhere else (Jupyter, nbval, the HTML build) this cell does nothing.
import sys

if "google.colab" in sys.modules:
    import subprocess

    package_url = "git+{REPOSITORY}@{REF}"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                    f"transformer_lib[book] @ {{package_url}}"], check=True)'''

# Chapters that need a Debian package in Colab: notebook name -> (package, a file it installs).
APT = {"14_real_sentences.ipynb": ("trans-de-en", "/usr/share/trans/de-en")}

APT_LINES = '''
    import os

    # {why}: a Debian package, installed with apt
    if not os.path.exists("{path}"):
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", "{package}"], check=True)'''
WHY = {"trans-de-en": "The Ding dictionary (GPL-2.0-or-later)"}


def source_for(path) -> str:
    """The setup cell of the notebook at ``path``: SOURCE, plus its apt package if it has one."""
    if Path(path).name not in APT:
        return SOURCE
    package, installed = APT[Path(path).name]
    return SOURCE + APT_LINES.format(path=installed, package=package,
                                     why=WHY.get(package, "Needed by this chapter"))


TAG = "remove-cell"
MARKER = "# Colab setup:"


def make_cell(source: str = SOURCE):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = [TAG]
    cell["id"] = "colab-setup"
    return cell


def is_setup_cell(cell) -> bool:
    return cell.cell_type == "code" and cell.source.startswith(MARKER)


def sync(path: Path) -> bool:
    """Insert or refresh the setup cell as the notebook's first cell. True if the file changed."""
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if not is_setup_cell(c)]
    old_first = nb.cells[0] if nb.cells else None
    cell = make_cell(source_for(path))
    if old_first is not None and is_setup_cell(old_first):
        cell.execution_count = old_first.get("execution_count")
    nb.cells = [cell] + cells
    before = path.read_text()
    nbformat.write(nb, path)
    return path.read_text() != before


def check(path: Path) -> list[str]:
    """Problems with the notebook's setup cell (empty list when it is right)."""
    nb = nbformat.read(path, as_version=4)
    problems = []
    setup = [i for i, c in enumerate(nb.cells) if is_setup_cell(c)]
    if setup != [0]:
        problems.append(f"{path}: expected exactly one Colab setup cell, first; found at {setup}")
    elif nb.cells[0].source != source_for(path):
        problems.append(f"{path}: Colab setup cell differs from scripts/colab_cell.py (run sync)")
    elif TAG not in nb.cells[0].metadata.get("tags", []):
        problems.append(f"{path}: Colab setup cell lacks the {TAG!r} tag")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in {"sync", "check"}:
        print(__doc__)
        return 2
    paths = [Path(p) for p in argv[1:]]
    if argv[0] == "sync":
        for p in paths:
            print(f"{p}: {'updated' if sync(p) else 'up to date'}")
        return 0
    problems = [msg for p in paths for msg in check(p)]
    print("\n".join(problems) or "all setup cells are up to date")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
