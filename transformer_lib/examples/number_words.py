"""Capstone: translate English number words into German (or French) number words.

    python -m transformer_lib.examples.number_words --lang de --minutes 0.5 --out de.pt

trains a small ``tl.Transformer`` with Adam as in the paper (betas (0.9, 0.98), eps
1e-9) and the warm-up of eq. 3, shows a progress bar with loss and accuracy, reports
exact match on held-out test numbers and saves a checkpoint (weights + configuration +
vocabularies) atomically. From Python::

    from transformer_lib.examples import load_checkpoint, translate
    model = load_checkpoint("de.pt")
    translate(model, "ninety-seven")            # 'siebenundneunzig'
    translate(model, "ninety-seven", beam_size=4)

The same command runs under ``torchrun`` (``torchrun --standalone --nproc_per_node 2 -m
transformer_lib.examples.number_words ...``): the processes train one model with
DistributedDataParallel, each on its share of every batch (``transformer_lib.distributed``,
chapter 13). ``--precision bf16|fp16`` trains under autocast, ``--accumulate K`` in K
micro-batches per step. SIGTERM or Ctrl-C stops a run after the current step with a
resumable checkpoint at ``--out`` (exit status 75); the same command with ``--resume
OUT`` finishes it.

The number words are one corpus among others: the loop, the schedule and the budget are
``transformer_lib.translate.trainer`` (``fit``), which every corpus shares (``python -m
transformer_lib.translate train --corpus ...``); this module keeps what is particular to
number words (its vocabularies, exact match, the capstone's recipe and command line).

The recipe is tuned for a short budget (half a minute on two CPU cores gives 99% exact
match and more) and departs from the paper's where measurements said so
(``benchmarks/capstone_recipe.py``):

- the warm-up of eq. 3, short (40 steps) and times a constant ``lr_factor`` (the paper
  warms up for 4000 steps), then a straight line down to zero exactly where the budget
  ends (``steps`` or ``seconds``) instead of eq. 3's 1/sqrt(step) tail: the weights
  settle at the end instead of being cut off at a high rate;
- batches of 64, not 128: twice the updates for the same examples and about the same CPU
  time, and at this scale the number of updates is what counts;
- no dropout and no label smoothing: the held-out numbers follow the same rules as the
  training numbers, so there is little to over-fit, and both slowed learning down;
- one encoder and one decoder layer: per second of CPU, the shallow model learns faster;
- French targets as "glued" morphemes (" mille", "-vingt"), training numbers rich in
  zero digits (see ``NumberWordsData``), and one CPU thread (see ``main``).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import time
from dataclasses import dataclass, field

import torch

from .. import distributed
from .._checks import check_device, check_instance, check_positive_int
from ..checkpoint import TRAINING_STATE_VERSION, atomic_save
from ..data import BOS, EOS, NumberWordsData, Vocab, pad_sequences, target_tokenizer, tokenize_words
from ..data.numbers import split_numbers
from ..data.tokenize import tokenizer_inventory
from ..decoding import _eval_mode, beam_search, greedy_decode
from ..model import Transformer
from ..precision import PRECISIONS, check_precision, grad_scaler
from ..stopping import StopFlag
from ..translate.arguments import (add_deterministic_argument, check_device_args,
                                  check_world_args, int_at_least, positive_float)
from ..translate.checkpoints import check_output_path, read_checkpoint, to_cpu  # noqa: F401
from ..translate.trainer import (  # noqa: F401 (names of this module's interface)
    EXIT_STOPPED,
    LinearDecay,
    ResumeMismatch,
    check_batch_size,
    check_resumable,
    fit,
    make_optimizer,
)
from ..utils import get_device, set_seed

CHECKPOINT_FORMAT = "transformer_lib.number_words/1"

# A small, fast model: on one CPU thread a training step takes about 10 milliseconds.
MODEL_CONFIG = dict(d_model=64, num_heads=4, num_encoder_layers=1, num_decoder_layers=1,
                    d_ff=256, dropout=0.0, max_len=64)
# Peak learning rate 0.2 * 64**-0.5 * 40**-0.5 = 4.0e-3 at step 40, then down to 0.
TRAIN_CONFIG = dict(batch_size=64, lr_factor=0.2, warmup=40, label_smoothing=0.0,
                    decay="linear")
# The recipe of the first edition, close to the paper's, for comparison: eq. 3 with
# warm-up 200 and factor 0.5, 2 + 2 layers, dropout and label smoothing 0.1, batches of
# 128, uniformly drawn training numbers, separators as target tokens.
PAPER_RECIPE = dict(
    model_config=dict(MODEL_CONFIG, num_encoder_layers=2, num_decoder_layers=2,
                      dropout=0.1),
    batch_size=128, lr_factor=0.5, warmup=200, label_smoothing=0.1, decay="noam",
    data=dict(scheme="morphemes", zero_prob=None))


class NumberTranslator(Transformer):
    """A ``tl.Transformer`` that also carries what it needs to translate text: the two vocabularies
    and the target tokenizer. Its weights are exactly a ``Transformer``'s (same ``state_dict``)."""

    def __init__(self, src_vocab: Vocab, tgt_vocab: Vocab, lang: str,
                 scheme: str = "glued", morphemes=None, max_target_len: int = 32,
                 **model_config):
        super().__init__(len(src_vocab), len(tgt_vocab), pad_id=Vocab.pad_id, **model_config)
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab
        self.lang, self.scheme = lang, scheme
        self.tgt_tokenizer = target_tokenizer(lang, scheme, morphemes)
        self.max_target_len = max_target_len  # decoding stops after this many tokens

    def extra_state(self) -> dict:
        """Everything besides the weights that a checkpoint needs (plain Python values)."""
        morphemes = tokenizer_inventory(self.tgt_tokenizer)  # a BPE state: one str
        return dict(src_vocab=list(self.src_vocab.itos), tgt_vocab=list(self.tgt_vocab.itos),
                    lang=self.lang, scheme=self.scheme, morphemes=morphemes,
                    max_target_len=self.max_target_len)


