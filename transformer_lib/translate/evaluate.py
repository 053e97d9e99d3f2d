"""Scores that say exactly what they measured: sacreBLEU's BLEU and chrF, with signatures.

BLEU and chrF are computed by sacreBLEU on detokenised, cased text (the translations as
the model writes them, against the references as the corpus gives them), with its
default 13a tokenisation for BLEU. Its signature (e.g.
``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0``) names every choice, so
a score can be compared with another only where the signatures agree.
"""
from __future__ import annotations

from .search import translate_texts


def _sacrebleu():
    try:
        import sacrebleu
    except ImportError as error:  # an optional dependency of the library
        raise ImportError("scoring needs sacreBLEU: pip install sacrebleu") from error
    return sacrebleu


def score(hypotheses: list[str], references: list[str]) -> dict:
    """Corpus BLEU and chrF of ``hypotheses`` against one reference each.

    Returns {"bleu", "chrf" (floats, 0-100), "bleu_signature", "chrf_signature" (str)}."""
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise TypeError("hypotheses and references must be lists of str, not one str")
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not references:
        raise ValueError("nothing to score: no references")
    sacrebleu = _sacrebleu()
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    b = bleu.corpus_score(list(hypotheses), [list(references)])
    c = chrf.corpus_score(list(hypotheses), [list(references)])
    return {"bleu": b.score, "chrf": c.score, "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature())}


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
