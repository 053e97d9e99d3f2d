"""BLEU and chrF on the Ding test split against training time (a script, not a test).

    python benchmarks/real_corpus.py                        # 1, 3, 10, 30 minutes on 2 cores
    python benchmarks/real_corpus.py --minutes 1 3 --seeds 0 1
    python benchmarks/real_corpus.py --merge a.json b.json  # one file from several runs

"Minutes on 2 cores" are budgets of CPU time: M minutes on 2 cores is 2 x 60 x M seconds
of the training process's CPU time (``time.process_time``, all its threads together),
so neighbours on a shared machine slow a run down but do not change its result (every
run records the load average and its wall time). On a CUDA device (``--device cuda``)
the budgets are wall-clock minutes of one GPU instead.

Each run trains ``python -m transformer_lib.translate train``'s recipe (``RECIPE`` in
``transformer_lib/translate/presets.py``, with the overrides in ``--set``) on the Ding
dictionary of Debian's ``trans-de-en`` (German -> English), then scores greedy and beam
search (4, length penalty 0.6) on the test split with sacreBLEU (cased, detokenised; the
signatures are stored) and counts exact matches on test sentences of 3-6 words.
Checkpoints trained on Ding are never written here (the dictionary is GPL-2+: its
weights do not belong in the repository). Results go to ``--out`` as they come.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time

import torch

from transformer_lib.data import load_corpus
from transformer_lib.translate.evaluate import evaluate
from transformer_lib.translate.pipeline import train_corpus
from transformer_lib.translate.presets import PRESETS, RECIPE

OUT = os.path.join(os.path.dirname(__file__), "results", "real_corpus_cpu.json")
TRAIN_KEYS = ("preset", "vocab_size", "extra_pairs", "batch_size", "lr_factor", "warmup",
              "decay", "dropout", "label_smoothing", "word_dropout", "norm_first",
              "share_embeddings", "max_len")


def machine_header(device: str, threads: int, recipe: dict) -> dict:
    """What a results file says about its runs: clock, torch, the CPU (or GPU), recipe."""
    gpu = torch.cuda.get_device_name() if device.startswith("cuda") else None
    return dict(kind="real_corpus", clock="cpu" if gpu is None else "wall",
                torch=torch.__version__, cpus=os.cpu_count(),
                processor=platform.processor() or platform.machine(),
                cpu_capability=torch.backends.cpu.get_cpu_capability(), gpu=gpu,
                threads=threads, recipe=recipe,
                presets={recipe["preset"]: PRESETS[recipe["preset"]]})


def run_one(recipe: dict, minutes: float, seed: int, device: str, threads: int,
            corpus) -> dict:
    """Train for ``minutes`` (on 2 cores' CPU time, or a GPU's wall time), then score."""
    cpu = not device.startswith("cuda")
    seconds = minutes * 60 * (2 if cpu else 1)
    load_before = os.getloadavg()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    result = train_corpus(corpus, max_seconds=seconds, clock="cpu" if cpu else "wall",
                          seed=seed, device=device, progress=False, log_every=50,
                          **{k: recipe[k] for k in TRAIN_KEYS})
    wall, cpu_s = time.perf_counter() - wall0, time.process_time() - cpu0
    load_after = os.getloadavg()
    row = dict(minutes=minutes, seed=seed, device=device, budget_s=seconds, recipe=recipe,
               steps=result.metrics["steps"], train_pairs=result.metrics["train_pairs"],
               vocab=result.metrics["vocab_size"],
               parameters=sum(p.numel() for p in result.model.parameters()),
               train_wall_s=round(wall, 1), train_cpu_s=round(cpu_s, 1),
               final_loss=round(result.history["loss"][-1], 4),
               load_before=[round(x, 2) for x in load_before],
               load_after=[round(x, 2) for x in load_after])
    for name, beam in (("greedy", 1), ("beam4", 4)):
        scores = evaluate(result.model, corpus.test, beam_size=beam)
        row[name] = dict(bleu=round(scores["bleu"], 2), chrf=round(scores["chrf"], 2),
                         exact_short=scores["exact_short"]["count"],
                         short_total=scores["exact_short"]["total"])
        row["signatures"] = dict(bleu=scores["bleu_signature"], chrf=scores["chrf_signature"])
    return row


def save(path: str, content: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(content, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def merge(paths: list[str], out: str) -> dict:
    """One results file from several (same recipe): their rows, sorted by budget and seed."""
    files = [json.load(open(p)) for p in paths]
    header = {k: v for k, v in files[0].items() if k != "results"}
    rows = sorted((r for f in files for r in f["results"]),
                  key=lambda r: (r["device"], r["minutes"], r["seed"]))
    header["recipes"] = [f["recipe"] for f in files]
    merged = dict(header, results=rows)
    save(out, merged)
    return merged


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, nargs="+", default=[1, 3, 10, 30])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="recipe overrides, e.g. preset=medium dropout=0.2 (JSON values)")
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--merge", nargs="+", default=None, metavar="FILE",
                        help="merge these results files into --out and stop")
    args = parser.parse_args(argv)
    if args.merge:
        merged = merge(args.merge, args.out)
        print(f"wrote {args.out}: {len(merged['results'])} runs")
        return 0
    recipe = dict(RECIPE)
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in recipe:
            parser.error(f"--set: unknown recipe key {key!r}; expected one of {sorted(recipe)}")
        try:
            recipe[key] = json.loads(value)
        except json.JSONDecodeError:
            recipe[key] = value
    torch.set_num_threads(args.threads)
    corpus = load_corpus("ding", phrases=recipe["extra_pairs"] != 0)
    header = dict(machine_header(args.device, args.threads, recipe),
                  corpus=dict(name="ding", version=corpus.info.get("version"),
                              train=len(corpus.train), valid=len(corpus.valid),
                              test=len(corpus.test), extra=len(corpus.extra_train)))
    results = []
    for seed in args.seeds:
        for minutes in args.minutes:
            row = run_one(recipe, minutes, seed, args.device, args.threads, corpus)
            results.append(row)
            print(f"{minutes:g} min seed {seed}: BLEU {row['greedy']['bleu']:.2f} chrF "
                  f"{row['greedy']['chrf']:.2f} (greedy), BLEU {row['beam4']['bleu']:.2f} "
                  f"chrF {row['beam4']['chrf']:.2f} (beam 4); {row['steps']} steps, "
                  f"{row['train_cpu_s']} CPU s, {row['train_wall_s']} wall s, load "
                  f"{row['load_before'][0]:.1f}", flush=True)
            save(args.out, dict(header, results=results))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