def build_model(data: NumberWordsData, **overrides) -> NumberTranslator:
    """A fresh ``NumberTranslator`` for ``data``'s vocabularies; ``overrides`` change MODEL_CONFIG."""
    unknown = set(overrides) - set(MODEL_CONFIG) - {"norm_first", "share_embeddings"}
    if unknown:
        raise ValueError(f"unknown model settings {sorted(unknown)}; expected some of {sorted(MODEL_CONFIG)}")
    config = {**MODEL_CONFIG, **overrides}
    longest = int((data.tensors["train"][1] != Vocab.pad_id).sum(1).max())
    return NumberTranslator(data.src_vocab, data.tgt_vocab, data.lang, data.scheme,
                            tokenizer_inventory(data.tgt_tokenizer),
                            max_target_len=longest + 8, **config)


@dataclass
class TrainResult:
    """What ``train_number_words`` returns: the model, its data, the training history (steps,
    loss, token accuracy, learning rate, seconds; plus ``valid_step``/``valid_exact`` if validated)
    and the test scores."""

    model: NumberTranslator
    data: NumberWordsData
    history: dict
    metrics: dict = field(default_factory=dict)
    # What a checkpoint needs to resume the run (``training_state`` plus the run's
    # settings), and whether a StopFlag ended it early.
    training: dict | None = None
    stopped: bool = False


