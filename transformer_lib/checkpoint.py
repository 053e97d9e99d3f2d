"""Checkpoints that survive a crash and let a stopped run continue exactly.

Two ideas:

- **Atomic writing** (``atomic_save``): write to a temporary file in the same folder, flush
  it to the disk (``fsync``), then rename it over the old file (``os.replace``, atomic on
  POSIX and Windows). A crash at any moment leaves either the old checkpoint or the new
  one, never half of one.
- **Everything that decides the next step** (``training_state`` / ``restore_training``):
  the weights alone are not enough. Adam's moment estimates, the schedule's step count,
  the batcher's place in the data and every random generator (Python, NumPy, torch on
  the CPU and on each GPU, on every rank) must also be saved; restored, the next step is
  computed from exactly the same numbers as in the run that was never stopped.
"""
from __future__ import annotations

import os
import random
import tempfile

import numpy as np
import torch

from . import distributed

TRAINING_STATE_VERSION = 1


def atomic_save(obj, path) -> str:
    """``torch.save(obj, path)``, atomically (see the module's docstring)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    handle, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".pt")
    try:
        with os.fdopen(handle, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on the disk before the name points at them
        os.replace(tmp, path)
    except BaseException:  # a full disk, Ctrl-C, ...: the old file stays as it was
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    _fsync_folder(folder)  # and the new name is on the disk too
    return path


def _fsync_folder(folder: str) -> None:
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open a folder; the rename is done anyway
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


# ------------------------------------------------------------------------------------
# Random states, as plain values and tensors (loadable with weights_only=True)


def rng_state() -> dict:
    """The state of Python's, NumPy's (global) and torch's generators (CPU, every GPU)."""
    version, mt_keys, mt_pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": {"keys": torch.from_numpy(mt_keys.astype(np.int64)), "pos": int(mt_pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict) -> None:
    """Restore what ``rng_state`` returned."""
    version, keys, gauss = state["python"]
    random.setstate((version, tuple(keys), gauss))
    numpy = state["numpy"]
    np.random.set_state(("MT19937", numpy["keys"].numpy().astype(np.uint32), numpy["pos"],
                         numpy["has_gauss"], numpy["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


# ------------------------------------------------------------------------------------
# The whole training state


def _scheduler_state(scheduler) -> dict | None:
    """A LambdaLR's counters, without its lambda: a callable object's ``__dict__`` (which
    ``state_dict`` copies) may hold functions, which a weights-only load refuses. The
    schedule is rebuilt from the run's settings; only its counters must be saved."""
    if scheduler is None:
        return None
    state = scheduler.state_dict()
    state.pop("lr_lambdas", None)
    return state


def training_state(model, optimizer, scheduler, scaler, batcher, step: int,
                   seconds: float, history: dict) -> dict:
    """Everything a resumed run needs besides the model's configuration and weights:
    optimizer, schedule and gradient-scaler states, ``step``, ``seconds`` of the time
    budget used, the history so far, the batcher's position and the random states of
    every rank.

    A collective under DDP (the ranks' random states are gathered): every rank calls it;
    each gets the whole state, and rank 0 writes it.
    """
    del model  # the weights travel in the checkpoint's own state_dict
    return {
        "version": TRAINING_STATE_VERSION,
        "step": int(step),
        "seconds": float(seconds),
        "optimizer": optimizer.state_dict(),
        "scheduler": _scheduler_state(scheduler),
        "scaler": scaler.state_dict() if scaler is not None else None,
        "batcher": batcher.state_dict() if batcher is not None else None,
        "rng": distributed.gather_objects(rng_state()),  # one per rank
        "history": {key: list(values) for key, values in history.items()},
    }


def restore_training(state: dict, optimizer, scheduler, scaler, batcher,
                     world: distributed.World) -> bool:
    """Load ``training_state``'s parts into freshly built objects (the model's weights are
    loaded by the caller). Rank r takes the random state rank r saved. Returns True if
    the run continues bit for bit, False if the world size changed: then ranks beyond
    the saved ones keep their own random state (the data order and the schedule are the
    same, but the sums of gradients are taken in another order)."""
    optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state["scheduler"] is not None:
        scheduler.load_state_dict({**state["scheduler"],
                                   "lr_lambdas": [None] * len(scheduler.lr_lambdas)})
    if scaler is not None and state["scaler"] is not None:
        scaler.load_state_dict(state["scaler"])
    if batcher is not None and state["batcher"] is not None:
        batcher.load_state_dict(state["batcher"])
    saved = state["rng"]
    if world.rank < len(saved):
        set_rng_state(saved[world.rank])
    return len(saved) == world.size
