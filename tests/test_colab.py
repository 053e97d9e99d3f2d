"""Every chapter runs in Colab: one identical setup cell first, and the package installs cleanly."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import colab_cell  # noqa: E402

CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))


def test_there_are_chapters():
    assert CHAPTERS, "no chapter notebooks found in book/"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_has_exactly_the_setup_cell(path):
    assert colab_cell.check(path) == []


def test_setup_cell_is_inert_outside_colab():
    namespace = {}
    exec(compile(colab_cell.SOURCE, "setup-cell", "exec"), namespace)  # must not install anything
    assert "google.colab" not in sys.modules


def test_a_chapter_that_reads_a_debian_package_installs_it_in_colab_only():
    source = colab_cell.source_for(Path("book/14_real_sentences.ipynb"))
    assert source.startswith(colab_cell.SOURCE)
    assert '"apt-get", "install", "-y", "-qq", "trans-de-en"' in source
    assert 'if not os.path.exists("/usr/share/trans/de-en"):' in source
    assert colab_cell.source_for(Path("book/10_capstone.ipynb")) == colab_cell.SOURCE
    namespace = {}
    exec(compile(source, "setup-cell", "exec"), namespace)  # outside Colab: nothing runs
    assert "subprocess" not in namespace and "os" not in namespace


def test_check_catches_a_missing_or_edited_cell(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(1)")]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    assert colab_cell.check(path), "a notebook without the cell must be reported"
    colab_cell.sync(path)
    assert colab_cell.check(path) == []
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].source += "\n# edited"
    nbformat.write(nb, path)
    assert "differs" in colab_cell.check(path)[0]


def test_package_installs_into_a_fresh_venv(tmp_path):
    """`pip install .` from a clean copy of the tracked files, in a new virtual environment.

    The venv is isolated (no system site-packages): the package's own dependencies must be enough.
    They are taken at the locked versions (``-c requirements.txt``), which pip finds in its cache or
    on this machine's disk, so nothing large is downloaded twice; transformer_lib itself must come
    from the install, not from the source folder.
    """
    checkout = tmp_path / "checkout"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        source = ROOT / name
        if source.is_file() and (name.startswith("transformer_lib/") or name in {"pyproject.toml", "README.md"}):
            target = checkout / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    constraints = tmp_path / "constraints.txt"  # the lock without its `-e .` line
    constraints.write_text("\n".join(line for line in (ROOT / "requirements.txt").read_text().splitlines()
                                     if not line.startswith("-e")))
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "-c", str(constraints),
                              str(checkout)], capture_output=True, text=True, env=env, timeout=900)
    assert install.returncode == 0, install.stdout + install.stderr
    code = ("import transformer_lib as tl, torch; "
            "m = tl.Transformer(11, 11, d_model=16, num_heads=2, num_encoder_layers=1, "
            "num_decoder_layers=1, d_ff=32); "
            "print(tl.__file__); print(tuple(m(torch.ones(1, 3, dtype=torch.long), "
            "torch.ones(1, 2, dtype=torch.long)).shape))")
    run = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    location, shape = run.stdout.split()[0], run.stdout.split("\n")[1]
    assert str(venv) in location, f"imported from {location}, not from the fresh environment"
    assert shape == "(1, 2, 11)"
