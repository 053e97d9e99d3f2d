"""The checks of the three newer assignments: an encoder layer, the Noam schedule and a
training step, self-attention with a key/value cache and greedy decoding.

For each: a correct implementation (written here, independently of the grader) scores
full marks, an unfinished one scores 0, and each classic mistake the check names,
written below as a small buggy implementation, fails with the message that names it.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import transformer_lib as tl
from transformer_grader import (
    MISTAKES,
    check_encoder_layer,
    check_greedy_decode,
    check_kv_cache,
    check_noam,
    check_train_step,
)


def failure_text(result) -> str:
    return "\n".join(message for _, ok, message in result.cases if not ok)


def assert_named(result, key: str) -> None:
    assert not result, str(result)
    assert MISTAKES[key] in failure_text(result), str(result)


def _not_implemented(*args, **kwargs):
    raise NotImplementedError()


class _NotImplementedModule(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        raise NotImplementedError()


# --------------------------------------------------------------------------------------
# The encoder layer
# --------------------------------------------------------------------------------------
class Encoder(nn.Module):
    """An encoder layer with one switchable bug (``bug=None`` is correct)."""

    def __init__(
        self, d_model, num_heads, d_ff, dropout=0.1, norm_first=False, bug=None
    ):
        super().__init__()
        self.norm_first, self.bug, self.p = norm_first, bug, dropout
        self.self_attn = tl.MultiHeadAttention(d_model, num_heads)
        self.ffn = tl.PositionwiseFeedForward(d_model, d_ff)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        if self.bug == "polarity" and mask is not None:
            mask = ~mask

        def attend(h):
            return self.drop(self.self_attn(h, h, h, mask)[0])

        def feed(h):
            out = self.ffn(h)
            return (
                F.dropout(out, self.p) if self.bug == "eval_dropout" else self.drop(out)
            )

        norm2 = self.norm1 if self.bug == "shared_norm" else self.norm2
        pre = self.norm_first != (self.bug == "placement")
        if self.bug == "no_residual":
            return (
                feed(norm2(attend(self.norm1(x))))
                if pre
                else norm2(feed(self.norm1(attend(x))))
            )
        if pre and self.bug == "residual_normed":
            h = self.norm1(x)
            x = h + attend(h)
            h = norm2(x)
            return h + feed(h)
        if pre:
            x = x + attend(self.norm1(x))
            return x + feed(norm2(x))
        x = self.norm1(x + attend(x))
        return norm2(x + feed(x))


def test_encoder_layer_correct_and_library_pass_unfinished_scores_zero():
    for cls in (Encoder, tl.EncoderLayer):
        result = check_encoder_layer(cls)
        assert result and result.total >= 8, str(result)
    assert check_encoder_layer(_NotImplementedModule).score == 0.0


@pytest.mark.parametrize(
    "bug, key",
    [
        ("placement", "encoder_norm_placement"),
        ("no_residual", "encoder_no_residual"),
        ("residual_normed", "encoder_residual_normed"),
        ("shared_norm", "encoder_shared_norm"),
        ("eval_dropout", "encoder_dropout_in_eval"),
        ("polarity", "mask_polarity"),
    ],
)
def test_encoder_layer_mistakes_are_named(bug, key):
    assert_named(check_encoder_layer(functools.partial(Encoder, bug=bug)), key)


def test_encoder_layer_with_other_names_says_which_layers_are_needed():
    class Renamed(Encoder):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.ln1 = self.norm1
            del self.norm1

    result = check_encoder_layer(Renamed)
    assert not result and "norm1 is missing" in failure_text(result)


# --------------------------------------------------------------------------------------
# The Noam schedule
# --------------------------------------------------------------------------------------
def noam(step, d_model, warmup, *, bug=None):
    if bug != "step_zero":
        step = max(step, 1)
    scale = 1.0 if bug == "no_scale" else d_model**-0.5
    slope = warmup ** (-0.5 if bug == "warmup_exponent" else -1.5)
    pick = max if bug == "max" else min
    return scale * pick(step**-0.5, step * slope)


def test_noam_correct_and_library_pass():
    assert check_noam(noam) and check_noam(tl.noam_lr)
    assert check_noam(_not_implemented).score == 0.0


@pytest.mark.parametrize(
    "bug, key",
    [
        ("max", "noam_max"),
        ("no_scale", "noam_no_scale"),
        ("warmup_exponent", "noam_warmup_exponent"),
        ("step_zero", "noam_step_zero"),
    ],
)
def test_noam_mistakes_are_named(bug, key):
    assert_named(check_noam(functools.partial(noam, bug=bug)), key)


# --------------------------------------------------------------------------------------
# One training step
# --------------------------------------------------------------------------------------
def step(model, src, tgt, optimizer, scheduler, label_smoothing=0.0, *, bug=None):
    model.train()
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    if bug == "no_shift":
        tgt_in = tgt_out = tgt
    if bug == "reversed":
        tgt_in, tgt_out = tgt[:, 1:], tgt[:, :-1]
    logits = model(src, tgt_in)
    ignore = -100 if bug == "pad_in_loss" else model.pad_id
    smoothing = 0.0 if bug == "no_smoothing" else label_smoothing
    loss = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        tgt_out.reshape(-1),
        ignore_index=ignore,
        label_smoothing=smoothing,
    )
    if bug != "no_zero_grad":
        optimizer.zero_grad()
    loss.backward()
    if bug == "scheduler_first":
        scheduler.step()
    if bug != "no_optimizer_step":
        optimizer.step()
    if bug not in ("scheduler_first", "no_scheduler_step"):
        scheduler.step()
    return loss.item()


def test_train_step_correct_and_library_pass():
    assert check_train_step(step)
    assert check_train_step(lambda *args, **kwargs: tl.train_step(*args, **kwargs)[0])
    assert check_train_step(_not_implemented).score == 0.0


@pytest.mark.filterwarnings("ignore:Detected call of")
@pytest.mark.parametrize(
    "bug, key",
    [
        ("no_shift", "ts_no_shift"),
        ("reversed", "ts_shift_reversed"),
        ("pad_in_loss", "ts_pad_in_loss"),
        ("no_smoothing", "ts_no_smoothing"),
        ("no_zero_grad", "ts_no_zero_grad"),
        ("scheduler_first", "ts_scheduler_first"),
        ("no_scheduler_step", "ts_no_scheduler_step"),
        ("no_optimizer_step", "ts_no_optimizer_step"),
    ],
)
def test_train_step_mistakes_are_named(bug, key):
    assert_named(check_train_step(functools.partial(step, bug=bug)), key)


# --------------------------------------------------------------------------------------
# Self-attention with a key/value cache
# --------------------------------------------------------------------------------------
class Cached(nn.Module):
    def __init__(self, d_model, num_heads, bug=None):
        super().__init__()
        self.h, self.d_k, self.bug = num_heads, d_model // num_heads, bug
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def split(self, x):
        return x.view(x.size(0), x.size(1), self.h, self.d_k).transpose(1, 2)

    def forward(self, x, cache=None):
        q, k, v = (
            self.split(self.q_proj(x)),
            self.split(self.k_proj(x)),
            self.split(self.v_proj(x)),
        )
        if cache is not None:
            if "k" in cache and self.bug != "not_appended":
                k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
            cache["k"], cache["v"] = k, v
        new, total = q.size(2), k.size(2)
        if self.bug == "is_causal":  # top-left aligned: wrong once keys are cached
            context = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            diagonal = 1 if self.bug == "offset" else total - new + 1
            mask = torch.triu(torch.ones(new, total, dtype=torch.bool), diagonal)
            if self.bug == "no_causal" and cache is not None:
                mask = torch.zeros_like(mask)
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
            context = torch.softmax(scores.masked_fill(mask, float("-inf")), -1) @ v
        return self.out_proj(context.transpose(1, 2).reshape(x.size(0), new, -1))


def test_kv_cache_correct_passes_unfinished_scores_zero():
    result = check_kv_cache(Cached)
    assert result and result.total >= 6, str(result)

    class Unfinished(Cached):
        def forward(self, x, cache=None):
            raise NotImplementedError()

    assert check_kv_cache(Unfinished).score == 0.0


@pytest.mark.parametrize(
    "bug, key",
    [
        ("not_appended", "kv_not_appended"),
        ("offset", "kv_offset_mask"),
        ("is_causal", "kv_offset_mask"),
        ("no_causal", "kv_no_causal"),
    ],
)
def test_kv_cache_mistakes_are_named(bug, key):
    assert_named(check_kv_cache(functools.partial(Cached, bug=bug)), key)


# --------------------------------------------------------------------------------------
# Greedy decoding with the model's cache
# --------------------------------------------------------------------------------------
@torch.no_grad()
def greedy(model, src, max_len, bos_id, eos_id, *, bug=None):
    model.eval()
    memory = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    cache = None if bug == "no_cache" else model.decoder.new_cache()
    for _ in range(max_len):
        if cache is None:
            logits = model.decode(ys, memory, src)[:, -1]
        else:
            fed = ys if bug == "prefix" else ys[:, -1:]
            logits = model.decode(fed, memory, src, cache=cache)[:, -1]
        if bug != "pad":
            logits[:, model.pad_id] = float("-inf")
        token = logits.argmax(-1)
        if bug != "after_eos":
            token = token.masked_fill(finished, model.pad_id)
        ys = torch.cat([ys, token[:, None]], 1)
        finished |= token == eos_id
        if finished.all() and bug != "no_stop":
            break
    return ys


def test_greedy_correct_and_library_pass():
    assert check_greedy_decode(greedy) and check_greedy_decode(tl.greedy_decode)
    assert check_greedy_decode(_not_implemented).score == 0.0


@pytest.mark.parametrize(
    "bug, key",
    [
        ("no_cache", "greedy_no_cache"),
        ("prefix", "greedy_prefix_with_cache"),
        ("pad", "greedy_pad_chosen"),
        ("after_eos", "greedy_no_pad_after_eos"),
        ("no_stop", "greedy_no_early_stop"),
    ],
)
def test_greedy_mistakes_are_named(bug, key):
    result = check_greedy_decode(functools.partial(greedy, bug=bug))
    assert_named(result, key)
    if (
        bug == "no_cache"
    ):  # recomputation gives the right tokens: only the cache case fails
        assert [name for name, ok, _ in result.cases if not ok] == [
            "uses the key/value cache: after the first call, model.decode gets only the"
            " newest token"
        ]
