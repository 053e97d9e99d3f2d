"""Beam search (tl.beam_search, FastDecoder.beam) is the standard algorithm: K live beams at
every step, finished hypotheses set aside with their length-penalised score.

- wide enough to hold every prefix, it returns the best-scoring output of all (checked
  against every output there is, scored by full recomputation);
- the defect of our first beam search (finished hypotheses holding beam slots) is gone;
- cached, uncached and static-cache (FastDecoder) searches give the same tokens and scores;
  beam size 1 is greedy decoding.

Equality with Hugging Face's ``generate(num_beams=K)`` is in test_marian.py.
"""
from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import transformer_lib as tl
from transformer_lib.decoding import length_penalty_gnmt, length_penalty_power

from conftest import PAD, make_small_model, random_tokens

pytestmark = pytest.mark.usefixtures("one_thread")

BOS, EOS = 1, 2
PENALTIES = {"gnmt": length_penalty_gnmt, "power": length_penalty_power}
RULES = [True, False, "never"]


def _sequence_scores(model, src_row, outputs, alpha, lp_fn):
    """sum log p / lp(|Y|) of each output (a list of token lists, after BOS), by full
    recomputation: one teacher-forced forward pass over all of them."""
    width = max(map(len, outputs))
    tgt = torch.full((len(outputs), width + 1), PAD)
    tgt[:, 0] = BOS
    for i, tokens in enumerate(outputs):
        tgt[i, 1:len(tokens) + 1] = torch.tensor(tokens)
    with torch.no_grad():
        logits = model(src_row.expand(len(outputs), -1), tgt[:, :-1])  # (N, width, V)
    # Decoding bans padding after the softmax (as generate() does): p is not renormalised.
    log_probs = F.log_softmax(logits.float(), dim=-1)
    token_log_probs = log_probs.gather(2, tgt[:, 1:, None].clamp(min=0))[..., 0]  # (N, width)
    lengths = torch.tensor([len(t) for t in outputs])
    real = torch.arange(width)[None] < lengths[:, None]
    total = token_log_probs.masked_fill(~real, 0.0).sum(dim=1)
    return (total / lp_fn(lengths.double(), alpha).float()).tolist()


def _every_output(vocab, max_len):
    """Every output the search can return: ends with EOS, or reaches max_len without one.
    No padding, no EOS before the end."""
    inner = [t for t in range(vocab) if t not in (PAD, EOS)]
    outputs = []
    for n in range(1, max_len + 1):
        for prefix in itertools.product(inner, repeat=n - 1):
            outputs.append([*prefix, EOS])
            if n == max_len:
                outputs += [[*prefix, t] for t in inner]
    return outputs


def _until_eos(row):
    tokens = []
    for token in row[1:].tolist():
        if token == PAD:
            break
        tokens.append(token)
        if token == EOS:
            break
    return tokens


@pytest.mark.parametrize("penalty", sorted(PENALTIES))
@pytest.mark.parametrize("early_stopping", RULES)
def test_a_beam_holding_every_prefix_finds_the_best_output(penalty, early_stopping):
    """Vocabulary 5 (pad, BOS, EOS, two more), max_len 3: 40 possible outputs. A beam of
    K = 5**3 holds every prefix at every step, so nothing is pruned: it must return the
    output whose recomputed score is the highest of all, for every rule and alpha."""
    vocab, max_len, k = 5, 3, 5 ** 3
    torch.manual_seed(0)
    model = make_small_model(vocab=vocab, layers=1)
    with torch.no_grad():
        model.generator.weight.mul_(4.0)  # sharper distributions: scores far apart
    src = random_tokens(3, 4, vocab, lengths=[4, 2, 3], low=3)
    outputs = _every_output(vocab, max_len)
    assert len(outputs) == 40
    lp_fn = PENALTIES[penalty]
    winners = set()
    for alpha in (0.0, 0.6, 1.5, 3.0):
        ys, scores = tl.beam_search(model, src, k, max_len, BOS, EOS, length_penalty=alpha,
                                    length_penalty_fn=lp_fn, early_stopping=early_stopping,
                                    return_scores=True)
        for b in range(src.size(0)):
            every = _sequence_scores(model, src[b:b + 1], outputs, alpha, lp_fn)
            best = max(range(len(outputs)), key=every.__getitem__)
            ranked = sorted(every, reverse=True)
            assert ranked[0] - ranked[1] > 1e-4  # no near tie: one right answer
            assert _until_eos(ys[b]) == outputs[best], (alpha, b)
            assert scores[b].item() == pytest.approx(every[best], abs=1e-4)
            winners.add(len(outputs[best]))
    assert len(winners) >= 2  # the best output's length changes with alpha


