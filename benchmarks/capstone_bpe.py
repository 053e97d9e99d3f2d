"""Exact match against training time: the capstone's morpheme targets against learned
BPE vocabularies (a script, not a test; chapter 10 quotes its results).

    python benchmarks/capstone_bpe.py                    # CPU-second budgets 2, 4, 8
    python benchmarks/capstone_bpe.py --clock wall --budgets 5 10
    python benchmarks/capstone_bpe.py --sizes 40 60 100 200 --seeds 0 1 2

Every recipe is the chapter's ("new" in ``capstone_recipe.py``: ``nw.MODEL_CONFIG``,
``nw.TRAIN_CONFIG``, one thread) and only the German target tokenization changes: the
hand-made morphemes ("glued", the default) or a byte-pair encoding learned from the
training targets with ``--sizes`` tokens (``NumberWordsData(scheme="bpe")``). Chapter
10 compares them at a fixed number of steps, which a stored output can show; this script
gives them the same time, which depends on the machine. ``--clock cpu`` (the default)
counts the process's CPU time, a stand-in for a quiet machine when the one at hand is
shared; ``--clock wall`` counts wall-clock seconds, as ``--minutes`` in the command line.
Each run records its steps, seconds per step and the mean target length, and the results
go to ``benchmarks/results/capstone_bpe_CLOCK.json``.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capstone_recipe import machine_header, print_table, recipes, run_grid  # noqa: E402


def bpe_recipes(sizes) -> dict:
    """name -> settings: the chapter's recipe with morpheme or BPE targets."""
    new = recipes()["new"]
    table = {"morphemes": new}
    for size in sizes:
        table[f"BPE {size}"] = dict(new, data=dict(new["data"], scheme="bpe",
                                                   bpe_vocab_size=size))
    return table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=float, nargs="+", default=[2, 4, 8])
    parser.add_argument("--sizes", type=int, nargs="+", default=[60, 200])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--clock", choices=["wall", "cpu"], default="cpu")
    parser.add_argument("--out", default=None,
                        help="JSON file (default: benchmarks/results/capstone_bpe_CLOCK.json)")
    args = parser.parse_args(argv)
    table = bpe_recipes(args.sizes)
    here = os.path.dirname(os.path.abspath(__file__))
    out = args.out or os.path.join(here, "results", f"capstone_bpe_{args.clock}.json")
    header = machine_header("bpe", args.clock, table)

    def annotate(result, data):
        tgt = data.tensors["train"][1]
        result["target_vocab"] = len(data.tgt_vocab)
        # tokens per training target, <eos> included (the model writes them)
        result["mean_target_len"] = round(float((tgt != 0).sum(1).float().mean()) - 1, 3)

    results = run_grid(table, ["de"], args.seeds, args.budgets, args.clock, out, header,
                       annotate)
    print_table(results)
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
