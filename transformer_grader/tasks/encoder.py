"""The check of an encoder layer: ``EncoderLayer(d_model, num_heads, d_ff, dropout=0.1,
norm_first=False)``, ``forward(x, mask=None) -> (B, L, d_model)``, post-norm (the paper)
or pre-norm.

The reference is PyTorch's own ``nn.TransformerEncoderLayer`` (``batch_first=True``,
ReLU). The grader draws the weights of the library's ``EncoderLayer`` (random biases and
LayerNorm weights, so that a missing or shared piece shows), copies them into PyTorch's
layer with ``interop.copy_to_torch`` and into the student's module, which must have the
library's layout: ``self_attn`` (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``),
``ffn`` (``linear1``, ``linear2``), ``norm1``, ``norm2``.
"""

from __future__ import annotations

import random

import torch
from torch import nn

from transformer_lib.encoder import EncoderLayer as _RefLayer
from transformer_lib.interop import copy_to_torch
from ._ops import ENCODER_OPS
from ._helpers import (
    as_tensor, compare, first_match, listed, padded_lengths, randn, seeded_module
)
from ._result import Failed, GradeResult
from ._task import Case, Task, returned, run_check
from .attention import MISTAKES as _ATTENTION_MISTAKES
from ..runner.calls import CALLERS
from ..runner.calls import encoder_layers as _layers
from ..runner.modules import layer_problem

NAME = "EncoderLayer"

MISTAKES = {
    "encoder_norm_placement": (
        "Your layer normalises in the wrong place: with norm_first=False (post-norm,"
        " the paper) each sublayer is x = norm(x + sublayer(x)); with norm_first=True"
        " (pre-norm) it is x = x + sublayer(norm(x)). Yours computes the other one (is"
        " norm_first ignored?)."
    ),
    "encoder_no_residual": (
        "The residual connection is missing: a sublayer's output is added to its input"
        " (x + sublayer(...)), otherwise the layer forgets x and deep stacks stop"
        " training."
    ),
    "encoder_residual_normed": (
        "Pre-norm residual taken from the normalised x: the sublayer reads norm(x), but"
        " the residual adds the un-normalised x: x = x + sublayer(norm(x)), not h ="
        " norm(x); x = h + sublayer(h)."
    ),
    "encoder_shared_norm": (
        "One LayerNorm used for both sublayers: norm1 and norm2 are different layers"
        " with their own weights; the feed-forward block needs norm2."
    ),
    "encoder_dropout_in_eval": (
        "Dropout is active in eval mode: two calls on the same input give different"
        " outputs. Use nn.Dropout modules (model.eval() switches them off), or"
        " F.dropout(x, p, training=self.training); F.dropout's default is"
        " training=True."
    ),
}


# --------------------------------------------------------------------------------------
# The grader's side
# --------------------------------------------------------------------------------------
def _reference(d, h, d_ff, norm_first, seed, dtype=torch.float32):
    """(the library's layer, PyTorch's layer) with the same seeded weights, in eval
    mode."""

    def make():
        ours = _RefLayer(d, h, d_ff, dropout=0.0, norm_first=norm_first)
        with torch.no_grad():
            for name, p in ours.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0.0, 0.1)
                elif name.startswith("norm"):
                    p.normal_(1.0, 0.2)
        theirs = nn.TransformerEncoderLayer(
            d, h, d_ff, dropout=0.0, batch_first=True, norm_first=norm_first
        )
        copy_to_torch(ours, theirs)
        return ours, theirs

    ours, theirs = seeded_module(make, seed)
    return ours.to(dtype).eval(), theirs.to(dtype).eval()


def encoder_variant(ours, x, mask, norm_first, bug=None):
    """The library's layer computed by hand, with one classic mistake (``bug``) or
    none."""
    blocked = {"mask_polarity": None if mask is None else ~mask, "mask_ignored": None}
    attn_mask = blocked.get(bug, mask)

    def attn(h):
        return ours.self_attn(h, h, h, attn_mask)[0]

    ffn, norm1 = ours.ffn, ours.norm1
    norm2 = norm1 if bug == "shared_norm" else ours.norm2
    pre = norm_first != (bug == "placement")
    if bug == "no_residual":
        return ffn(norm2(attn(norm1(x)))) if pre else norm2(ffn(norm1(attn(x))))
    if pre and bug == "residual_normed":
        h = norm1(x)
        x = h + attn(h)
        h = norm2(x)
        return h + ffn(h)
    if pre:
        x = x + attn(norm1(x))
        return x + ffn(norm2(x))
    x = norm1(x + attn(x))
    return norm2(x + ffn(x))


