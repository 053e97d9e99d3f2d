"""Scores that say exactly what they measured: sacreBLEU's BLEU and chrF, with signatures.

BLEU and chrF are computed by sacreBLEU on detokenised, cased text (the translations as
the model writes them, against the references as the corpus gives them), with its
default 13a tokenisation for BLEU. Its signature (e.g.
``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0``) names every choice, so
a score can be compared with another only where the signatures agree.

References are one list of strings (one per sentence), or a list of reference
*streams* (sacreBLEU's form: ``[refs_1, refs_2]``, each a list with one string per
sentence; ``None`` where a sentence has fewer references), for several references per
sentence. Two systems are compared with sacreBLEU's paired bootstrap
(``paired_bootstrap``), and one system's score gets a 95% interval from the same
resampling (``bootstrap_interval``).
"""
from __future__ import annotations

import os
import re
import unicodedata
from contextlib import contextmanager

import torch

from ..data.batching import pad_sequences
from ..loss import masked_cross_entropy
from .search import translate_texts


@torch.no_grad()
def teacher_forced_loss(model, pairs, batch_size: int = 64) -> float:
    """The mean cross entropy of the references of ``pairs`` (source, target) under
    ``model`` (a ``Translator``) with teacher forcing: nats per target token (EOS
    included, padding not), no label smoothing, dropout off. Its fall and rise against
    training steps tells under- from over-fitting; the trained loss cannot (it has
    label smoothing and dropout)."""
    if not pairs:
        raise ValueError("teacher_forced_loss needs at least one pair")
    tok, limit = model.tokenizer, model.config["max_len"]
    sources = [model.encode_source(s)[-limit:] for s, _ in pairs]
    targets = [([tok.bos_id] + tok.encode(t) + [tok.eos_id])[:limit + 1] for _, t in pairs]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        for start in range(0, len(pairs), batch_size):
            src = pad_sequences(sources[start:start + batch_size], tok.pad_id).to(device)
            tgt = pad_sequences(targets[start:start + batch_size], tok.pad_id).to(device)
            logits = model(src, tgt[:, :-1])  # (B, Lt - 1, V)
            gold = tgt[:, 1:]  # (B, Lt - 1)
            tokens = int((gold != tok.pad_id).sum())
            # chapter 9's loss: the mean over real tokens, back to a sum for the batch
            total += masked_cross_entropy(logits.float(), gold, tok.pad_id).item() * tokens
            count += tokens
    finally:
        model.train(was_training)
    return total / count


def _sacrebleu():
    try:
        import sacrebleu
    except ImportError as error:  # an optional dependency of the library
        raise ImportError("scoring needs sacreBLEU: pip install sacrebleu") from error
    return sacrebleu


def reference_streams(hypotheses, references) -> list[list]:
    """``references`` as sacreBLEU's list of streams, checked against ``hypotheses``:
    a list of str is one stream; a list of lists is already streams, each as long as
    ``hypotheses`` (``None`` marks a missing reference)."""
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise TypeError("hypotheses and references must be lists of str, not one str")
    references = list(references)
    if not references:
        raise ValueError("nothing to score: no references")
    if all(isinstance(r, str) for r in references):
        if len(references) != len(hypotheses):
            raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
        streams = [references]
    else:
        streams = references
    for stream in streams:
        if isinstance(stream, str) or len(stream) != len(hypotheses):
            raise ValueError(
                f"{len(hypotheses)} hypotheses but a reference stream of "
                f"{1 if isinstance(stream, str) else len(stream)}: give one list of str, or "
                f"a list of reference streams each with one entry per hypothesis")
        if not all(r is None or isinstance(r, str) for r in stream):
            raise TypeError("references must be str (or None for a missing one)")
    streams = [list(stream) for stream in streams]
    if not hypotheses:
        raise ValueError("nothing to score: no hypotheses")
    if any(all(stream[i] is None for stream in streams) for i in range(len(hypotheses))):
        raise ValueError("every sentence needs at least one reference")
    return streams


