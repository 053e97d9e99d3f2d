"""Shared fixtures and helpers for the transformer_lib test suite.

The central helper is ``transformer_lib.interop.copy_from_torch``: it copies the weights of a
PyTorch reference module (``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer``,
``nn.TransformerDecoderLayer``) into the matching ``transformer_lib`` module, so the two can be
compared number for number. Tests receive it through the ``copy_weights`` fixture.
"""
from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

import transformer_lib as tl
from transformer_lib.interop import copy_from_torch

PAD = 0  # the padding id used throughout the tests

# CI sets TT_REQUIRE_ALL=1: there, a test whose tool is missing fails instead of skipping.
REQUIRE_ALL = os.environ.get("TT_REQUIRE_ALL") == "1"


# A correct attention as a student writes it: the source for notebook cells, and the
# function it defines (the grading tests use both).
HONEST_ATTENTION = """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(mask, 0.0)
    return weights @ v, weights
"""


def honest_attention_function():
    """``HONEST_ATTENTION`` run: the function, with ``math`` and ``torch`` as it expects."""
    namespace = {"math": math, "torch": torch}
    exec(HONEST_ATTENTION, namespace)
    return namespace["scaled_dot_product_attention"]


def need(available, reason: str) -> None:
    """Skip the calling test with ``reason`` unless ``available``; under TT_REQUIRE_ALL=1, fail."""
    if available:
        return
    if REQUIRE_ALL:
        pytest.fail(f"{reason} (TT_REQUIRE_ALL=1: CI must have it)", pytrace=False)
    pytest.skip(reason)


def tool(name: str) -> str | None:
    """A command-line tool installed beside this Python (its venv's bin/), else one on PATH.

    Tests run ``python -m pytest`` from a venv that need not be activated, so PATH alone may miss
    the venv's own ``jupyter-book`` or ``jupyter``.
    """
    return shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)


@pytest.fixture
def copy_weights():
    """The weight-copy helper: ``copy_weights(ours, theirs)`` copies theirs into ours."""
    return copy_from_torch


@pytest.fixture
def one_thread():
    """Run a test with one intra-op thread, then restore the previous setting.

    The library tests use tiny tensors, for which extra threads cost more than they bring (and
    test machines are often shared). Modules opt in with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same random state, so failures reproduce."""
    torch.manual_seed(0)
    yield


def make_small_model(vocab: int = 13, d_model: int = 16, num_heads: int = 2, layers: int = 2,
                     d_ff: int = 32, dropout: float = 0.0, max_len: int = 64, **kwargs):
    """A small randomly initialised Transformer in eval mode."""
    model = tl.Transformer(vocab, vocab, d_model=d_model, num_heads=num_heads,
                           num_encoder_layers=layers, num_decoder_layers=layers, d_ff=d_ff,
                           dropout=dropout, max_len=max_len, pad_id=PAD, **kwargs)
    return model.eval()


@pytest.fixture
def small_model():
    """Factory fixture: ``small_model(**overrides)`` -> an eval-mode ``tl.Transformer``."""
    return make_small_model


def random_tokens(batch: int, length: int, vocab: int, lengths=None, low: int = 1) -> torch.Tensor:
    """(batch, length) int64 ids in [low, vocab); row b is padded with PAD after ``lengths[b]``."""
    tokens = torch.randint(low, vocab, (batch, length))
    if lengths is not None:
        for b, n in enumerate(lengths):
            tokens[b, n:] = PAD
    return tokens


@pytest.fixture
def tokens():
    """Factory fixture for padded token batches: ``tokens(batch, length, vocab, lengths=None)``."""
    return random_tokens


# ---------------------------------------------------------------------------------------
# Processes a test starts (torchrun, its workers, a CLI run): nothing may outlive the test.


def _children() -> dict[int, list[int]]:
    """{parent pid: [child pids]} from /proc (Linux); {} where there is no /proc."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat") if Path("/proc").is_dir() else []:
        try:
            stat = entry.read_text()
        except OSError:  # the process ended meanwhile
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the name may hold spaces
        tree.setdefault(ppid, []).append(int(entry.parent.name))
    return tree


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, grandchildren, ...), deepest first."""
    tree, out, stack = _children(), [], [pid]
    while stack:
        for child in tree.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out[::-1]


def kill_tree(proc) -> None:
    """SIGKILL ``proc`` (a Popen) and everything below it, and reap ``proc``. torchrun starts
    its workers in sessions of their own, so killing its process group would miss them:
    they are found through their parent pids, before ``proc`` dies and orphans them."""
    import signal

    if proc.poll() is None:
        for pid in descendants(proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.kill()
    proc.wait()
