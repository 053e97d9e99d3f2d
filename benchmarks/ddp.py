"""Data parallelism, mixed precision and accumulation on this machine: training steps per
second and test exact match at a fixed time budget (a script, not a test).

    python benchmarks/ddp.py                    # 8 settings x 3 rounds, 20 s per run
    python benchmarks/ddp.py --seconds 60 --rounds 1 --out /tmp/ddp.json
    python benchmarks/ddp.py --steps 40 --train-size 2000 --test-size 100 \
        --precisions fp32 --accumulate 1 --out benchmarks/results/ddp_cpu_40_steps.json
                                                # chapter 13's two torchrun runs

Runs the capstone's command line (its default recipe: batch 64, linear decay to zero at
the end of the budget) once per setting: 1 process (plain ``python -m``) or 2 processes
(``python -m torch.distributed.run --standalone --nproc_per_node 2``), fp32 or bf16
autocast, 1 or 2 micro-batches per step. The global batch is 64 examples in every run, so
every run trains the same model on the same batches; only the arithmetic and the speed
differ, and at a time budget the speed decides how many steps fit. Each process uses one
CPU thread (the command line's default). On a GPU machine add ``--device cuda`` (then
each process takes one GPU, and fp16 can be added with ``--precisions fp32 bf16 fp16``).

On a machine shared with other work, the speed of a run depends on what else runs at the
time, so the settings are run in turn, ``--rounds`` times over, and the table shows each
setting's median. Prints each setting's median steps per second relative to one process in
fp32 and its median exact match, and writes every run (with the load average before it)
and the medians (with the machine's CPU count, load averages and torch version) as JSON.
``--steps`` trains a fixed number of steps instead of a time budget (then the speed is
all the runs differ in).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import torch


def run(processes: int, precision: str, accumulate: int, seconds: float, device: str,
        folder: str, steps: int | None = None, sizes: tuple[int, int] | None = None) -> dict:
    """One training run of the CLI; its metrics, read from the checkpoint it saved.
    ``steps`` replaces the time budget; ``sizes`` = (train size, test size) replace the
    command line's defaults."""
    out = os.path.join(folder, f"p{processes}_{precision}_k{accumulate}.pt")
    budget = ["--steps", str(steps)] if steps else ["--minutes", str(seconds / 60)]
    size = ["--train-size", str(sizes[0]), "--test-size", str(sizes[1])] if sizes else []
    cli = ["-m", "transformer_lib.examples.number_words", "--lang", "de", *budget, *size,
           "--beam", "1", "--device", device,
           "--precision", precision, "--accumulate", str(accumulate), "--out", out]
    if processes == 1:
        command = [sys.executable, *cli]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc_per_node", str(processes), *cli]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")
    metrics = torch.load(out, weights_only=True)["metrics"]
    return {"processes": processes, "precision": precision, "accumulate": accumulate,
            "steps": int(metrics["steps"]), "train_seconds": metrics["train_seconds"],
            "steps_per_second": metrics["steps"] / metrics["train_seconds"],
            "ms_per_step": 1e3 * metrics["train_seconds"] / metrics["steps"],
            "test_exact_match": metrics["test_exact_match"], "wall_seconds": wall,
            "load_average_before": load}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="time budget per run")
    parser.add_argument("--steps", type=int, default=None,
                        help="train this many steps instead (no time budget)")
    parser.add_argument("--train-size", type=int, default=None)
    parser.add_argument("--test-size", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=3,
                        help="runs of every setting, in turn (the table shows medians)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--accumulate", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", default=None,
                        help="JSON file (default: benchmarks/results/ddp_DEVICE.json)")
    args = parser.parse_args(argv)
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   f"ddp_{args.device}.json")
    settings = list(itertools.product(args.processes, args.precisions, args.accumulate))
    sizes = None
    if args.train_size or args.test_size:
        sizes = (args.train_size or 12_000, args.test_size or 2000)
    runs = []
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(args.rounds):
            for processes, precision, accumulate in settings:
                r = run(processes, precision, accumulate, args.seconds, args.device, folder,
                        args.steps, sizes)
                runs.append({"round": round_, **r})
                print(f"round {round_}: {processes} process(es), {precision}, accumulate "
                      f"{accumulate}: {r['steps']} steps, {r['steps_per_second']:.1f} "
                      f"steps/s, exact match {r['test_exact_match']:.4f}", flush=True)
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    medians = []
    for processes, precision, accumulate in settings:
        mine = [r for r in runs if (r["processes"], r["precision"], r["accumulate"])
                == (processes, precision, accumulate)]
        medians.append({
            "processes": processes, "precision": precision, "accumulate": accumulate,
            "steps_per_second": statistics.median(r["steps_per_second"] for r in mine),
            "ms_per_step": statistics.median(r["ms_per_step"] for r in mine),
            "test_exact_match": statistics.median(r["test_exact_match"] for r in mine)})
    base = medians[0]["steps_per_second"]
    budget = f"{args.steps} steps" if args.steps else f"{args.seconds:.0f} s budget"
    print(f"\n{budget}, global batch 64, device {args.device}, "
          f"{os.cpu_count()} CPUs, median of {args.rounds} run(s); load average (1 min) "
          f"{load_before} before, {load_after} after")
    print("| processes | precision | accumulate | steps/s | vs first | test exact match |")
    print("|---|---|---|---|---|---|")
    for m in medians:
        print(f"| {m['processes']} | {m['precision']} | {m['accumulate']} | "
              f"{m['steps_per_second']:.1f} | {m['steps_per_second'] / base:.2f}x | "
              f"{m['test_exact_match']:.4f} |")
    machine = {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
               "load_average_before": load_before, "load_average_after": load_after,
               "torch": torch.__version__, "python": platform.python_version(),
               "cuda": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else None}
    with open(out, "w") as f:
        json.dump({"seconds": None if args.steps else args.seconds, "steps": args.steps,
                   "train_size": sizes[0] if sizes else 12_000,
                   "rounds": args.rounds, "device": args.device, "global_batch": 64, "machine": machine, "medians": medians, "runs": runs},
                  f, indent=1)
        f.write("\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
