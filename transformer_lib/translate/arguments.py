"""Argument types and checks shared by the command lines (``translate``, ``number_words``)."""
from __future__ import annotations

import argparse
import math

import torch

from ..precision import check_precision
from ..utils import get_device


def int_at_least(minimum: int):
    """An argparse type: an int >= ``minimum`` (argparse names the option)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an int, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value
    return parse


def positive_float(text: str) -> float:
    """An argparse type: a finite float > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def boolean(text: str) -> bool:
    """An argparse type: true/false (also yes/no, on/off, 1/0)."""
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"must be true or false, got {text!r}")


def add_deterministic_argument(parser: argparse.ArgumentParser) -> None:
    """``--deterministic`` (or ``--deterministic false``): ``tl.set_seed``'s choice, the same
    in every command line. Unset, deterministic on the CPU (free there), not on CUDA."""
    parser.add_argument("--deterministic", type=boolean, nargs="?", const=True, default=None,
                        metavar="true|false",
                        help="PyTorch's deterministic algorithms (and on CUDA deterministic "
                             "cuBLAS): needed for a CUDA run that resumes bit for bit, and "
                             "dearer there (default: yes on the CPU, where they cost "
                             "nothing; no on CUDA)")


def check_device_args(parser: argparse.ArgumentParser, args) -> None:
    """``--device`` names a device that is there, and ``--precision`` suits it (exit status
    2 with the option's name otherwise, before any work)."""
    try:
        device = torch.device(args.device) if args.device is not None else None
    except RuntimeError:
        parser.error(f"argument --device: expected a device such as cpu or cuda, "
                     f"got {args.device!r}")
    mps = getattr(torch.backends, "mps", None)
    available = {"cuda": torch.cuda.is_available(),
                 "mps": mps is not None and mps.is_available()}
    if device is not None and not available.get(device.type, True):
        parser.error(f"argument --device: {args.device} was asked for, but "
                     f"{device.type.upper()} is not available")
    try:
        check_precision(args.precision, device or get_device())
    except ValueError as error:
        parser.error(f"argument --precision: {error}")


def check_world_args(parser: argparse.ArgumentParser, args, world, load_resumable):
    """The checks that depend on the processes: the batch must cut into their micro-batches,
    rank 0 (which writes) must be able to write ``--out``, and ``--resume`` must be readable
    by ``load_resumable`` (each command's own). Returns the checkpoint to resume from, or
    None."""
    from .checkpoints import check_output_path
    from .trainer import check_batch_size

    try:
        check_batch_size(args.batch_size, world.size, args.accumulate)
    except ValueError as error:
        parser.error(f"argument --batch-size: {error}")
    if world.is_main:
        try:
            check_output_path(args.out)
        except ValueError as error:
            parser.error(f"argument --out: {error}")
    if args.resume is None:
        return None
    try:
        return load_resumable(args.resume)
    except (OSError, ValueError) as error:
        parser.error(f"argument --resume: {error}")
