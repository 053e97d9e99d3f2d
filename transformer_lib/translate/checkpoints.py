"""Checkpoints of translation models: reading them safely, writing them where asked,
and averaging the weights of the last few (the paper's section 6.1).

The paper's base models are "a single model obtained by averaging the last 5
checkpoints, which were written at 10-minute intervals": the average of weights taken
near the end of training is a smoother point than any one of them, and often scores a
little better. ``average_state_dicts`` is that mean, tensor by tensor.
"""
from __future__ import annotations

import os
import pickle
import tempfile
import warnings

import torch


def read_checkpoint(path, what: str = "a checkpoint of this library"):
    """``torch.load(path, weights_only=True)``, each failure made one clear error;
    ``what`` names the kind of file expected ("a number-words checkpoint")."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {path!r}: the file does not exist")
    if os.path.isdir(path):
        raise ValueError(f"{path!r} is a folder, not a checkpoint file")
    if os.path.getsize(path) == 0:
        raise ValueError(
            f"checkpoint {path!r} is empty (0 bytes): was its saving interrupted?")
    try:
        with warnings.catch_warnings():  # e.g. about a foreign file's pickle protocol
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except PermissionError:
        raise PermissionError(
            f"cannot read checkpoint {path!r}: permission denied") from None
    except pickle.UnpicklingError as error:
        # PyTorch's message here advises loading with weights_only=False, which runs any
        # code the file holds: never pass that on. Our checkpoints need none.
        if "unsupported global" in str(error).lower():
            raise ValueError(f"{path!r} is not {what}: it holds "
                             f"Python objects other than tensors and plain values, and "
                             f"is refused (loading them could run code)") from None
        raise ValueError(f"{path!r} is not a readable checkpoint: damaged or not a "
                         f"PyTorch file") from None
    except Exception:  # a damaged file: KeyError, OSError, EOFError, RuntimeError, ...
        raise ValueError(f"{path!r} is not a readable checkpoint: truncated, damaged "
                         f"or not a PyTorch file") from None


def check_output_path(path: str) -> None:
    """Raise ValueError unless a checkpoint can be written to ``path``: not a folder, in
    a folder that exists and that we may write to (tried with a temporary file, which is
    removed)."""
    if os.path.isdir(path):
        raise ValueError(f"{path!r} is a folder; give a file name such as "
                         f"{os.path.join(path, 'model.pt')!r}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ValueError(f"the folder {folder!r} of {path!r} {what}; create it first")
    try:
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".tmp-probe-")
    except OSError as error:
        raise ValueError(
            f"cannot write to the folder {folder!r}: {error.strerror}") from None
    os.close(handle)
    os.remove(probe)



def to_cpu(value):
    """``value`` with every tensor inside (dicts, lists, tuples) moved to the CPU."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(v) for v in value)
    return value


def average_state_dicts(state_dicts: list[dict]) -> dict:
    """The mean of K ``state_dict``s of one model, tensor by tensor (in float64, then cast
    back). Integer tensors (counters, buffers) must agree and are kept as they are."""
    if not isinstance(state_dicts, (list, tuple)) or not state_dicts:
        raise ValueError(f"state_dicts must be a non-empty list of state_dicts, got {state_dicts!r:.80}")
    keys = list(state_dicts[0])
    for i, state in enumerate(state_dicts[1:], 1):
        if not isinstance(state, dict) or list(state) != keys:
            raise ValueError(f"state_dicts[{i}] has other keys than state_dicts[0]: "
                             f"they are not checkpoints of one model")
    out = {}
    for key in keys:
        tensors = [state[key] for state in state_dicts]
        first = tensors[0]
        if any(t.shape != first.shape for t in tensors):
            raise ValueError(f"{key!r} has different shapes {[tuple(t.shape) for t in tensors]}")
        if first.is_floating_point():
            out[key] = torch.stack([t.double() for t in tensors]).mean(0).to(first.dtype)
        else:
            out[key] = first.clone()
    return out


