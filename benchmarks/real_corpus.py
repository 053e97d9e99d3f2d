"""The recipe on the Ding dictionary's sentences, chosen on validation, tested once (a
script, not a test).

    # recipe search: every run is scored on the validation split only
    python benchmarks/real_corpus.py --minutes 10 --cores 2 --set dropout=0.2 --out a.json
    # the chosen recipe, three seeds, scored on test too
    python benchmarks/real_corpus.py --minutes 10 --cores 2 --seeds 0 1 2 --final
    python benchmarks/real_corpus.py --merge a.json b.json  # one file from several runs

Research hygiene (``/work/shared/design.md``):

- Budgets: "M minutes on N cores" (``--minutes M --cores N``) is M x 60 x N seconds of
  the training process's CPU time (``time.process_time``, all its threads together), so
  neighbours on a shared machine slow a run but do not change its result; each run
  records its wall and CPU time and the load average. On CUDA (``--device cuda``) a
  budget is wall-clock minutes of one GPU.
- Every run scores the *validation* split: greedy and beam search (4, length penalty
  0.6), sacreBLEU's BLEU and chrF (cased, detokenised, signatures stored), exact matches
  on sentences of 3-6 words. Recipes (``--set key=value``, one change at a time) are
  compared there.
- The *test* split is scored only with ``--final``, for the recipe chosen: each seed's
  run, then the mean and spread over seeds, and sacreBLEU's paired bootstrap of each run
  against the retrieval baseline and of beam search against greedy.
- Every results file holds the baselines that learn nothing (``translate/baselines.py``:
  copy the source; retrieve the target of the training pair sharing the most words),
  scored once on validation and test: no choice depends on them.
- Every run is also scored on 30 everyday sentences written for this project
  (``benchmarks/data/everyday_de_en.tsv``): chrF and exact matches ignoring case and
  punctuation, and the model's translations of them (the sentences are ours; a results
  file never holds Ding's sentences or translations of them). A report of what the
  model does with plain speech, not a choice set.

Each run trains ``python -m transformer_lib.translate train``'s recipe (``RECIPE`` in
``transformer_lib/translate/presets.py``, with the ``--set`` overrides) on the Ding
dictionary of Debian's ``trans-de-en`` (German -> English). ``--average K`` averages the
last K snapshots, one every ``--snapshot-every`` steps (paper 6.1); ``--valid-every S``
logs the greedy BLEU of 200 validation sentences every S steps (that decoding is CPU
time of the run, so it eats into the budget: off by default). Checkpoints and
translations of models trained on Ding are never written here (the dictionary is
GPL-2+). Results go to ``--out`` as they come (schema 2: rows of schema 1 were measured
on other splits and are not comparable).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch

from transformer_lib.data import load_corpus
from transformer_lib.translate.baselines import Retrieval, copy_source
from transformer_lib.translate.everyday import load_everyday as read_everyday
from transformer_lib.translate.evaluate import (evaluate, exact_match_rate,
                                                normalise_for_match, paired_bootstrap, score)
from transformer_lib.translate.pipeline import learning_curve, train_corpus
from transformer_lib.translate.presets import PRESETS, RECIPE
from transformer_lib.translate.search import translate_texts

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "real_corpus_cpu.json")
EVERYDAY = os.path.join(HERE, "data", "everyday_de_en.tsv")
SCHEMA = 2
SEARCHES = (("greedy", 1), ("beam4", 4))
# The knobs of ``train_corpus`` that RECIPE leaves off, at their off values: a search turns
# one on with ``--set`` (e.g. ``--set dict_fraction=0.3 dict_tag=true``).
KNOBS = dict(attention_dropout=None, activation_dropout=None, bpe_dropout=0.0,
             bidirectional=False, dict_tag=False, dict_fraction=0.0, model_config=None)
TRAIN_KEYS = ("preset", "vocab_size", "extra_pairs", "batch_size", "lr_factor", "warmup",
              "decay", "dropout", "label_smoothing", "word_dropout", "norm_first",
              "share_embeddings", "max_len") + tuple(KNOBS)


def load_everyday(path: str = EVERYDAY) -> list[tuple[str, list[str]]]:
    """The everyday sentences: (German, [one or two English references]), read by the
    library's ``parse_everyday`` (comments and blank lines skipped)."""
    return read_everyday(path)


def reference_streams_of(pairs) -> list[list]:
    """(source, [references]) pairs -> sacreBLEU's reference streams (None where a
    sentence has fewer references than the most)."""
    most = max(len(refs) for _, refs in pairs)
    return [[refs[k] if k < len(refs) else None for _, refs in pairs] for k in range(most)]


