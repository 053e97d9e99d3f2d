"""Mixed precision: run the forward pass in 16-bit floats where that is safe (autocast), and
scale the loss where 16 bits would lose small gradients (GradScaler).

- ``"fp32"``: everything in float32, as the rest of the book does.
- ``"bf16"``: matrix products in bfloat16 under ``torch.autocast``; weights, optimizer
  state and the loss stay float32 (``masked_cross_entropy`` upcasts the logits). On CUDA
  autocast also runs softmax, LayerNorm and sums in float32; on the CPU they take the
  bfloat16 results as they come (their kernels accumulate in float32). bfloat16 has
  float32's exponent range, so gradients need no scaling. Fast on recent GPUs; on a CPU
  it can be slower than fp32 (``benchmarks/ddp.py`` measures it).
- ``"fp16"``: float16 under autocast, CUDA only (off a GPU it is rarely faster than
  bfloat16, and it needs the scaler that bfloat16 does not). Its exponent range is small:
  gradients below about 3e-8 round to zero. ``GradScaler`` multiplies the loss by a large factor
  before the backward pass and divides the gradients by it before the step, skipping
  steps whose gradients overflowed and lowering the factor then.
"""
from __future__ import annotations

from contextlib import nullcontext

import torch

PRECISIONS = ("fp32", "bf16", "fp16")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(precision, device) -> None:
    """Raise ValueError unless ``precision`` is one of PRECISIONS and works on ``device``."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    device = torch.device(device)
    if precision == "fp16" and device.type != "cuda":
        raise ValueError(
            f"precision 'fp16' needs a CUDA device, got {device.type}: float16 needs a "
            f"gradient scaler and is rarely faster than bfloat16 off a GPU, while bfloat16 "
            f"has float32's range and needs none; use 'bf16' (or 'fp32') on the "
            f"{device.type}")
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError("precision 'bf16' needs a GPU with bfloat16 support "
                         "(Ampere or newer); use 'fp16' on this one")


def autocast(precision: str, device):
    """The context to run a forward pass (and loss) in: ``torch.autocast`` for bf16/fp16,
    nothing at all for fp32 (so fp32 runs exactly the code it ran before)."""
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(torch.device(device).type, dtype=_DTYPES[precision])


def grad_scaler(precision: str, device) -> torch.amp.GradScaler | None:
    """A ``GradScaler`` for fp16 on CUDA; None otherwise (bf16 and fp32 need none)."""
    device = torch.device(device)
    if precision == "fp16" and device.type == "cuda":
        return torch.amp.GradScaler("cuda")
    return None