# ------------------------------------------------------------------------------------
# The defect of the first beam search: finished hypotheses held beam slots
# ------------------------------------------------------------------------------------

A, C, D = 3, 4, 5  # the scripted model's vocabulary: pad 0, BOS 1, EOS 2, A 3, C 4, D 5


class _Scripted(nn.Module):
    """A stand-in model whose next-token probabilities are a table of prefixes (the tokens
    after BOS), the same for every source; other prefixes get a flat distribution. It has
    the decoding interface (encode, decode, pad_id), without a cache: ``use_cache=False``."""

    pad_id, vocab_size = PAD, 6
    TABLE = {
        (): {A: 0.5, C: 0.45},  # greedy starts with A; C is close
        (A,): {C: 0.31, D: 0.29, A: 0.21, EOS: 0.19},  # A C: greedy, but only 0.155 in all
        (C,): {EOS: 0.5, C: 0.45},  # C EOS (0.225) and C C (0.2025) both outrank A C
        (A, C): {EOS: 0.99},  # A C EOS: greedy's output, the best
        (C, C): {D: 0.9, EOS: 0.1},
        (C, C, D): {EOS: 0.22, D: 0.21, C: 0.2, A: 0.19, BOS: 0.18},  # nothing good
    }

    def encode(self, src):
        return torch.zeros(src.size(0), 1, 1)

    def log_probs(self, prefix):
        probs = torch.full((self.vocab_size,), 1e-3)
        probs[PAD] = 0.0
        for token, p in self.TABLE.get(tuple(prefix), {}).items():
            probs[token] = p
        return (probs / probs.sum()).log()  # (V,)

    def score(self, tokens):
        """The summed log-probability of an output."""
        return sum(self.log_probs(tokens[:i])[t].item() for i, t in enumerate(tokens))

    def decode(self, ys, memory, src, cache=None):
        logits = torch.stack([self.log_probs(prefix) for prefix in ys[:, 1:].tolist()])
        return logits[:, None].expand(-1, ys.size(1), -1)  # (B, t, V): the last is read


def _first_beam_search(model, src, k, max_len, alpha, lp_fn):
    """Our first beam search, kept here to show its defect: a finished beam stays in the
    beam (extended by padding at no cost) and competes for the K slots by summed
    log-probability; the length penalty only ranks the K survivors at the end."""
    ys = torch.full((k, 1), BOS)
    scores = torch.tensor([0.0] + [float("-inf")] * (k - 1))
    finished = torch.zeros(k, dtype=torch.bool)
    for _ in range(max_len):
        log_probs = F.log_softmax(model.decode(ys, None, src)[:, -1], dim=-1)  # (K, V)
        log_probs[:, PAD] = float("-inf")
        log_probs[finished] = float("-inf")
        log_probs[finished, PAD] = 0.0
        scores, flat = (scores[:, None] + log_probs).view(-1).topk(k)
        parent, token = flat // log_probs.size(1), flat % log_probs.size(1)
        ys = torch.cat([ys[parent], token[:, None]], dim=1)
        finished = finished[parent] | (token == EOS)
        if finished.all():
            break
    lengths = (ys[:, 1:] != PAD).sum(dim=1)
    return ys[(scores / lp_fn(lengths, alpha)).argmax()]


@pytest.mark.parametrize("alpha, lp_fn", [(1.0, length_penalty_power),
                                          (2.0, length_penalty_gnmt)])
def test_finished_hypotheses_no_longer_crowd_out_live_beams(alpha, lp_fn):
    """K = 2. After two steps C EOS (finished) and C C outrank A C, greedy's prefix: the
    first beam search kept those two, so A C was lost, and it returned C EOS, shorter and
    worse (by its own score) than greedy's A C EOS. Now C EOS is set aside, the two live
    beams are C C and A C, and A C EOS is found."""
    model = _Scripted()
    src = torch.tensor([[3, 4]])
    greedy = tl.greedy_decode(model, src, 4, BOS, EOS, use_cache=False)
    assert _until_eos(greedy[0]) == [A, C, EOS]
    old = _first_beam_search(model, src, 2, 4, alpha, lp_fn)
    assert _until_eos(old) == [C, EOS]
    for rule in RULES:
        new, score = tl.beam_search(model, src, 2, 4, BOS, EOS, alpha, use_cache=False,
                                    length_penalty_fn=lp_fn, early_stopping=rule,
                                    return_scores=True)
        assert _until_eos(new[0]) == [A, C, EOS], rule
        lp = lambda n: lp_fn(torch.tensor(n, dtype=torch.float64), alpha).item()  # noqa: E731
        assert score.item() == pytest.approx(model.score([A, C, EOS]) / lp(3), abs=1e-5)
        assert score.item() > model.score([C, EOS]) / lp(2)  # the old answer scores worse