def _diagnose(ours, x, mask, norm_first, expected):
    def diagnose(found):
        named = [
            ("placement", MISTAKES["encoder_norm_placement"]),
            ("no_residual", MISTAKES["encoder_no_residual"]),
            ("shared_norm", MISTAKES["encoder_shared_norm"]),
            ("mask_polarity", _ATTENTION_MISTAKES["mask_polarity"]),
            ("mask_ignored", _ATTENTION_MISTAKES["mask_ignored"]),
        ]
        if norm_first:
            named.insert(1, ("residual_normed", MISTAKES["encoder_residual_normed"]))
        variants = [
            (message, lambda bug=bug: encoder_variant(ours, x, mask, norm_first, bug))
            for bug, message in named
        ]
        with torch.no_grad():
            return first_match(found, variants, expected)

    return diagnose


def _judge_registration(inputs, outputs):
    facts = returned(outputs)
    problem = layer_problem(facts, _layers(inputs["d_model"], inputs["d_ff"]), NAME)
    if problem:
        raise Failed(problem)


def _judge_forward(inputs, outputs):
    out = returned(outputs)
    d, h, d_ff, norm_first = (
        inputs[k] for k in ("d_model", "num_heads", "d_ff", "norm_first")
    )
    problem = layer_problem(out["facts"], _layers(d, d_ff), NAME)
    if problem:
        raise Failed(problem)
    found, again = as_tensor("output", out["output"]), as_tensor("output", out["again"])
    if found.shape == again.shape and not torch.equal(found, again):
        raise Failed(MISTAKES["encoder_dropout_in_eval"])
    dtype = getattr(torch, inputs["dtype"])
    ours, theirs = _reference(d, h, d_ff, norm_first, inputs["seed"], dtype)
    x, mask = inputs["x"], inputs["mask"]
    key_padding = None if mask is None else mask[:, 0, 0, :]  # (B, 1, 1, L) -> (B, L)
    # With autograd on, PyTorch takes its plain path (not the inference fast path).
    expected = theirs(x, src_key_padding_mask=key_padding).detach()
    tolerance = (
        dict(atol=1e-5, rtol=1e-4)
        if dtype == torch.float64
        else dict(atol=1e-4, rtol=1e-3)
    )
    compare(
        "output",
        found,
        expected,
        _diagnose(ours, x, mask, norm_first, expected),
        **tolerance,
    )
    if inputs["grad"]:
        grads = out.get("grads") or {}
        for path in _layers(d, d_ff):
            g = grads.get(path)
            if (
                not isinstance(g, torch.Tensor)
                or not torch.isfinite(g).all()
                or not g.abs().sum() > 0
            ):
                raise Failed(
                    f"{path}.weight received no (finite, non-zero) gradient: every "
                    "layer must take part in the output, through autograd."
                )


def _forward(
    name, x, norm_first, mask=None, seed=0, sizes=(16, 4, 32), grad=False
) -> Case:
    d, h, d_ff = sizes
    ours, _ = _reference(d, h, d_ff, norm_first, seed, x.dtype)
    weights = {k: v.detach().clone() for k, v in ours.state_dict().items()}
    inputs = dict(
        d_model=d,
        num_heads=h,
        d_ff=d_ff,
        norm_first=norm_first,
        seed=seed,
        dtype=str(x.dtype).replace("torch.", ""),
        weights=weights,
        x=x,
        mask=mask,
        grad=grad,
    )
    return Case(
        name, "forward", inputs, _judge_forward, uses=(NAME,), args=("x", "mask")
    )


