"""How much the key/value cache speeds up greedy decoding (a script, not a test).

    python benchmarks/decoding.py                      # CPU: a small model
    python benchmarks/decoding.py --model base         # the paper's base model (slow on a CPU)
    python benchmarks/decoding.py --device cuda --model base --json

Times ``tl.greedy_decode`` with the cache (each step feeds only the newest token) and
without it (each step recomputes the whole prefix), for exactly ``--new-tokens`` steps
(the end-of-sequence id is the padding id, which decoding never picks, so no row stops
early), and prints time without / time with: how many times faster the cache is. The
issue's target, for the base model with B=32 and 64 new tokens on a GPU, is >= 3x.

``--model base``: d_model 512, 6+6 layers, d_ff 2048, one shared vocabulary of 32,000.
``--model small``: d_model 64, 2+2 layers, d_ff 256, vocabulary 1,000: the arithmetic
is tiny, so the time per step is mostly the host's (Python and kernel launches), which
is what decides a GPU's speed on such steps.
"""
from __future__ import annotations

import argparse

import torch

import transformer_lib as tl
from _timing import RESULTS, add_common_arguments, median_times, start, write_json

MODELS = {
    "base": dict(vocab=32_000, d_model=512, num_heads=8, layers=6, d_ff=2048),
    "small": dict(vocab=1_000, d_model=64, num_heads=4, layers=2, d_ff=256),
}
TARGET = 3.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, "decoding_<model>_<device>.json")
    parser.add_argument("--model", choices=sorted(MODELS), default="small")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--src-len", type=int, default=32, help="source length")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=None,
                        help="interleaved repeats (default: 10 on a GPU, 3 on the CPU)")
    args = parser.parse_args(argv)
    device, info = start(args)
    config = MODELS[args.model]
    torch.manual_seed(0)
    model = tl.Transformer(config["vocab"], config["vocab"], config["d_model"],
                           config["num_heads"], config["layers"], config["layers"],
                           config["d_ff"], dropout=0.1, share_embeddings=True)
    model = model.to(device).eval()
    pad_id, bos_id = model.pad_id, 1
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(3, config["vocab"], (args.batch, args.src_len), generator=generator)
    src[: args.batch // 2, args.src_len // 2:] = pad_id  # half the batch padded
    src = src.to(device)

    def decode(use_cache):
        def fn():
            ys = tl.greedy_decode(model, src, args.new_tokens, bos_id, eos_id=pad_id,
                                  use_cache=use_cache)
            assert ys.shape == (args.batch, args.new_tokens + 1)
        return fn

    with torch.no_grad():  # an untrained model: near-ties may differ in the last bits
        cached, recomputed = (tl.greedy_decode(model, src, args.new_tokens, bos_id, pad_id,
                                               use_cache=use_cache) for use_cache in (True, False))
    same_rows = int((cached == recomputed).all(dim=1).sum())
    print(f"greedy decoding, {args.model} model ({config}), B={args.batch}, "
          f"Ls={args.src_len}, {args.new_tokens} new tokens; rows decoded the same "
          f"with and without the cache: {same_rows}/{args.batch}")
    repeats = args.repeats or (10 if device.type == "cuda" else 3)
    t = median_times({"cache": decode(True), "no_cache": decode(False)}, repeats, device,
                     warmup=1)
    speedup = t["no_cache"] / t["cache"]
    print(f"with the cache {1e3 * t['cache']:.1f} ms "
          f"({1e3 * t['cache'] / args.new_tokens:.2f} ms/step), "
          f"without {1e3 * t['no_cache']:.1f} ms: the cache is {speedup:.2f}x faster")
    if device.type == "cuda" and args.model == "base":
        print(f"Target (cuda, base model): >= {TARGET:.0f}x: "
              f"{'met' if speedup >= TARGET else 'MISSED'}")
    if args.json is not None:
        results = {"info": info, "model": args.model, "config": config, "batch": args.batch,
                   "src_len": args.src_len, "new_tokens": args.new_tokens,
                   "cache_ms": 1e3 * t["cache"], "no_cache_ms": 1e3 * t["no_cache"],
                   "speedup": speedup, "same_rows": same_rows}
        path = args.json or RESULTS / f"decoding_{args.model}_{device.type}.json"
        print(f"wrote {write_json(path, results)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
