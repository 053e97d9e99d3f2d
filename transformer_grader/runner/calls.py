"""How each task's cases call the student's code: the grader's inputs in, raw outputs
out.

A caller ``call(objs, inputs)`` gets the objects the notebook defined (``objs``, by
graded name) and fresh copies of one case's inputs, runs the student's code and returns
what came out. It compares nothing with a reference and holds none: the judges do that,
in the grading process (``tasks/attention.py``, ...). ``CALLERS`` maps each task to
its callers by the key a case names (``Case.call``).

A caller raises ``Failed`` only when the result cannot even be sent back (a function
that should return a pair returned something else); everything else is the judge's
business.
"""

from __future__ import annotations

import torch
from torch import nn

from transformer_lib.model import Transformer
from .cases import Failed
from .modules import layer_problem, load_weights, module_facts

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")


# --------------------------------------------------------------------------------------
# attention: scaled_dot_product_attention(q, k, v, mask=None) -> (context, weights)
# --------------------------------------------------------------------------------------
def call_attention(fn, q, k, v, mask):
    out = fn(q, k, v) if mask is None else fn(q, k, v, mask)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        length = "" if not isinstance(out, (tuple, list)) else f" of length {len(out)}"
        raise Failed(
            "Your function should return a pair (context, weights), got "
            f"{type(out).__name__}{length}."
        )
    return out


def _attention(objs, inputs):
    fn = objs["scaled_dot_product_attention"]
    context, weights = call_attention(
        fn, inputs["q"], inputs["k"], inputs["v"], inputs["mask"]
    )
    out = {"context": context, "weights": weights}
    if inputs["grad"]:
        q, k, v = (inputs[n].detach().clone().requires_grad_(True) for n in "qkv")
        context, _ = call_attention(fn, q, k, v, inputs["mask"])
        out["requires_grad"] = (
            isinstance(context, torch.Tensor) and context.requires_grad
        )
        if out["requires_grad"]:
            context.sum().backward()
            out["grads"] = {"q": q.grad, "k": k.grad, "v": v.grad}
    return out


# --------------------------------------------------------------------------------------
# masks: padding_mask(tokens, pad_id), causal_mask(L), cross_mask(src, tgt_len, pad_id)
# --------------------------------------------------------------------------------------
def _padding(objs, inputs):
    return objs["padding_mask"](inputs["tokens"], inputs["pad_id"])


def _causal(objs, inputs):
    return objs["causal_mask"](inputs["length"])


def _cross(objs, inputs):
    return objs["cross_mask"](inputs["src"], inputs["tgt_len"], inputs["pad_id"])


# --------------------------------------------------------------------------------------
# multihead: MultiHeadAttention(d_model, num_heads), forward(query, key, value, mask)
# --------------------------------------------------------------------------------------
def projections_fit(facts: dict, d: int) -> bool:
    """Whether the grader's weights fit: four ``nn.Linear(d, d)`` named as in the
    library (the judge explains what does not fit)."""
    layers = facts.get("layers") or {}
    return all(
        layers.get(name) and layers[name]["linear"] and layers[name]["weight"] == [d, d]
        for name in PROJECTIONS
    )


def _build_mha(objs, inputs):
    cls = objs["MultiHeadAttention"]
    student = cls(inputs["d_model"], inputs["num_heads"])
    if not isinstance(student, nn.Module):
        raise Failed(
            f"{getattr(cls, '__name__', cls)}(d_model, num_heads) should create an"
            f" nn.Module, got {type(student).__name__}."
        )
    return student


def _call_mha(module, query, key, value, mask):
    out = module(query, key, value) if mask is None else module(query, key, value, mask)
    if isinstance(out, (tuple, list)):
        if not out:
            raise Failed(
                "forward returned an empty tuple; expected output or (output, weights)."
            )
        out = out[0]
    return out


def _mha_registration(objs, inputs):
    student = objs["MultiHeadAttention"](inputs["d_model"], inputs["num_heads"])
    return module_facts(student, PROJECTIONS)


def _mha_forward(objs, inputs):
    student = _build_mha(objs, inputs)
    facts = module_facts(student, PROJECTIONS)
    if not projections_fit(facts, inputs["d_model"]):
        return {"facts": facts}
    load_weights(student, inputs["weights"])
    student.eval()
    student.to(getattr(torch, inputs["dtype"]))
    query, key, value, mask = (inputs[n] for n in ("query", "key", "value", "mask"))
    if not inputs["grad"]:
        with torch.no_grad():
            return {
                "facts": facts,
                "output": _call_mha(student, query, key, value, mask),
            }
    output = _call_mha(student, query, key, value, mask)
    out = {"facts": facts, "output": output}
    if isinstance(output, torch.Tensor) and output.requires_grad:
        output.sum().backward()
        out["grads"] = {
            name: getattr(student, name).weight.grad for name in PROJECTIONS
        }
    return out