def score(hypotheses: list[str], references: list) -> dict:
    """Corpus BLEU and chrF of ``hypotheses`` against one reference each (a list of str)
    or several (a list of reference streams, see ``reference_streams``).

    Returns {"bleu", "chrf" (floats, 0-100), "bleu_signature", "chrf_signature" (str)}."""
    streams = reference_streams(hypotheses, references)
    sacrebleu = _sacrebleu()
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    b = bleu.corpus_score(list(hypotheses), streams)
    c = chrf.corpus_score(list(hypotheses), streams)
    return {"bleu": b.score, "chrf": c.score, "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature())}


@contextmanager
def _sacrebleu_seed(seed: int):
    # sacreBLEU's bootstrap reads its seed from the environment (SACREBLEU_SEED), and
    # takes 0 for "no seed": we set it for the call and put it back.
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 1:
        raise ValueError(f"seed must be a positive int (sacreBLEU reads 0 as 'unseeded'), "
                         f"got {seed!r}")
    before = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if before is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = before


def _paired_test(systems, references, n_samples: int, seed: int):
    from sacrebleu.significance import PairedTest

    if n_samples < 2:
        raise ValueError(f"n_samples must be at least 2, got {n_samples}")
    streams = reference_streams(systems[0][1], references)
    for name, hyps in systems[1:]:
        reference_streams(hyps, streams)  # the same number of sentences
    metrics = {"bleu": _sacrebleu().metrics.BLEU(), "chrf": _sacrebleu().metrics.CHRF()}
    with _sacrebleu_seed(seed):
        test = PairedTest([(n, list(h)) for n, h in systems], metrics, streams,
                          test_type="bs", n_samples=n_samples)
        signatures, scores = test()
    return signatures, scores


def _interval(result) -> dict:
    return {"score": result.score, "mean": float(result.mean), "ci": float(result.ci),
            "low": float(result.mean - result.ci), "high": float(result.mean + result.ci)}


def bootstrap_interval(hypotheses: list[str], references: list, n_samples: int = 1000,
                       seed: int = 12345) -> dict:
    """A 95% bootstrap interval for one system's BLEU and chrF (sacreBLEU's: the
    sentences resampled with replacement ``n_samples`` times with ``seed``; the mean of
    the resampled scores, and half the distance between their 2.5th and 97.5th
    percentiles as ``ci``).

    Returns {"bleu": {"score", "mean", "ci", "low", "high"}, "chrf": {...},
    "bleu_signature", "chrf_signature"} (the signatures name the seed and resamples)."""
    signatures, scores = _paired_test([("system", hypotheses)], references, n_samples, seed)
    (bleu_name, chrf_name) = list(signatures)
    return {"bleu": _interval(scores[bleu_name][0]), "chrf": _interval(scores[chrf_name][0]),
            "bleu_signature": str(signatures[bleu_name]),
            "chrf_signature": str(signatures[chrf_name])}


def paired_bootstrap(baseline: list[str], system: list[str], references: list,
                     n_samples: int = 1000, seed: int = 12345) -> dict:
    """Is ``system`` different from ``baseline`` (both translations of the same
    sentences)? sacreBLEU's paired bootstrap resampling (Koehn 2004, as Moses's
    ``bootstrap-hypothesis-difference-significance.pl`` does it): ``n_samples``
    resamples of the sentences (with ``seed``), both systems scored on each; the p-value
    is the share of resamples whose score difference, centred, is larger than the real
    one. A small p (< 0.05) says the difference is unlikely to be luck of the sentences.
Where the two systems wrote exactly the same translations, p is 1 (sacreBLEU's strict
"larger than" would give the smallest p it can, 1 / (n_samples + 1), for no difference).

    Returns, for "bleu" and "chrf": {"baseline", "system" (each ``bootstrap_interval``'s
    score, mean, ci, low, high), "difference" (system - baseline), "p_value"}, and the
    two signatures."""
    signatures, scores = _paired_test([("baseline", baseline), ("system", system)],
                                      references, n_samples, seed)
    out = {}
    for key, name in zip(("bleu", "chrf"), signatures):
        base, other = scores[name]
        same = list(baseline) == list(system)
        out[key] = {"baseline": _interval(base), "system": _interval(other),
                    "difference": other.score - base.score,
                    "p_value": 1.0 if same else float(other.p_value)}
        out[f"{key}_signature"] = str(signatures[name])
    return out


def normalise_for_match(text: str) -> str:
    """A sentence as exact matching compares it: Unicode NFKC, case-folded, every
    punctuation character (Unicode category P*) replaced by a space, runs of white space
    made one space, stripped. "Thank you very much!" and "thank you very much" match;
    "Thanks a lot." and "Thank you." do not."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = "".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in text)
    return re.sub(r"\s+", " ", text).strip()


def exact_match_rate(hypotheses: list[str], references: list) -> dict:
    """How many hypotheses equal one of their references after ``normalise_for_match``
    (references as ``score`` takes them): {"count", "total", "rate" (0-1)}."""
    streams = reference_streams(hypotheses, references)
    count = sum(any(r is not None and normalise_for_match(h) == normalise_for_match(r)
                    for r in refs) for h, refs in zip(hypotheses, zip(*streams)))
    return {"count": count, "total": len(hypotheses), "rate": count / len(hypotheses)}


def exact_matches(sources, hypotheses, references, min_words: int = 3,
                  max_words: int = 6) -> dict:
    """Among the pairs whose reference has ``min_words`` to ``max_words`` words: how many
    translations are exactly the reference (``count`` of ``total``), and which."""
    short = [(s, h, r) for s, h, r in zip(sources, hypotheses, references)
             if min_words <= len(r.split()) <= max_words]
    right = [(s, h) for s, h, r in short if h.strip() == r.strip()]
    return {"count": len(right), "total": len(short), "examples": right}


def evaluate(model, pairs, beam_size: int = 1, length_penalty: float = 0.6,
             batch_size: int = 64) -> dict:
    """Translate the sources of ``pairs`` (a list of (source, reference)) and score them:
    ``score``'s keys, plus "hypotheses", "exact_short" (``exact_matches``), "sentences"
    and the search settings."""
    if not pairs:
        raise ValueError("pairs is empty: nothing to evaluate")
    sources = [s for s, _ in pairs]
    references = [t for _, t in pairs]
    hypotheses = translate_texts(model, sources, beam_size, length_penalty, batch_size)
    return {**score(hypotheses, references), "hypotheses": hypotheses,
            "exact_short": exact_matches(sources, hypotheses, references),
            "sentences": len(pairs), "beam_size": beam_size,
            "length_penalty": length_penalty}


def report(result: dict) -> str:
    """Lines a person reads: BLEU and chrF with their signatures, and the short exact
    matches."""
    short = result["exact_short"]
    search = ("greedy" if result["beam_size"] == 1 else
              f"beam {result['beam_size']}, length penalty {result['length_penalty']}")
    return "\n".join([
        f"BLEU {result['bleu']:.2f}  ({result['bleu_signature']})",
        f"chrF {result['chrf']:.2f}  ({result['chrf_signature']})",
        f"{result['sentences']} sentences, {search}; exact matches on sentences of 3-6 "
        f"words: {short['count']} of {short['total']}",
    ])
