"""The check of greedy decoding with a key/value cache: ``greedy_decode(model, src,
max_len, bos_id, eos_id) -> (B, T)`` int64 tokens, starting with BOS; after a sequence's
EOS only ``model.pad_id``; stop once every sequence has ended (or after ``max_len`` new
tokens); padding is never chosen as a token. It must use the model's cache: ``cache =
model.decoder.new_cache()``, then each ``model.decode(new_tokens, memory, src,
cache=cache)`` gets only the newest token.

The reference is the library's ``greedy_decode``, which gives the same tokens with and
without the cache. Some cases use a real (small, random) ``Transformer``; others a
``ScriptedModel``, a stand-in with the same interface whose next token is read from a
script, so that sequences end exactly where the case wants and padding is sometimes the
model's favourite.
"""

from __future__ import annotations

import torch

from transformer_lib.decoding import greedy_decode as _ref_greedy
from transformer_lib.model import Transformer
from ._helpers import as_tensor, rng, seeded_module
from ._result import Failed, GradeResult
from ._task import Case, Task, check_function, returned
from ..runner.calls import BOS, CALLERS, EOS, GREEDY_VOCAB
from ..runner.calls import decoding_model as _model

NAME = "greedy_decode"
CONFIG = dict(
    src_vocab_size=GREEDY_VOCAB,
    tgt_vocab_size=GREEDY_VOCAB,
    d_model=16,
    num_heads=2,
    num_encoder_layers=1,
    num_decoder_layers=1,
    d_ff=32,
    dropout=0.0,
    max_len=64,
    pad_id=0,
)

MISTAKES = {
    "greedy_no_cache": (
        "Each step recomputes the whole prefix: make the cache once (cache ="
        " model.decoder.new_cache()) and give model.decode only the newest token, ys[:,"
        " -1:], with cache=cache: a step then costs O(L) instead of O(L^2)."
    ),
    "greedy_prefix_with_cache": (
        "You fed the whole prefix into a cached decode: the cache already holds the"
        " keys and values of the earlier tokens, so they are counted twice and"
        " positions shift. With a cache, give model.decode only the newest token, ys[:,"
        " -1:]."
    ),
    "greedy_pad_chosen": (
        "The padding token was chosen as an output token: padding is not a word. Set"
        " its logit to -inf before the argmax (logits[:, model.pad_id] ="
        " float('-inf'))."
    ),
    "greedy_no_pad_after_eos": (
        "A sequence went on after its EOS: once a sequence has produced eos_id, its"
        " remaining positions hold model.pad_id (next_token.masked_fill(finished,"
        " model.pad_id))."
    ),
    "greedy_no_early_stop": (
        "Decoding went on after every sequence had ended: stop as soon as all have"
        " produced EOS (if finished.all(): break); the output is then shorter than"
        " max_len + 1."
    ),
}


# --------------------------------------------------------------------------------------
# The grader's side
# --------------------------------------------------------------------------------------
@torch.no_grad()
def greedy_variant(model, src, max_len, bos_id, eos_id, bug=None):
    """Greedy decoding with one classic mistake (``bug``) or none."""
    memory, pad = model.encode(src), model.pad_id
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    cache = None if bug == "greedy_no_cache" else model.decoder.new_cache()
    for _ in range(max_len):
        if cache is None:
            logits = model.decode(ys, memory, src)[:, -1]
        else:
            fed = ys if bug == "greedy_prefix_with_cache" else ys[:, -1:]
            logits = model.decode(fed, memory, src, cache=cache)[:, -1]
        if bug != "greedy_pad_chosen":
            logits[:, pad] = float("-inf")
        token = logits.argmax(dim=-1)
        if bug != "greedy_no_pad_after_eos":
            token = token.masked_fill(finished, pad)
        ys = torch.cat([ys, token[:, None]], dim=1)
        finished |= token == eos_id
        if finished.all() and bug != "greedy_no_early_stop":
            break
    return ys


def _judge_tokens(inputs, outputs):
    out = returned(outputs)
    found = as_tensor("tokens", out["tokens"])
    model, src, max_len = _model(inputs), inputs["src"], inputs["max_len"]
    expected = _ref_greedy(model, src, max_len, BOS, EOS, use_cache=False)
    if found.dtype.is_floating_point or found.dtype == torch.bool:
        raise Failed(f"tokens: expected int64 token ids, got dtype {found.dtype}.")
    if found.shape == expected.shape and torch.equal(found.long(), expected):
        return
    hint = next(
        (
            message
            for bug, message in MISTAKES.items()
            if bug != "greedy_no_cache"
            and torch.equal(
                greedy_variant(model, src, max_len, BOS, EOS, bug), found.long()
            )
        ),
        None,
    )
    if found.shape != expected.shape:
        text = (
            f"tokens: expected shape {tuple(expected.shape)} (BOS and up to"
            f" max_len={max_len} new tokens), got {tuple(found.shape)}."
        )
    else:
        row, col = (found.long() != expected).nonzero()[0].tolist()
        text = (
            f"tokens: sequence {row} differs at position {col}: expected "
            f"{expected[row].tolist()}, got {found[row].long().tolist()}."
        )
    raise Failed(text + (f"\n{hint}" if hint else ""))


