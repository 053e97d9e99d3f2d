"""Does ``torch.compile`` pay for itself in the capstone's 30-second budget? (a script,
not a test)

    python benchmarks/capstone_compile.py            # German, 300 timed steps, one thread
    python benchmarks/capstone_compile.py --steps 500 --threads 2
    python benchmarks/capstone_compile.py --dynamic    # torch.compile(dynamic=True)
    python benchmarks/capstone_compile.py --out benchmarks/results/capstone_compile_cpu.json
                                                       # add this run to a JSON file

Builds the capstone's data and model (the library's defaults), then times training
steps three ways: eager (as the library trains), and compiled with ``torch.compile``,
counting the compile time (the first steps) separately from the steady state. Prints
the step times, their ratio and how many steps each way fits in a 30 s budget; with
``--out``, appends them (and the machine's load average) to a JSON file.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time

import torch

import transformer_lib as tl
from transformer_lib.data import NumberWordsData
from transformer_lib.examples import number_words as nw


def time_steps(model, batches, optimizer, scheduler, steps: int, step_fn) -> list[float]:
    """Seconds per step for ``steps`` steps of ``step_fn``."""
    times = []
    for _, (src, tgt) in zip(range(steps), batches):
        start = time.perf_counter()
        step_fn(model, src, tgt, optimizer, scheduler)
        times.append(time.perf_counter() - start)
    return times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--budget", type=float, default=30.0)
    parser.add_argument("--dynamic", action="store_true",
                        help="compile with dynamic shapes (one graph for all lengths)")
    parser.add_argument("--out", default=None, help="JSON file to add this run's results to")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    torch.set_num_threads(args.threads)
    data = NumberWordsData("de", train_size=12_000, seed=0)
    batch_size = nw.TRAIN_CONFIG["batch_size"]

    def fresh():
        tl.set_seed(0)
        model = nw.build_model(data)
        optimizer, scheduler = nw.make_optimizer(
            model, nw.TRAIN_CONFIG["lr_factor"], nw.TRAIN_CONFIG["warmup"], steps=10_000)
        return model, optimizer, scheduler, iter(data.batches(batch_size, seed=0))

    model, optimizer, scheduler, batches = fresh()
    eager = time_steps(model, batches, optimizer, scheduler, args.steps, tl.train_step)

    model, optimizer, scheduler, batches = fresh()
    compiled_model = torch.compile(model, dynamic=True if args.dynamic else None)
    # Length-bucketed batches have many shapes: every new (B, Ls, Lt) may compile again.
    first = time.perf_counter()
    compiled = time_steps(compiled_model, batches, optimizer, scheduler, args.steps,
                          tl.train_step)
    total = time.perf_counter() - first

    recompiles = None
    try:  # how many graphs dynamo compiled (every recompilation is one more)
        from torch._dynamo.utils import counters
        recompiles = int(counters["stats"]["unique_graphs"])
    except (ImportError, KeyError, TypeError):
        pass
    shapes = {(tuple(s.shape), tuple(t.shape))
              for _, (s, t) in zip(range(args.steps), data.batches(batch_size, seed=0))}

    eager_step = sorted(eager)[len(eager) // 2]
    steady = sorted(compiled[len(compiled) // 2:])[len(compiled) // 4]
    warm = sum(compiled) - steady * len(compiled)  # time beyond the steady rate: compiling
    mode = "dynamic=True" if args.dynamic else "default"
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.steps} steps, "
          f"torch.compile {mode}")
    print(f"eager:    median step {eager_step * 1e3:.1f} ms")
    print(f"compiled: median step {steady * 1e3:.1f} ms once warm; {total:.1f} s for all "
          f"{args.steps} steps, of which about {warm:.1f} s compiling")
    print(f"step time, compiled / eager: {steady / eager_step:.2f}; {len(shapes)} batch "
          f"shapes, {recompiles} graphs compiled")
    fits_eager = args.budget / eager_step
    fits_compiled = max(0.0, args.budget - warm) / steady
    print(f"steps in {args.budget:g} s: eager {fits_eager:.0f}, compiled {fits_compiled:.0f}")
    if args.out:
        results = {"runs": []}
        if os.path.exists(args.out):
            with open(args.out) as f:
                results = json.load(f)
        results["runs"].append({
            "dynamic": args.dynamic, "threads": args.threads, "steps": args.steps,
            "eager_ms_per_step": 1e3 * eager_step, "compiled_ms_per_step": 1e3 * steady,
            "compiled_over_eager": steady / eager_step, "compile_seconds": warm,
            "compiled_total_seconds": total, "budget_s": args.budget,
            "steps_in_budget_eager": fits_eager, "steps_in_budget_compiled": fits_compiled,
            "graphs_compiled": recompiles, "batch_shapes": len(shapes),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
            "cpus": os.cpu_count(), "torch": torch.__version__,
            "python": platform.python_version()})
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
            f.write("\n")
        print(f"added to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
