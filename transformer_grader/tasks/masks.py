"""The check of the mask builders: ``padding_mask(tokens, pad_id=0) -> (B, 1, 1, L)``,
``causal_mask(L) -> (1, 1, L, L)``, ``cross_mask(src, tgt_len, pad_id=0) -> (B, 1,
tgt_len, Ls)``. All bool with True = blocked.
"""

from __future__ import annotations

import random

import torch

from transformer_lib import masks as _masks
from ._helpers import as_tensor, compare, matches, token_batch
from ._result import Failed, GradeResult
from ._task import Case, Task, returned, run_check
from ..runner.calls import CALLERS
from .attention import MISTAKES as _ATTENTION_MISTAKES

NAMES = ("padding_mask", "causal_mask", "cross_mask")

MISTAKES: dict[str, str] = {}  # the mask mistakes are named in the messages below


def _check_bool_mask(what, found, expected, diagnose):
    found = as_tensor(what, found)
    if found.dtype != torch.bool:
        raise Failed(
            f"{what}: expected a bool tensor (True = blocked), got dtype {found.dtype}."
            " A comparison such as `tokens == pad_id` already gives a bool tensor."
        )
    compare(what, found, expected, diagnose)


# --------------------------------------------------------------------------------------
# The grader's side
# --------------------------------------------------------------------------------------
def _padding_diagnose(tokens, pad_id):
    def diagnose(found):
        ref = tokens == pad_id
        wanted = (ref.shape[0], 1, 1, ref.shape[1])
        if (
            found.shape == ref.shape
            or found.numel() == ref.numel()
            and found.shape != wanted
        ):
            return (
                f"Your mask has shape {tuple(found.shape)}; it must be (B, 1, 1, L) so"
                " that it broadcasts over the heads and the query positions of the"
                " scores (B, H, Lq, Lk): use (tokens == pad_id)[:, None, None, :]."
            )
        if matches(found.to(torch.float64), (~ref)[:, None, None, :].double()):
            return _ATTENTION_MISTAKES["mask_polarity"]
        return None

    return diagnose


def _judge_padding(inputs, outputs):
    tokens, pad_id = inputs["tokens"], inputs["pad_id"]
    _check_bool_mask(
        "padding mask",
        returned(outputs),
        _masks.padding_mask(tokens, pad_id),
        _padding_diagnose(tokens, pad_id),
    )


def _causal_diagnose(length):
    def diagnose(found):
        ones = torch.ones(length, length, dtype=torch.bool)
        named = [
            (
                (
                    "Your mask also blocks the diagonal: a position may attend to"
                    " itself. Use torch.triu(ones, diagonal=1)."
                ),
                torch.triu(ones),
            ),
            (
                _ATTENTION_MISTAKES["mask_polarity"]
                + " (Your mask is True on and below the diagonal.)",
                torch.tril(ones),
            ),
            (
                (
                    "Your mask blocks the past instead of the future: row i (a query)"
                    " may attend to columns 0..i; True must be strictly ABOVE the"
                    " diagonal."
                ),
                torch.tril(ones, -1),
            ),
        ]
        for message, pattern in named:
            if found.shape[-2:] == (length, length) and torch.equal(
                found.detach().reshape(-1, length, length)[0].bool(), pattern
            ):
                return message
        if found.shape != (1, 1, length, length) and found.numel() == length * length:
            return (
                f"Your mask has shape {tuple(found.shape)}; it must be (1, 1, L, L) to"
                " broadcast over batch and heads: add two leading dimensions with"
                " [None, None]."
            )
        return None

    return diagnose


def _judge_causal(inputs, outputs):
    length = inputs["length"]
    _check_bool_mask(
        "causal mask",
        returned(outputs),
        _masks.causal_mask(length),
        _causal_diagnose(length),
    )


def _cross_diagnose(src, tgt_len, pad_id):
    def diagnose(found):
        ref = _masks.cross_mask(src, tgt_len, pad_id)
        if (
            found.shape == (src.size(0), 1, src.size(1), tgt_len)
            and src.size(1) != tgt_len
        ):
            return (
                "Rows and columns are swapped: rows are the queries (the tgt_len target"
                " positions), columns are the keys (the source positions): shape (B, 1,"
                " tgt_len, Ls)."
            )
        if matches(found.double(), (~ref).double()):
            return _ATTENTION_MISTAKES["mask_polarity"]
        if found.shape == ref.shape and tgt_len <= src.size(1):
            causal = torch.triu(torch.ones(tgt_len, src.size(1), dtype=torch.bool), 1)
            if torch.equal(found.detach(), ref | causal):
                return (
                    "Your cross mask is causal: the decoder may look at the whole"
                    " source sentence; only padded source tokens are blocked."
                )
        return None

    return diagnose


def _judge_cross(inputs, outputs):
    src, tgt_len, pad_id = inputs["src"], inputs["tgt_len"], inputs["pad_id"]
    expected = _masks.cross_mask(src, tgt_len, pad_id)
    found = as_tensor("cross mask", returned(outputs))
    if found.shape != expected.shape and found.dim() == 4 and found.size(2) == 1:
        try:
            broadcasts = torch.equal(found.expand_as(expected), expected)
        except RuntimeError:
            broadcasts = False
        if broadcasts:
            raise Failed(
                f"cross mask: expected shape {tuple(expected.shape)} (one row per "
                f"target position), got {tuple(found.shape)}. The values broadcast "
                "correctly, but the exercise asks for the explicit (B, 1, tgt_len, "
                "Ls) mask: use .expand(-1, -1, tgt_len, -1)."
            )
    _check_bool_mask(
        "cross mask", found, expected, _cross_diagnose(src, tgt_len, pad_id)
    )


