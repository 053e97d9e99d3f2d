"""Run every chapter under nbval with each of PyTorch's CPU kernel sets, as other machines would.

PyTorch picks its CPU kernels by the instructions the processor offers (plain C++, AVX2, AVX-512),
and each set rounds a little differently. A chapter recorded on one machine must still pass on a
laptop, on a cloud CPU or on a GPU runner, so its stored numbers and its trained results must not
hang on the last bits. ``ATEN_CPU_CAPABILITY`` forces a kernel set, which is the cheap way to see
another machine's rounding without owning one.

Usage:
    python scripts/check_portability.py                          # default, avx2 and native
    python scripts/check_portability.py --capability default     # one kernel set
    python scripts/check_portability.py --capability avx2 book/08_decoder.ipynb

It prints one line per failing cell (capability, chapter, cell, the first line of the reason), a
summary with the time each capability took, and exits 1 if any cell failed anywhere (2 for bad
arguments, or a capability this CPU cannot run).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
CAPABILITIES = ("default", "avx2", "avx512", "native")  # native: whatever this CPU offers
DEFAULT_RUN = ("default", "avx2", "native")


@dataclass
class Failure:
    capability: str
    chapter: str
    cell: str
    reason: str

    def __str__(self) -> str:
        return f"FAIL [{self.capability}] {self.chapter} {self.cell}: {self.reason}"


def environment(capability: str) -> dict:
    env = dict(os.environ)
    env.pop("ATEN_CPU_CAPABILITY", None)
    if capability != "native":
        env["ATEN_CPU_CAPABILITY"] = capability
    return env


def capability_in_use(capability: str) -> str:
    """The kernel set PyTorch really uses under ``capability`` (it falls back when the CPU lacks it)."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    result = subprocess.run([sys.executable, "-c", code], env=environment(capability),
                            capture_output=True, text=True, check=True)
    return result.stdout.strip()


def chapter_name(classname: str) -> str:
    """junit's class name of a notebook item ('book.08_decoder.ipynb') -> '08_decoder.ipynb'."""
    if classname.endswith(".ipynb"):
        return classname[: -len(".ipynb")].rsplit(".", 1)[-1] + ".ipynb"
    return classname


ANSI = re.compile(r"(\x1b|#x1B)\[[0-9;]*m")


def short_reason(problem: ET.Element) -> str:
    """What went wrong, from nbval's message: the differing output or the error raised.

    nbval's message is: a headline, "Input:" and the cell's source, then "Traceback:" and the
    details. The source is skipped (its lines say nothing about the failure).
    """
    # junit's "message" attribute may be cut short; the element's text holds the whole report.
    text = ANSI.sub("", max(problem.get("message") or "", problem.text or "", key=len))
    head, _, rest = text.partition("Input:")
    _, _, details = rest.partition("Traceback:")
    lines = [line.strip() for line in (head + "\n" + details).splitlines() if line.strip()]
    useful = [line for line in lines if "Notebook cell execution failed" not in line
              and not line.startswith(("Input:", "Traceback:", "---"))
              and not re.match(r"^Cell \d+: Cell outputs differ$", line)]
    # An exception: its last line ("ValueError: ...") says most; otherwise the first lines.
    errors = [line for line in useful if re.match(r"^\w+(Error|Exception|Interrupt)\b", line)
              or "Timeout" in line]
    return " | ".join((errors[-1:] or useful[:3] or ["failed"]))[:240]


def cell_label(chapter: Path | None, name: str) -> str:
    """nbval's item name ('Cell 11': the 11th code cell) with the notebook's cell index and the
    cell's first line, which is how CONTRIBUTING.md and the chapter scripts count cells."""
    match = re.fullmatch(r"Cell (\d+)", name)
    if chapter is None or not match or not chapter.is_file():
        return name
    import nbformat

    cells = nbformat.read(chapter, as_version=4).cells
    code = [i for i, cell in enumerate(cells) if cell.cell_type == "code"]
    number = int(match[1])
    if number >= len(code):
        return name
    index = code[number]
    first = next((line for line in cells[index].source.splitlines()
                  if line.strip() and not line.startswith("# NBVAL")), "")
    return f"{name} (cell index {index}: {first[:50]!r})"


def failures_in(report: Path, capability: str, notebooks: list[Path] = ()) -> list[Failure]:
    """The failed or errored test cases of a pytest junit XML report."""
    by_name = {path.name: path for path in notebooks}
    failures = []
    for case in ET.parse(report).getroot().iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is None:
            continue
        chapter = chapter_name(case.get("classname", "?"))
        cell = cell_label(by_name.get(chapter), case.get("name", "?"))
        failures.append(Failure(capability, chapter, cell, short_reason(problem)))
    return failures


def run_capability(capability: str, notebooks: list[Path], workdir: Path) -> tuple[list[Failure], float]:
    report = workdir / f"nbval-{capability}.xml"
    command = [sys.executable, "-m", "pytest", "--nbval", "-q", "-p", "no:cacheprovider",
               f"--junitxml={report}", *map(str, notebooks)]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=environment(capability), capture_output=True,
                            text=True)
    seconds = time.perf_counter() - start
    if not report.exists():  # pytest itself failed (bad path, crashed plugin): show why
        tail = (result.stdout + result.stderr).strip().splitlines()[-5:]
        return [Failure(capability, "-", "-", " | ".join(tail) or f"pytest exit {result.returncode}")], seconds
    failures = failures_in(report, capability, notebooks)
    if result.returncode != 0 and not failures:
        failures = [Failure(capability, "-", "-", f"pytest exited {result.returncode}")]
    return failures, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="chapters to check (default: every chapter in book/)")
    parser.add_argument("--capability", action="append", choices=CAPABILITIES,
                        help=f"a kernel set to run under; repeat for several (default: {', '.join(DEFAULT_RUN)})")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or CHAPTERS
    missing = [str(path) for path in notebooks if not path.is_file() or path.suffix != ".ipynb"]
    if missing:
        parser.error(f"not a notebook file: {', '.join(missing)}")
    capabilities = list(dict.fromkeys(args.capability or DEFAULT_RUN))

    native = capability_in_use("native")
    for capability in capabilities:
        used = capability_in_use(capability)
        if capability != "native" and used.lower() != capability.lower():
            print(f"error: this CPU cannot run the {capability} kernels (PyTorch uses {used}); "
                  f"choose from default, avx2, native ({native})", file=sys.stderr)
            return 2

    all_failures, times = [], {}
    with tempfile.TemporaryDirectory(prefix="tt-portability-") as workdir:
        for capability in capabilities:
            label = f"native ({native})" if capability == "native" else capability
            print(f"== {label}: nbval on {len(notebooks)} chapter(s)", flush=True)
            failures, seconds = run_capability(capability, notebooks, Path(workdir))
            times[label] = seconds
            for failure in failures:
                print(failure, flush=True)
            print(f"   {'ok' if not failures else f'{len(failures)} failing cell(s)'} in {seconds:.0f} s",
                  flush=True)
            all_failures += failures

    print("\nsummary:")
    for label, seconds in times.items():
        count = sum(1 for f in all_failures if label.startswith(f.capability))
        print(f"  {label:<16} {'passed' if not count else f'{count} failed':<10} {seconds:6.0f} s")
    return 1 if all_failures else 0


if __name__ == "__main__":
    sys.exit(main())