# ------------------------------------------------------------------------------------
# One algorithm, three implementations: cached, recomputed, static cache
# ------------------------------------------------------------------------------------

VOCAB, MAX_LEN = 13, 10


def _case(seed):
    """A random model, a padded batch, and an EOS the model emits early for some rows."""
    torch.manual_seed(seed)
    model = make_small_model(vocab=VOCAB, layers=2)
    src = random_tokens(5, 7, VOCAB, lengths=[7, 3, 5, 1, 6])
    free = tl.greedy_decode(model, src, MAX_LEN, BOS, eos_id=PAD)  # never stops
    return model, src, int(free[0, 3])


@pytest.mark.parametrize("seed", [0, 1])
def test_cache_recomputation_and_static_cache_agree(seed):
    model, src, eos = _case(seed)
    decoder = tl.FastDecoder(model)
    for k, alpha, penalty, rule in [(2, 0.6, "gnmt", False), (3, 1.0, "power", True),
                                    (4, 0.0, "power", "never"), (5, 1.5, "gnmt", "never"),
                                    (3, 0.6, "gnmt", False)]:
        options = dict(length_penalty=alpha, length_penalty_fn=PENALTIES[penalty],
                       early_stopping=rule, return_scores=True)
        ys, scores = tl.beam_search(model, src, k, MAX_LEN, BOS, eos, **options)
        again, again_scores = tl.beam_search(model, src, k, MAX_LEN, BOS, eos,
                                             use_cache=False, **options)
        fast, fast_scores = decoder.beam(src, k, MAX_LEN, BOS, eos, **options)
        assert torch.equal(ys, again) and torch.equal(ys, fast), (k, alpha, penalty, rule)
        torch.testing.assert_close(again_scores, scores, atol=1e-5, rtol=0)
        torch.testing.assert_close(fast_scores, scores, atol=1e-5, rtol=0)


@pytest.mark.parametrize("rule", [True, False])
def test_beam_size_one_is_greedy(rule):
    for seed in range(3):
        model, src, eos = _case(seed)
        greedy = tl.greedy_decode(model, src, MAX_LEN, BOS, eos)
        for alpha in (0.0, 0.6, 2.0):
            beam = tl.beam_search(model, src, 1, MAX_LEN, BOS, eos, length_penalty=alpha,
                                  early_stopping=rule)
            assert torch.equal(beam, greedy)
            assert torch.equal(tl.fast_beam_search(model, src, 1, MAX_LEN, BOS, eos,
                                                   length_penalty=alpha,
                                                   early_stopping=rule), greedy)


def test_outputs_pad_after_eos_and_scores_are_recomputed_scores():
    model, src, eos = _case(2)
    ys, scores = tl.beam_search(model, src, 3, MAX_LEN, BOS, eos, length_penalty=0.6,
                                return_scores=True)
    lengths = []
    for b, row in enumerate(ys):
        tokens = row[1:].tolist()
        n = tokens.index(eos) + 1 if eos in tokens else len(tokens)
        assert all(t == PAD for t in tokens[n:]) and PAD not in tokens[:n]
        lengths.append(n)
        # score with this file's BOS: _sequence_scores starts from BOS
        (expected,) = _sequence_scores(model, src[b:b + 1], [tokens[:n]], 0.6,
                                       length_penalty_gnmt)
        assert scores[b].item() == pytest.approx(expected, abs=1e-4)
    assert ys.size(1) == 1 + max(lengths)
    assert len(set(lengths)) > 1


def test_bad_beam_arguments_raise_named_errors():
    model, src, eos = _case(0)
    with pytest.raises(ValueError, match=r"early_stopping must be True, False or 'never', "
                                         r"got 'sometimes'"):
        tl.beam_search(model, src, 2, 4, BOS, eos, early_stopping="sometimes")
    with pytest.raises(ValueError, match=r"early_stopping must be True, False or 'never'"):
        tl.fast_beam_search(model, src, 2, 4, BOS, eos, early_stopping=1)
    with pytest.raises(TypeError, match=r"return_scores must be True or False, got str"):
        tl.beam_search(model, src, 2, 4, BOS, eos, return_scores="yes")
    with pytest.raises(ValueError, match=r"length_penalty_fn\(lengths, alpha\) must return "
                                         r"one positive number per length"):
        tl.beam_search(model, src, 2, 4, BOS, eos,
                       length_penalty_fn=lambda n, a: torch.zeros_like(n))
