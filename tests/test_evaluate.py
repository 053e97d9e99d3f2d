"""Scores (``transformer_lib.translate.evaluate``): several references, the paired
bootstrap, a system's interval, and exact matching."""
from __future__ import annotations

import os
import random

import pytest
import sacrebleu

from transformer_lib.translate.evaluate import (bootstrap_interval, exact_match_rate,
                                                normalise_for_match, paired_bootstrap,
                                                reference_streams, score)

REFS = [f"the cat number {i} sat on the mat" for i in range(120)]


def _noisy(share: float, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [r if rng.random() < share else "a dog ran" for r in REFS]


def test_one_list_of_references_scores_as_before():
    hyps = _noisy(0.5, 0)
    got = score(hyps, REFS)
    assert got["bleu"] == sacrebleu.corpus_bleu(hyps, [REFS]).score
    assert got["chrf"] == sacrebleu.corpus_chrf(hyps, [REFS]).score
    assert got["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")


def test_reference_streams_give_several_references_per_sentence():
    hyps = ["I am tired.", "Thanks a lot."]
    one = score(hyps, ["I'm tired.", "Thank you very much."])
    two = score(hyps, [["I'm tired.", "Thank you very much."], ["I am tired.", None]])
    assert two["bleu_signature"].startswith("nrefs:var") or "nrefs:2" in two["bleu_signature"]
    assert two["bleu"] > one["bleu"] and two["chrf"] > one["chrf"]


@pytest.mark.parametrize("refs", [["a"], [["a", "b"], ["c"]], [["a", "b"], "cd"]])
def test_streams_must_have_one_entry_per_hypothesis(refs):
    with pytest.raises(ValueError):
        reference_streams(["x", "y"], refs)


def test_a_sentence_without_any_reference_is_refused():
    with pytest.raises(ValueError, match="at least one reference"):
        score(["x", "y"], [["a", None], ["b", None]])
    with pytest.raises(TypeError):
        score("x", ["a"])


def test_paired_bootstrap_is_seeded_and_finds_a_real_difference():
    worse, better = _noisy(0.4, 1), _noisy(0.8, 2)
    before = os.environ.get("SACREBLEU_SEED")
    first = paired_bootstrap(worse, better, REFS, n_samples=200, seed=7)
    assert os.environ.get("SACREBLEU_SEED") == before  # put back
    assert first == paired_bootstrap(worse, better, REFS, n_samples=200, seed=7)
    for metric in ("bleu", "chrf"):
        result = first[metric]
        assert result["difference"] > 0 and result["p_value"] < 0.05
        assert result["system"]["low"] <= result["system"]["score"] <= result["system"]["high"]
        assert result["baseline"]["high"] < result["system"]["high"]
    assert "bs:200|seed:7" in first["bleu_signature"]


def test_paired_bootstrap_of_a_system_with_itself_finds_nothing():
    hyps = _noisy(0.5, 3)
    result = paired_bootstrap(hyps, hyps, REFS, n_samples=100)
    assert result["bleu"]["difference"] == 0 and result["bleu"]["p_value"] == 1.0


def test_a_near_copy_is_not_significantly_different():
    a = _noisy(0.5, 4)
    b = list(a)
    b[0] = "the cat number 0 sat on a mat"
    assert paired_bootstrap(a, b, REFS, n_samples=200)["chrf"]["p_value"] > 0.05


def test_bootstrap_interval_surrounds_the_score_and_narrows_with_more_sentences():
    hyps = _noisy(0.5, 5)
    wide = bootstrap_interval(hyps[:30], REFS[:30], n_samples=200)
    narrow = bootstrap_interval(hyps, REFS, n_samples=200)
    assert narrow["bleu"]["low"] <= narrow["bleu"]["score"] <= narrow["bleu"]["high"]
    assert narrow["chrf"]["ci"] < wide["chrf"]["ci"]
    with pytest.raises(ValueError, match="positive"):
        bootstrap_interval(hyps, REFS, seed=0)


@pytest.mark.parametrize("text, normal", [
    ("Thank you very much!", "thank you very much"),
    ("  I'm   TIRED. ", "i m tired"),
    ("Guten Morgen, Anna!", "guten morgen anna"),
    ("well-known «words»…", "well known words"),
    ("Straße", "strasse"),
    ("ﬁne", "fine"),
])
def test_exact_matching_ignores_case_punctuation_and_spacing(text, normal):
    assert normalise_for_match(text) == normal


def test_exact_match_rate_takes_any_reference():
    hyps = ["i am tired", "Thanks.", "The car is red"]
    refs = [["I am tired.", "Thank you.", "The car is blue."],
            ["I'm tired.", "Thanks!", None]]
    assert exact_match_rate(hyps, refs) == {"count": 2, "total": 3, "rate": 2 / 3}
    assert exact_match_rate(hyps, refs[0])["count"] == 1
