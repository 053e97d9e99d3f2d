"""Padding and length-bucketed batching of token-id sequences."""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch

from .._checks import (
    check_bool,
    check_int,
    check_positive_int,
    check_same_size,
    check_token_ids,
)


def pad_sequences(sequences: Sequence[Sequence[int]], pad_id: int = 0,
                  length: int | None = None) -> torch.Tensor:
    """Lists of ids -> one (N, L) int64 tensor, right-padded with ``pad_id``.

    L is the longest sequence, or ``length`` if given (a longer sequence raises ValueError).
    """
    if not _is_sized_iterable(sequences):
        raise TypeError(f"sequences must be a list of lists of token ids, "
                        f"got {type(sequences).__name__}")
    for i, seq in enumerate(sequences):
        if not _is_sized_iterable(seq):
            raise TypeError(f"sequences[{i}] must be a list of token ids, "
                            f"got {type(seq).__name__}")
    check_int("pad_id", pad_id)
    if length is not None:
        check_int("length", length, minimum=0)
    longest = max((len(s) for s in sequences), default=0)
    length = longest if length is None else length
    if longest > length:
        raise ValueError(f"a sequence has length {longest}, longer than length={length}")
    out = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    for i, seq in enumerate(sequences):
        out[i, : len(seq)] = torch.as_tensor(list(seq), dtype=torch.long)
    return out


def _is_sized_iterable(x) -> bool:
    """A list, tuple, array or tensor; not a string (its letters would become "ids")."""
    sized = hasattr(x, "__len__") and hasattr(x, "__iter__")
    return sized and not isinstance(x, (str, bytes))


