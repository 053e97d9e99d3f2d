"""One command for every corpus::

    python -m transformer_lib.translate train --corpus ding --minutes 10 --out ding.pt
    python -m transformer_lib.translate translate ding.pt "Wie spät ist es?"
    echo "Das ist gut." | python -m transformer_lib.translate translate ding.pt
    python -m transformer_lib.translate evaluate ding.pt --beam 4
    python -m transformer_lib.translate average avg.pt a.pt b.pt c.pt

``--minutes M --clock cpu --threads N`` trains M minutes of N cores: M * 60 * N seconds of
the process's CPU time, however busy the machine. ``train`` runs under torchrun as
``number_words`` does (``torchrun --standalone --nproc_per_node 2 -m
transformer_lib.translate train ...``); SIGTERM or Ctrl-C stops it after the current step
with a resumable checkpoint (exit status 75), and the same command with ``--resume OUT``
finishes the run.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

from .. import distributed
from ..precision import PRECISIONS
from ..stopping import StopFlag
from .arguments import (
    add_deterministic_argument,
    boolean as _bool,
    check_device_args,
    check_world_args,
    int_at_least,
    positive_float,
)
from .checkpoints import (
    average_checkpoints,
    check_output_path,
    load_resumable,
    load_translator,
    read_checkpoint,
    save_translator,
)
from .evaluate import evaluate, report
from .pipeline import train_corpus
from .presets import PRESETS, RECIPE
from .search import translate_texts
from .trainer import EXIT_STOPPED, ResumeMismatch, check_batch_size

CORPORA = ("ding", "tsv", "multi30k", "number-words")


def _fraction(text: str) -> float:
    """An argparse type: a float in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be at least 0 and below 1, got {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m transformer_lib.translate",
        description="Train a Transformer on a parallel corpus, translate with it, score it "
                    "with sacreBLEU.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    positive, non_negative = int_at_least(1), int_at_least(0)

    train = commands.add_parser(
        "train", help="train a model on a corpus",
        epilog=f"SIGTERM or Ctrl-C stops the run after the current step: it saves a "
               f"resumable checkpoint at --out and exits with status {EXIT_STOPPED}; the "
               f"same command with --resume OUT finishes the run.")
    train.add_argument("--corpus", choices=CORPORA, default="ding",
                       help="ding (default: /usr/share/trans/de-en, package trans-de-en), "
                            "tsv (--path FILE), multi30k (--path FOLDER), number-words")
    train.add_argument("--path", default=None, help="the corpus file or folder")
    train.add_argument("--src-col", type=int_at_least(0), default=0,
                       help="tsv: the source column (0 is the first)")
    train.add_argument("--tgt-col", type=int_at_least(0), default=1,
                       help="tsv: the target column")
    train.add_argument("--src-lang", default=None,
                       help="tsv: the source language's name; multi30k: its code (de)")
    train.add_argument("--tgt-lang", default=None,
                       help="tsv: the target language's name; multi30k: its code (en)")
    train.add_argument("--out", default=None, help="checkpoint path (default: CORPUS.pt)")
    train.add_argument("--minutes", type=positive_float, default=None,
                       help="time budget, on --clock: M wall-clock minutes, or with --clock "
                            "cpu M minutes of --threads cores, M * 60 * threads seconds of "
                            "the process's CPU time")
    train.add_argument("--steps", type=positive, default=None,
                       help="training steps (default: 1000 if --minutes is not given)")
    train.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                       help="what --minutes counts: wall-clock time, or the process's CPU "
                            "time (all its threads together; neighbours do not count), "
                            "--minutes of --threads cores")
    train.add_argument("--preset", choices=sorted(PRESETS), default=RECIPE["preset"])
    train.add_argument("--vocab-size", type=int_at_least(8), default=RECIPE["vocab_size"],
                       help="joint BPE vocabulary size")
    train.add_argument("--extra-pairs", type=int_at_least(-1), default=RECIPE["extra_pairs"],
                       help="word/phrase pairs drawn from the corpus's extra training "
                            "material (Ding: ~390k); -1: all")
    train.add_argument("--batch-size", type=positive, default=RECIPE["batch_size"],
                       help="sentence pairs per optimizer step, all processes and "
                            "micro-batches together")
    train.add_argument("--lr-factor", type=positive_float, default=RECIPE["lr_factor"])
    train.add_argument("--warmup", type=positive, default=RECIPE["warmup"])
    train.add_argument("--decay", choices=("linear", "noam"), default=RECIPE["decay"])
    train.add_argument("--dropout", type=_fraction, default=RECIPE["dropout"],
                       help="on the embeddings and every sublayer's output (and on attention "
                            "and in the feed-forward layers unless set apart below)")
    train.add_argument("--attention-dropout", type=_fraction, default=None,
                       help="on the attention weights (default: --dropout)")
    train.add_argument("--activation-dropout", type=_fraction, default=None,
                       help="inside the feed-forward layers, after the activation "
                            "(default: --dropout)")
    train.add_argument("--label-smoothing", type=_fraction, default=RECIPE["label_smoothing"])
    train.add_argument("--word-dropout", type=_fraction, default=RECIPE["word_dropout"],
                       help="source tokens replaced by <unk> in training")
    train.add_argument("--bpe-dropout", type=_fraction, default=0.0,
                       help="BPE-dropout: each merge skipped with this probability when "
                            "the training examples are segmented anew at each pass (never "
                            "at evaluation); not reproducible bit for bit (default: 0)")
    train.add_argument("--bidirectional", type=_bool, nargs="?", const=True, default=False,
                       metavar="true|false",
                       help="one model for both directions: every pair both ways, a "
                            "<2LANG> tag before each source; translates with the target "
                            "language's tag (default: false)")
    train.add_argument("--dict-tag", type=_bool, nargs="?", const=True, default=False,
                       metavar="true|false",
                       help="a <dict> tag before the source of each word/phrase pair "
                            "(--extra-pairs, --dict-fraction) (default: false)")
    train.add_argument("--dict-fraction", type=_fraction, default=0.0, metavar="F",
                       help="each pass over the sentences comes with a new sample of the "
                            "corpus's word/phrase pairs, the fraction F of the pass (not "
                            "with --extra-pairs) (default: 0)")
    train.add_argument("--d-model", type=positive, default=None,
                       help="model width (default: the preset's)")
    train.add_argument("--num-heads", type=positive, default=None,
                       help="attention heads (default: the preset's)")
    train.add_argument("--layers", type=positive, default=None,
                       help="encoder and decoder layers, each (default: the preset's)")
    train.add_argument("--d-ff", type=positive, default=None,
                       help="feed-forward width (default: the preset's)")
    train.add_argument("--norm-first", type=_bool, default=RECIPE["norm_first"],
                       help="pre-norm (true, default) or the paper's post-norm (false)")
    train.add_argument("--average", type=positive, default=1, metavar="K",
                       help="average the last K snapshots of the weights (paper 6.1)")
    train.add_argument("--snapshot-every", type=positive, default=200, metavar="STEPS",
                       help="steps between snapshots for --average")
    train.add_argument("--seed", type=non_negative, default=0)
    add_deterministic_argument(train)
    train.add_argument("--threads", type=positive, default=None,
                       help="torch CPU threads per process, and the cores --clock cpu "
                            "counts (default: torch's, torch.get_num_threads())")
    train.add_argument("--device", default=None, help="cpu, cuda, ... (default: best available)")
    train.add_argument("--precision", choices=PRECISIONS, default="fp32")
    train.add_argument("--accumulate", type=positive, default=1,
                       help="micro-batches per optimizer step (gradient accumulation)")
    train.add_argument("--resume", default=None, metavar="PATH",
                       help="continue the run saved in this checkpoint (same settings, "
                            "--threads and --deterministic included)")
    train.add_argument("--stop-after", type=non_negative, default=None, metavar="STEPS",
                       help="stop as if signalled once this many steps are done")
    train.add_argument("--beam", type=positive, default=1,
                       help="beam size for the test score printed at the end")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")

    tr = commands.add_parser("translate", help="translate text (arguments, or stdin lines)")
    tr.add_argument("checkpoint")
    tr.add_argument("text", nargs="*", help="sentences (default: one per line of stdin)")
    tr.add_argument("--beam", type=positive, default=1)
    tr.add_argument("--length-penalty", type=float, default=0.6)
    tr.add_argument("--device", default=None)

    ev = commands.add_parser("evaluate",
                             help="BLEU and chrF (sacreBLEU, signatures) on a split")
    ev.add_argument("checkpoint")
    ev.add_argument("--split", choices=("test", "valid"), default="test")
    ev.add_argument("--path", default=None,
                    help="the corpus file or folder (default: where it was trained from)")
    ev.add_argument("--beam", type=positive, default=1)
    ev.add_argument("--length-penalty", type=float, default=0.6)
    ev.add_argument("--device", default=None)

    av = commands.add_parser("average", help="average the weights of checkpoints (paper 6.1)")
    av.add_argument("out")
    av.add_argument("checkpoints", nargs="+")
    return parser