def _padding(name, tokens, pad_id) -> Case:
    return Case(
        f"padding_mask: {name}",
        "padding",
        dict(tokens=tokens, pad_id=pad_id),
        _judge_padding,
        uses=("padding_mask",),
        args=("tokens",),
    )


def _causal(length) -> Case:
    return Case(
        f"causal_mask: L={length}",
        "causal",
        dict(length=length),
        _judge_causal,
        uses=("causal_mask",),
    )


def _cross(name, src, tgt_len, pad_id) -> Case:
    return Case(
        f"cross_mask: {name}",
        "cross",
        dict(src=src, tgt_len=tgt_len, pad_id=pad_id),
        _judge_cross,
        uses=("cross_mask",),
        args=("src",),
    )


def _fixed_tokens():
    tokens = torch.tensor([[5, 7, 2, 9, 4], [3, 8, 0, 0, 0], [6, 0, 0, 0, 0]])
    return {
        "tokens": tokens,
        "pad3": torch.tensor([[1, 4, 3, 3], [3, 3, 3, 3]]),
        "one": torch.tensor([[4]]),
        "padded_row": torch.tensor([[0, 0, 0], [2, 5, 0]]),
        "padded3": torch.tensor([[3, 3, 3], [1, 2, 3]]),
        "lengths": (4, 7, 1),
        "tgt": (3, 7, 1, 2),
        "pad": (0, 3),
    }


def _drawn_tokens(seed: int):
    """The same kinds of batches as ``_fixed_tokens``, with sizes, lengths, tokens and
    padding ids drawn from ``seed``."""
    rng = random.Random(seed)
    length = rng.randint(4, 9)
    rows = rng.randint(2, 4)
    lengths = [length, rng.randint(1, length - 1)] + [
        rng.randint(1, length) for _ in range(rows - 2)
    ]
    rng.shuffle(lengths)
    pad = rng.randint(1, 9)
    other = rng.randint(3, 7)
    return {
        "tokens": token_batch(rng, rows, length, 0, lengths),
        "pad3": token_batch(rng, 2, other, pad, [rng.randint(1, other - 1), 0]),
        "one": torch.tensor([[rng.randint(1, 10_000)]]),
        "padded_row": token_batch(rng, 2, other, 0, [0, rng.randint(1, other)]),
        "padded3": token_batch(rng, 2, other, pad, [0, rng.randint(1, other)]),
        "lengths": (rng.randint(2, 64), rng.randint(65, 160), rng.randint(161, 300)),
        "tgt": (rng.randint(2, length - 1), length + rng.randint(1, 4), 1, rng.randint(1, 5)),
        "pad": (0, pad),
    }


def make_cases(present, seed: int = 0) -> list[Case]:
    """``seed`` 0: the notebook checks' fixed batches; any other seed draws the same
    kinds of batches (a padded batch, another padding id, a batch of 1, a fully padded
    row, non-contiguous tokens) with fresh sizes, lengths, tokens and padding ids."""
    t = _fixed_tokens() if seed == 0 else _drawn_tokens(seed)
    tokens, pad = t["tokens"], t["pad"][1]
    shown = ", ".join(str(int((row != 0).sum())) for row in tokens)
    cases = []
    if "padding_mask" in present:
        cases += [
            _padding(f"batch with lengths {shown} (pad_id=0)", tokens, 0),
            _padding(f"pad_id={pad}", t["pad3"], pad),
            _padding("batch of 1, length 1", t["one"], 0),
            _padding("a fully padded row", t["padded_row"], 0),
            _padding("non-contiguous tokens", tokens.t().contiguous().t(), 0),
        ]
    if "causal_mask" in present:
        cases += [_causal(length) for length in t["lengths"]]
    if "cross_mask" in present:
        short, long, one, last = t["tgt"]
        cases += [
            _cross(f"source lengths {shown}; tgt_len={short}", tokens, short, 0),
            _cross(
                f"tgt_len longer than the source (tgt_len={long})", tokens, long, 0
            ),
            _cross("batch of 1, lengths 1", t["one"], one, 0),
            _cross(f"fully padded source with pad_id={pad}", t["padded3"], last, pad),
        ]
    return cases

TASK = Task(
    name="masks",
    title="check_masks",
    names=NAMES,
    callers=CALLERS["masks"],
    make_cases=make_cases,
    banned=(
        "transformer_lib.masks",
        "torch.nn.Transformer.generate_square_subsequent_mask",
        "torch.nn.modules.transformer._generate_square_subsequent_mask",
    ),
    rules=(
        "the library's masks (transformer_lib.masks: padding_mask, causal_mask,"
        " cross_mask, decoder_self_mask) and"
        " nn.Transformer.generate_square_subsequent_mask"
    ),
)


def check_masks(padding_mask=None, causal_mask=None, cross_mask=None) -> GradeResult:
    """Check the mask builders that are given (each optional), against the library's.

    padding_mask(tokens, pad_id=0) -> (B, 1, 1, L) bool; causal_mask(L) -> (1, 1, L, L)
    bool, True strictly above the diagonal; cross_mask(src, tgt_len, pad_id=0) -> (B, 1,
    tgt_len, Ls) bool. True = blocked everywhere.
    """
    result = GradeResult("check_masks")
    if padding_mask is None and causal_mask is None and cross_mask is None:
        result.add(
            "a mask function was given",
            False,
            "Pass at least one of padding_mask=..., causal_mask=..., cross_mask=....",
        )
        return result
    objs = dict(
        padding_mask=padding_mask, causal_mask=causal_mask, cross_mask=cross_mask
    )
    return run_check(TASK, objs, result)