# --------------------------------------------------------------------------------------
# loss: masked_cross_entropy(logits, targets, pad_id=0, label_smoothing=0.0)
# --------------------------------------------------------------------------------------
def _loss(objs, inputs):
    logits = inputs["logits"]
    if inputs["grad"]:
        logits = logits.detach().clone().requires_grad_(True)
    found = objs["masked_cross_entropy"](
        logits,
        inputs["targets"],
        pad_id=inputs["pad_id"],
        label_smoothing=inputs["eps"],
    )
    out = {"loss": found}
    if inputs["grad"] and isinstance(found, torch.Tensor):
        out["requires_grad"] = found.requires_grad
        if found.requires_grad and found.dim() == 0:
            found.backward()
            out["grad"] = logits.grad
    return out


# --------------------------------------------------------------------------------------
# positional: sinusoidal_table(max_len, d_model)
# --------------------------------------------------------------------------------------
def _table(objs, inputs):
    return objs["sinusoidal_table"](inputs["max_len"], inputs["d_model"])


# --------------------------------------------------------------------------------------
# encoder: EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first), forward(x, mask)
# --------------------------------------------------------------------------------------
def encoder_layers(d, d_ff) -> dict:
    """The layers the grader copies its weights into: path -> (weight, bias) shape."""
    shapes = {f"self_attn.{p}": ((d, d), (d,)) for p in PROJECTIONS}
    shapes.update(
        {
            "ffn.linear1": ((d_ff, d), (d_ff,)),
            "ffn.linear2": ((d, d_ff), (d,)),
            "norm1": ((d,), (d,)),
            "norm2": ((d,), (d,)),
        }
    )
    return shapes


def _build_encoder(objs, inputs):
    return objs["EncoderLayer"](
        inputs["d_model"],
        inputs["num_heads"],
        inputs["d_ff"],
        dropout=0.1,
        norm_first=inputs["norm_first"],
    )


def _encoder_registration(objs, inputs):
    layers = encoder_layers(inputs["d_model"], inputs["d_ff"])
    return module_facts(_build_encoder(objs, inputs), layers)


def _weight_grad(module, path):
    for part in path.split("."):
        module = getattr(module, part)
    return module.weight.grad


def _encoder_forward(objs, inputs):
    student = _build_encoder(objs, inputs)
    layers = encoder_layers(inputs["d_model"], inputs["d_ff"])
    facts = module_facts(student, layers)
    if layer_problem(facts, layers, "EncoderLayer"):
        return {"facts": facts}
    load_weights(student, inputs["weights"])
    student.eval()
    student.to(getattr(torch, inputs["dtype"]))
    x, mask = inputs["x"], inputs["mask"]
    call = (lambda: student(x)) if mask is None else (lambda: student(x, mask))
    if not inputs["grad"]:
        with torch.no_grad():
            return {"facts": facts, "output": call(), "again": call()}
    output = call()
    out = {"facts": facts, "output": output, "again": output}
    if isinstance(output, torch.Tensor) and output.requires_grad:
        output.sum().backward()
        out["grads"] = {path: _weight_grad(student, path) for path in facts["layers"]}
    return out


# --------------------------------------------------------------------------------------
# noam: noam_lr(step, d_model, warmup) -> float
# --------------------------------------------------------------------------------------
def _noam_values(objs, inputs):
    fn = objs["noam_lr"]
    return [fn(step, inputs["d_model"], inputs["warmup"]) for step in inputs["steps"]]


def _noam_lambda_lr(objs, inputs):
    """The schedule in PyTorch's LambdaLR, as the course uses it: the rates of the first
    updates."""
    fn, d_model, warmup = objs["noam_lr"], inputs["d_model"], inputs["warmup"]
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: fn(s + 1, d_model, warmup)
    )
    rates = []
    for _ in range(inputs["updates"]):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


# --------------------------------------------------------------------------------------
# train_step: train_step(model, src, tgt, optimizer, scheduler, label_smoothing) ->
# float
# --------------------------------------------------------------------------------------
def schedule(step: int) -> float:
    """The LambdaLR factor the grader uses (base lr 0.1): 0.05, then 0.1, 0.15, ..."""
    return (step + 1) / 2


def training_setup(config: dict, weights: dict):
    """The model, optimizer and schedule one step is graded with (in both processes)."""
    model = Transformer(**config)
    model.load_state_dict(weights)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    for p in model.parameters():  # left over from an earlier step
        p.grad = torch.full_like(p, 0.5)
    return model, optimizer, scheduler


def _train_step(objs, inputs):
    model, optimizer, scheduler = training_setup(inputs["config"], inputs["weights"])
    losses = [
        objs["train_step"](
            model,
            inputs["src"],
            inputs["tgt"],
            optimizer,
            scheduler,
            label_smoothing=inputs["eps"],
        )
        for _ in range(inputs["steps"])
    ]
    return {
        "losses": losses,
        "params": dict(model.state_dict()),
        "lr": optimizer.param_groups[0]["lr"],
    }


# --------------------------------------------------------------------------------------
# kv_cache: CachedSelfAttention(d_model, num_heads), forward(x, cache=None)
# --------------------------------------------------------------------------------------
def kv_layers(d) -> dict:
    """The projections the grader copies its weights into: path -> (weight, bias)."""
    return {name: ((d, d), (d,)) for name in PROJECTIONS}


