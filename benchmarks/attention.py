"""Speed of transformer_lib against PyTorch's own modules (a script, not a test).

    python benchmarks/attention.py            # full table (a few minutes on a 2-core CPU)
    python benchmarks/attention.py --quick    # fewer lengths and repeats

Prints, for forward + backward of self-attention (B=16, d_model=256, 8 heads), the time of
tl.MultiHeadAttention (fused path and explicit path) divided by nn.MultiheadAttention's, for several
sequence lengths; then tl.Transformer vs nn.Transformer for one training step of a small model.
Ratios below 1 mean we are faster. Each timing is the median of interleaved repeats, so background
load affects both sides alike.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

import transformer_lib as tl


def copy_mha(ours: tl.MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """Give both modules the same weights (nn stacks [Wq; Wk; Wv] in in_proj_weight)."""
    d = ours.d_model
    with torch.no_grad():
        for i, proj in enumerate((ours.q_proj, ours.k_proj, ours.v_proj)):
            proj.weight.copy_(theirs.in_proj_weight[i * d:(i + 1) * d])
            proj.bias.copy_(theirs.in_proj_bias[i * d:(i + 1) * d])
        ours.out_proj.weight.copy_(theirs.out_proj.weight)
        ours.out_proj.bias.copy_(theirs.out_proj.bias)


def median_times(fns: dict, repeats: int, warmup: int = 2) -> dict:
    """Run each function ``warmup`` times, then ``repeats`` rounds interleaved; median seconds."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) for name, s in samples.items()}


def bench_attention(lengths, repeats, batch=16, d_model=256, heads=8):
    print(f"Multi-head self-attention, forward + backward, B={batch}, d_model={d_model}, {heads} heads")
    print(f"{'L':>6} {'nn.MHA ms':>10} {'fused ms':>10} {'explicit ms':>12} {'fused/nn':>9} {'explicit/nn':>12}")
    rows = []
    for length in lengths:
        theirs = nn.MultiheadAttention(d_model, heads, batch_first=True)
        ours = tl.MultiHeadAttention(d_model, heads)
        copy_mha(ours, theirs)
        x = torch.randn(batch, length, d_model, requires_grad=True)

        def run_nn():
            out, _ = theirs(x, x, x, need_weights=False)
            out.sum().backward()

        def run_fused():
            out, _ = ours(x, x, x, need_weights=False)
            out.sum().backward()

        def run_explicit():
            out, _ = ours(x, x, x, need_weights=True)
            out.sum().backward()

        # long sequences are slow: fewer (still interleaved) repeats there
        t = median_times({"nn": run_nn, "fused": run_fused, "explicit": run_explicit},
                         repeats if length <= 256 else max(3, repeats // 3))
        rows.append((length, t["fused"] / t["nn"], t["explicit"] / t["nn"]))
        print(f"{length:>6} {1e3 * t['nn']:>10.1f} {1e3 * t['fused']:>10.1f} {1e3 * t['explicit']:>12.1f} "
              f"{t['fused'] / t['nn']:>9.2f} {t['explicit'] / t['nn']:>12.2f}")
    return rows


def bench_train_step(repeats, batch=32, src_len=24, tgt_len=24, vocab=1000, d_model=128, heads=4,
                     layers=2, d_ff=512):
    """One Adam step of a small encoder-decoder: ours vs nn.Transformer with its own embeddings."""
    print(f"\nTraining step, B={batch}, L={src_len}/{tgt_len}, vocab={vocab}, d_model={d_model}, "
          f"{heads} heads, {layers}+{layers} layers, d_ff={d_ff}, dropout 0.1")
    ours = tl.Transformer(vocab, vocab, d_model, heads, layers, layers, d_ff, dropout=0.1)

    class TorchModel(nn.Module):
        """nn.Transformer with the same embedding, positional encoding and output layer."""

        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, d_model, padding_idx=0)
            self.pos = tl.PositionalEncoding(d_model, dropout=0.1)
            self.core = nn.Transformer(d_model, heads, layers, layers, d_ff, dropout=0.1, batch_first=True)
            self.out = nn.Linear(d_model, vocab, bias=False)

        def forward(self, src, tgt_in):
            causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1), dtype=torch.bool)
            h = self.core(self.pos(self.embed(src) * d_model**0.5), self.pos(self.embed(tgt_in) * d_model**0.5),
                          tgt_mask=causal, src_key_padding_mask=src == 0,
                          tgt_key_padding_mask=tgt_in == 0, memory_key_padding_mask=src == 0)
            return self.out(h)

    theirs = TorchModel()
    src = torch.randint(3, vocab, (batch, src_len))
    tgt = torch.randint(3, vocab, (batch, tgt_len + 1))
    src[: batch // 2, src_len // 2:] = 0  # half the batch padded
    tgt[: batch // 2, tgt_len // 2:] = 0
    opt_ours = torch.optim.Adam(ours.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    opt_theirs = torch.optim.Adam(theirs.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

    def step(model, opt):
        model.train()
        logits = model(src, tgt[:, :-1])
        loss = tl.masked_cross_entropy(logits, tgt[:, 1:], pad_id=0, label_smoothing=0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()

    t = median_times({"nn": lambda: step(theirs, opt_theirs), "ours": lambda: step(ours, opt_ours)}, repeats)
    ratio = t["ours"] / t["nn"]
    print(f"nn.Transformer {1e3 * t['nn']:.1f} ms, tl.Transformer {1e3 * t['ours']:.1f} ms, ratio {ratio:.2f}")
    return ratio


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer lengths and repeats")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    lengths = [64, 256] if args.quick else [64, 128, 256, 512, 1024]
    repeats = 5 if args.quick else 15
    rows = bench_attention(lengths, repeats)
    ratio = bench_train_step(repeats=10 if args.quick else 30)
    worst_fused = max(r[1] for r in rows)
    print(f"\nTargets: fused path within 1.10x of nn.MultiheadAttention (worst {worst_fused:.2f}x): "
          f"{'met' if worst_fused <= 1.10 else 'MISSED'}; training step within 1.15x of nn.Transformer "
          f"({ratio:.2f}x): {'met' if ratio <= 1.15 else 'MISSED'}")


if __name__ == "__main__":
    main()
