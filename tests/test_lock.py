"""The pinned stack: requirements.txt pins every package exactly, portably, and covers requirements.in."""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import lock  # noqa: E402

LOCKED = (ROOT / "requirements.txt").read_text()


def _requirement_lines(text: str) -> list[str]:
    return [line.split("#")[0].strip() for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_every_requirement_line_is_an_exact_pin():
    loose = [line for line in _requirement_lines(LOCKED) if line != "-e ." and "==" not in line]
    assert not loose, f"lines without ==: {loose}"


def test_the_lock_is_portable():
    assert re.search(r"^torch==2\.13\.0$", LOCKED, re.M), "torch must be pinned without a local label"
    assert "-e .\n" in LOCKED and "file://" not in LOCKED


def test_every_package_of_requirements_in_is_pinned():
    pinned = lock.pins(LOCKED)
    wanted = [re.split(r"[<>=\[ ;]", line)[0] for line in
              _requirement_lines((ROOT / "requirements.in").read_text()) if not line.startswith("-")]
    missing = [name for name in wanted if lock._canonical(name) not in pinned]
    assert not missing, f"in requirements.in but not pinned: {missing} (run python scripts/lock.py)"


def test_portable_rewrites_only_the_local_label_and_the_editable_path():
    text = "-e file:///home/me/tt\ntorch==2.13.0+cpu\ntorchaudio==2.13.0\n"
    assert lock.portable(text) == "-e .\ntorch==2.13.0\ntorchaudio==2.13.0\n"


def test_pins_reads_names_canonically():
    assert lock.pins("Jupyter_Book==1.0.4.post1\n    # via x\n") == {"jupyter-book": "1.0.4.post1"}


def test_the_readme_tools_are_installed():
    """After the README's install, `jupyter lab`, `jupyter-book` and `jupyter nbconvert` work."""
    import subprocess

    from conftest import need, tool

    for command in (["jupyter", "lab", "--version"], ["jupyter-book", "--version"],
                    ["jupyter", "nbconvert", "--version"]):
        executable = tool(command[0])
        need(executable, f"{command[0]} is not installed (pip install -r requirements.txt)")
        run = subprocess.run([executable, *command[1:]], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, f"{' '.join(command)}: {run.stderr[-500:]}"
