"""From a corpus to a trained ``Translator``: subwords, tensors, model, then ``fit``.

``train_corpus(corpus, ...)`` is what ``python -m transformer_lib.translate train`` runs,
and what a chapter calls. A corpus is any object with ``name``, ``src_lang``,
``tgt_lang``, ``train``/``valid``/``test`` lists of (source, target) strings,
``extra_train`` (more pairs for training only, e.g. Ding's word and phrase pairs) and an
``info`` dict (``transformer_lib.data.load_corpus``).

Recipe knobs beyond the model's size, each off by default (``RECIPE`` is what they are
measured against), each recorded in the run's settings (``CorpusResult.recipe``, and the
checkpoint's ``training["run"]`` that ``--resume`` compares):

- ``attention_dropout``, ``activation_dropout``: dropout on the attention weights and
  inside the feed-forward layers, apart from ``dropout`` (None: ``dropout``'s rate);
- ``word_dropout``: source tokens replaced by <unk> in training (``WordDropout``);
- ``bpe_dropout``: BPE-dropout (Provilkov et al. 2020), both sides of every training
  example written in new pieces at each pass, never at evaluation (its draws come from
  the ``tokenizers`` library's generator, which cannot be seeded: such a run is not
  reproducible bit for bit, and a resumed one continues with new draws);
- ``bidirectional``: one model for both directions, each pair used both ways with the
  target language's tag before its source (``<2en>``, ``<2de>``); it translates with
  ``<2{tgt_lang}>`` (``Translator.source_tag``);
- ``dict_tag``: ``<dict>`` before the source of every pair from ``extra_train`` (Ding's
  words and phrases), so the model can tell a dictionary entry from a sentence;
- ``dict_fraction`` F: each pass over the training sentences comes with a new sample,
  drawn by the seed, of ``extra_train`` pairs that makes up the fraction F of the pass
  (F / (1 - F) dictionary pairs per sentence; the subword vocabulary is learned on the
  sentences alone). One mechanism, a mixing ratio, rather than a first phase on the
  dictionary: it needs no schedule and keeps every pass alike. ``extra_pairs`` N instead
  adds one fixed sample of N pairs (the two do not mix).
"""
from __future__ import annotations

import hashlib
import re
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch

from .. import distributed
from .._checks import check_bool, check_instance, check_number, check_positive_int
from ..data.batching import BucketBatcher
from ..precision import check_precision, grad_scaler
from ..stopping import StopFlag
from ..utils import get_device, set_seed
from .checkpoints import average_state_dicts
from .evaluate import score, teacher_forced_loss
from .presets import RECIPE
from .search import translate_texts
from .trainer import check_batch_size, fit
from .translator import Translator, build_translator


@dataclass
class CorpusResult:
    """What ``train_corpus`` returns: the model, the training history (``step``, ``loss``,
    ``acc``, ``lr``, ``seconds``; ``valid_step``/``valid_bleu``/``valid_loss`` if validated), metrics,
    the training state a checkpoint needs to resume, whether a stop ended the run, and
    ``recipe``: every setting of the run (the ``run`` dict a checkpoint keeps)."""

    model: Translator
    history: dict
    metrics: dict = field(default_factory=dict)
    training: dict | None = None
    stopped: bool = False
    recipe: dict = field(default_factory=dict)  # the run's settings (plain values)


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


def learn_tokenizer(pairs, vocab_size: int, tags=()):
    """A joint subword vocabulary (``SubwordTokenizer``) learned on both sides of
    ``pairs`` (training pairs only: the test set must not shape the vocabulary), with the
    special tokens ``tags`` (``<2en>``, ``<dict>``) beside the 4 of every vocabulary."""
    from ..data import SubwordTokenizer  # the corpora's tokenizer

    texts = [s for s, _ in pairs] + [t for _, t in pairs]
    return SubwordTokenizer.train(texts, vocab_size=vocab_size, min_frequency=2, tags=tags)


DICT_TAG = "<dict>"


def language_tag(language: str) -> str:
    """The tag that asks for a translation into ``language``: "en" -> "<2en>"."""
    return "<2" + "_".join(str(language).split()) + ">"


def tagged(pairs, tags: tuple = (), both_ways: tuple | None = None) -> list:
    """(source, target, tags) examples from (source, target) pairs: each with ``tags``;
    ``both_ways=(to_target, to_source)`` gives each pair twice, forwards after the tag
    ``to_target`` and backwards after ``to_source`` (bidirectional training)."""
    if both_ways is None:
        return [(s, t, tags) for s, t in pairs]
    forwards, backwards = both_ways
    return [example for s, t in pairs
            for example in ((s, t, (forwards, *tags)), (t, s, (backwards, *tags)))]


