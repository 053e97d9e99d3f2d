"""Regenerate requirements.txt, the fully pinned closure of requirements.in.

Usage (in the book's virtualenv, which has pip-tools):
    python scripts/lock.py                    # re-resolve, keeping the pins that still fit
    python scripts/lock.py --upgrade          # move every package to its newest release
    python scripts/lock.py --check-installed  # exit 1 unless this environment is exactly the lock

The resolving is pip-tools' ``pip-compile``. Two lines of its output are then made portable:
- ``torch==2.13.0+cpu`` becomes ``torch==2.13.0``. pip-compile writes the build it resolved,
  local label included; without the label, a CUDA build (``2.13.0+cu126``) satisfies the same pin,
  so the file works on GPU machines too. The pins of torch's own dependencies are those of the CPU
  build: resolve where a CPU build of torch can be found (this machine's pip finds one on disk;
  elsewhere set ``PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu``), or the file would
  also pin the CUDA libraries.
- ``-e file:///absolute/path/to/checkout`` becomes ``-e .``, so the file works in any checkout.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE, TARGET = ROOT / "requirements.in", ROOT / "requirements.txt"
COMMAND = "python scripts/lock.py"


def portable(text: str) -> str:
    """pip-compile's output with the torch pin and the editable path made portable (see above)."""
    text = re.sub(r"^torch==([0-9][0-9.]*)\+[0-9A-Za-z.]+$", r"torch==\1", text, flags=re.M)
    text = re.sub(r"^-e file://\S+$", "-e .", text, flags=re.M)
    return text


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """{canonical name: version} of every ``name==version`` line of a requirements file."""
    found = {}
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if match:
            found[_canonical(match[1])] = match[2]
    return found


def check_installed() -> list[str]:
    """Differences between the installed distributions and the pins (empty when they agree).

    A local label (``2.13.0+cpu``) satisfies a pin without one, as it does for pip.
    """
    from importlib.metadata import distributions

    pinned = pins(TARGET.read_text())
    problems = []
    for dist in distributions():
        name, version = _canonical(dist.metadata["Name"]), dist.version
        if name == "transformer-lib":  # the project itself, installed from -e .
            continue
        if name not in pinned:
            problems.append(f"{name}=={version} is installed but not pinned in {TARGET.name}")
        elif version.split("+")[0] != pinned[name].split("+")[0]:
            problems.append(f"{name}=={version} is installed, {TARGET.name} pins {pinned[name]}")
    return sorted(problems)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upgrade", action="store_true", help="upgrade every package")
    parser.add_argument("--check-installed", action="store_true",
                        help="check that this environment holds exactly the pinned packages")
    args = parser.parse_args(argv)
    if args.check_installed:
        problems = check_installed()
        if problems:
            print(*problems, sep="\n", file=sys.stderr)
            return 1
        print(f"every installed package is pinned in {TARGET.name} at its installed version")
        return 0
    command = [sys.executable, "-m", "piptools", "compile", "--quiet", "--strip-extras",
               "--allow-unsafe", "--no-emit-index-url", "--no-emit-find-links",
               "--output-file", str(TARGET), str(SOURCE)]
    if args.upgrade:
        command.append("--upgrade")
    env = {**os.environ, "CUSTOM_COMPILE_COMMAND": COMMAND}  # the command the header names
    result = subprocess.run(command, cwd=ROOT, env=env)
    if result.returncode != 0:
        print(f"pip-compile failed (exit {result.returncode}); {TARGET.name} is unchanged",
              file=sys.stderr)
        return result.returncode
    text = portable(TARGET.read_text())
    TARGET.write_text(text)
    loose = [line for line in text.splitlines()
             if line and not line.startswith(("#", " ", "-e ")) and "==" not in line]
    if loose:
        print("lines without an exact pin:", *loose, sep="\n  ", file=sys.stderr)
        return 1
    pins = sum(1 for line in text.splitlines() if "==" in line and not line.startswith("#"))
    print(f"{TARGET.name}: {pins} packages pinned")
    return 0


if __name__ == "__main__":
    sys.exit(main())
