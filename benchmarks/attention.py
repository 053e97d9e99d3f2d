"""Speed of transformer_lib against PyTorch's own modules (a script, not a test).

    python benchmarks/attention.py                   # CPU (a few minutes on 2 cores)
    python benchmarks/attention.py --quick           # fewer lengths and repeats
    python benchmarks/attention.py --device cuda     # a GPU, timed with CUDA events
    python benchmarks/attention.py --device cuda --json   # also write results JSON

Prints ratios, ours / PyTorch's (below 1: we are faster):
1. Multi-head self-attention, forward + backward (B=16, d_model=512, 8 heads):
   tl.MultiHeadAttention's fused path (and its explicit path, up to L=1024) against
   nn.MultiheadAttention, for each length L, in float32 and under bfloat16 autocast.
2. One training step of the paper's base model (d_model 512, 6+6 layers, d_ff 2048, one
   shared vocabulary of 32,000, label smoothing 0.1, fused Adam): tl.Transformer against
   nn.Transformer with the same embeddings, positional encoding and output layer.
   On a GPU: B=64 x L=128 under bfloat16 autocast; on the CPU a smaller batch in float32.
   ``--compile`` adds tl.Transformer with forward and loss compiled (fullgraph=True); if
   compiling fails, the error is named, the other timings still run, and the exit code is 1.

``--deterministic off|on|both``: PyTorch's deterministic algorithms (and, on CUDA,
deterministic cuBLAS, ``CUBLAS_WORKSPACE_CONFIG``) off, on, or both: the script then runs
itself once more, deterministic, in a fresh process and prints the cost of determinism
(deterministic time / fast time) for each measurement. Default: both on a GPU; on the
CPU, where determinism is free, on (``tl.set_seed``'s default there).

Then it says whether the targets are met (issue 28, determinism off on a GPU): on a GPU,
fused attention <= 1.00x at every L >= 128 and the training step <= 0.95x; on the CPU,
attention <= 1.10x and the training step <= 1.00x. ``--json [PATH]`` writes everything, with the machine's description, to
PATH (default: benchmarks/results/attention_<device>.json).
"""
from __future__ import annotations

import argparse
import contextlib
import time

import torch
from torch import nn

import transformer_lib as tl
from _timing import (
    RESULTS,
    add_common_arguments,
    add_determinism_argument,
    deterministic_mode,
    failure,
    median_times,
    print_cost,
    run_deterministic,
    start,
    write_json,
)

TARGETS = {"cuda": {"attention": 1.00, "train_step": 0.95},
           "cpu": {"attention": 1.10, "train_step": 1.00}}
EXPLICIT_MAX_LEN = 1024  # the explicit path stores (B, H, L, L) weights: skip it beyond