class TrainingData:
    """The training examples of a run as padded id tensors, and, where the recipe asks
    for it, the examples written anew at every pass (``refresh``, for ``BucketBatcher``).

    ``fixed``: (source, target, tags) examples used in every pass, encoded once (those
    longer than ``max_len`` tokens left out). ``pool``: examples of which ``per_pass``
    are drawn for each pass, by ``seed`` and the pass (a resumed run draws the same), and
    encoded when drawn (the pool is Ding's ~370,000 entries: encoding all of them would
    take minutes); a pool example with more than ``max_len // 2 - 4`` characters on a
    side is left out at the start, so that none can outgrow ``max_len`` tokens.
    ``bpe_dropout``: each pass segments every example anew (one that would outgrow
    ``max_len`` keeps its plain pieces); this costs about 50 microseconds of CPU time per
    text and pass, inside the training budget.
    """

    def __init__(self, tokenizer, fixed, pool=(), per_pass: int = 0,
                 bpe_dropout: float = 0.0, max_len: int = 128, seed: int = 0):
        from ..data.batching import pad_sequences

        check_number("bpe_dropout", bpe_dropout, 0.0, 1.0, high_open=True)
        self.tokenizer, self.bpe_dropout, self.max_len, self.seed = (
            tokenizer, bpe_dropout, max_len, seed)
        self._pad = lambda rows: pad_sequences(rows, tokenizer.pad_id)
        self.fixed = self._encode(list(fixed))
        if not self.fixed:
            raise ValueError(f"no pair fits in max_len={max_len} tokens")
        short = max_len // 2 - 4  # characters: at most 2 tokens each (a piece, a space)
        self.pool = [e for e in pool if len(e[0]) <= short and len(e[1]) <= short] \
            if per_pass else []
        self.per_pass = min(per_pass, len(self.pool))

    def _encode(self, examples, dropout: float = 0.0, plain=None):
        """Examples -> (source, target, tags, source ids, target ids); those that do not
        fit in ``max_len`` are left out, or, with ``plain`` (their plain ids), keep those."""
        from .translator import encode_examples

        if not examples:
            return []
        pairs = [(s, t) for s, t, _ in examples]
        tags = [tags for _, _, tags in examples] if any(e[2] for e in examples) else None
        ids = encode_examples(self.tokenizer, pairs, tags, dropout)
        out = []
        for i, (example, s, t) in enumerate(zip(examples, *ids)):
            if len(s) <= self.max_len and len(t) <= self.max_len:
                out.append((*example, s, t))
            elif plain is not None:
                out.append(plain[i])
        return out

    @property
    def changes(self) -> bool:
        """Whether the passes differ (a pool to draw from, or BPE-dropout)."""
        return self.per_pass > 0 or self.bpe_dropout > 0

    def drawn(self, epoch: int) -> list:
        """The pool examples of pass ``epoch`` (by the seed and the pass)."""
        if not self.per_pass:
            return []
        rng = np.random.default_rng([self.seed, 2, epoch])
        return [self.pool[i] for i in np.sort(rng.choice(len(self.pool), self.per_pass,
                                                         replace=False))]

    def examples(self, epoch: int = 0, dropout: bool = False) -> list:
        """The examples of pass ``epoch`` with their ids: the fixed ones, then those drawn
        from the pool; ``dropout``: segmented with BPE-dropout."""
        examples = self.fixed + self._encode(self.drawn(epoch))
        if dropout and self.bpe_dropout > 0:
            examples = self._encode([e[:3] for e in examples], self.bpe_dropout, examples)
        return examples

    def tensors(self, epoch: int = 0, dropout: bool = False):
        """Padded (N, Ls) sources and (N, Lt) targets of pass ``epoch``."""
        examples = self.examples(epoch, dropout)
        return self._pad([e[3] for e in examples]), self._pad([e[4] for e in examples])

    def refresh(self, epoch: int):
        """``BucketBatcher``'s ``refresh``: the tensors of pass ``epoch``, as trained on."""
        return self.tensors(epoch, dropout=True)


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
    except padding, EOS and the ids in ``keep`` (tags such as ``<2en>``) becomes <unk>
    with probability ``p``, so the model cannot lean on any one word. Draws from torch's
    global generator (saved with a checkpoint)."""

    def __init__(self, p: float, unk_id: int, pad_id: int, eos_id: int, keep=()):
        check_number("word_dropout", p, 0.0, 1.0, high_open=True)
        self.p, self.unk_id, self.pad_id, self.eos_id = p, unk_id, pad_id, eos_id
        self.keep = tuple(keep)

    def __call__(self, batch):
        src, tgt = batch
        if self.p == 0:
            return src, tgt
        drop = torch.rand(src.shape, device=src.device) < self.p  # (B, Ls)
        drop &= (src != self.pad_id) & (src != self.eos_id)
        for token in self.keep:
            drop &= src != token
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
                 attention_dropout: float | None = None,
                 activation_dropout: float | None = None, bpe_dropout: float = 0.0,
                 bidirectional: bool = False, dict_tag: bool = False,
                 dict_fraction: float = 0.0,
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
    greedy BLEU of ``valid_size`` validation sentences and the teacher-forced loss of
    all of them (``teacher_forced_loss``) to the history. ``resume``: a
    checkpoint from ``load_resumable``; the run continues with the settings and the
    vocabulary it was started with. ``model_config``: more model settings over the
    preset's (``d_model``, ``num_heads``, ``num_encoder_layers``, ``num_decoder_layers``,
    ``d_ff``). The recipe knobs (``attention_dropout`` ... ``dict_fraction``) are in the
    module's docstring; the other settings are those of ``fit``.
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
    check_number("bpe_dropout", bpe_dropout, 0.0, 1.0, high_open=True)
    check_number("dict_fraction", dict_fraction, 0.0, 1.0, high_open=True)
    check_bool("bidirectional", bidirectional)
    check_bool("dict_tag", dict_tag)
    dictionary = list(getattr(corpus, "extra_train", None) or [])
    if dict_fraction > 0 and not dictionary:
        raise ValueError(f"dict_fraction={dict_fraction} needs the corpus's extra_train "
                         f"(Ding: load it with phrases=True), but corpus {corpus.name!r} "
                         f"has none")
    if dict_fraction > 0 and extra_pairs != 0:
        raise ValueError(f"give extra_pairs (one fixed sample) or dict_fraction (a new "
                         f"sample at each pass), not both: got extra_pairs={extra_pairs}, "
                         f"dict_fraction={dict_fraction}")
    if bidirectional and language_tag(corpus.src_lang) == language_tag(corpus.tgt_lang):
        raise ValueError(f"bidirectional training needs two languages, got "
                         f"{corpus.src_lang!r} and {corpus.tgt_lang!r}")
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
    sentences = len(corpus.train)
    both_ways = ((language_tag(corpus.tgt_lang), language_tag(corpus.src_lang))
                 if bidirectional else None)
    dict_tags = (DICT_TAG,) if dict_tag else ()
    fixed = tagged(pairs[:sentences], (), both_ways) + \
        tagged(pairs[sentences:], dict_tags, both_ways)
    pool = tagged(dictionary, dict_tags, both_ways) if dict_fraction > 0 else []
    tags = list(both_ways or ()) + (
        [DICT_TAG] if dict_tag and (pool or len(pairs) > sentences) else [])
    if resume is not None:
        from ..data import SubwordTokenizer

        tokenizer = SubwordTokenizer.from_json(resume["tokenizer"])
    elif tokenizer is None:
        tokenizer = learn_tokenizer(pairs, vocab_size, tags)  # not on the pool
    per_pass = round(dict_fraction / (1 - dict_fraction) * len(fixed))
    data = TrainingData(tokenizer, fixed, pool, per_pass, bpe_dropout, max_len, seed)
    src, tgt = data.tensors(0)  # pass 0 in plain pieces: the data's reference form
    set_seed(seed, deterministic=deterministic)
    info = dict(name=corpus.name, src_lang=corpus.src_lang, tgt_lang=corpus.tgt_lang,
                info=dict(getattr(corpus, "info", {}) or {}))
    model = build_translator(tokenizer, preset, info, max_target_len=max_len - 1,
                             source_tag=both_ways[0] if both_ways else None,
                             dropout=dropout, norm_first=norm_first,
                             share_embeddings=share_embeddings, max_len=max_len,
                             **({} if attention_dropout is None
                                else {"attention_dropout": attention_dropout}),
                             **({} if activation_dropout is None
                                else {"activation_dropout": activation_dropout}),
                             **(model_config or {})).to(device)
    run = dict(corpus=corpus.name, steps=steps, max_seconds=max_seconds, clock=clock,
               seed=seed, batch_size=batch_size, lr_factor=lr_factor, warmup=warmup,
               decay=decay, label_smoothing=label_smoothing, word_dropout=word_dropout,
               extra_pairs=extra_pairs, bpe_dropout=bpe_dropout,
               bidirectional=bidirectional, dict_tag=dict_tag, dict_fraction=dict_fraction,
               model=dict(model.config), accumulate=accumulate,
               precision=precision, average=average, snapshot_every=snapshot_every,
               data=fingerprint(src, tgt, tokenizer.to_json()))
    scaler = grad_scaler(precision, device)
    batcher = BucketBatcher(src.to(device), tgt.to(device), batch_size,
                            pad_id=tokenizer.pad_id, seed=seed,
                            refresh=data.refresh if data.changes else None)
    dropper = WordDropout(word_dropout, tokenizer.unk_id, tokenizer.pad_id, tokenizer.eos_id,
                          keep=[tokenizer.token_id(tag) for tag in tokenizer.tags])
    past = resume["training"]["history"] if resume is not None else {}
    extra = {key: list(past.get(key, []))
             for key in ("valid_step", "valid_bleu", "valid_loss")}
    snapshots = deque(maxlen=max(average - 1, 1))
    valid = corpus.valid[:valid_size]

    def callback(step, history):
        # Runs every ``log_every`` steps: act at the first call past each multiple.
        if valid_every and world.is_main and valid and \
                step // valid_every > len(extra["valid_step"]):
            extra["valid_step"].append(step)
            hyps = translate_texts(model, [s for s, _ in valid])
            extra["valid_bleu"].append(score(hyps, [t for _, t in valid])["bleu"])
            extra["valid_loss"].append(teacher_forced_loss(model, corpus.valid))
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
    metrics = dict(done.metrics, train_pairs=len(pairs), vocab_size=len(tokenizer),
                   examples_per_pass=src.size(0), dict_per_pass=data.per_pass)
    if average > 1 and snapshots and not done.stopped:
        final = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.load_state_dict(average_state_dicts(list(snapshots) + [final]))
        metrics["averaged"] = len(snapshots) + 1
    model.eval()
    recipe = dict(done.training["run"], preset=preset, dropout=dropout, norm_first=norm_first,
                  share_embeddings=share_embeddings, max_len=max_len, vocab_size=vocab_size,
                  attention_dropout=model.config.get("attention_dropout", dropout),
                  activation_dropout=model.config.get("activation_dropout", dropout))
    return CorpusResult(model, done.history, metrics, done.training, done.stopped, recipe)


def learning_curve(history: dict) -> dict:
    """The validation curve of a run, from its history (``valid_every``): at each
    validation step, the greedy BLEU of the ``valid_size`` validation sentences, the
    teacher-forced loss of all of them (nats per token, no label smoothing) and the mean
    training loss since the previous validation (with label smoothing and dropout, as
    trained). What ``viz.plot_learning_curves`` draws."""
    steps = list(history.get("valid_step", []))
    train, since = [], 0
    for step in steps:
        window = [loss for s, loss in zip(history["step"], history["loss"])
                  if since < s <= step]
        train.append(round(sum(window) / len(window), 4) if window else None)
        since = step
    return dict(step=steps, bleu=[round(b, 2) for b in history.get("valid_bleu", [])],
                loss=[round(x, 4) for x in history.get("valid_loss", [])], train_loss=train)


_WORD = re.compile(r"\w+")


def dictionary_coverage(corpus, split: str = "valid") -> dict:
    """How much of what the training sentences lack the dictionary holds: of the source
    words of ``split`` ("valid" or "test") that are in no training sentence's source, how
    many are a word of some ``extra_train`` source (Ding's entries). Words are runs of
    letters and digits, compared case-folded. Counts only (``tokens``: every occurrence;
    ``types``: each distinct word once): ``unseen_*``, ``covered_*`` and their ratio
    ``covered_*_fraction`` (of the unseen)."""
    def words(texts):
        return [w.casefold() for text in texts for w in _WORD.findall(text)]

    seen = set(words(s for s, _ in corpus.train))
    entries = set(words(s for s, _ in getattr(corpus, "extra_train", None) or []))
    unseen = [w for w in words(s for s, _ in corpus.split(split)) if w not in seen]
    out = {"split": split, "tokens": len(words(s for s, _ in corpus.split(split)))}
    for kind, found in (("tokens", unseen), ("types", sorted(set(unseen)))):
        covered = sum(w in entries for w in found)
        out.update({f"unseen_{kind}": len(found), f"covered_{kind}": covered,
                    f"covered_{kind}_fraction": covered / len(found) if found else 0.0})
    return out


def train_cpu_budget(corpus, minutes: float = 3.0, cores: int = 2, **settings) -> CorpusResult:
    """``train_corpus`` for ``minutes`` on ``cores`` CPU cores, counted in the process's
    CPU time (``minutes * 60 * cores`` CPU seconds, all threads together): on a shared or
    slow machine the run takes longer, but trains as far as on a quiet one. For a chapter
    that must train within a few minutes and assert what it reaches."""
    check_number("minutes", minutes, 0.0, low_open=True)
    check_positive_int("cores", cores)
    return train_corpus(corpus, max_seconds=minutes * 60 * cores, clock="cpu", **settings)