def in_training(everyday, corpus) -> list[str]:
    """The everyday sources that are (after ``normalise_for_match``) a training source,
    extra pairs included: common phrases are in the dictionary too, and a match there
    can be memory rather than translation."""
    seen = {normalise_for_match(s) for s, _ in list(corpus.train) + list(corpus.extra_train)}
    return [s for s, _ in everyday if normalise_for_match(s) in seen]


def score_everyday(model, pairs=None, beam_size: int = 1) -> dict:
    """chrF and exact matches (``exact_match_rate``: case, punctuation and spacing
    ignored; any reference) of ``model`` on the everyday sentences, and its
    translations of them (in the file's order). The sentences are the project's own, so
    a results file may keep what the model made of them; it never keeps Ding's."""
    pairs = load_everyday() if pairs is None else pairs
    hyps = translate_texts(model, [s for s, _ in pairs], beam_size)
    streams = reference_streams_of(pairs)
    scores, exact = score(hyps, streams), exact_match_rate(hyps, streams)
    return dict(chrf=round(scores["chrf"], 2), exact=exact["count"], total=exact["total"],
                chrf_signature=scores["chrf_signature"], translations=list(hyps))


def _rounded(scores: dict) -> dict:
    return dict(bleu=round(scores["bleu"], 2), chrf=round(scores["chrf"], 2))


def baselines(corpus) -> tuple[dict, dict]:
    """Copy and retrieval on validation and test: (scores for the file, the test
    translations for the paired comparisons, which are never stored)."""
    memory = Retrieval(corpus.train)
    systems = {"copy": copy_source, "retrieval": memory.translate}
    scores, test_hyps = {}, {}
    for name, system in systems.items():
        scores[name] = {}
        for split in ("valid", "test"):
            pairs = corpus.split(split)
            hyps = system([s for s, _ in pairs])
            scores[name][split] = _rounded(score(hyps, [t for _, t in pairs]))
            if split == "test":
                test_hyps[name] = hyps
    scores["signatures"] = {k: v for k, v in score(["a"], ["a"]).items() if "signature" in k}
    scores["retrieval_rule"] = ("target of the training pair sharing the most distinct "
                                "lower-cased words with the source; then fewest words; "
                                "then first (exact source: that pair)")
    return scores, test_hyps


def machine_header(device: str, threads: int, recipe: dict) -> dict:
    """What a results file says about its runs: clock, torch, the CPU (or GPU), recipe."""
    gpu = torch.cuda.get_device_name() if device.startswith("cuda") else None
    return dict(kind="real_corpus", schema=SCHEMA, clock="cpu" if gpu is None else "wall",
                torch=torch.__version__, cpus=os.cpu_count(),
                processor=platform.processor() or platform.machine(),
                cpu_capability=torch.backends.cpu.get_cpu_capability(), gpu=gpu,
                threads=threads, recipe=recipe,
                presets={recipe["preset"]: PRESETS[recipe["preset"]]})


def _split_scores(model, pairs) -> tuple[dict, dict]:
    """Greedy and beam 4 on ``pairs``: (rounded scores, hypotheses by search)."""
    out, hyps = {}, {}
    for name, beam in SEARCHES:
        result = evaluate(model, pairs, beam_size=beam)
        hyps[name] = result["hypotheses"]
        out[name] = dict(_rounded(result), exact_short=result["exact_short"]["count"],
                         short_total=result["exact_short"]["total"])
    out["signatures"] = dict(bleu=result["bleu_signature"], chrf=result["chrf_signature"])
    return out, hyps