def average_checkpoints(paths: list) -> dict:
    """``average_state_dicts`` of the checkpoints at ``paths`` (files holding a
    ``state_dict`` under that key, as the trainers save them)."""
    if isinstance(paths, (str, os.PathLike)) or not paths:
        raise ValueError(f"paths must be a non-empty list of checkpoint files, got {paths!r}")
    states = []
    for path in paths:
        state = read_checkpoint(path)
        if not isinstance(state, dict) or "state_dict" not in state:
            raise ValueError(f"{os.fspath(path)!r} holds no state_dict: not a model checkpoint")
        states.append(state["state_dict"])
    return average_state_dicts(states)


# ------------------------------------------------------------------------------------
# Translator checkpoints: weights, configuration, tokenizer, corpus, training state

FORMAT = "transformer_lib.translate/1"
_KEYS = ("config", "state_dict", "tokenizer", "corpus", "preset", "max_target_len")
_TRAINING_KEYS = ("version", "step", "seconds", "optimizer", "scheduler", "scaler",
                  "batcher", "rng", "history", "run")


def save_translator(model, path, metrics: dict | None = None,
                    training: dict | None = None) -> str:
    """Save a ``Translator`` (weights, configuration, tokenizer as JSON, corpus name and
    info, preset) and ``metrics`` to ``path`` atomically; ``training`` (a run's training
    state) makes the file resumable. Loadable with ``weights_only=True``: no code inside."""
    from ..checkpoint import atomic_save
    from .translator import Translator

    if not isinstance(model, Translator):
        raise TypeError(f"model must be a Translator, got {type(model).__name__}")
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"cannot save the checkpoint to {path!r}: it is a folder; "
                                f"give a file name such as {os.path.join(path, 'model.pt')!r}")
    for key, value in (metrics or {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"metrics[{key!r}] must be a number, got {type(value).__name__}")
    state = {"format": FORMAT, "config": dict(model.config),
             "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
             **model.extra_state(),
             "metrics": {k: float(v) for k, v in (metrics or {}).items()}}
    if training is not None:
        state["training"] = to_cpu(training)
    return atomic_save(state, path)


def _read_translator(path) -> dict:
    path = os.fspath(path)
    state = read_checkpoint(path, "a translate checkpoint")
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"{path!r} is not a translate checkpoint: expected format "
                         f"{FORMAT!r}, got {found!r}")
    missing = [key for key in _KEYS if key not in state]
    if missing:
        raise ValueError(f"{path!r} is not a translate checkpoint: it lacks {missing}")
    return state


def load_translator(path, device=None):
    """The ``Translator`` saved at ``path``, in eval mode on ``device`` (default CPU).
    A missing file raises FileNotFoundError; anything else wrong, a ValueError naming the
    file and the problem."""
    from ..data import SubwordTokenizer
    from .translator import Translator

    state = _read_translator(path)
    try:
        tokenizer = SubwordTokenizer.from_json(state["tokenizer"])
        config = dict(state["config"])
        for key in ("src_vocab_size", "tgt_vocab_size"):
            if config.pop(key, None) != len(tokenizer):
                raise ValueError(f"its config's {key} differs from its vocabulary")
        config.pop("pad_id", None)
        model = Translator(tokenizer, state["corpus"], state["preset"],
                           state["max_target_len"], state.get("source_tag"), **config)
        model.load_state_dict(state["state_dict"])
    except (TypeError, ValueError, KeyError, RuntimeError) as error:
        first = " ".join(str(error).split("\n")[:2])
        raise ValueError(f"{os.fspath(path)!r} is not a usable translate checkpoint: "
                         f"{first}") from None
    model.metrics = dict(state.get("metrics", {}))
    return model.to(device or "cpu").eval()


def load_resumable(path) -> dict:
    """The checkpoint at ``path`` as a dict, for resuming its run: ValueError unless it
    holds a training state this version can continue."""
    from ..checkpoint import TRAINING_STATE_VERSION

    state = _read_translator(path)
    training = state.get("training")
    if training is None:
        raise ValueError(f"{os.fspath(path)!r} holds a trained model but no training state: "
                         f"it can translate and be evaluated, but a run cannot resume from it")
    missing = [key for key in _TRAINING_KEYS if key not in training]
    if training.get("version") != TRAINING_STATE_VERSION or missing:
        raise ValueError(f"{os.fspath(path)!r} has a training state this version cannot "
                         f"resume (version {training.get('version')!r}, missing {missing})")
    return state