def copy_mha(ours: tl.MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """Give both modules the same weights (nn stacks [Wq; Wk; Wv] in in_proj_weight)."""
    d = ours.d_model
    with torch.no_grad():
        for i, proj in enumerate((ours.q_proj, ours.k_proj, ours.v_proj)):
            proj.weight.copy_(theirs.in_proj_weight[i * d:(i + 1) * d])
            proj.bias.copy_(theirs.in_proj_bias[i * d:(i + 1) * d])
        ours.out_proj.weight.copy_(theirs.out_proj.weight)
        ours.out_proj.bias.copy_(theirs.out_proj.bias)


def autocast(device: torch.device, dtype: str):
    """bfloat16 autocast for "bf16", nothing for "float32"."""
    if dtype == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def bench_attention(device, lengths, dtypes, repeats, batch=16, d_model=512, heads=8):
    print(f"Multi-head self-attention, forward + backward, B={batch}, d_model={d_model}, "
          f"{heads} heads")
    print(f"{'dtype':>8} {'L':>6} {'nn.MHA ms':>10} {'fused ms':>9} {'explicit ms':>12} "
          f"{'fused/nn':>9} {'explicit/nn':>12}")
    rows = []
    for dtype in dtypes:
        for length in lengths:
            theirs = nn.MultiheadAttention(d_model, heads, batch_first=True).to(device)
            ours = tl.MultiHeadAttention(d_model, heads).to(device)
            copy_mha(ours, theirs)
            x = torch.randn(batch, length, d_model, device=device, requires_grad=True)

            def run(module, need_weights):
                def fn():
                    with autocast(device, dtype):
                        out, _ = module(x, x, x, need_weights=need_weights)
                    out.float().sum().backward()
                return fn

            fns = {"nn": run(theirs, False), "fused": run(ours, False)}
            if length <= EXPLICIT_MAX_LEN:
                fns["explicit"] = run(ours, True)
            # long sequences on the CPU are slow: fewer (still interleaved) repeats there
            n = repeats if device.type == "cuda" or length <= 256 else max(3, repeats // 3)
            t = median_times(fns, n, device)
            row = {"dtype": dtype, "L": length, "nn_ms": 1e3 * t["nn"],
                   "fused_ms": 1e3 * t["fused"], "fused_ratio": t["fused"] / t["nn"],
                   "explicit_ms": 1e3 * t["explicit"] if "explicit" in t else None,
                   "explicit_ratio": t["explicit"] / t["nn"] if "explicit" in t else None}
            rows.append(row)
            explicit_ms = f"{row['explicit_ms']:.2f}" if "explicit" in t else "-"
            explicit_ratio = f"{row['explicit_ratio']:.2f}" if "explicit" in t else "-"
            print(f"{dtype:>8} {length:>6} {row['nn_ms']:>10.2f} {row['fused_ms']:>9.2f} "
                  f"{explicit_ms:>12} {row['fused_ratio']:>9.2f} {explicit_ratio:>12}")
            del theirs, ours, x
    return rows


class TorchTransformer(nn.Module):
    """nn.Transformer with the same (shared) embedding, positional encoding and (tied)
    output layer as a ``tl.Transformer(..., share_embeddings=True)``."""

    def __init__(self, vocab, d_model, heads, layers, d_ff, dropout, pad_id=0):
        super().__init__()
        self.pad_id, self.d_model = pad_id, d_model
        self.embed = nn.Embedding(vocab, d_model, padding_idx=pad_id)
        self.pos = tl.PositionalEncoding(d_model, dropout=dropout)
        self.core = nn.Transformer(d_model, heads, layers, layers, d_ff, dropout=dropout,
                                   batch_first=True)
        self.out = nn.Linear(d_model, vocab, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, src, tgt_in):
        causal = nn.Transformer.generate_square_subsequent_mask(
            tgt_in.size(1), device=tgt_in.device, dtype=torch.bool)
        scale = self.d_model ** 0.5
        h = self.core(self.pos(self.embed(src) * scale), self.pos(self.embed(tgt_in) * scale),
                      tgt_mask=causal, src_key_padding_mask=src == self.pad_id,
                      tgt_key_padding_mask=tgt_in == self.pad_id,
                      memory_key_padding_mask=src == self.pad_id)
        return self.out(h)


def make_adam(model):
    """The paper's Adam, fused (one kernel for all parameters) where this torch has it."""
    settings = dict(lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    try:
        return torch.optim.Adam(model.parameters(), fused=True, **settings)
    except (RuntimeError, TypeError):  # no fused kernel for this device
        return torch.optim.Adam(model.parameters(), **settings)


def bench_train_step(device, repeats, batch, length, amp, compile_step=False, vocab=32_000,
                     d_model=512, heads=8, layers=6, d_ff=2048, dropout=0.1):
    """One Adam step of the base model: ours vs nn.Transformer, same embeddings; with
    ``compile_step``, also ours with forward and loss in one torch.compile(fullgraph=True)
    graph (its compile time, the first call, reported apart)."""
    print(f"\nTraining step of the base model, B={batch} x L={length}, vocab={vocab} (shared), "
          f"d_model={d_model}, {heads} heads, {layers}+{layers} layers, d_ff={d_ff}, "
          f"dropout {dropout}, label smoothing 0.1, {amp} autocast, fused Adam")
    ours = tl.Transformer(vocab, vocab, d_model, heads, layers, layers, d_ff, dropout,
                          share_embeddings=True).to(device)
    theirs = TorchTransformer(vocab, d_model, heads, layers, d_ff, dropout).to(device)
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(3, vocab, (batch, length), generator=generator)
    tgt = torch.randint(3, vocab, (batch, length + 1), generator=generator)
    src[: batch // 2, length // 2:] = 0  # half the batch padded
    tgt[: batch // 2, length // 2:] = 0
    src, tgt = src.to(device), tgt.to(device)
    optimizers = {"ours": make_adam(ours), "nn": make_adam(theirs)}

    def forward_and_loss(model, src, tgt):
        with autocast(device, amp):
            logits = model(src, tgt[:, :-1])
            return tl.masked_cross_entropy(logits, tgt[:, 1:], pad_id=0, label_smoothing=0.1)

    def step(model, name, loss_fn=forward_and_loss):
        def fn():
            model.train()
            loss = loss_fn(model, src, tgt)
            optimizers[name].zero_grad(set_to_none=True)
            loss.backward()
            optimizers[name].step()
        return fn

    fns = {"nn": step(theirs, "nn"), "ours": step(ours, "ours")}
    result = {"batch": batch, "length": length, "vocab": vocab, "amp": amp}
    if compile_step:
        compiled = step(ours, "ours", torch.compile(forward_and_loss, fullgraph=True))
        start = time.perf_counter()
        try:
            compiled()  # compiles forward and backward
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        except Exception as error:  # named; the eager contenders are still timed
            result["failed"] = f"compiled: {failure(error)}"
            print(f"FAILED: {result['failed']}", flush=True)
            compile_step = False
        else:
            result["compile_s"] = time.perf_counter() - start
            fns["compiled"] = compiled
    t = median_times(fns, repeats, device)
    result.update(nn_ms=1e3 * t["nn"], ours_ms=1e3 * t["ours"], ratio=t["ours"] / t["nn"])
    print(f"nn.Transformer {1e3 * t['nn']:.1f} ms, tl.Transformer {1e3 * t['ours']:.1f} ms, "
          f"ratio {result['ratio']:.2f}")
    if compile_step:
        result.update(compiled_ms=1e3 * t["compiled"],
                      compiled_vs_eager=t["compiled"] / t["ours"],
                      compiled_vs_nn=t["compiled"] / t["nn"])
        print(f"tl.Transformer compiled (fullgraph): {1e3 * t['compiled']:.1f} ms a step after "
              f"{result['compile_s']:.0f} s compiling; compiled / eager "
              f"{result['compiled_vs_eager']:.2f}, compiled / nn.Transformer (eager) "
              f"{result['compiled_vs_nn']:.2f}")
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, "attention_<device>.json")
    parser.add_argument("--quick", action="store_true", help="fewer lengths and repeats")
    parser.add_argument("--lengths", type=int, nargs="+", default=None,
                        help="attention lengths (default: 128 ... 4096 on a GPU, "
                             "128 ... 1024 on the CPU)")
    parser.add_argument("--dtypes", nargs="+", choices=("float32", "bf16"),
                        default=["float32", "bf16"], help="attention: float32, bf16 autocast")
    parser.add_argument("--batch", type=int, default=16, help="attention batch size")
    parser.add_argument("--step-batch", type=int, default=None,
                        help="training-step batch (default: 64 on a GPU, 8 on the CPU)")
    parser.add_argument("--step-length", type=int, default=None,
                        help="training-step length (default: 128 on a GPU, 32 on the CPU)")
    parser.add_argument("--amp", choices=("bf16", "none"), default=None,
                        help="training-step autocast (default: bf16 on a GPU, none on the CPU)")
    parser.add_argument("--compile", action="store_true",
                        help="also time the training step with forward and loss compiled "
                             "(torch.compile, fullgraph=True)")
    parser.add_argument("--skip", choices=("attention", "train_step"), action="append",
                        default=[], help="leave out a part")
    add_determinism_argument(parser)
    args = parser.parse_args(argv)
    device, info = start(args)
    gpu = device.type == "cuda"
    if gpu:
        # The same cuBLAS settings for both sides; TF32 off (float32 means float32).
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    lengths = args.lengths or ([128, 256, 512, 1024, 2048, 4096] if gpu
                               else [128, 256, 512, 1024])
    if args.quick:
        lengths = lengths[:2]
    repeats = (5 if args.quick else 20) if gpu else (3 if args.quick else 9)
    results = {"info": info, "targets": TARGETS[device.type]}
    if "attention" not in args.skip:
        results["attention"] = bench_attention(device, lengths, args.dtypes, repeats,
                                               batch=args.batch)
    if "train_step" not in args.skip:
        results["train_step"] = bench_train_step(
            device, repeats=repeats,
            batch=args.step_batch or (64 if gpu else 8),
            length=args.step_length or (128 if gpu else 32),
            amp=args.amp or ("bf16" if gpu else "none"), compile_step=args.compile)

    targets = TARGETS[device.type]
    print()
    if "attention" in results:
        for dtype in args.dtypes:
            worst = max((r["fused_ratio"] for r in results["attention"]
                         if r["dtype"] == dtype and r["L"] >= 128), default=None)
            if worst is None:
                print(f"Target: no length L >= 128 measured in {dtype}")
                continue
            print(f"Target ({device.type}): fused attention <= {targets['attention']:.2f}x "
                  f"nn.MultiheadAttention at every L >= 128, {dtype}: worst {worst:.2f}x, "
                  f"{'met' if worst <= targets['attention'] else 'MISSED'}")
    if "train_step" in results:
        ratio = results["train_step"]["ratio"]
        print(f"Target ({device.type}): base-model training step <= "
              f"{targets['train_step']:.2f}x nn.Transformer: {ratio:.2f}x, "
              f"{'met' if ratio <= targets['train_step'] else 'MISSED'}")
    if deterministic_mode(args, device) == "both":
        other = run_deterministic(argv)
        rows = [(f"attention {r['dtype']} L={r['L']} fused", r["fused_ms"], o["fused_ms"])
                for r, o in zip(results.get("attention", []), other.get("attention", []))]
        rows += [(f"attention {r['dtype']} L={r['L']} nn.MHA", r["nn_ms"], o["nn_ms"])
                 for r, o in zip(results.get("attention", []), other.get("attention", []))]
        if "train_step" in results:
            fast, slow = results["train_step"], other["train_step"]
            rows += [("training step, tl.Transformer", fast["ours_ms"], slow["ours_ms"]),
                     ("training step, nn.Transformer", fast["nn_ms"], slow["nn_ms"])]
        results["deterministic"] = {"results": other, "cost": print_cost(rows)}
    if args.json is not None:
        path = args.json or RESULTS / f"attention_{device.type}.json"
        print(f"wrote {write_json(path, results)}")
    failed = [part.get("failed") for part in (results.get("train_step", {}),
              results.get("deterministic", {}).get("results", {}).get("train_step", {}))]
    if any(failed):
        print("FAILED: " + "; ".join(f for f in failed if f))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