class BucketBatcher:
    """Endless (src, tgt) batches from two padded tensors, with length bucketing.

    src (N, Ls) and tgt (N, Lt) hold the whole data set, padded once (keep them on the training
    device: a batch is then one indexing operation, no Python per example). Each pass shuffles the
    examples, cuts them into pools of ``pool_batches`` batches, sorts each pool by length and cuts
    it into batches, so that a batch holds sequences of similar length; the batches are shuffled
    again and each is trimmed to its longest sequence. Less padding means less wasted compute.

    ``bucket=False`` gives plain shuffled batches (for comparison).

    ``refresh(epoch) -> (src, tgt)`` (optional) gives the data anew at the start of each pass,
    the same N examples in the same order, each written again: a new BPE-dropout
    segmentation, a new sample of extra material (see ``translate.pipeline``). The
    ``src``/``tgt`` given here are then only the data's reference form (its lengths are
    not used).

    ``state_dict()`` says where the batcher is (the pass, how many of its batches were handed
    out, and the random state the pass was drawn from); a batcher built the same way and
    given that state with ``load_state_dict`` continues exactly there: a resumed training
    run reads the batches the interrupted one would have read.
    """

    def __init__(self, src: torch.Tensor, tgt: torch.Tensor, batch_size: int, pad_id: int = 0,
                 seed: int = 0, bucket: bool = True, pool_batches: int = 32, epochs: int | None = None,
                 refresh=None):
        check_token_ids("src", src, ndim=2)
        check_token_ids("tgt", tgt, ndim=2)
        check_same_size(0, "N (number of examples)", src=src, tgt=tgt)
        if src.size(0) == 0:  # an endless batcher of nothing would hang
            raise ValueError(
                f"src and tgt must hold at least one example, got {tuple(src.shape)}")
        check_positive_int("batch_size", batch_size)
        check_int("pad_id", pad_id)
        check_int("seed", seed, minimum=0)
        check_bool("bucket", bucket)
        check_positive_int("pool_batches", pool_batches)
        if epochs is not None:
            check_positive_int("epochs", epochs)
        if refresh is not None and not callable(refresh):
            raise TypeError(f"refresh must be a function of the epoch, got {type(refresh).__name__}")
        self.batch_size, self.bucket = batch_size, bucket
        self.pool = batch_size * pool_batches
        self.epochs = epochs
        self.pad_id, self.refresh = pad_id, refresh
        self.rng = np.random.default_rng(seed)
        self._use(src, tgt)
        self._position = self._start_of_pass(0)  # where the last batch handed out came from
        self._resume = None  # a state to continue from, for the next __iter__

    @property
    def batches_per_epoch(self) -> int:
        """Batches per pass over the data."""
        return -(-self.src.size(0) // self.batch_size)

    def __len__(self) -> int:
        """Batches in all, ``batches_per_epoch * epochs``; an endless batcher has no length."""
        if self.epochs is None:
            raise TypeError("an endless BucketBatcher (epochs=None) has no length; "
                            "see batches_per_epoch")
        return self.batches_per_epoch * self.epochs

    def epoch_batches(self) -> list[np.ndarray]:
        """The index arrays of one pass, in training order."""
        order = self.rng.permutation(self.src.size(0))
        batches = []
        size = self.pool if self.bucket else len(order)
        for start in range(0, len(order), size):
            pool = order[start:start + size]
            if self.bucket:  # sort by target length, then source length
                pool = pool[np.lexsort((self.src_len[pool], self.tgt_len[pool]))]
            batches += [pool[i:i + self.batch_size] for i in range(0, len(pool), self.batch_size)]
        if self.bucket:
            self.rng.shuffle(batches)
        return batches

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        epoch, skip = 0, 0
        if self._resume is not None:  # continue where a saved batcher stopped
            epoch, skip = self._resume["epoch"], self._resume["batch"]
            self.rng.bit_generator.state = self._resume["rng"]
            self._resume = None
        while self.epochs is None or epoch < self.epochs:
            self._position = self._start_of_pass(epoch)
            if self.refresh is not None:
                self._refresh(epoch)
            batches = self.epoch_batches()
            for i in range(skip, len(batches)):
                idx = batches[i]
                index = torch.as_tensor(idx, device=self.src.device)
                ls, lt = int(self.src_len[idx].max()), int(self.tgt_len[idx].max())
                self._position["batch"] = i + 1
                yield self.src[index, :ls], self.tgt[index, :lt]
            skip = 0
            epoch += 1
            self._position = self._start_of_pass(epoch)

    def _use(self, src: torch.Tensor, tgt: torch.Tensor) -> None:
        self.src, self.tgt = src, tgt
        # Lengths (without padding), computed once per data on the CPU.
        self.src_len = (src != self.pad_id).sum(1).cpu().numpy()
        self.tgt_len = (tgt != self.pad_id).sum(1).cpu().numpy()

    def _refresh(self, epoch: int) -> None:
        src, tgt = self.refresh(epoch)
        if src.size(0) != self.src.size(0) or tgt.size(0) != src.size(0):
            raise ValueError(f"refresh({epoch}) gave {src.size(0)} sources and {tgt.size(0)} "
                             f"targets, not the {self.src.size(0)} examples of every pass")
        self._use(src.to(self.src.device), tgt.to(self.tgt.device))

    def _start_of_pass(self, epoch: int) -> dict:
        return {"epoch": epoch, "batch": 0, "rng": self.rng.bit_generator.state}

    def state_dict(self) -> dict:
        """Where the batcher is: pass ``epoch``, ``batch`` batches of it handed out, and
        ``rng``, the random state that pass was drawn from (plain Python values)."""
        return dict(self._position)

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state_dict()`` of a batcher built with the same data and
        settings: the next iteration starts with the batch that one would give next."""
        if not isinstance(state, dict) or set(state) != {"epoch", "batch", "rng"}:
            raise ValueError(f"state must be a BucketBatcher.state_dict() (keys epoch, "
                             f"batch, rng), got {state!r:.80}")
        check_int("state['epoch']", state["epoch"], minimum=0)
        check_int("state['batch']", state["batch"], minimum=0, maximum=self.batches_per_epoch)
        if self.epochs is not None and state["epoch"] > self.epochs:
            raise ValueError(f"state['epoch']={state['epoch']} is past this batcher's "
                             f"epochs={self.epochs}")
        probe = np.random.default_rng()
        try:
            probe.bit_generator.state = state["rng"]
        except (TypeError, ValueError, KeyError) as error:
            raise ValueError(f"state['rng'] is not a random state of NumPy's "
                             f"{type(self.rng.bit_generator).__name__}: {error}") from None
        self._resume = dict(state)
        self._position = dict(state)