def corpus_options(args) -> dict:
    """``load_corpus`` options from the command line (plain values, kept in the checkpoint
    so that ``evaluate`` reads the same corpus)."""
    path = os.path.abspath(args.path) if args.path is not None else None
    langs = {key: value for key, value in (("src_lang", args.src_lang),
                                           ("tgt_lang", args.tgt_lang)) if value}
    if args.corpus == "ding":
        phrases = args.extra_pairs != 0 or args.dict_fraction > 0
        return ({"path": path} if path else {}) | {"phrases": phrases}
    if args.corpus == "tsv":
        return {"path": path, "src_col": args.src_col, "tgt_col": args.tgt_col, **langs}
    if args.corpus == "multi30k":
        return {"folder": path, **langs}
    return {}


def budget_seconds(minutes: float | None, clock: str, threads: int) -> float | None:
    """``--minutes`` in seconds on ``clock``: M wall-clock minutes, or on the CPU clock M
    minutes of ``threads`` cores, M * 60 * threads seconds of the process's CPU time (as
    the benchmarks count: "10 minutes on 2 cores" is 1200 CPU seconds)."""
    if minutes is None:
        return None
    return minutes * 60 * (threads if clock == "cpu" else 1)


def model_options(args) -> dict:
    """``train_corpus``'s ``model_config``: the size options given on the command line."""
    given = {"d_model": args.d_model, "num_heads": args.num_heads,
             "num_encoder_layers": args.layers, "num_decoder_layers": args.layers,
             "d_ff": args.d_ff}
    return {key: value for key, value in given.items() if value is not None}