def train_number_words(lang: str = "de", *, steps: int | None = 1000, max_seconds: float | None = None,
                       data: NumberWordsData | None = None, train_size: int = 12_000, seed: int = 0,
                       deterministic: bool | None = None,
                       batch_size: int = TRAIN_CONFIG["batch_size"],
                       lr_factor: float = TRAIN_CONFIG["lr_factor"], warmup: int = TRAIN_CONFIG["warmup"],
                       label_smoothing: float = TRAIN_CONFIG["label_smoothing"],
                       decay: str = TRAIN_CONFIG["decay"],
                       model_config: dict | None = None, device=None, progress: bool = True,
                       log_every: int = 20, valid_every: int | None = None,
                       evaluate_test: bool = True, accumulate: int = 1, precision: str = "fp32",
                       world: distributed.World | None = None, resume: dict | None = None,
                       stop: StopFlag | None = None) -> TrainResult:
    """Build the data (unless given), train for ``steps`` steps and/or ``max_seconds`` seconds,
    then (``evaluate_test``) measure greedy exact match on the test split.

    ``decay="linear"`` lets the learning rate fall to zero where that budget ends (see
    ``make_optimizer``); ``"noam"`` keeps eq. 3's 1/sqrt(step) decay. Training for a
    fixed number of steps with a fixed ``seed`` is reproducible; a time budget depends
    on the machine's speed. ``valid_every`` adds validation exact match to the history.

    Past one process (the command line's ``torchrun`` path):

    - ``world`` (``tl.distributed.setup()``): the model is wrapped in DDP and each rank
      trains on its share of every batch; ``batch_size`` is the whole step's batch, cut
      into ``world.size * accumulate`` micro-batches. Rank 0 alone shows progress,
      validates and tests.
    - ``accumulate=K`` micro-batches per step; ``precision`` "fp32", "bf16" or "fp16".
    - ``resume``: a checkpoint read by ``load_resumable``; training continues from it
      (the settings must be those it was saved with), bit for bit on the CPU, and on CUDA
      with ``deterministic=True`` (``tl.set_seed``'s argument: by default deterministic
      algorithms on the CPU only).
    - ``stop``: a ``StopFlag`` that ends training early; ``result.stopped`` says so.

    ``result.training`` holds what ``save_checkpoint(..., training=...)`` needs to resume.
    """
    if steps is None and max_seconds is None:
        raise ValueError("give steps or max_seconds (or both)")
    if decay not in ("linear", "noam"):
        raise ValueError(f"decay must be 'linear' or 'noam', got {decay!r}")
    world = world if world is not None else distributed.World()
    check_instance("world", world, distributed.World, "a tl.distributed.World")
    if world.parallel:
        device = world.device
    else:
        device = torch.device(device) if device is not None else get_device()
    check_precision(precision, device)
    check_positive_int("accumulate", accumulate)
    check_batch_size(batch_size, world.size, accumulate)
    if data is None:
        data = NumberWordsData(lang, train_size=train_size, seed=seed)
    elif data.lang != lang:
        raise ValueError(f"data is for lang={data.lang!r}, but lang={lang!r} was asked for")
    set_seed(seed, deterministic=deterministic)
    model = build_model(data, **(model_config or {})).to(device)
    run = dict(lang=lang, steps=steps, max_seconds=max_seconds, seed=seed,
               batch_size=batch_size, lr_factor=lr_factor, warmup=warmup,
               label_smoothing=label_smoothing, decay=decay, model=dict(model.config),
               accumulate=accumulate, precision=precision, data=data_fingerprint(data))
    scaler = grad_scaler(precision, device)
    batcher = data.batches(batch_size, seed=seed, device=device)
    past = resume["training"]["history"] if resume is not None else {}
    history_extra = {"valid_step": list(past.get("valid_step", [])),
                     "valid_exact": list(past.get("valid_exact", []))}

    def validate(step, history):
        # The callback runs every ``log_every`` steps: validate at the first one past each multiple.
        if valid_every and world.is_main and step // valid_every > len(history_extra["valid_step"]):
            history_extra["valid_step"].append(step)
            history_extra["valid_exact"].append(exact_match(model, data, "valid")["exact_match"])

    done = fit(model, batcher, run, steps=steps, max_seconds=max_seconds, lr_factor=lr_factor,
               warmup=warmup, decay=decay, label_smoothing=label_smoothing, seed=seed,
               world=world, accumulate=accumulate, precision=precision, scaler=scaler,
               resume=resume, stop=stop, progress=progress, log_every=log_every,
               callback=validate, extra_history=history_extra)
    history, metrics, state, stopped = done.history, done.metrics, done.training, done.stopped
    if evaluate_test and world.is_main and not stopped:
        metrics["test_exact_match"] = exact_match(model, data, "test")["exact_match"]
    model.eval()
    return TrainResult(model, data, history, metrics, training=state, stopped=stopped)


def data_fingerprint(data: NumberWordsData) -> str:
    """A short hash of the training tensors and vocabularies: a resumed run must train on
    the very same data (same lang, train size, seed, ...)."""
    digest = hashlib.sha256()
    for tensor in data.tensors["train"]:
        digest.update(tensor.cpu().numpy().tobytes())
    digest.update("\n".join(data.src_vocab.itos + data.tgt_vocab.itos).encode())
    return digest.hexdigest()[:16]


