"""Data parallelism with ``torch.distributed``: joining the process group that ``torchrun``
prepares, cutting each global batch into the ranks' shares, and the few collectives the
trainer needs besides DDP's own.

``torchrun --nproc_per_node N script.py`` starts N copies of a script and tells each, in
environment variables, its ``RANK`` (0 to N-1), ``LOCAL_RANK`` (its number on this machine),
``WORLD_SIZE`` (N) and where the others can be reached. ``setup`` reads them and joins the
group: backend ``nccl`` with one GPU per process (``cuda:LOCAL_RANK``) on CUDA, ``gloo`` on
the CPU. Launched without torchrun, or with a world of one, nothing is joined and every
helper here is a no-op, so a single process runs exactly as before.

The model code never sees any of this: ``wrap`` puts a ``DistributedDataParallel`` around a
finished model, and ``unwrap`` takes it off again.
"""
from __future__ import annotations

import inspect
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ._checks import check_int, check_positive_int
from .utils import get_device

_TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@dataclass(frozen=True)
class World:
    """Who this process is: ``rank`` of ``size`` processes, ``local_rank`` on its machine,
    and the ``device`` it trains on (``None``: the caller chooses). ``World()`` is a single
    process. Rank 0 is the *main* process: it alone logs, validates and writes files."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    device: torch.device | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def parallel(self) -> bool:
        """True when there are other processes to talk to (a process group is joined)."""
        return self.size > 1


def launched_by_torchrun() -> bool:
    """True if torchrun (or another launcher using its variables) started this process."""
    return all(name in os.environ for name in _TORCHRUN_VARIABLES)


def setup(device=None) -> World:
    """Join the process group torchrun prepared and return this process's ``World``.

    ``device`` is what the user asked for ("cpu", "cuda" or None for the best available).
    With CUDA, each process takes the GPU ``cuda:LOCAL_RANK`` and the group uses ``nccl``
    (GPU-to-GPU transfers); on the CPU it uses ``gloo``. Without torchrun, or with
    ``WORLD_SIZE=1``, nothing is joined: ``World(device=...)`` for one process.
    """
    wanted = torch.device(device) if device is not None else get_device()
    if not launched_by_torchrun() or int(os.environ["WORLD_SIZE"]) == 1:
        return World(device=wanted)
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    if wanted.type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise ValueError(
                f"LOCAL_RANK={local_rank} needs a GPU of its own, but this machine has "
                f"{torch.cuda.device_count()}: start at most that many processes per node "
                f"(--nproc_per_node)")
        wanted = torch.device("cuda", local_rank)
        torch.cuda.set_device(wanted)
        dist.init_process_group("nccl", device_id=wanted)
    elif wanted.type == "cpu":
        dist.init_process_group("gloo")
    else:
        raise ValueError(f"data parallelism runs on CUDA (nccl) or the CPU (gloo), "
                         f"got device {wanted.type!r}; pass --device cpu")
    return World(rank, size, local_rank, wanted)


def teardown() -> None:
    """Leave the process group, if one was joined (safe to call in any case)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


@contextmanager
def process_group(device=None) -> Iterator[World]:
    """``with process_group() as world:`` ... ``setup`` on entry, ``teardown`` on exit."""
    world = setup(device)
    try:
        yield world
    finally:
        teardown()


# ------------------------------------------------------------------------------------
# The model: wrapped for training, unwrapped for everything else


def wrap(model: torch.nn.Module, world: World) -> torch.nn.Module:
    """``DistributedDataParallel(model)`` when there are several processes, else ``model``.

    DDP copies rank 0's weights to every rank once, then, during each backward pass,
    all-reduces the gradients bucket by bucket while the rest of the backward pass runs,
    and divides them by the world size: every rank ends with the same, averaged gradient
    and takes the same optimizer step. Buffers are not re-sent before each forward pass:
    ours (the positional table) never change.

    On the CPU (gloo) the gradients are summed by ``ordered_sum_hook`` instead of DDP's
    ring all-reduce, so that a resumed run continues bit for bit on any number of ranks.
    """
    if not world.parallel:
        return model
    cuda = world.device is not None and world.device.type == "cuda"
    options = {"device_ids": [world.device] if cuda else None}
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters:
        options["forward_sync_buffers"] = False  # its newer name (PyTorch 2.13)
    else:
        options["broadcast_buffers"] = False
    ddp = DistributedDataParallel(model, **options)
    if dist.get_backend() == "gloo":
        ddp.register_comm_hook(None, ordered_sum_hook)
    return ddp