def load_corpus_for(name: str, options: dict, parser=None):
    """``transformer_lib.data.load_corpus(name, **options)``; a missing or bad corpus is a
    command-line error that says what to do."""
    from ..data import load_corpus

    if name in ("tsv", "multi30k") and not (options.get("path") or options.get("folder")):
        what = "a TSV file" if name == "tsv" else "the folder of Multi30k's files"
        message = f"--corpus {name} needs --path: {what}"
        if parser is None:
            raise ValueError(message)
        parser.error(message)
    try:
        return load_corpus(name, **options)
    except (OSError, ValueError, TypeError) as error:
        if parser is None:
            raise
        parser.error(f"corpus {name!r}: {error}")


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "train":
        return _train(parser, args)
    if args.command == "translate":
        return _translate(parser, args)
    if args.command == "evaluate":
        return _evaluate(parser, args)
    return _average(parser, args)


def _load(parser, path, device=None):
    try:
        return load_translator(path, device)
    except (OSError, ValueError) as error:
        parser.error(f"argument checkpoint: {error}")


def _translate(parser, args) -> int:
    model = _load(parser, args.checkpoint, args.device)
    texts = args.text or [line.rstrip("\n") for line in sys.stdin]
    texts = [t for t in texts if t.strip()]
    for line in translate_texts(model, texts, args.beam, args.length_penalty):
        print(line)
    return 0


def _evaluate(parser, args) -> int:
    model = _load(parser, args.checkpoint, args.device)
    name = model.corpus.get("loader", model.corpus.get("name"))
    options = dict(model.corpus.get("options", {}), phrases=False) if name == "ding" \
        else dict(model.corpus.get("options", {}))
    if args.path is not None:
        options["folder" if name == "multi30k" else "path"] = os.path.abspath(args.path)
    corpus = load_corpus_for(name, options, parser)
    result = evaluate(model, corpus.split(args.split), args.beam, args.length_penalty)
    print(f"{corpus.name} {args.split} split:")
    print(report(result))
    return 0


def _average(parser, args) -> int:
    try:
        check_output_path(args.out)
        model = _load(parser, args.checkpoints[-1])
        model.load_state_dict(average_checkpoints(args.checkpoints))
        metrics = read_checkpoint(args.checkpoints[-1]).get("metrics", {})
    except (OSError, ValueError) as error:
        parser.error(str(error))
    save_translator(model, args.out, {**metrics, "averaged": len(args.checkpoints)})
    print(f"saved {args.out}: the mean of {len(args.checkpoints)} checkpoints")
    return 0


