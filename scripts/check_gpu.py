"""Everything a GPU runner checks, in one command.

Usage, on a machine with a CUDA build of torch and the book's stack installed:
    python scripts/check_gpu.py                    # all four checks
    python scripts/check_gpu.py --only nbval tests # some of them
    python scripts/check_gpu.py --dry-run          # print the commands, run nothing

The checks, each a command of its own (``--dry-run`` prints them):
    nbval       every chapter under nbval, strict: the stored CPU outputs must hold on a GPU
    tests       the library tests (tests/, except the book build), GPU-only tests included
    benchmarks  benchmarks/attention.py (with --compile: compiled vs eager training step) and
                benchmarks/decoding.py (with beam search, 4 beams), --device cuda, each in
                both modes (determinism off and on, the cost printed), results written as
                JSON to benchmarks/results/ (*_cuda.json)
    capstone    the capstone CLI for 30 s on the GPU
                (python -m transformer_lib.examples.number_words --minutes 0.5 --device cuda)
It runs them all, then prints a summary; it exits 1 if any failed. Where torch sees no CUDA
device it says so and exits 3, having run nothing.

Machines without a package index (many GPU servers) get the stack as wheels:
    # 1. on a machine with a package index, for the GPU machine's Python version:
    python scripts/check_gpu.py --download-wheels wheels/ --python-version 3.12
    # 2. copy wheels/ over; on the GPU machine, in a venv that has a CUDA build of torch:
    python scripts/check_gpu.py --wheels wheels/
``--download-wheels`` fetches the pinned closure of requirements.txt (Jupyter, nbval, pytest,
...: everything except torch and its CUDA libraries, nvidia-* and triton, which the GPU
machine brings with its CUDA build of torch) as wheels for that Python, and exits. pip
chooses among the wheels that fit: the whole manylinux family up to ``--platform`` (default
manylinux_2_28, so manylinux_2_17 / manylinux2014 wheels too), that CPython's own ABI, the
stable ABI (abi3) and pure Python (none-any). With ``--only``, just what those checks
need (e.g. ``--only nbval benchmarks capstone``: no browser, grader or book-build stack),
so the folder is smaller. A pinned package with no fitting wheel is built from its source
here, which fits anywhere if the package is pure Python; one that builds into a compiled
wheel is refused, and one whose build fails is reported as such. ``--wheels DIR`` installs
from that folder with no index (pip install --no-index --find-links DIR), transformer_lib
in editable mode, then runs the checks.

Environment: PYTHONHASHSEED=0 for every check; CUBLAS_WORKSPACE_CONFIG (deterministic
cuBLAS) only for the library tests (see ENVIRONMENT below): the chapters, the capstone and
the benchmarks run at a GPU's full speed, and the benchmarks report the cost of
determinism themselves.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "requirements.txt"
CHECKS = ("nbval", "tests", "benchmarks", "capstone")
DEFAULT_PLATFORM = "manylinux_2_28_x86_64"  # the newest glibc the wheels may need
CAPSTONE_MINUTES = 0.5
# Brought by the GPU machine's CUDA build of torch, not by the wheel folder.
NOT_DOWNLOADED = re.compile(r"^(torch|triton|pytorch-triton|nvidia-.*|cuda-.*)$")
NO_GPU_EXIT = 3
# Fixed hashing for every check. Deterministic cuBLAS (CUBLAS_WORKSPACE_CONFIG) only for
# the library tests: a test that asks for bitwise equality on CUDA turns deterministic
# algorithms on (tl.set_seed(..., deterministic=True)), but cuBLAS reads the variable once,
# when the first test starts it, so it must be set before pytest starts. The chapters and
# the capstone run as a reader's GPU runs them (tl.set_seed's default: fast kernels; their
# stored outputs and assertions do not depend on bitwise equality on a GPU), and the
# benchmarks measure both modes themselves (--deterministic both).
ENVIRONMENT = {"PYTHONHASHSEED": "0"}
CHECK_ENVIRONMENT = {"tests": {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}}
# What each check needs from the pinned closure, as roots of requirements.txt's "# via"
# graph (transformer-lib: the library's own dependencies, Hugging Face's included).
# None: everything (the test suite also runs kernels, the grader, nbgrader, the browser).
CHECK_ROOTS = {
    "benchmarks": ["transformer-lib"],
    "capstone": ["transformer-lib"],
    "nbval": ["transformer-lib", "pytest", "nbval", "ipykernel", "nbclient", "nbformat",
              "ipywidgets"],
    "tests": None,
}


# --------------------------------------------------------------------------------------
# The wheel folder
# --------------------------------------------------------------------------------------


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> dict[str, tuple[str, list[str]]]:
    """requirements.txt as pip-compile writes it: canonical name -> (``name==version``,
    the names in its "# via" comment; "-r ..." for the hand-written list)."""
    pins, current = {}, None
    for line in text.splitlines():
        stripped = line.strip()
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", stripped)
        if match:
            current = canonical(match[1])
            pins[current] = (f"{match[1]}=={match[2]}", [])
            continue
        via = re.match(r"^#\s+(?:via\s+)?(\S.*)$", stripped)
        if current is not None and via and via[1] != "via":
            pins[current][1].append(canonical(via[1]) if not via[1].startswith("-")
                                    else via[1])
        elif not stripped.startswith("#"):
            current = None
    return pins


def closure(pins: dict[str, tuple[str, list[str]]], roots: list[str]) -> set[str]:
    """The roots and everything that some package already in the set needs."""
    needed = {canonical(r) for r in roots}
    grown = True
    while grown:
        grown = False
        for name, (_, vias) in pins.items():
            if name not in needed and any(v in needed for v in vias):
                needed.add(name)
                grown = True
    return needed


def wheel_requirements(text: str, checks=None) -> list[str]:
    """The ``name==version`` pins of a requirements file that a wheel folder carries:
    all but torch and its CUDA libraries (and the editable ``-e .``, comments, options);
    with ``checks``, only what those checks need (``CHECK_ROOTS``)."""
    pins = parse_lock(text)
    wanted = set(pins)
    if checks is not None and all(CHECK_ROOTS[c] is not None for c in checks):
        wanted = closure(pins, [r for c in checks for r in CHECK_ROOTS[c]])
    return [pin for name, (pin, _) in pins.items()
            if name in wanted and not NOT_DOWNLOADED.match(name)]


def manylinux_family(platform: str) -> list[str]:
    """A manylinux tag and every older one a machine that runs it also runs, newest first
    (pip expands only the legacy manylinux2014/2010 aliases itself): manylinux_2_28 ->
    manylinux_2_28 ... manylinux_2_17 (= manylinux2014), ... manylinux_2_5 (= manylinux1)."""
    match = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    if match is None:
        return [platform]
    newest, arch = int(match[1]), match[2]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags = []
    for minor in range(newest, 4, -1):
        tags.append(f"manylinux_2_{minor}_{arch}")
        if minor in legacy:
            tags.append(f"{legacy[minor]}_{arch}")
    return tags


def download_command(pins_file: Path, folder: Path, python_version: str,
                     platform: str) -> list[str]:
    """pip download: wheels only, for another Python and the whole manylinux family up to
    ``platform``, no dependency resolution (the pins are already the whole closure).
    pip picks, for each pin, the best wheel among: CPython ``python_version``'s own ABI,
    the stable ABI (abi3, from older CPythons) and pure Python (``none-any``)."""
    cp = "cp" + python_version.replace(".", "")
    platforms = [option for tag in manylinux_family(platform) for option in ("--platform", tag)]
    return [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-deps",
            "--python-version", python_version, "--implementation", "cp",
            "--abi", cp, "--abi", "abi3", "--abi", "none", *platforms,
            "-d", str(folder), "-r", str(pins_file)]


def source_wheel_command(pin: str, folder: Path) -> list[str]:
    """Build one pin from its source into a wheel (here, with this Python)."""
    return [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-binary=:all:",
            "-w", str(folder), pin]


def install_commands(folder: Path, pins_file: Path) -> list[list[str]]:
    """pip install from the folder alone: the pins, then transformer_lib (editable)."""
    offline = ["--no-index", "--find-links", str(folder)]
    return [[sys.executable, "-m", "pip", "install", *offline, "-r", str(pins_file)],
            [sys.executable, "-m", "pip", "install", *offline, "--no-deps", "-e", str(ROOT)]]


MISSING = re.compile(r"No matching distribution found for ([A-Za-z0-9._-]+==\S+)")


def write_pins(pins: list[str]) -> Path:
    """A requirements file holding ``pins``, in a temporary folder."""
    path = Path(tempfile.mkdtemp(prefix="check_gpu_")) / "requirements-wheels.txt"
    path.write_text("".join(f"{pin}\n" for pin in pins))
    return path


def folder_size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.glob("*.whl"))


def download_wheels(folder: Path, python_version: str, platform: str, dry_run: bool,
                    checks=None) -> int:
    """Fill ``folder`` with wheels of the pinned closure (or of what ``checks`` need) for
    ``python_version``."""
    pins = wheel_requirements(REQUIREMENTS.read_text(), checks)
    if not dry_run:
        folder.mkdir(parents=True, exist_ok=True)
    where = f"Python {python_version}, {platform} or older manylinux"
    no_wheel = []
    while True:  # pip stops at the first pin with no wheel: set it aside, try again
        command = download_command(write_pins([p for p in pins if p not in no_wheel]),
                                   folder, python_version, platform)
        print("$", shlex.join(command), flush=True)
        if dry_run:
            return 0
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode == 0:
            break
        missing = MISSING.search(result.stderr)
        if missing is None or missing[1] in no_wheel:
            sys.stderr.write(result.stdout[-3000:] + result.stderr)
            return result.returncode
        print(f"no wheel of {missing[1]} for {where}", flush=True)
        no_wheel.append(missing[1])
    compiled, failed = [], []
    for pin in no_wheel:  # a pure-Python package's source makes a wheel that fits anywhere
        with tempfile.TemporaryDirectory() as tmp:
            command = source_wheel_command(pin, Path(tmp))
            print("$", shlex.join(command), flush=True)
            result = subprocess.run(command, capture_output=True, text=True)
            wheels = sorted(Path(tmp).glob("*.whl"))
            if result.returncode != 0 or not wheels:
                last = (result.stderr.strip().splitlines() or ["?"])[-1]
                failed.append(f"{pin} ({last})")
            elif all(w.name.endswith("-none-any.whl") for w in wheels):
                for wheel in wheels:
                    shutil.move(str(wheel), str(folder / wheel.name))
            else:
                compiled.append(pin)
    if compiled:
        print(f"\nNo wheel for {where} of: {', '.join(compiled)}. Built from source "
              f"here they hold compiled code, so they would fit only this machine: fetch "
              f"them where the package index has them (or build them on a machine like "
              f"the GPU machine) into {folder}.", file=sys.stderr)
    if failed:
        print(f"\nNo wheel for {where}, and building from source failed, of: "
              f"{'; '.join(failed)}.", file=sys.stderr)
    if compiled or failed:
        return 1
    size = folder_size(folder)
    print(f"{len(pins)} pinned packages for {where} in {folder} ({size / 1e6:.0f} MB); "
          f"on the GPU machine: python scripts/check_gpu.py --wheels {folder}")
    return 0


# --------------------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------------------


def check_commands(out: Path) -> dict[str, list[list[str]]]:
    """The command lines of each check (run from the repository root)."""
    python = sys.executable
    capstone = [python, "-m", "transformer_lib.examples.number_words",
                "--minutes", str(CAPSTONE_MINUTES), "--device", "cuda",
                "--out", str(out / "number_words_de.pt")]
    return {
        "nbval": [[python, "-m", "pytest", "book", "--nbval", "-q", "-p", "no:cacheprovider"]],
        "tests": [[python, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider",
                   "--ignore=tests/test_book.py"]],
        "benchmarks": [[python, "benchmarks/attention.py", "--device", "cuda", "--compile",
                        "--json"],
                       [python, "benchmarks/decoding.py", "--device", "cuda", "--model",
                        "base", "--beam", "4", "--json"]],
        "capstone": [capstone],
    }


def cuda_status() -> tuple[bool, str]:
    """Whether torch sees a CUDA device, and a line saying what it sees."""
    code = ("import torch\n"
            "ok = torch.cuda.is_available()\n"
            "name = torch.cuda.get_device_name() if ok else 'no CUDA device'\n"
            "print(int(ok), f'torch {torch.__version__} (CUDA {torch.version.cuda}): {name}')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["?"])[-1]
        return False, f"torch cannot be imported by {sys.executable} ({last})"
    ok, line = result.stdout.strip().split(" ", 1)
    return ok == "1", line


def check_environment(name: str) -> dict[str, str]:
    """The environment a check runs in: this one, plus ENVIRONMENT and the check's own."""
    return {**ENVIRONMENT, **CHECK_ENVIRONMENT.get(name, {}), **os.environ}