def ordered_sum_hook(process_group, bucket):  # -> Future of the summed bucket
    """A DDP communication hook: every rank receives all ranks' gradients of the bucket
    (all-gather) and adds them up in rank order, then divides by their number.

    Why not the usual all-reduce: DDP packs gradients into flat *buckets*, and after the
    first step it repacks them in the order the backward pass produced them. A ring
    all-reduce of 3 or more ranks adds each element's values in an order that depends on
    where the element sits in its bucket, and float addition is not associative: (a + b)
    + c and a + (b + c) can differ in the last bit. So a run resumed from a checkpoint,
    whose first step uses the first packing, would drift from the run never stopped. Here
    each element is summed as g_0 + g_1 + ... + g_{W-1} whatever the packing. (Two ranks
    add a + b either way; on GPUs nccl's all-reduce is kept, for speed.)
    """
    group = process_group if process_group is not None else dist.group.WORLD
    size = dist.get_world_size(group)
    grads = bucket.buffer()  # (n,) this rank's gradients, flat
    parts = [torch.empty_like(grads) for _ in range(size)]
    work = dist.all_gather(parts, grads, group=group, async_op=True)

    def add_in_rank_order(_):
        total = parts[0].clone()
        for part in parts[1:]:
            total += part
        return total.div_(size)

    return work.get_future().then(add_in_rank_order)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside a ``DistributedDataParallel`` (or the model itself)."""
    return model.module if isinstance(model, DistributedDataParallel) else model


def is_parallel(model: torch.nn.Module) -> bool:
    """True for a DDP-wrapped model in a group of more than one process."""
    return isinstance(model, DistributedDataParallel) and dist.get_world_size() > 1


def world_size(model: torch.nn.Module) -> int:
    """How many processes share the training of ``model`` (1 unless it is DDP-wrapped)."""
    return dist.get_world_size() if isinstance(model, DistributedDataParallel) else 1


# ------------------------------------------------------------------------------------
# Each rank's share of a global batch


def split_batch(src: torch.Tensor, tgt: torch.Tensor, parts: int,
                pad_id: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Cut a batch src (B, Ls), tgt (B, Lt) into ``parts`` pieces of about B / parts rows.

    Piece j takes rows j, j + parts, j + 2 parts, ...: a length-bucketed batch is sorted by
    length, and striding gives every piece the same mix of short and long rows (so no rank
    waits for the one that got all the long ones). Together the pieces hold each row once.

    A batch with fewer rows than ``parts`` leaves some pieces empty. Those get one row whose
    target is all padding: it has no token to count, so its loss and gradient are exactly
    zero, and yet its rank runs the same forward and backward pass (and the same gradient
    all-reduce) as the others, which DDP needs.
    """
    check_positive_int("parts", parts)
    check_int("pad_id", pad_id)
    pieces = []
    for j in range(parts):
        if j < src.size(0):
            pieces.append((src[j::parts], tgt[j::parts]))  # (~B/parts, Ls), (~B/parts, Lt)
        else:
            pieces.append((src[:1], torch.full_like(tgt[:1], pad_id)))
    return pieces


def micro_batches(batches: Iterable, world: World, accumulate: int = 1,
                  pad_id: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's micro-batches, ``accumulate`` of them per global batch of ``batches``.

    Every rank reads the same global batches (same data, same seed) and keeps its own
    ``accumulate`` of the ``world.size * accumulate`` pieces of each (``split_batch``), so
    one optimizer step sees each example of the global batch exactly once, whatever the
    number of processes and micro-batches.
    """
    check_positive_int("accumulate", accumulate)
    parts = world.size * accumulate
    for src, tgt in batches:
        if parts == 1:
            yield src, tgt
            continue
        mine = split_batch(src, tgt, parts, pad_id)[world.rank * accumulate:]
        yield from mine[:accumulate]


# ------------------------------------------------------------------------------------
# Collectives (no-ops for a single process)


def _collective_device() -> torch.device:
    """nccl reduces GPU tensors, gloo CPU tensors."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over all ranks, in place (nothing to do for one process)."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def agree(stop: bool, seconds: float) -> tuple[bool, float]:
    """What every rank decides before a step: stop if *any* rank was asked to stop, and read
    the time used from rank 0's clock. One small all-reduce; for one process, the inputs.

    Without it, a signal that reaches rank 0 just before a step and rank 1 just after would
    leave rank 1 waiting forever in the next gradient all-reduce; and ranks whose clocks
    differ by a millisecond would disagree on when a time budget ends.
    """
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return stop, seconds
    mine = [float(stop), seconds if dist.get_rank() == 0 else 0.0]
    both = torch.tensor(mine, dtype=torch.float64, device=_collective_device())
    dist.all_reduce(both, op=dist.ReduceOp.SUM)
    any_stop, rank0_seconds = both.tolist()
    return any_stop > 0, rank0_seconds


def gather_objects(obj) -> list:
    """``[obj of rank 0, obj of rank 1, ...]`` on every rank (``[obj]`` for one process)."""
    if not (dist.is_available() and dist.is_initialized()):
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj, src: int = 0):
    """Rank ``src``'s ``obj``, on every rank (``obj`` itself for one process)."""
    if not (dist.is_available() and dist.is_initialized()):
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def barrier() -> None:
    """Wait until every rank gets here (nothing to wait for in one process)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
