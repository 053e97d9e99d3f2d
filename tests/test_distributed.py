"""Data parallelism: several processes (gloo, CPU) train one model as one process would.

The multi-process checks run in ``ddp_worker.py``, started W times with the environment
variables torchrun sets (W = 2 and 3); the world of one runs the same checks in this
process. Each test compares what rank 0 saved with one process on the whole batch. The
last test runs the real command line under ``python -m torch.distributed.run``.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import transformer_lib as tl
from transformer_lib import distributed
from transformer_lib.data import NumberWordsData
from transformer_lib.examples import number_words as nw

import ddp_worker as worker
from conftest import kill_tree

pytestmark = pytest.mark.usefixtures("one_thread")

HERE = Path(__file__).resolve().parent
WORKER_TIMEOUT = 120  # seconds; a hung collective must fail the test, not hang it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn_world(size: int, folder: Path) -> None:
    """Run ddp_worker.py as ``size`` ranks; every process is reaped, whatever happens."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
           "WORLD_SIZE": str(size), "OMP_NUM_THREADS": "1"}
    procs = []
    try:
        for rank in range(size):
            procs.append(subprocess.Popen(
                [sys.executable, str(HERE / "ddp_worker.py"), str(folder)],
                env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + WORKER_TIMEOUT
        outputs = [p.communicate(timeout=max(1, deadline - time.monotonic()))[0]
                   for p in procs]
    finally:
        for p in procs:
            kill_tree(p)
    for rank, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"rank {rank} exited {p.returncode}:\n{out.decode()[-3000:]}"


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda w: f"world{w}")
def world_results(request, tmp_path_factory):
    """What rank 0 of a world of W processes measured (W = 1: in this process)."""
    size = request.param
    folder = tmp_path_factory.mktemp(f"world{size}")
    if size == 1:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            world = distributed.World(device=torch.device("cpu"))
            results = {"world_size": 1,
                       "grads": {k: worker.gradient_check(world, k) for k in (1, 2, 3)},
                       "steps": {k: worker.steps_check(world, k) for k in (1, 2)},
                       "resume": {k: worker.resume_check(world, k, str(folder))
                                  for k in (1, 2)}}
        finally:
            torch.set_num_threads(threads)
        return results
    _spawn_world(size, folder)
    return torch.load(folder / "results.pt", weights_only=False)


def _reference_grads(initial: dict) -> dict:
    """One process, the whole batch, plain ``masked_cross_entropy``."""
    model = worker.tiny_model()
    model.load_state_dict(initial)
    model.train()
    src, tgt = worker.GRAD_BATCH
    tl.masked_cross_entropy(model(src, tgt[:, :-1]), tgt[:, 1:], worker.PAD).backward()
    return {name: p.grad for name, p in model.named_parameters()}


def _max_diff(a: dict, b: dict, skip=()) -> float:
    return max((a[k].double() - b[k].double()).abs().max().item()
               for k in a if a[k].is_floating_point() and not any(s in k for s in skip))


@pytest.mark.parametrize("accumulate", [1, 2, 3])
def test_ddp_gradients_equal_one_process_on_the_whole_batch(world_results, accumulate):
    """float64: the averaged gradient of W ranks x K micro-batches, each padded and holding
    a different number of target tokens, is the gradient of one process on the whole
    batch (3 ranks x 3 micro-batches = 9 pieces of 8 rows: one rank runs an empty piece)."""
    result = world_results["grads"][accumulate]
    reference = _reference_grads(result["initial"])
    assert _max_diff(result["grads"], reference) <= 1e-10
    assert result["spread"] == 0.0  # every rank holds the very same gradient


def test_the_gradient_check_can_fail():
    """Averaging the pieces' mean losses (no token weights) gives another gradient: the
    pieces hold different numbers of tokens, so the check above is a real one."""
    src, tgt = worker.GRAD_BATCH
    pieces = distributed.split_batch(src, tgt, 2, worker.PAD)
    counts = [int((t[:, 1:] != worker.PAD).sum()) for _, t in pieces]
    assert counts[0] != counts[1] and all((s == worker.PAD).any() for s, _ in pieces)
    model = worker.tiny_model().train()
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    for s, t in pieces:
        (tl.masked_cross_entropy(model(s, t[:, :-1]), t[:, 1:], worker.PAD) / 2).backward()
    naive = {name: p.grad for name, p in model.named_parameters()}
    assert _max_diff(naive, _reference_grads(initial)) > 1e-4


@pytest.mark.parametrize("accumulate", [1, 2])
def test_ddp_steps_equal_one_process_with_the_whole_batch(world_results, accumulate):
    """float64, dropout off: STEPS Adam steps on W ranks (each with its share of every
    batch, in K micro-batches) give the weights of one process on the whole batches."""
    model = worker.tiny_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    tl.train(model, worker.GLOBAL_BATCHES, optimizer, progress=False)
    assert _max_diff(world_results["steps"][accumulate], model.state_dict()) <= 1e-9


@pytest.mark.parametrize("accumulate", [1, 2])
def test_ddp_resumed_run_is_bitwise_the_uninterrupted_one(world_results, accumulate):
    """train_number_words on W ranks, stopped after s steps (also across an epoch of the
    data), saved, loaded and resumed: the same weights, bit for bit, as a run never
    stopped."""
    result = world_results["resume"][accumulate]
    for stop_after in worker.RESUME_STOPS[accumulate]:
        assert result[f"steps_{stop_after}"] == worker.RESUME_STEPS
        resumed = result[f"resumed_{stop_after}"]
        for name, value in result["whole"].items():
            assert torch.equal(resumed[name], value), (stop_after, name)


def test_ddp_capstone_run_matches_one_process(world_results):
    """float32: the capstone trained on W ranks and in one process with the same global
    batches. The losses agree, and so does every weight but the attention key biases:
    softmax ignores a constant added to every score, so their true gradient is zero and
    what they get is rounding noise, which Adam (dividing by the gradient's size) turns
    into steps of full size."""
    if world_results["world_size"] == 1:
        pytest.skip("the world of one is the one process")
    data = NumberWordsData("de", train_size=64, n_test=20, n_valid=5, seed=0)
    alone = nw.train_number_words("de", steps=worker.RESUME_STEPS, data=data, batch_size=12,
                                  model_config=worker.TINY, device="cpu", progress=False,
                                  evaluate_test=False, log_every=2)
    parallel = world_results["resume"][1]
    assert _max_diff(parallel["whole"], alone.model.state_dict(), skip=["k_proj.bias"]) < 1e-5
    losses = torch.tensor(parallel["history"]["loss"]) - torch.tensor(alone.history["loss"])
    assert losses.abs().max() < 1e-5


# ---------------------------------------------------------------------------------------
# Pieces of a batch


def test_split_batch_gives_every_row_once_in_strides():
    src = torch.arange(1, 8)[:, None].repeat(1, 3)  # (7, 3), row i holds i + 1
    tgt = torch.arange(1, 8)[:, None].repeat(1, 4)
    pieces = distributed.split_batch(src, tgt, 3, pad_id=0)
    assert [s[:, 0].tolist() for s, _ in pieces] == [[1, 4, 7], [2, 5], [3, 6]]
    assert [t[:, 0].tolist() for _, t in pieces] == [[1, 4, 7], [2, 5], [3, 6]]
    # more pieces than rows: the missing ones are one row of target padding
    pieces = distributed.split_batch(src[:2], tgt[:2], 4, pad_id=0)
    assert [s.shape[0] for s, _ in pieces] == [1, 1, 1, 1]
    assert (pieces[2][1] == 0).all() and (pieces[3][1] == 0).all()


def test_micro_batches_are_each_ranks_share():
    batches = [(torch.arange(6)[:, None] + 10 * b, torch.arange(6)[:, None].repeat(1, 2))
               for b in range(2)]
    seen = []
    for rank in range(2):
        world = distributed.World(rank=rank, size=2)
        seen.append([s[:, 0].tolist()
                     for s, _ in distributed.micro_batches(batches, world, accumulate=3)])
    # 6 pieces per batch: rank 0 takes pieces 0-2, rank 1 pieces 3-5, of each batch
    assert seen[0] == [[0], [1], [2], [10], [11], [12]]
    assert seen[1] == [[3], [4], [5], [13], [14], [15]]
    alone = list(distributed.micro_batches(batches, distributed.World(), accumulate=1))
    assert all(a[0] is b[0] for a, b in zip(alone, batches))  # untouched


def test_without_torchrun_setup_joins_nothing(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    world = distributed.setup("cpu")
    assert world == distributed.World(device=torch.device("cpu"))
    assert world.is_main and not world.parallel
    assert not torch.distributed.is_initialized()
    model = torch.nn.Linear(2, 2)
    assert distributed.wrap(model, world) is model and distributed.unwrap(model) is model
    assert distributed.agree(True, 3.0) == (True, 3.0)
    assert distributed.gather_objects("x") == ["x"]
    # torchrun with one process is one process too
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert distributed.setup("cpu") == world and not torch.distributed.is_initialized()


# ---------------------------------------------------------------------------------------
# The command line under torchrun

TORCHRUN_ARGS = ["--lang", "de", "--steps", "40", "--train-size", "96", "--test-size", "20",
                 "--batch-size", "16", "--beam", "1", "--device", "cpu"]


def _torchrun(out: Path, *extra: str, signal_after_steps: int | None = None):
    """Run the CLI under ``python -m torch.distributed.run`` on 2 processes; optionally send
    SIGTERM to torchrun once the progress bar shows ``signal_after_steps`` steps.
    Returns (exit code, output). torchrun and both workers are reaped in every case."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", "2", "-m", "transformer_lib.examples.number_words",
               *TORCHRUN_ARGS, "--out", str(out), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "20"}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    output = b""
    try:
        deadline = time.monotonic() + WORKER_TIMEOUT
        if signal_after_steps is not None:
            os.set_blocking(proc.stdout.fileno(), False)
            while proc.poll() is None and time.monotonic() < deadline:
                output += proc.stdout.read() or b""
                done = [int(n) for n in re.findall(rb"\| *(\d+)/\d+ \[", output)]
                if done and max(done) >= signal_after_steps:
                    proc.send_signal(signal.SIGTERM)
                    break
                time.sleep(0.02)
            os.set_blocking(proc.stdout.fileno(), True)
        output += proc.communicate(timeout=max(1, deadline - time.monotonic()))[0]
    finally:
        kill_tree(proc)
    return proc.returncode, output.decode(errors="replace")


def test_torchrun_command_line_end_to_end(tmp_path):
    """2 processes: SIGTERM to torchrun in mid-run stops both ranks after the same step,
    with a non-zero exit and one resumable checkpoint; the same command with --resume
    finishes the run with exit code 0 and one checkpoint, whose model agrees with one
    process trained on the same batches."""
    out = tmp_path / "de.pt"
    code, output = _torchrun(out, signal_after_steps=2)
    assert code != 0, output
    assert sorted(os.listdir(tmp_path)) == ["de.pt"], output
    stopped = nw.load_resumable(out)["training"]
    assert 2 <= stopped["step"] <= 40 and len(stopped["rng"]) == 2, output

    code, output = _torchrun(out, "--resume", str(out))
    assert code == 0, output
    assert sorted(os.listdir(tmp_path)) == ["de.pt"]  # one checkpoint, no temporary file
    assert output.count("saved ") == 1 and "test exact match (greedy)" in output
    model = nw.load_checkpoint(out)  # an ordinary checkpoint as well
    assert model.metrics["steps"] == 40 and "test_exact_match" in model.metrics

    alone = tmp_path / "alone" / "de.pt"
    alone.parent.mkdir()
    assert nw.main([*TORCHRUN_ARGS, "--out", str(alone)]) == 0
    weights = nw.load_checkpoint(alone).state_dict()
    assert _max_diff(model.state_dict(), weights, skip=["k_proj.bias"]) < 1e-4