def run_one(recipe: dict, minutes: float, seed: int, device: str, cores: int, corpus, *,
            final: bool = False, average: int = 1, snapshot_every: int | None = None,
            valid_every: int | None = None, steps: int | None = None,
            test_baselines: dict | None = None, everyday=None,
            bootstrap_samples: int = 1000) -> dict:
    """Train for ``minutes`` on ``cores`` (CPU time; a GPU's wall time on CUDA), then
    score validation, the everyday sentences, and (``final``) test."""
    cpu = not device.startswith("cuda")
    seconds = minutes * 60 * (cores if cpu else 1)
    load_before = os.getloadavg()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    result = train_corpus(corpus, steps=steps, max_seconds=seconds,
                          clock="cpu" if cpu else "wall", seed=seed, device=device,
                          progress=False, log_every=50, average=average,
                          snapshot_every=snapshot_every, valid_every=valid_every,
                          **{k: recipe[k] for k in TRAIN_KEYS})
    wall, cpu_s = time.perf_counter() - wall0, time.process_time() - cpu0
    load_after = os.getloadavg()
    history = result.history
    row = dict(minutes=minutes, cores=cores, seed=seed, device=device, budget_s=seconds,
               step_cap=steps, recipe=recipe, average=average,
               snapshot_every=snapshot_every, averaged=result.metrics.get("averaged", 1),
               steps=result.metrics["steps"], train_pairs=result.metrics["train_pairs"],
               vocab=result.metrics["vocab_size"],
               parameters=sum(p.numel() for p in result.model.parameters()),
               train_wall_s=round(wall, 3), train_cpu_s=round(cpu_s, 3),
               final_loss=round(history["loss"][-1], 4),
               valid_curve=learning_curve(history),
               load_before=[round(x, 2) for x in load_before],
               load_after=[round(x, 2) for x in load_after])
    row["valid"], _ = _split_scores(result.model, corpus.valid)
    row["everyday"] = {name: score_everyday(result.model, everyday, beam)
                       for name, beam in SEARCHES}
    if final:
        row["test"], hyps = _split_scores(result.model, corpus.test)
        refs = [t for _, t in corpus.test]
        compare = {"beam4_vs_greedy": (hyps["greedy"], hyps["beam4"])}
        if test_baselines is not None:
            for name, _ in SEARCHES:
                compare[f"{name}_vs_retrieval"] = (test_baselines["retrieval"], hyps[name])
        row["test"]["paired_bootstrap"] = {
            key: _paired_summary(paired_bootstrap(a, b, refs, bootstrap_samples))
            for key, (a, b) in compare.items()}
    return row


def _paired_summary(result: dict) -> dict:
    """The numbers of ``paired_bootstrap`` a results file keeps."""
    out = {}
    for metric in ("bleu", "chrf"):
        r = result[metric]
        out[metric] = dict(difference=round(r["difference"], 2),
                           p_value=round(r["p_value"], 4),
                           system_interval=[round(r["system"]["low"], 2),
                                            round(r["system"]["high"], 2)],
                           baseline_interval=[round(r["baseline"]["low"], 2),
                                              round(r["baseline"]["high"], 2)])
    out["signature"] = result["bleu_signature"]
    return out


