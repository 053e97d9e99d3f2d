"""Timing helpers shared by the benchmark scripts (not a benchmark itself).

Each timing is the median of interleaved repeats: round after round, every contender runs
once, so background load on a shared machine affects all of them alike. On the CPU a run
is timed with ``time.perf_counter``; on a CUDA device with CUDA events, after a sync, so
the time runs from the first launch to the end of the last kernel: it includes the host's
launch overhead whenever the GPU has to wait for it, and nothing else the host does.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parent / "results"


def pick_device(name: str) -> torch.device:
    """``--device``: "cpu", "cuda" or "cuda:N"; exits with a message if it is missing."""
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(f"--device {name}: no CUDA device is visible to torch "
                 f"{torch.__version__} on this machine")
    if device.type not in ("cpu", "cuda"):
        sys.exit(f"--device must be cpu or cuda[:N], got {name!r}")
    return device


def add_common_arguments(parser, json_name: str) -> None:
    """--device, --threads and --json, as every benchmark script takes them."""
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--json", nargs="?", const="", default=None, metavar="PATH",
                        help=f"write the results as JSON (default path: "
                             f"benchmarks/results/{json_name})")


def add_determinism_argument(parser) -> None:
    """--deterministic: off, on, or both (the script runs itself once more, deterministic,
    in a fresh process: cuBLAS reads CUBLAS_WORKSPACE_CONFIG once, when it starts)."""
    parser.add_argument("--deterministic", choices=("off", "on", "both"), default=None,
                        help="deterministic algorithms (tl.set_seed(0, deterministic=True), "
                             "with CUBLAS_WORKSPACE_CONFIG on CUDA): off, on, or both side "
                             "by side with the cost of determinism (default: both on a "
                             "GPU; on the CPU, where it is free, on)")


def deterministic_mode(args, device: torch.device) -> str:
    return args.deterministic or ("both" if device.type == "cuda" else "on")


def start(args) -> tuple[torch.device, dict]:
    """Pick the device and the threads, set the seed (deterministic or not, as
    ``--deterministic`` says, where the script has it); print and return where the
    numbers come from."""
    device = pick_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    mode = deterministic_mode(args, device) if hasattr(args, "deterministic") else None
    if mode is not None:
        import transformer_lib as tl
        tl.set_seed(0, deterministic=mode == "on")  # "both": this run is the fast one
    info = describe(device)
    if mode is not None:
        info["deterministic"] = mode == "on"
    print(", ".join(f"{k} {v}" for k, v in info.items() if v is not None))
    return device, info


def median_times(fns: dict, repeats: int, device: torch.device, warmup: int = 2) -> dict:
    """Run each function ``warmup`` times, then ``repeats`` interleaved rounds; return
    the median seconds per call of each."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples = {name: [] for name in fns}
    cuda = device.type == "cuda"
    for _ in range(repeats):
        for name, fn in fns.items():
            if cuda:
                start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                torch.cuda.synchronize(device)
                start.record()
                fn()
                end.record()
                end.synchronize()
                samples[name].append(start.elapsed_time(end) / 1e3)  # ms -> s
            else:
                begin = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - begin)
    return {name: statistics.median(s) for name, s in samples.items()}


def run_deterministic(argv: list[str] | None) -> dict:
    """Run the calling script again with ``--deterministic on`` in a fresh process (its
    output indented) and return the results it writes as JSON."""
    argv = list(sys.argv[1:] if argv is None else argv)
    for flag in ("--deterministic", "--json"):  # drop the caller's choice of these
        while flag in argv:
            at = argv.index(flag)
            takes_value = at + 1 < len(argv) and not argv[at + 1].startswith("--")
            del argv[at: at + 1 + takes_value]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "deterministic.json"
        command = [sys.executable, sys.argv[0], *argv, "--deterministic", "on",
                   "--json", str(path)]
        env = {**os.environ, "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
        print(f"\n--- the same, deterministic (a fresh process) ---", flush=True)
        result = subprocess.run(command, env=env, capture_output=True, text=True)
        print("".join(f"  | {line}\n" for line in result.stdout.splitlines()), end="")
        if result.returncode != 0 and not path.exists():
            sys.stderr.write(result.stderr[-3000:])
            raise SystemExit(f"the deterministic run failed (exit {result.returncode})")
        # A run that wrote its results but exits 1 had contenders fail: they are named in
        # its results ("failed"), and the caller reports them.
        return json.loads(path.read_text())


def failure(error: BaseException) -> str:
    """A contender's exception in one line: its type and the first line of its message."""
    first_line = (str(error).strip().splitlines() or [""])[0][:300]
    return f"{type(error).__name__}: {first_line}"


def print_cost(rows: list[tuple[str, float, float]]) -> list[dict]:
    """rows of (what, ms fast, ms deterministic): print the cost of determinism."""
    print("\nThe cost of determinism (same machine, one after the other):")
    print(f"{'':<40} {'fast ms':>9} {'determ. ms':>11} {'determ./fast':>13}")
    out = []
    for name, fast, slow in rows:
        print(f"{name:<40} {fast:>9.2f} {slow:>11.2f} {slow / fast:>13.2f}")
        out.append({"what": name, "fast_ms": fast, "deterministic_ms": slow,
                    "cost": slow / fast})
    return out


def describe(device: torch.device) -> dict:
    """Where the numbers come from: the device, torch, threads, the Python and machine."""
    info = {"device": str(device), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "python": platform.python_version(),
            "machine": platform.machine(), "processor": platform.processor() or None}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


def write_json(path: Path, payload: dict) -> Path:
    """Write ``payload`` (plus the command line and a UTC timestamp) as indented JSON."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"command": " ".join(["python"] + sys.argv),
               "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **payload}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path
