"""Run every chapter as Google Colab would, with Colab's own package versions.

Colab does not start from our lock: it has its own runtime (ipywidgets 7.7.1, IPython 7.34, its
own torch and transformers), and each chapter's first cell installs ``transformer_lib[book]`` into
it from the repository. This script rebuilds that situation on this machine and checks that it works:

1. a fresh virtualenv with the packages of ``scripts/colab_pins.txt`` (Colab's key pins);
2. a fake ``google.colab`` module, imported at start-up as in Colab, so the setup cell runs;
3. a clone of this repository's committed HEAD, and each chapter's setup cell pointed at it
   (``git+file://...``) instead of GitHub;
4. every chapter executed top to bottom in that virtualenv's kernel, offline
   (``HF_HUB_OFFLINE=1``: this machine cannot reach the Hugging Face Hub, so the cells that
   download a pretrained model take their offline path and print a message, as they must);
5. the versions of the pinned packages compared before and after: the setup cell must upgrade
   none of them.

Usage:
    python scripts/check_colab.py                    # every chapter
    python scripts/check_colab.py book/04_attention.ipynb
    python scripts/check_colab.py --keep /tmp/colab  # keep the venv and clone (reused next time)

It needs the package registry (pip) and git. Exit 0 when every chapter ran and no pin moved.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import colab_cell  # noqa: E402

PINS = ROOT / "scripts" / "colab_pins.txt"
# Where Colab has internet this machine has none: without this, every download attempt of a
# needs-internet cell retries for about 25 s before it gives up.
KERNEL_ENV = {"HF_HUB_OFFLINE": "1"}
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))

# Executed inside the Colab-like venv: run one notebook, print a JSON verdict.
RUNNER = r"""
import json, sys, time
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
path, cwd = sys.argv[1], sys.argv[2]
nb = nbformat.read(path, as_version=4)
start = time.perf_counter()
error = None
try:
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": cwd}}).execute()
except CellExecutionError as exc:
    error = str(exc).strip().splitlines()[-1][:300]
except Exception as exc:  # a kernel that died, a timeout
    error = f"{type(exc).__name__}: {str(exc)[:300]}"
print(json.dumps({"seconds": time.perf_counter() - start, "error": error}))
"""


def pinned(path: Path = PINS) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonical(name)] = version.strip()
    return pins


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(python: Path) -> dict[str, str]:
    out = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], capture_output=True,
                         text=True, check=True).stdout
    return {canonical(p["name"]): p["version"] for p in json.loads(out)}


def base_version(version: str) -> str:
    return version.split("+", 1)[0]  # 2.13.0+cpu satisfies the pin 2.13.0


def make_venv(where: Path) -> Path:
    python = where / "venv" / "bin" / "python"
    if python.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", str(where / "venv")], check=True)
    print("== installing Colab's pins (a few minutes)", flush=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(PINS)], check=True)
    # The executor (not part of Colab; it runs the notebooks), held to Colab's versions.
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-c", str(PINS), "nbclient",
                    "nbformat"], check=True)
    return python


def fake_colab(python: Path) -> None:
    """A ``google.colab`` package imported at every start-up (a .pth line), as in Colab."""
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    package = site / "google" / "colab"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text('"""A stand-in for Colab\'s module (scripts/check_colab.py)."""\n')
    (site / "fake_google_colab.pth").write_text("import google.colab\n")


def clone(where: Path) -> tuple[Path, str]:
    target = where / "clone"
    if target.exists():
        shutil.rmtree(target)
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(target)], check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=target, capture_output=True, text=True,
                            check=True).stdout.strip()
    return target, commit


def point_setup_cell(chapter: Path, repo: Path, commit: str) -> None:
    remote = f"git+{colab_cell.REPOSITORY}@{colab_cell.REF}"
    text = chapter.read_text()
    if remote not in text:
        raise SystemExit(f"{chapter.name}: its setup cell does not install from {remote}")
    chapter.write_text(text.replace(remote, f"git+file://{repo}@{commit}"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="chapters (default: all)")
    parser.add_argument("--keep", type=Path, help="a folder to keep the venv in (reused if present)")
    args = parser.parse_args(argv)
    chapters = [path.resolve() for path in args.notebooks] or CHAPTERS
    for path in chapters:
        if not path.is_file() or path.parent != ROOT / "book":
            parser.error(f"not a chapter in book/: {path}")
    if subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True,
                      text=True).stdout.strip():
        print("note: uncommitted changes are not checked (the clone holds the committed HEAD)")

    where = args.keep or Path(tempfile.mkdtemp(prefix="tt-colab-"))
    where.mkdir(parents=True, exist_ok=True)
    python = make_venv(where)
    fake_colab(python)
    before = installed(python)
    repo, commit = clone(where)

    results = {}
    for chapter in chapters:
        copy = repo / "book" / chapter.name
        point_setup_cell(copy, repo, commit)
        print(f"== {chapter.name}", flush=True)
        run = subprocess.run([str(python), "-c", RUNNER, str(copy), str(copy.parent)],
                             capture_output=True, text=True, env={**os.environ, **KERNEL_ENV})
        try:
            verdict = json.loads(run.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            verdict = {"seconds": 0.0, "error": (run.stderr or "no output").strip()[-300:]}
        results[chapter.name] = verdict
        print(f"   {'ok' if verdict['error'] is None else 'FAILED: ' + verdict['error']} "
              f"({verdict['seconds']:.0f} s)", flush=True)

    after = installed(python)
    moved = {name: (before.get(name), after.get(name)) for name, version in pinned().items()
             if base_version(after.get(name, "")) != version}
    others = {name: (before.get(name), version) for name, version in after.items()
              if name not in pinned() and before.get(name) not in (None, version)}
    print("\nColab's pins after the setup cells:", "unchanged" if not moved else "")
    for name, (old, new) in moved.items():
        print(f"  MOVED {name}: {old} -> {new}")
    if others:
        print("other packages the setup cell changed:",
              ", ".join(f"{n} {a} -> {b}" for n, (a, b) in others.items()))
    new = sorted(set(after) - set(before))
    print("installed by the setup cell:", ", ".join(f"{n}=={after[n]}" for n in new) or "nothing")
    failed = [name for name, verdict in results.items() if verdict["error"] is not None]
    print(f"\n{len(results) - len(failed)}/{len(results)} chapters ran; "
          f"{'no pin moved' if not moved else f'{len(moved)} pin(s) moved'}")
    if not args.keep:
        shutil.rmtree(where, ignore_errors=True)
    return 1 if failed or moved else 0


if __name__ == "__main__":
    sys.exit(main())