def _judge_cache(inputs, outputs):
    calls = returned(outputs)["calls"]
    if not calls:
        raise Failed(
            "model.decode was never called: decode with model.decode(new_tokens, "
            "memory, src, cache=cache)."
        )
    if not all(cached for _, cached in calls):
        raise Failed(MISTAKES["greedy_no_cache"])
    if any(length != 1 for length, _ in calls):
        raise Failed(
            f"model.decode got {[length for length, _ in calls]} tokens in its calls; "
            "with a cache each call gets one.\n" + MISTAKES["greedy_prefix_with_cache"]
        )


def _transformer(name, seed, batch, src_length, max_len, judge=_judge_tokens) -> Case:
    model = seeded_module(lambda: Transformer(**CONFIG), seed)
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    src = torch.randint(
        3, CONFIG["src_vocab_size"], (batch, src_length), generator=rng(seed)
    )
    if batch > 1:  # the last sentence is padded
        src[-1, src_length // 2 :] = CONFIG["pad_id"]
    inputs = dict(
        kind="transformer", config=CONFIG, weights=weights, src=src, max_len=max_len
    )
    return Case(name, "decode", inputs, judge, uses=(NAME,), args=("src",))


def _scripted(name, seed, ends, max_len, trap_at=()) -> Case:
    """Row b says len ``ends[b]`` words then EOS (None: no EOS within max_len)."""
    length = max_len + 2
    words = torch.randint(
        4, CONFIG["tgt_vocab_size"], (len(ends), length), generator=rng(seed)
    )
    script = torch.cat([torch.full((len(ends), 1), BOS), words[:, 1:]], dim=1)
    for b, end in enumerate(ends):
        if end is not None:
            script[b, end + 1] = EOS
    trap = torch.zeros(len(ends), length, dtype=torch.bool)
    for b, t in trap_at:
        trap[b, t] = True
    src = torch.randint(
        3, CONFIG["src_vocab_size"], (len(ends), 4), generator=rng(seed + 1)
    )
    inputs = dict(kind="scripted", script=script, trap=trap, src=src, max_len=max_len)
    return Case(name, "decode", inputs, _judge_tokens, uses=(NAME,), args=("src",))


def make_cases(present, seed: int = 0) -> list[Case]:
    s = seed
    return [
        _transformer(
            "a small Transformer (random weights), batch of 3 with padding, max_len=8: "
            "the tokens of greedy decoding",
            s + 61,
            3,
            6,
            8,
        ),
        _transformer(
            "uses the key/value cache: after the first call, model.decode gets only the"
            " newest token",
            s + 61,
            3,
            6,
            8,
            judge=_judge_cache,
        ),
        _scripted(
            "sequences that end at different steps: padding after EOS, stop once all"
            " have ended",
            s + 62,
            ends=(2, 4, 3),
            max_len=8,
        ),
        _scripted(
            "the padding token is never chosen, even where the model prefers it",
            s + 63,
            ends=(3, 5),
            max_len=7,
            trap_at=((0, 1), (1, 2), (1, 4)),
        ),
        _scripted(
            "no EOS within max_len=4: exactly 4 new tokens",
            s + 64,
            ends=(None, None),
            max_len=4,
        ),
        _transformer("batch of 1, max_len=1", s + 65, 1, 3, 1),
    ]


TASK = Task(
    name="greedy",
    title="check_greedy_decode",
    names=(NAME,),
    callers=CALLERS["greedy"],
    make_cases=make_cases,
    banned=("transformer_lib.decoding",),
    rules=(
        "the library's decoding (transformer_lib.decoding: greedy_decode, beam_search);"
        " the model's encode, decode and decoder.new_cache are fine"
    ),
)


def check_greedy_decode(fn) -> GradeResult:
    """Check ``fn(model, src, max_len, bos_id, eos_id)`` against the library's greedy
    decoding, and that it decodes with the model's key/value cache."""
    return check_function(TASK, NAME, fn)