def summarise(rows: list[dict]) -> list[dict]:
    """Test scores of the final runs: mean and spread (sample standard deviation, min,
    max) over seeds, for each budget, averaging and recipe."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        if "test" in row:
            key = json.dumps([row["minutes"], row["average"], row["recipe"]], sort_keys=True)
            groups.setdefault(key, []).append(row)
    summary = []
    for members in groups.values():
        entry = dict(minutes=members[0]["minutes"], average=members[0]["average"],
                     recipe=members[0]["recipe"], seeds=[r["seed"] for r in members])
        for search, _ in SEARCHES:
            for metric in ("bleu", "chrf"):
                values = [r["test"][search][metric] for r in members]
                entry[f"{search}_{metric}"] = dict(
                    mean=round(statistics.fmean(values), 2),
                    sd=round(statistics.stdev(values), 2) if len(values) > 1 else None,
                    min=min(values), max=max(values))
        summary.append(entry)
    return summary


def save(path: str, content: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(content, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def merge(paths: list[str], out: str) -> dict:
    """One results file from several of schema 2 on the same corpus version: their rows,
    sorted by device, budget, averaging and seed; the test summary recomputed."""
    files = [json.load(open(p)) for p in paths]
    for path, f in zip(paths, files):
        if f.get("schema") != SCHEMA:
            raise ValueError(f"{path}: schema {f.get('schema')}, not {SCHEMA}: not comparable")
        # the same sentences and splits; "extra" (the dictionary's pairs, loaded only by the
        # runs that use them) may differ
        same = {k: v for k, v in f["corpus"].items() if k != "extra"}
        first = {k: v for k, v in files[0]["corpus"].items() if k != "extra"}
        if same != first:
            raise ValueError(f"{path}: measured on {f['corpus']}, not {files[0]['corpus']}")
    header = {k: v for k, v in files[0].items() if k not in ("results", "final")}
    rows = sorted((r for f in files for r in f["results"]),
                  key=lambda r: (r["device"], r["minutes"], r["average"], r["seed"]))
    header["recipes"] = [f["recipe"] for f in files]
    merged = dict(header, results=rows, final=summarise(rows))
    save(out, merged)
    return merged


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, nargs="+", default=[1, 3, 10, 30])
    parser.add_argument("--cores", type=int, default=2,
                        help="N in 'M minutes on N cores' (M x 60 x N CPU seconds)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads torch uses (default: --cores). The budget is CPU time "
                             "either way: two 1-thread runs side by side on 2 cores train "
                             "what one 2-thread run would, in twice the wall time")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--final", action="store_true",
                        help="the chosen recipe: score the test split too (use >= 3 seeds)")
    parser.add_argument("--average", type=int, default=1,
                        help="average the last K snapshots (paper 6.1); recorded per row")
    parser.add_argument("--snapshot-every", type=int, default=None,
                        help="steps between snapshots (needed with --average > 1)")
    parser.add_argument("--valid-every", type=int, default=None,
                        help="log the greedy BLEU of 200 validation sentences every S steps "
                             "(its decoding counts in the CPU budget)")
    parser.add_argument("--steps", type=int, default=None, help="also stop after N steps")
    parser.add_argument("--bootstrap-samples", type=int, default=1000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="recipe overrides, e.g. preset=medium dropout=0.2 (JSON values)")
    parser.add_argument("--baselines-only", action="store_true",
                        help="write the file's header and the baselines, train nothing")
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--merge", nargs="+", default=None, metavar="FILE",
                        help="merge these results files into --out and stop")
    return parser


def main(argv=None, corpus=None) -> int:
    """The command line; ``corpus`` (a ``Corpus``) replaces Ding, for tests."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.merge:
        merged = merge(args.merge, args.out)
        print(f"wrote {args.out}: {len(merged['results'])} runs")
        return 0
    if args.average > 1 and not args.snapshot_every:
        parser.error("--average K > 1 needs --snapshot-every S")
    recipe = dict(RECIPE, **KNOBS)
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in recipe:
            parser.error(f"--set: unknown recipe key {key!r}; expected one of {sorted(recipe)}")
        try:
            recipe[key] = json.loads(value)
        except json.JSONDecodeError:
            recipe[key] = value
    if args.final and len(args.seeds) < 3:
        print(f"note: --final with {len(args.seeds)} seed(s); reported points want >= 3")
    torch.set_num_threads(args.threads or args.cores)
    if corpus is None:
        phrases = bool(recipe["extra_pairs"] or recipe["dict_fraction"])
        corpus = load_corpus("ding", phrases=phrases)
    everyday = load_everyday()
    base_scores, test_baselines = baselines(corpus)
    header = dict(machine_header(args.device, args.threads or args.cores, recipe),
                  corpus=dict(name=corpus.name, version=corpus.info.get("version"),
                              train=len(corpus.train), valid=len(corpus.valid),
                              test=len(corpus.test), extra=len(corpus.extra_train)),
                  everyday=dict(path=os.path.relpath(EVERYDAY, os.path.dirname(HERE)),
                                sentences=len(everyday),
                                in_training=in_training(everyday, corpus),
                                note="a report on everyday speech, not a choice set"),
                  baselines=base_scores)
    print("baselines: " + "; ".join(
        f"{name} valid BLEU {base_scores[name]['valid']['bleu']:.2f} chrF "
        f"{base_scores[name]['valid']['chrf']:.2f}" for name in ("copy", "retrieval")))
    results = []
    if args.baselines_only:  # the file's header and baselines, no run
        save(args.out, dict(header, results=results))
        print(f"wrote {args.out}")
        return 0
    for seed in args.seeds:
        for minutes in args.minutes:
            row = run_one(recipe, minutes, seed, args.device, args.cores, corpus,
                          final=args.final, average=args.average,
                          snapshot_every=args.snapshot_every, valid_every=args.valid_every,
                          steps=args.steps, test_baselines=test_baselines,
                          everyday=everyday, bootstrap_samples=args.bootstrap_samples)
            results.append(row)
            valid = row["valid"]
            print(f"{minutes:g} min on {args.cores} cores, seed {seed}: valid BLEU "
                  f"{valid['greedy']['bleu']:.2f} chrF {valid['greedy']['chrf']:.2f} (greedy), "
                  f"BLEU {valid['beam4']['bleu']:.2f} chrF {valid['beam4']['chrf']:.2f} "
                  f"(beam 4); everyday exact {row['everyday']['greedy']['exact']}/"
                  f"{row['everyday']['greedy']['total']}; {row['steps']} steps, "
                  f"{row['train_cpu_s']} CPU s, {row['train_wall_s']} wall s, load "
                  f"{row['load_before'][0]:.1f}", flush=True)
            content = dict(header, results=results)
            if args.final:
                content["final"] = summarise(results)
            save(args.out, content)
    if args.final:
        for entry in summarise(results):
            print(f"test, {entry['minutes']:g} min, seeds {entry['seeds']}: BLEU "
                  f"{entry['beam4_bleu']['mean']:.2f} (sd {entry['beam4_bleu']['sd']}) chrF "
                  f"{entry['beam4_chrf']['mean']:.2f} (sd {entry['beam4_chrf']['sd']}), beam 4")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