def run_checks(names, out: Path, dry_run: bool) -> int:
    commands = check_commands(out)
    results = []
    for name in names:
        extra = CHECK_ENVIRONMENT.get(name, {})
        for command in commands[name]:
            shown = " ".join(f"{k}={v}" for k, v in extra.items())
            print(f"\n[{name}] $ {shown + ' ' if shown else ''}{shlex.join(command)}",
                  flush=True)
            if dry_run:
                continue
            start = time.perf_counter()
            status = subprocess.run(command, cwd=ROOT, env=check_environment(name)).returncode
            results.append((name, command, status, time.perf_counter() - start))
    if dry_run:
        return 0
    print("\nSummary")
    for name, command, status, seconds in results:
        verdict = "ok" if status == 0 else f"FAILED (exit {status})"
        print(f"  {name:<10} {seconds:7.0f} s  {verdict}  {shlex.join(command[1:])}")
    return 0 if all(status == 0 for *_, status, _ in results) else 1


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python scripts/check_gpu.py", description=__doc__.splitlines()[0],
        epilog="See the module docstring (or README, 'Running the chapters on a GPU').")
    parser.add_argument("--only", nargs="+", choices=CHECKS, default=list(CHECKS),
                        metavar="CHECK", help=f"run only these checks: {', '.join(CHECKS)}")
    parser.add_argument("--wheels", type=Path, metavar="DIR",
                        help="first install the pinned stack from this wheel folder, offline")
    parser.add_argument("--download-wheels", type=Path, metavar="DIR",
                        help="fetch the pinned stack's wheels into DIR for --python-version "
                             "(needs a package index, no GPU), then exit")
    parser.add_argument("--python-version", metavar="X.Y",
                        help="with --download-wheels: the GPU machine's Python "
                             "(default: this one's)")
    parser.add_argument("--platform", default=DEFAULT_PLATFORM,
                        help=f"with --download-wheels: the newest manylinux tag the GPU "
                             f"machine runs; older ones are accepted too (default "
                             f"{DEFAULT_PLATFORM})")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="where the capstone writes its checkpoint (default: a temporary "
                             "folder)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the commands that would run, run nothing")
    args = parser.parse_args(argv)
    if args.download_wheels is not None and args.wheels is not None:
        parser.error("--download-wheels and --wheels are two steps on two machines: "
                     "give one of them")
    if args.python_version is not None:
        if args.download_wheels is None:
            parser.error("--python-version only goes with --download-wheels")
        if not re.fullmatch(r"3\.[0-9]{1,2}", args.python_version):
            parser.error(f"--python-version must look like 3.12, got {args.python_version!r}")
    if args.platform != DEFAULT_PLATFORM and args.download_wheels is None:
        parser.error("--platform only goes with --download-wheels")
    if args.wheels is not None and not args.dry_run:
        if not args.wheels.is_dir() or not any(args.wheels.glob("*.whl")):
            parser.error(f"--wheels {args.wheels}: no folder of wheels there (make one with "
                         f"--download-wheels on a machine with a package index)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.download_wheels is not None:
        version = args.python_version or f"{sys.version_info.major}.{sys.version_info.minor}"
        checks = None if set(args.only) == set(CHECKS) else args.only
        return download_wheels(args.download_wheels, version, args.platform, args.dry_run,
                               checks)
    if args.dry_run:
        print("(dry run: the commands below are printed, not run; no GPU is looked for)")
    else:
        ok, line = cuda_status()
        if not ok:
            print(f"No CUDA device found: {line}. This script checks the book on a GPU; "
                  f"run it on a machine with an NVIDIA GPU and a CUDA build of torch "
                  f"(for the CPU, the README's test command).", file=sys.stderr)
            return NO_GPU_EXIT
        print(f"GPU: {line}", flush=True)
    if args.wheels is not None:
        pins_file = write_pins(wheel_requirements(REQUIREMENTS.read_text()))
        for command in install_commands(args.wheels, pins_file):
            print("$", shlex.join(command), flush=True)
            if not args.dry_run:
                subprocess.run(command, check=True)
    out = args.out or Path(tempfile.mkdtemp(prefix="check_gpu_"))
    return run_checks(args.only, out, args.dry_run)


if __name__ == "__main__":
    raise SystemExit(main())