def _train(parser, args) -> int:
    args.out = args.out or f"{args.corpus}.pt"
    check_device_args(parser, args)
    stop = StopFlag(after=args.stop_after)
    with stop.catch_signals():  # from here on, SIGTERM and Ctrl-C end with a checkpoint
        try:
            world = distributed.setup(args.device)
        except ValueError as error:
            parser.error(f"argument --device: {error}")
        try:
            return _train_world(parser, args, world, stop)
        finally:
            distributed.teardown()


def _train_world(parser, args, world, stop) -> int:
    resume = check_world_args(parser, args, world, load_resumable)
    if args.threads:
        torch.set_num_threads(args.threads)
    say = print if world.is_main else (lambda *values, **options: None)
    start = time.perf_counter()
    if args.dict_fraction > 0 and args.extra_pairs != 0:
        parser.error(f"argument --dict-fraction: a new sample of word/phrase pairs at each "
                     f"pass does not go with --extra-pairs {args.extra_pairs} (one fixed "
                     f"sample): give one of them")
    options = corpus_options(args)
    corpus = load_corpus_for(args.corpus, options, parser)
    if args.dict_fraction > 0 and not corpus.extra_train:
        parser.error(f"argument --dict-fraction: corpus {corpus.name} has no word/phrase "
                     f"pairs (extra training material) to draw from")
    say(f"corpus {corpus.name}: {len(corpus.train)} training, {len(corpus.valid)} "
        f"validation, {len(corpus.test)} test pairs ({time.perf_counter() - start:.1f} s)")
    steps = args.steps if args.steps is not None or args.minutes is not None else 1000
    seconds = budget_seconds(args.minutes, args.clock, torch.get_num_threads())
    if seconds is not None and args.clock == "cpu":
        say(f"budget: {args.minutes:g} minutes of {torch.get_num_threads()} cores, "
            f"{seconds:g} s of the process's CPU time")
    try:
        result = train_corpus(
            corpus, steps=steps, max_seconds=seconds, clock=args.clock, preset=args.preset,
            vocab_size=args.vocab_size, extra_pairs=args.extra_pairs, seed=args.seed,
            deterministic=args.deterministic, batch_size=args.batch_size,
            lr_factor=args.lr_factor, warmup=args.warmup, decay=args.decay,
            dropout=args.dropout, label_smoothing=args.label_smoothing,
            word_dropout=args.word_dropout, attention_dropout=args.attention_dropout,
            activation_dropout=args.activation_dropout, bpe_dropout=args.bpe_dropout,
            bidirectional=args.bidirectional, dict_tag=args.dict_tag,
            dict_fraction=args.dict_fraction, model_config=model_options(args),
            norm_first=args.norm_first,
            average=args.average, snapshot_every=args.snapshot_every, device=args.device,
            world=world, accumulate=args.accumulate, precision=args.precision,
            resume=resume, stop=stop, progress=world.is_main and not args.no_progress)
    except ResumeMismatch as error:
        parser.error(f"argument --resume: {error}")
    result.model.corpus.update(loader=args.corpus, options=options)  # for evaluate
    code = _finish(args, result, corpus, stop) if world.is_main else 0
    return distributed.broadcast_object(code)  # every rank exits as rank 0 does


def _finish(args, result, corpus, stop) -> int:
    """Rank 0, after training: save; unless stopped, score the test split and show."""
    model, metrics = result.model, result.metrics
    if result.stopped or stop.requested:
        out = save_translator(model, args.out, metrics, training=result.training)
        print(f"stopped after step {metrics['steps']}: saved the resumable checkpoint "
              f"{out}; to finish, run the same command with --resume {out}")
        return EXIT_STOPPED
    print(f"trained {metrics['steps']} steps in {metrics['train_seconds']:.1f} s "
          f"({args.clock} clock) on {next(model.parameters()).device}")
    scores = evaluate(model, corpus.test, beam_size=args.beam)
    metrics.update(test_bleu=scores["bleu"], test_chrf=scores["chrf"])
    out = save_translator(model, args.out, metrics, training=result.training)
    print(f"{corpus.name} test split:")
    print(report(scores))
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