@torch.no_grad()
def decode_ids(model: NumberTranslator, src: torch.Tensor, beam_size: int = 1,
               batch_size: int = 1000) -> list[str]:
    """Translate a padded (N, Ls) tensor of source ids into N target strings, in big batches."""
    device = next(model.parameters()).device
    out = []
    for start in range(0, src.size(0), batch_size):
        chunk = src[start:start + batch_size].to(device)
        chunk = chunk[:, : int((chunk != model.pad_id).sum(1).max())]  # drop all-padding columns
        if beam_size == 1:
            ys = greedy_decode(model, chunk, model.max_target_len, Vocab.bos_id, Vocab.eos_id)
        else:
            ys = beam_search(model, chunk, beam_size, model.max_target_len, Vocab.bos_id, Vocab.eos_id)
        for row in ys.cpu().tolist():
            out.append(model.tgt_tokenizer.detokenize(model.tgt_vocab.decode(row)))
    return out


def exact_match(model: NumberTranslator, data: NumberWordsData, split: str = "test",
                beam_size: int = 1) -> dict:
    """Fraction of ``split``'s numbers translated exactly right, with the predictions.

    Returns {"exact_match": float, "numbers": [...], "predictions": [...], "targets": [...]}.
    """
    if split not in data.tensors:
        raise ValueError(f"split must be one of {sorted(data.tensors)}, got {split!r}")
    numbers = [int(n) for n in data.numbers[split]]
    predictions = decode_ids(model, data.tensors[split][0], beam_size)
    targets = [data.words(n) for n in numbers]
    correct = sum(p == t for p, t in zip(predictions, targets))
    return {"exact_match": correct / len(numbers), "numbers": numbers,
            "predictions": predictions, "targets": targets}


