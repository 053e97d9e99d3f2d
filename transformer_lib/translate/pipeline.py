"""From a corpus to a trained ``Translator``: subwords, tensors, model, then ``fit``.

``train_corpus(corpus, ...)`` is what ``python -m transformer_lib.translate train`` runs,
and what a chapter calls. A corpus is any object with ``name``, ``src_lang``,
``tgt_lang``, ``train``/``valid``/``test`` lists of (source, target) strings,
``extra_train`` (more pairs for training only, e.g. Ding's word and phrase pairs) and an
``info`` dict (``transformer_lib.data.load_corpus``).
"""
from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch

from .. import distributed
from .._checks import check_instance, check_number, check_positive_int
from ..data.batching import BucketBatcher
from ..precision import check_precision, grad_scaler
from ..stopping import StopFlag
from ..utils import get_device, set_seed
from .checkpoints import average_state_dicts
from .evaluate import score
from .presets import RECIPE
from .search import translate_texts
from .trainer import check_batch_size, fit
from .translator import Translator, build_translator, encode_pairs


@dataclass
class CorpusResult:
    """What ``train_corpus`` returns: the model, the training history (``step``, ``loss``,
    ``acc``, ``lr``, ``seconds``; ``valid_step``/``valid_bleu`` if validated), metrics,
    the training state a checkpoint needs to resume, and whether a stop ended the run."""

    model: Translator
    history: dict
    metrics: dict = field(default_factory=dict)
    training: dict | None = None
    stopped: bool = False


def training_pairs(corpus, extra_pairs: int = 0, seed: int = 0) -> list:
    """The corpus's training sentences, plus ``extra_pairs`` pairs drawn (without
    replacement, by ``seed``) from its ``extra_train``; -1 takes all of them."""
    pairs = list(corpus.train)
    extra = list(getattr(corpus, "extra_train", None) or [])
    if extra_pairs == -1 or extra_pairs >= len(extra):
        return pairs + extra
    if extra_pairs > 0:
        chosen = np.random.default_rng([seed, 1]).choice(len(extra), extra_pairs, replace=False)
        pairs += [extra[i] for i in sorted(chosen)]
    return pairs


def learn_tokenizer(pairs, vocab_size: int):
    """A joint subword vocabulary (``SubwordTokenizer``) learned on both sides of
    ``pairs`` (training pairs only: the test set must not shape the vocabulary)."""
    from ..data import SubwordTokenizer  # the corpora's tokenizer

    texts = [s for s, _ in pairs] + [t for _, t in pairs]
    return SubwordTokenizer.train(texts, vocab_size=vocab_size, min_frequency=2)


def fingerprint(src: torch.Tensor, tgt: torch.Tensor, tokenizer_json: str) -> str:
    """A short hash of the training tensors and the vocabulary: a resumed run must train
    on the very same data."""
    digest = hashlib.sha256()
    for tensor in (src, tgt):
        digest.update(tensor.cpu().numpy().tobytes())
    digest.update(tokenizer_json.encode())
    return digest.hexdigest()[:16]


class WordDropout:
    """Source-side word dropout (Sennrich & Zhang 2019): in training, each source token
    except padding and EOS becomes <unk> with probability ``p``, so the model cannot lean
    on any one word. Draws from torch's global generator (saved with a checkpoint)."""

    def __init__(self, p: float, unk_id: int, pad_id: int, eos_id: int):
        check_number("word_dropout", p, 0.0, 1.0, high_open=True)
        self.p, self.unk_id, self.pad_id, self.eos_id = p, unk_id, pad_id, eos_id

    def __call__(self, batch):
        src, tgt = batch
        if self.p == 0:
            return src, tgt
        drop = torch.rand(src.shape, device=src.device) < self.p  # (B, Ls)
        drop &= (src != self.pad_id) & (src != self.eos_id)
        return src.masked_fill(drop, self.unk_id), tgt


class _Transformed:
    """A batcher seen through ``transform``: iterating applies it to every batch; the
    state (``state_dict``) is the batcher's own."""

    def __init__(self, batcher, transform):
        self.batcher, self.transform = batcher, transform

    def __iter__(self):
        return map(self.transform, self.batcher)

    def state_dict(self):
        return self.batcher.state_dict()

    def load_state_dict(self, state):
        self.batcher.load_state_dict(state)