def _kv_chunks(objs, inputs):
    student = objs["CachedSelfAttention"](inputs["d_model"], inputs["num_heads"])
    facts = module_facts(student, kv_layers(inputs["d_model"]))
    if layer_problem(facts, kv_layers(inputs["d_model"]), "CachedSelfAttention"):
        return {"facts": facts}
    load_weights(student, inputs["weights"])
    student.eval()
    student.to(getattr(torch, inputs["dtype"]))
    x, chunks = inputs["x"], inputs["chunks"]
    outputs, cache, start = [], (None if chunks is None else {}), 0
    with torch.no_grad():
        for size in chunks or [x.size(1)]:
            part = x[:, start : start + size]
            outputs.append(student(part) if cache is None else student(part, cache))
            start += size
    kept = None if cache is None else {k: cache.get(k) for k in ("k", "v")}
    return {"facts": facts, "outputs": outputs, "cache": kept}


# --------------------------------------------------------------------------------------
# greedy: greedy_decode(model, src, max_len, bos_id, eos_id)
# --------------------------------------------------------------------------------------
BOS, EOS, FILLER = 1, 2, 3
GREEDY_VOCAB = 12


class _ScriptedDecoder(nn.Module):
    def new_cache(self) -> list[dict]:
        return [{"self": {}, "cross": {"static": True}}]


class ScriptedModel(nn.Module):
    """A stand-in for ``Transformer`` with its decoding interface (``encode``,
    ``decode`` with or without a cache, ``decoder.new_cache()``, ``pad_id``). Row b's
    next token follows ``script[b]`` as long as the prefix does (then FILLER); where
    ``trap[b, t]`` is True, the padding token gets an even higher logit at position
    t."""

    def __init__(self, script, trap, vocab_size, pad_id=0):
        super().__init__()
        self.pad_id, self.vocab_size = pad_id, vocab_size
        self.register_buffer("script", script)  # (B, T)
        self.register_buffer("trap", trap)  # (B, T) bool
        # so that model.parameters() is not empty
        self.anchor = nn.Parameter(torch.zeros(()))
        self.decoder = _ScriptedDecoder()

    def encode(self, src):
        return torch.zeros(src.size(0), src.size(1), 1)

    def decode(self, tgt_in, memory, src, cache=None):
        """tgt_in (B, new) -> logits (B, new, V); with a cache, tgt_in continues what it
        holds."""
        tokens = tgt_in
        if cache is not None:
            held = cache[0]["self"].get("k")  # (B, 1, L, 1): the tokens seen so far
            if held is not None:
                tokens = torch.cat([held[:, 0, :, 0].long(), tgt_in], dim=1)
            cache[0]["self"]["k"] = cache[0]["self"]["v"] = tokens[
                :, None, :, None
            ].float()
        offset, (batch, length) = tokens.size(1) - tgt_in.size(1), self.script.shape
        logits = torch.zeros(batch, tgt_in.size(1), self.vocab_size)
        for b in range(batch):
            for j in range(tgt_in.size(1)):
                t = offset + j  # the position of this query
                follows = t + 1 < length and torch.equal(
                    tokens[b, : t + 1], self.script[b, : t + 1]
                )
                logits[b, j, int(self.script[b, t + 1]) if follows else FILLER] = 10.0
                if t < length and self.trap[b, t]:
                    logits[b, j, self.pad_id] = 20.0
        return logits

    def forward(self, src, tgt_in):
        return self.decode(tgt_in, self.encode(src), src)


def decoding_model(inputs):
    """The model a greedy case decodes with: a small real ``Transformer`` with the
    grader's weights, or a ``ScriptedModel``."""
    if inputs["kind"] == "transformer":
        model = Transformer(**inputs["config"])
        model.load_state_dict(inputs["weights"])
        return model.eval()
    return ScriptedModel(inputs["script"], inputs["trap"], GREEDY_VOCAB)


def _greedy(objs, inputs):
    model, calls = decoding_model(inputs), []
    decode = model.decode

    def logged(tgt_in, memory, src, cache=None, **kwargs):
        calls.append(
            [
                int(tgt_in.size(1)) if isinstance(tgt_in, torch.Tensor) else -1,
                cache is not None,
            ]
        )
        return decode(tgt_in, memory, src, cache=cache, **kwargs)

    model.decode = logged
    tokens = objs["greedy_decode"](model, inputs["src"], inputs["max_len"], BOS, EOS)
    return {"tokens": tokens, "calls": calls}


CALLERS = {
    "attention": {"attention": _attention},
    "masks": {"padding": _padding, "causal": _causal, "cross": _cross},
    "multihead": {"registration": _mha_registration, "forward": _mha_forward},
    "loss": {"loss": _loss},
    "positional": {"table": _table},
    "encoder": {"registration": _encoder_registration, "forward": _encoder_forward},
    "noam": {"values": _noam_values, "lambda_lr": _noam_lambda_lr},
    "train_step": {"step": _train_step},
    "kv_cache": {"chunks": _kv_chunks},
    "greedy": {"decode": _greedy},
}