def _sizes(seed: int) -> dict:
    """The sizes and padding of the cases: seed 0, the notebook check's fixed ones; any
    other seed draws fresh ones (width, heads, d_ff, batch, lengths, a second model
    size), so a layer built for one set of shapes fails."""
    if seed == 0:
        return dict(size=(16, 4, 32), B=2, L=5, lengths=[5, 3], other=(12, 3, 20), L2=4)
    rng = random.Random(seed)
    h = rng.randint(2, 4)
    d = h * rng.randint(2, 5)
    h2 = rng.choice([n for n in (2, 3, 4, 6) if n != h])
    d2 = h2 * rng.randint(2, 4)
    B, L = rng.randint(2, 3), rng.randint(3, 7)
    return dict(
        size=(d, h, d * rng.randint(2, 4)), B=B, L=L,
        lengths=padded_lengths(rng, B, L),
        other=(d2, h2, d2 * rng.randint(2, 3) + rng.randint(0, 3)), L2=rng.randint(2, 6),
    )


def make_cases(present, seed: int = 0) -> list[Case]:
    """``seed`` 0: the notebook check's fixed sizes and mask; any other seed draws the
    same kinds of cases with fresh sizes and lengths (``_sizes``)."""
    s, z = seed, _sizes(seed)
    (d, h, d_ff), B, L = z["size"], z["B"], z["L"]
    x = randn(B, L, d, seed=s + 31)
    lengths = torch.tensor(z["lengths"])
    pad = torch.arange(L)[None, :] >= lengths[:, None]  # (B, L), True on padding
    pad = pad[:, None, None, :]  # (B, 1, 1, L), True = blocked
    d2, h2, d_ff2 = z["other"]
    x2 = randn(B, z["L2"], d2, seed=s + 32)
    sizes = dict(sizes=(d, h, d_ff))
    return [
        Case(
            "creates the module with the library's layout (self_attn.q_proj ..."
            " ffn.linear1, ffn.linear2, norm1, norm2)",
            "registration",
            dict(d_model=d, num_heads=h, d_ff=d_ff, norm_first=False),
            _judge_registration,
            uses=(NAME,),
        ),
        _forward(
            f"post-norm (the paper), random input (B={B}, L={L}), no mask", x, False,
            seed=s, **sizes,
        ),
        _forward(
            "post-norm with a key padding mask (B, 1, 1, L), lengths "
            + listed(z["lengths"]),
            x,
            False,
            pad,
            seed=s,
            **sizes,
        ),
        _forward("pre-norm (norm_first=True), no mask", x, True, seed=s, **sizes),
        _forward("pre-norm with a key padding mask", x, True, pad, seed=s, **sizes),
        _forward(
            "batch of 1, length 1", randn(1, 1, d, seed=s + 33), False, seed=s, **sizes
        ),
        _forward(
            "float64 (module.double() and a float64 input)",
            x.double(),
            True,
            pad,
            seed=s,
            **sizes,
        ),
        _forward(
            f"other sizes: d_model={d2}, num_heads={h2}, d_ff={d_ff2} (pre-norm)",
            x2,
            True,
            seed=s + 1,
            sizes=(d2, h2, d_ff2),
        ),
        _forward(
            "gradients reach every layer (post-norm, with a mask)",
            x,
            False,
            pad,
            seed=s,
            grad=True,
            **sizes,
        ),
    ]


TASK = Task(
    name="encoder",
    title="check_encoder_layer",
    names=(NAME,),
    callers=CALLERS["encoder"],
    make_cases=make_cases,
    ops=ENCODER_OPS,
    banned=(
        "transformer_lib.encoder",
        "transformer_lib.decoder",
        "transformer_lib.model",
        "torch.nn.modules.transformer",
        "torch._transformer_encoder_layer_fwd",
    ),
    rules=(
        "the library's encoder and decoder layers (transformer_lib.encoder, .decoder,"
        " .model) and PyTorch's (nn.TransformerEncoderLayer, nn.Transformer);"
        " MultiHeadAttention, PositionwiseFeedForward and LayerNorm are fine"
    ),
)


def check_encoder_layer(cls) -> GradeResult:
    """Check ``cls(d_model, num_heads, d_ff, dropout=0.1, norm_first=False)`` against
    PyTorch's ``nn.TransformerEncoderLayer`` (post-norm and pre-norm), with the same
    weights copied in.
    """
    result = GradeResult("check_encoder_layer")
    if not callable(cls):
        result.add("is a class", False, f"Expected a class, got {type(cls).__name__}.")
        return result
    return run_check(TASK, {NAME: cls}, result)