def train_corpus(corpus, *, steps: int | None = None, max_seconds: float | None = None,
                 clock: str = "wall", preset: str = RECIPE["preset"],
                 vocab_size: int = RECIPE["vocab_size"],
                 extra_pairs: int = RECIPE["extra_pairs"], tokenizer=None, seed: int = 0,
                 deterministic: bool | None = None,
                 batch_size: int = RECIPE["batch_size"],
                 lr_factor: float = RECIPE["lr_factor"], warmup: int = RECIPE["warmup"],
                 decay: str = RECIPE["decay"], dropout: float = RECIPE["dropout"],
                 label_smoothing: float = RECIPE["label_smoothing"],
                 word_dropout: float = RECIPE["word_dropout"],
                 norm_first: bool = RECIPE["norm_first"],
                 share_embeddings: bool = RECIPE["share_embeddings"],
                 max_len: int = RECIPE["max_len"], model_config: dict | None = None,
                 average: int = 1, snapshot_every: int | None = None,
                 valid_every: int | None = None, valid_size: int = 200,
                 device=None, world: distributed.World | None = None, accumulate: int = 1,
                 precision: str = "fp32", resume: dict | None = None,
                 stop: StopFlag | None = None, progress: bool = True,
                 log_every: int = 20) -> CorpusResult:
    """Train a ``Translator`` on ``corpus`` for ``steps`` and/or ``max_seconds`` (on
    ``clock``: "wall", or "cpu" for the process's CPU time, all threads together).

    The joint BPE vocabulary of ``vocab_size`` is learned on the training pairs (and the
    ``extra_pairs`` drawn from ``corpus.extra_train``), unless a ``tokenizer`` is given.
    ``average=K`` replaces the final weights by the mean of the last K snapshots, taken
    every ``snapshot_every`` steps and at the end (paper 6.1). ``valid_every`` adds the
    greedy BLEU of ``valid_size`` validation sentences to the history. ``resume``: a
    checkpoint from ``load_resumable``; the run continues with the settings and the
    vocabulary it was started with. The other settings are those of ``fit``.
    """
    if steps is None and max_seconds is None:
        raise ValueError("give steps or max_seconds (or both)")
    for name in ("train", "valid", "test"):
        if not isinstance(getattr(corpus, name, None), list):
            raise TypeError(f"corpus must have lists of (source, target) pairs train, valid "
                            f"and test (see transformer_lib.data.load_corpus), got "
                            f"{type(corpus).__name__}")
    if not corpus.train:
        raise ValueError(f"corpus {corpus.name!r} has no training pairs")
    check_positive_int("average", average)
    if average > 1:
        check_positive_int("snapshot_every", snapshot_every)
    check_number("dropout", dropout, 0.0, 1.0, high_open=True)
    world = world if world is not None else distributed.World()
    check_instance("world", world, distributed.World, "a tl.distributed.World")
    if world.parallel:
        device = world.device
    else:
        device = torch.device(device) if device is not None else get_device()
    check_precision(precision, device)
    check_positive_int("accumulate", accumulate)
    check_batch_size(batch_size, world.size, accumulate)
    pairs = training_pairs(corpus, extra_pairs, seed)
    if resume is not None:
        from ..data import SubwordTokenizer

        tokenizer = SubwordTokenizer.from_json(resume["tokenizer"])
    elif tokenizer is None:
        tokenizer = learn_tokenizer(pairs, vocab_size)
    src, tgt = encode_pairs(tokenizer, pairs, max_len)
    set_seed(seed, deterministic=deterministic)
    info = dict(name=corpus.name, src_lang=corpus.src_lang, tgt_lang=corpus.tgt_lang,
                info=dict(getattr(corpus, "info", {}) or {}))
    model = build_translator(tokenizer, preset, info, max_target_len=max_len - 1,
                             dropout=dropout, norm_first=norm_first,
                             share_embeddings=share_embeddings, max_len=max_len,
                             **(model_config or {})).to(device)
    run = dict(corpus=corpus.name, steps=steps, max_seconds=max_seconds, clock=clock,
               seed=seed, batch_size=batch_size, lr_factor=lr_factor, warmup=warmup,
               decay=decay, label_smoothing=label_smoothing, word_dropout=word_dropout,
               extra_pairs=extra_pairs, model=dict(model.config), accumulate=accumulate,
               precision=precision, average=average, snapshot_every=snapshot_every,
               data=fingerprint(src, tgt, tokenizer.to_json()))
    scaler = grad_scaler(precision, device)
    batcher = BucketBatcher(src.to(device), tgt.to(device), batch_size,
                            pad_id=tokenizer.pad_id, seed=seed)
    dropper = WordDropout(word_dropout, tokenizer.unk_id, tokenizer.pad_id, tokenizer.eos_id)
    past = resume["training"]["history"] if resume is not None else {}
    extra = {"valid_step": list(past.get("valid_step", [])),
             "valid_bleu": list(past.get("valid_bleu", []))}
    snapshots = deque(maxlen=max(average - 1, 1))
    valid = corpus.valid[:valid_size]

    def callback(step, history):
        # Runs every ``log_every`` steps: act at the first call past each multiple.
        if valid_every and world.is_main and valid and \
                step // valid_every > len(extra["valid_step"]):
            extra["valid_step"].append(step)
            hyps = translate_texts(model, [s for s, _ in valid])
            extra["valid_bleu"].append(score(hyps, [t for _, t in valid])["bleu"])
        if average > 1 and step // snapshot_every > snapshots_taken[0]:
            snapshots_taken[0] = step // snapshot_every
            snapshots.append({k: v.detach().clone() for k, v in model.state_dict().items()})

    snapshots_taken = [resume["training"]["step"] // snapshot_every
                       if resume is not None and average > 1 else 0]
    done = fit(model, _Transformed(batcher, dropper), run, steps=steps,
               max_seconds=max_seconds, lr_factor=lr_factor, warmup=warmup, decay=decay,
               label_smoothing=label_smoothing, seed=seed, world=world,
               accumulate=accumulate, precision=precision, scaler=scaler, resume=resume,
               stop=stop, progress=progress, log_every=log_every, callback=callback,
               extra_history=extra, clock=clock)
    metrics = dict(done.metrics, train_pairs=len(pairs), vocab_size=len(tokenizer))
    if average > 1 and snapshots and not done.stopped:
        final = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.load_state_dict(average_state_dicts(list(snapshots) + [final]))
        metrics["averaged"] = len(snapshots) + 1
    model.eval()
    return CorpusResult(model, done.history, metrics, done.training, done.stopped)


def train_cpu_budget(corpus, minutes: float = 3.0, cores: int = 2, **settings) -> CorpusResult:
    """``train_corpus`` for ``minutes`` on ``cores`` CPU cores, counted in the process's
    CPU time (``minutes * 60 * cores`` CPU seconds, all threads together): on a shared or
    slow machine the run takes longer, but trains as far as on a quiet one. For a chapter
    that must train within a few minutes and assert what it reaches."""
    check_number("minutes", minutes, 0.0, low_open=True)
    check_positive_int("cores", cores)
    return train_corpus(corpus, max_seconds=minutes * 60 * cores, clock="cpu", **settings)
