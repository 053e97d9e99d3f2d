"""Exact match against training time for the capstone's recipes (a script, not a test).

    python benchmarks/capstone_recipe.py              # old, new: de and fr, 15..90 s
    python benchmarks/capstone_recipe.py --clock cpu  # budgets in CPU seconds, 1 thread
    python benchmarks/capstone_recipe.py --budgets 30 --recipes new --seeds 0 1 2
    python benchmarks/capstone_recipe.py --ablation --budgets 8 --clock cpu

Recipes: "old" is the first edition's (``nw.PAPER_RECIPE``: eq. 3 with warm-up 200 and
factor 0.5, 2 + 2 layers, dropout and label smoothing 0.1, batch 128, uniform training
numbers, French separators as tokens, torch's default number of threads; "old, 1 thread"
is the same on one thread); "new" is the library's defaults (``nw.MODEL_CONFIG``,
``nw.TRAIN_CONFIG``, one thread). Each run builds the data first (not timed, as in the
command line), trains for the budget and scores greedy exact match on the 2,000 held-out
test numbers.

Budgets are wall-clock seconds by default, exactly as ``--minutes`` in the command line.
On a shared machine that measures the neighbours too, so every run records the load
average, the steps it reached and its seconds per step. ``--clock cpu`` counts the
process's CPU time instead, with one thread for both recipes: a stand-in for a quiet
machine. ``--ablation`` trains the new recipe with one lever at a time set back to its
old value, and the old recipe with one lever at a time set to its new value. Results go
to a JSON file (``--out``) for plotting.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time

import torch

import transformer_lib as tl
from transformer_lib.data import ZERO_PROB, NumberWordsData
from transformer_lib.examples import number_words as nw

OLD_THREADS = torch.get_num_threads()  # the first edition left torch's default


def recipes() -> dict:
    """name -> settings: data, model, training and threads."""
    keys = ("batch_size", "lr_factor", "warmup", "label_smoothing", "decay")
    train = {key: nw.TRAIN_CONFIG[key] for key in keys}
    new = dict(data=dict(scheme="glued", zero_prob=ZERO_PROB),
               model_config=dict(nw.MODEL_CONFIG), threads=1, **train)
    old = dict(nw.PAPER_RECIPE, threads=OLD_THREADS)
    return {"old": old, "new": new, "old, 1 thread": dict(old, threads=1)}


# A lever: the settings it changes, as (key,) for a top-level setting or (key, subkey).
LEVERS = {
    "schedule": [("lr_factor",), ("warmup",), ("decay",)],
    "layers": [("model_config", "num_encoder_layers"),
               ("model_config", "num_decoder_layers")],
    "dropout": [("model_config", "dropout")],
    "label smoothing": [("label_smoothing",)],
    "batch size": [("batch_size",)],
    "zero-rich numbers": [("data", "zero_prob")],
    "glued targets": [("data", "scheme")],
}


def ablations() -> dict:
    """One lever at a time: the new recipe with that lever's old value ("new - lever"),
    and the old recipe with its new value ("old + lever"). All on one thread."""
    base = {name: dict(recipes()[name], threads=1) for name in ("old", "new")}
    out = dict(base)
    for lever, keys in LEVERS.items():
        for start, other, sign in (("new", "old", "-"), ("old", "new", "+")):
            name = f"{start} {sign} {lever}"
            variant = {k: dict(v) if isinstance(v, dict) else v
                       for k, v in base[start].items()}
            for key in keys:
                if len(key) == 1:
                    variant[key[0]] = base[other][key[0]]
                else:
                    variant[key[0]][key[1]] = base[other][key[0]][key[1]]
            out[name] = variant
    return out


class Data:
    """Data sets by (lang, seed, scheme, zero_prob), sharing one num2words cache."""

    def __init__(self):
        self.cache, self.sets = {}, {}

    def get(self, lang, seed, scheme, zero_prob, train_size=12_000,
            **options) -> NumberWordsData:
        """``options``: more NumberWordsData arguments (``bpe_vocab_size``)."""
        key = (lang, seed, scheme, zero_prob, tuple(sorted(options.items())))
        if key not in self.sets:
            self.sets[key] = NumberWordsData(lang, train_size=train_size, seed=seed,
                                             scheme=scheme, zero_prob=zero_prob,
                                             cache=self.cache, **options)
        return self.sets[key]


def train_cpu_budget(recipe, data, seed, seconds):
    """Like ``nw.train_number_words`` with a time budget, but the clock is the process's
    CPU time (``time.process_time``): neighbours on a shared machine do not count."""
    tl.set_seed(seed)
    model = nw.build_model(data, **recipe["model_config"])
    factor, warmup = recipe["lr_factor"], recipe["warmup"]
    optimizer, scheduler = nw.make_optimizer(model, factor, warmup)
    if recipe["decay"] == "linear":  # the same schedule, on the CPU clock
        schedule = nw.LinearDecay(model.config["d_model"], factor, warmup,
                                  seconds=seconds, clock=time.process_time)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    start, steps = time.process_time(), 0
    for src, tgt in data.batches(recipe["batch_size"], seed=seed):
        tl.train_step(model, src, tgt, optimizer, scheduler, recipe["label_smoothing"])
        steps += 1
        if time.process_time() - start >= seconds:
            break
    return model, steps


def run_one(name, recipe, lang, seed, budget, clock, data_sets):
    data = data_sets.get(lang, seed, **recipe["data"])
    threads = recipe["threads"] if clock == "wall" else 1  # 1 thread: CPU time ~ wall
    torch.set_num_threads(threads)
    load_before = os.getloadavg()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    if clock == "wall":
        keys = ("batch_size", "lr_factor", "warmup", "label_smoothing", "decay",
                "model_config")
        run = nw.train_number_words(lang, steps=None, max_seconds=budget, data=data,
                                    seed=seed, device="cpu", progress=False,
                                    evaluate_test=False, **{k: recipe[k] for k in keys})
        model, steps = run.model, run.metrics["steps"]
    else:
        model, steps = train_cpu_budget(recipe, data, seed, budget)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    load_after = os.getloadavg()
    exact = nw.exact_match(model, data, "test")["exact_match"]
    return dict(recipe=name, lang=lang, seed=seed, clock=clock, budget_s=budget,
                steps=steps, exact_match=exact, train_wall_s=round(wall, 2),
                train_cpu_s=round(cpu, 2), wall_s_per_step=round(wall / steps, 5),
                cpu_s_per_step=round(cpu / steps, 5), threads=threads,
                load_before=[round(x, 2) for x in load_before],
                load_after=[round(x, 2) for x in load_after])


def machine_header(kind, clock, table) -> dict:
    """What a results file says about the run: its kind, clock, torch and the CPU."""
    return dict(kind=kind, clock=clock, torch=torch.__version__, cpus=os.cpu_count(),
                processor=platform.processor() or platform.machine(),
                cpu_capability=torch.backends.cpu.get_cpu_capability(), recipes=table)


def run_grid(table, langs, seeds, budgets, clock, out, header, annotate=None) -> list:
    """``run_one`` for every recipe of ``table`` (name -> settings), language, seed and
    budget; each result is printed and the file ``out`` rewritten as it comes (partial
    results survive an interrupted run). ``annotate(result, data)`` may add to a result."""
    data_sets, results = Data(), []
    for seed in seeds:
        for budget in budgets:
            for lang in langs:
                for name, recipe in table.items():
                    r = run_one(name, recipe, lang, seed, budget, clock, data_sets)
                    if annotate is not None:
                        annotate(r, data_sets.get(lang, seed, **recipe["data"]))
                    results.append(r)
                    print(f"{name:<26}{lang} seed {seed} {budget:>5g} s ({clock}):"
                          f" exact match {r['exact_match']:.4f}"
                          f" after {r['steps']} steps"
                          f" ({r['wall_s_per_step']:.4f} s/step wall,"
                          f" {r['cpu_s_per_step']:.4f} CPU),"
                          f" load {r['load_before'][0]:.1f}", flush=True)
                    save(out, dict(header, results=results))
    return results


def save(path, content):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(content, f, indent=1)


def print_table(results):
    """Exact match per recipe and language, one column per budget (mean over seeds)."""
    budgets = sorted({r["budget_s"] for r in results})
    print(f"\n{'recipe':<26}{'lang':<6}" + "".join(f"{b:>10g} s" for b in budgets))
    for name in dict.fromkeys(r["recipe"] for r in results):
        for lang in dict.fromkeys(r["lang"] for r in results):
            cells = []
            for b in budgets:
                ems = [r["exact_match"] for r in results
                       if (r["recipe"], r["lang"], r["budget_s"]) == (name, lang, b)]
                cells.append(f"{100 * sum(ems) / len(ems):>11.2f}" if ems else " " * 12)
            print(f"{name:<26}{lang:<6}" + "".join(cells))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=float, nargs="+", default=[15, 30, 60, 90])
    parser.add_argument("--langs", nargs="+", choices=("de", "fr"),
                        default=("de", "fr"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--recipes", nargs="+", default=None,
                        help="names in recipes() (or in ablations() with --ablation)")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    parser.add_argument("--ablation", action="store_true")
    parser.add_argument("--out", default=None,
                        help="JSON file (default: benchmarks/results/capstone_...json)")
    args = parser.parse_args(argv)
    table = ablations() if args.ablation else recipes()
    names = args.recipes or list(table)
    if args.clock == "cpu" and not args.recipes:  # "old, 1 thread" is "old" there
        names.remove("old, 1 thread")
    unknown = set(names) - set(table)
    if unknown:
        parser.error(f"unknown recipes {sorted(unknown)}; expected some of "
                     f"{sorted(table)}")
    kind = "ablation" if args.ablation else "recipes"
    here = os.path.dirname(os.path.abspath(__file__))
    filename = f"capstone_{kind}_{args.clock}.json"
    out = args.out or os.path.join(here, "results", filename)
    chosen = {n: table[n] for n in names}
    results = run_grid(chosen, args.langs, args.seeds, args.budgets, args.clock, out,
                       machine_header(kind, args.clock, chosen))
    print_table(results)
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
