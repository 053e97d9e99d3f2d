"""How far float32 attention gradients drift from float64, per path (not a test).

    python benchmarks/attention_precision.py

For self-attention ``tl.MultiHeadAttention(x, x, x)`` (B=2, L=16, d_model=32, 4 heads)
with inputs ``x = scale * randn``, prints the relative error ||g32 - g64|| / ||g64|| of
``x.grad`` (and of the output) for three paths: the fused default
(``need_weights=False``, whichever kernel ``F.scaled_dot_product_attention`` picks), the
fused call forced onto PyTorch's math backend, and our explicit path
(``need_weights=True``). Large scales saturate the softmax; that is where PyTorch's CPU
flash kernel loses gradient accuracy. ``tests/test_numerics.py`` checks the bounds.
"""

from __future__ import annotations

import argparse
import contextlib

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import transformer_lib as tl

PATHS = {
    "fused (default)": (False, contextlib.nullcontext),
    "fused, math backend": (False, lambda: sdpa_kernel(SDPBackend.MATH)),
    "explicit": (True, contextlib.nullcontext),
}


def relative_errors(
    scale: float, need_weights: bool, context, seed: int = 0, device: str = "cpu"
) -> tuple[float, float, float]:
    """(largest |score|, output error, x.grad error): float32 against float64."""
    torch.manual_seed(seed)
    mha = tl.MultiHeadAttention(32, 4).to(device, torch.float64)
    x64 = scale * torch.randn(2, 16, 32, dtype=torch.float64, device=device)
    upstream = torch.randn(2, 16, 32, dtype=torch.float64, device=device)
    with torch.no_grad():  # the scaled scores q k^T / sqrt(d_k) that the softmax sees
        q, k = mha.split_heads(mha.q_proj(x64)), mha.split_heads(mha.k_proj(x64))
        largest = (q @ k.transpose(-2, -1) / mha.d_k**0.5).abs().max().item()
    results = {}
    for dtype in (torch.float64, torch.float32):
        module = mha.to(dtype)
        x = x64.to(dtype).clone().requires_grad_(True)
        with context():
            out, _ = module(x, x, x, need_weights=need_weights)
        (out * upstream.to(dtype)).sum().backward()
        results[dtype] = out.detach().double(), x.grad.double()

    def rel(a, b):
        return ((a - b).norm() / b.norm()).item()

    (out32, grad32), (out64, grad64) = results[torch.float32], results[torch.float64]
    return largest, rel(out32, out64), rel(grad32, grad64)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--seeds", type=int, default=3, help="report the worst of this many seeds"
    )
    parser.add_argument(
        "--scales", type=float, nargs="+", default=[1.0, 10.0, 100.0, 1e3, 1e4]
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(
        f"relative error of float32 vs float64 (worst of {args.seeds} seeds), "
        f"device={args.device}"
    )
    print(
        f"{'input scale':>11} {'max |score|':>12}"
        + "".join(f"{n + ' grad':>26}" for n in PATHS)
        + f"{'output (worst path)':>22}"
    )
    for scale in args.scales:
        row, outs, largest = [], [], 0.0
        for need_weights, context in PATHS.values():
            errors = [
                relative_errors(scale, need_weights, context, seed, args.device)
                for seed in range(args.seeds)
            ]
            largest = max(e[0] for e in errors)
            outs.append(max(e[1] for e in errors))
            row.append(max(e[2] for e in errors))
        print(
            f"{scale:>11g} {largest:>12.3g}"
            + "".join(f"{g:>26.2e}" for g in row)
            + f"{max(outs):>22.2e}"
        )


if __name__ == "__main__":
    main()