def encode_source(model: NumberTranslator, text: str, unknown: str = "error") -> torch.Tensor:
    """English number words -> a (1, Ls) tensor of source ids.

    The text is lower-cased and its whitespace normalised. Words the model never saw raise a
    ValueError listing them (``unknown="error"``), or become <unk> (``unknown="unk"``): the model
    then translates the rest as best it can, which is rarely right.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    tokens = tokenize_words(" ".join(text.lower().split()))
    if not tokens:
        raise ValueError(f"text must contain English number words such as 'forty-two', got {text!r}")
    if unknown == "error":
        missing = [t for t in tokens if t not in model.src_vocab]
        if missing:
            raise ValueError(f"unknown words {missing} in {text!r}; expected English number words "
                             f"(0 to 999,999) such as 'one hundred and forty-two'. "
                             f"Pass unknown='unk' to translate them as <unk>.")
    ids = model.src_vocab.encode(tokens, unknown="unk" if unknown == "error" else unknown)
    if len(ids) > model.config["max_len"]:
        raise ValueError(f"text has {len(ids)} tokens, more than the model's max_len={model.config['max_len']}")
    device = next(model.parameters()).device
    return torch.tensor([ids], dtype=torch.long, device=device)


def translate(model: NumberTranslator, text: str, beam_size: int = 1, unknown: str = "error") -> str:
    """Translate English number words (e.g. "ninety-seven") into the model's target language.

    ``beam_size=1`` is greedy decoding. Empty text raises ValueError; for unknown words see
    ``encode_source`` (``unknown="error"`` raises, ``"unk"`` maps them to <unk>).
    """
    if not isinstance(model, NumberTranslator):
        raise TypeError(f"model must be a NumberTranslator (see load_checkpoint), got {type(model).__name__}")
    return decode_ids(model, encode_source(model, text, unknown), beam_size)[0]


@torch.no_grad()
def attention_batch(model: NumberTranslator, texts: list[str], beam_size: int = 1) -> dict:
    """Translate ``texts``, then run the model once more on (sources, its own outputs) as one padded
    batch with ``return_attention=True``, to collect every attention map for plotting.

    Returns lists with one entry per text: "source" (source tokens), "target" (output tokens,
    ending with <eos>), "decoder_input" (<bos> and the output tokens: what the decoder reads),
    "translation" (the output string); and "encoder"/"decoder"/"cross": lists, one per layer, of
    (B, H, Lq, Lk) CPU tensors. Decoder rows are the positions that *predict* each output token, so
    row i of a cross map shows what the model looked at to write ``target[i]``. Rows and columns
    past an example's own lengths are padding; cropped to those lengths, an example's maps do not
    depend on the others in the batch (the masks make padding invisible).
    """
    if isinstance(texts, str) or not texts:
        raise ValueError(f"texts must be a non-empty list of strings, got {texts!r}")
    device = next(model.parameters()).device
    sources = [encode_source(model, text)[0].tolist() for text in texts]
    src = pad_sequences(sources, model.pad_id).to(device)  # (B, Ls)
    translations = decode_ids(model, src, beam_size)
    targets = [model.tgt_tokenizer.tokenize(t) for t in translations]
    tgt_in = pad_sequences([model.tgt_vocab.encode(t, add_bos=True) for t in targets],
                           model.pad_id).to(device)  # (B, Lt)
    with _eval_mode(model):
        _, maps = model(src, tgt_in, return_attention=True)
    return {"source": [model.src_vocab.decode(ids) for ids in sources],
            "target": [t + [EOS] for t in targets], "decoder_input": [[BOS] + t for t in targets],
            "translation": translations,
            **{kind: [m.cpu() for m in maps[kind]] for kind in ("encoder", "decoder", "cross")}}


def attention_maps(model: NumberTranslator, text: str, beam_size: int = 1) -> dict:
    """``attention_batch`` for one text: the same keys, each for that text alone ("encoder",
    "decoder" and "cross" hold one (H, Lq, Lk) tensor per layer)."""
    batch = attention_batch(model, [text], beam_size)
    return {key: [m[0] for m in value] if key in ("encoder", "decoder", "cross") else value[0]
            for key, value in batch.items()}


def save_checkpoint(model: NumberTranslator, path, metrics: dict | None = None,
                    training: dict | None = None) -> str:
    """Save weights, model configuration and vocabularies to ``path``, atomically: the file is
    written under a temporary name in the same folder, flushed to the disk, then renamed
    with ``os.replace``, so ``path`` always holds either the old checkpoint or the complete
    new one.

    ``training`` (``TrainResult.training``) adds what ``--resume`` needs: optimizer,
    schedule, step, time used, random states and data position. ``load_checkpoint``
    ignores it, so a resumable checkpoint is also an ordinary one."""
    check_instance("model", model, NumberTranslator, "a NumberTranslator")
    path = os.fspath(path)
    if os.path.isdir(path):
        example = os.path.join(path, "model.pt")
        raise IsADirectoryError(f"cannot save the checkpoint to {path!r}: it is a "
                                f"folder; give a file name such as {example!r}")
    for key, value in (metrics or {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(
                f"metrics[{key!r}] must be a number, got {type(value).__name__}")
    if training is not None and not isinstance(training, dict):
        raise TypeError(f"training must be a dict (TrainResult.training) or None, "
                        f"got {type(training).__name__}")
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    state = {
        "format": CHECKPOINT_FORMAT,
        "config": dict(model.config),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        **model.extra_state(),
        "metrics": {k: float(v) for k, v in (metrics or {}).items()},
    }
    if training is not None:
        state["training"] = to_cpu(training)
    return atomic_save(state, path)


_CHECKPOINT_KEYS = ("config", "state_dict", "src_vocab", "tgt_vocab", "lang", "scheme",
                    "morphemes", "max_target_len")


def load_checkpoint(path, device=None) -> NumberTranslator:
    """Restore a ``NumberTranslator`` saved by ``save_checkpoint``, in eval mode, on ``device``
    (default: CPU). Loads with ``weights_only=True``: a checkpoint holds only tensors and plain
    Python values, so loading it cannot run code.

    A missing file raises FileNotFoundError; one that is empty, truncated, not a
    checkpoint, of another format, or whose configuration does not fit its weights
    raises ValueError naming the file and what is wrong with it.
    """
    path = os.fspath(path)
    device = check_device("device", device)
    state = _read_checkpoint(path)

    def broken(reason):
        return ValueError(f"{path!r} is not a number-words checkpoint: {reason}")

    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise broken(f"expected format {CHECKPOINT_FORMAT!r}, got {found!r}")
    missing = [key for key in _CHECKPOINT_KEYS if key not in state]
    if missing:
        raise broken(f"it lacks {missing}")
    try:
        config = dict(state["config"])
        src_vocab = Vocab.from_itos(state["src_vocab"])
        tgt_vocab = Vocab.from_itos(state["tgt_vocab"])
        for key, vocab in (("src_vocab_size", src_vocab),
                           ("tgt_vocab_size", tgt_vocab)):
            if config.pop(key, None) != len(vocab):
                raise ValueError(f"its config's {key} differs from its vocabulary")
        config.pop("pad_id", None)
        model = NumberTranslator(src_vocab, tgt_vocab, state["lang"], state["scheme"],
                                 state["morphemes"], state["max_target_len"], **config)
        model.load_state_dict(state["state_dict"])
    except (TypeError, ValueError, KeyError, RuntimeError) as error:
        # load_state_dict lists every mismatched tensor; the first lines say enough.
        raise broken(" ".join(str(error).split("\n")[:2])) from None
    model.metrics = dict(state.get("metrics", {}))
    return model.to(device or "cpu").eval()


_TRAINING_KEYS = ("version", "step", "seconds", "optimizer", "scheduler", "scaler",
                  "batcher", "rng", "history", "run")


def load_resumable(path) -> dict:
    """Read the checkpoint at ``path`` for resuming its run (``--resume``): a dict with the
    weights (``state_dict``), configuration, vocabularies and the ``training`` state.

    Raises FileNotFoundError if there is no file, and ValueError naming the file and the
    problem if it is empty, truncated, damaged, not a number-words checkpoint, or one
    without a training state (an ordinary ``save_checkpoint`` without ``training``: it
    can be loaded with ``load_checkpoint``, not resumed).
    """
    path = os.fspath(path)
    state = _read_checkpoint(path)
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"{path!r} is not a number-words checkpoint: expected format "
                         f"{CHECKPOINT_FORMAT!r}, got {found!r}")
    training = state.get("training")
    if training is None:
        raise ValueError(f"{path!r} holds a trained model but no training state (it was "
                         f"saved without one, e.g. by an older version): load_checkpoint "
                         f"can load it for translation, but a run cannot resume from it")
    missing = [key for key in _TRAINING_KEYS if key not in training]
    if training.get("version") != TRAINING_STATE_VERSION or missing or "state_dict" not in state:
        raise ValueError(f"{path!r} has a training state this version cannot resume "
                         f"(version {training.get('version')!r}, missing {missing})")
    return state


def _read_checkpoint(path: str):
    """``torch.load(path, weights_only=True)``, each failure made one clear error."""
    return read_checkpoint(path, "a number-words checkpoint")


def _check_args(parser: argparse.ArgumentParser, args) -> None:
    """What could fail after training fails here, before any work (exit status 2)."""
    try:
        split_numbers(args.test_size, max(1, args.test_size // 4), args.seed)
    except ValueError as error:
        parser.error(f"argument --test-size: {error}")
    check_device_args(parser, args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m transformer_lib.examples.number_words",
        description="Train a Transformer to translate English number words into German or "
                    "French. Under torchrun (torchrun --standalone --nproc_per_node N -m "
                    "transformer_lib.examples.number_words ...) N processes train one model "
                    "with DistributedDataParallel.",
        epilog=f"SIGTERM or Ctrl-C stops the run after the current step: it saves a "
               f"resumable checkpoint at --out and exits with status {EXIT_STOPPED}; the "
               f"same command with --resume OUT finishes the run.")
    positive, non_negative = int_at_least(1), int_at_least(0)
    parser.add_argument("--lang", choices=("de", "fr"), default="de")
    parser.add_argument("--minutes", type=positive_float, default=None,
                        help="training time budget")
    parser.add_argument("--steps", type=positive, default=None,
                        help="training steps (default: 1000 if --minutes is not given)")
    parser.add_argument("--out", default=None, help="checkpoint path (default: number_words_LANG.pt)")
    parser.add_argument("--train-size", type=positive, default=12_000,
                        help="training pairs to precompute")
    parser.add_argument("--test-size", type=positive, default=2000,
                        help="held-out test numbers")
    parser.add_argument("--batch-size", type=positive,
                        default=TRAIN_CONFIG["batch_size"],
                        help="examples per optimizer step, all processes and "
                             "micro-batches together")
    parser.add_argument("--lr-factor", type=positive_float,
                        default=TRAIN_CONFIG["lr_factor"])
    parser.add_argument("--warmup", type=positive, default=TRAIN_CONFIG["warmup"])
    parser.add_argument("--seed", type=non_negative, default=0)
    add_deterministic_argument(parser)
    parser.add_argument("--beam", type=positive, default=4,
                        help="beam size for the beam-search score")
    parser.add_argument("--threads", type=positive, default=1,
                        help="torch CPU threads per process (default 1: the model is small, "
                             "and a second thread on a busy machine waits for a free core)")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: best available)")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32",
                        help="fp32, or autocast to bf16 (CPU or GPU) or fp16 (CUDA, with "
                             "a gradient scaler)")
    parser.add_argument("--accumulate", type=positive, default=1,
                        help="micro-batches per optimizer step (gradient accumulation); "
                             "the step is the same as with one big batch")
    parser.add_argument("--resume", default=None, metavar="PATH",
                        help="continue the run saved in this checkpoint (give the same "
                             "settings it was started with, --threads and "
                             "--deterministic included)")
    parser.add_argument("--stop-after", type=non_negative, default=None, metavar="STEPS",
                        help="stop as if signalled once this many steps of the run are "
                             "done (to train in slices); resume with --resume")
    return parser


def main(argv=None) -> int:
    stop = StopFlag()
    with stop.catch_signals():  # from here on, SIGTERM and Ctrl-C end with a checkpoint
        parser = _parser()
        args = parser.parse_args(argv)
        args.out = args.out or f"number_words_{args.lang}.pt"
        stop.after = args.stop_after
        _check_args(parser, args)
        try:
            world = distributed.setup(args.device)
        except ValueError as error:
            parser.error(f"argument --device: {error}")
        try:
            return _main(parser, args, world, stop)
        finally:
            distributed.teardown()


def _main(parser: argparse.ArgumentParser, args, world: distributed.World,
          stop: StopFlag) -> int:
    resume = check_world_args(parser, args, world, load_resumable)
    if args.threads:
        torch.set_num_threads(args.threads)
    steps = args.steps if args.steps is not None or args.minutes is not None else 1000
    seconds = args.minutes * 60 if args.minutes is not None else None
    say = print if world.is_main else (lambda *values, **options: None)
    start = time.perf_counter()
    data = NumberWordsData(args.lang, train_size=args.train_size, n_test=args.test_size,
                           n_valid=max(1, args.test_size // 4), seed=args.seed)
    say(f"data: {data} ({time.perf_counter() - start:.1f} s)")
    if world.parallel:
        say(f"data parallel: {world.size} processes ({torch.distributed.get_backend()}), "
            f"{args.batch_size} examples per step in {world.size * args.accumulate} "
            f"micro-batches")
    if resume is not None:
        done = resume["training"]
        say(f"resuming {args.resume}: step {done['step']}, {done['seconds']:.1f} s used")
    try:
        result = train_number_words(
            args.lang, steps=steps, max_seconds=seconds, data=data, seed=args.seed,
            deterministic=args.deterministic, batch_size=args.batch_size,
            lr_factor=args.lr_factor, warmup=args.warmup, device=args.device,
            accumulate=args.accumulate, precision=args.precision, world=world,
            resume=resume, stop=stop, evaluate_test=False, progress=world.is_main)
    except ResumeMismatch as error:
        parser.error(f"argument --resume: {error}")
    code = _finish(args, world, result, data, stop) if world.is_main else 0
    return distributed.broadcast_object(code)  # every rank exits as rank 0 does


def _finish(args, world, result: TrainResult, data, stop: StopFlag) -> int:
    """Rank 0, after training: test, save, show. A stop (a signal, --stop-after) saves the
    resumable checkpoint without testing and returns EXIT_STOPPED."""
    metrics, model = result.metrics, result.model
    if not (result.stopped or stop.requested):
        seconds_per_step = metrics["train_seconds"] / max(metrics["steps"], 1)
        print(f"trained {metrics['steps']} steps in {metrics['train_seconds']:.1f} s "
              f"({seconds_per_step:.3f} s/step) on {next(model.parameters()).device}"
              + (f" x {world.size} processes" if world.parallel else ""))
        metrics["test_exact_match"] = exact_match(model, data, "test")["exact_match"]
        print(f"test exact match (greedy): {metrics['test_exact_match']:.4f}")
    if args.beam > 1 and not stop.requested and not result.stopped:
        key = f"test_exact_match_beam{args.beam}"
        metrics[key] = exact_match(model, data, "test", beam_size=args.beam)["exact_match"]
        print(f"test exact match (beam {args.beam}): {metrics[key]:.4f}")
    out = save_checkpoint(model, args.out, metrics, training=result.training)
    if result.stopped or stop.requested:
        print(f"stopped after step {metrics['steps']}: saved the resumable checkpoint "
              f"{out}; to finish, run the same command with --resume {out}")
        return EXIT_STOPPED
    print(f"saved {out}")
    for text in ("ninety-seven", "seven hundred and seventy-one thousand, eighty-one"):
        print(f"{text!r} -> {translate(model, text)!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
