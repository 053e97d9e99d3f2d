"""Stopping and resuming: a run stopped after any step (by a signal, Ctrl-C or --stop-after),
saved and resumed, ends with the weights of the run never stopped, bit for bit on the CPU;
checkpoints are written atomically and damaged ones are refused with a clear message."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from transformer_lib.checkpoint import atomic_save
from transformer_lib.data import BucketBatcher, NumberWordsData
from transformer_lib.examples import number_words as nw
from transformer_lib.stopping import StopFlag
from transformer_lib.translate import trainer
from transformer_lib.translate.trainer import ResumeMismatch, check_resumable

from conftest import kill_tree

pytest.importorskip("num2words")
pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
            dropout=0.0)
STEPS = 8  # 12 examples per step, 64 training pairs: the run crosses an epoch at step 6


@pytest.fixture(scope="module")
def data():
    return NumberWordsData("de", train_size=64, n_test=20, n_valid=5, seed=0)


def _settings(data, **extra):
    return {**dict(steps=STEPS, data=data, batch_size=12, model_config=TINY, device="cpu",
                   progress=False, evaluate_test=False, log_every=2), **extra}


def _assert_same_weights(a, b):
    a, b = a.state_dict(), b.state_dict()
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.fixture(scope="module")
def whole_runs(data):
    """The runs never stopped, one per accumulation factor. One thread, as in the tests
    (this module-scoped fixture runs before their one_thread fixture): some CPU kernels,
    LayerNorm's fused backward among them, sum in an order that depends on the number of
    threads, so bit for bit holds for one thread count."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {k: nw.train_number_words("de", **_settings(data, accumulate=k))
                for k in (1, 2, 3)}
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("accumulate, stop_after",
                         [(1, 0), (1, 1), (1, 5), (1, 6), (1, 7), (2, 3), (3, 2), (3, 6)])
def test_resumed_run_ends_bit_for_bit_where_the_whole_run_ends(
        data, whole_runs, tmp_path, accumulate, stop_after):
    settings = _settings(data, accumulate=accumulate)
    first = nw.train_number_words("de", stop=StopFlag(after=stop_after), **settings)
    assert first.stopped and first.metrics["steps"] == stop_after
    path = nw.save_checkpoint(first.model, tmp_path / "run.pt", first.metrics,
                              training=first.training)
    resumed = nw.train_number_words("de", resume=nw.load_resumable(path), **settings)
    assert not resumed.stopped and resumed.metrics["steps"] == STEPS
    whole = whole_runs[accumulate]
    _assert_same_weights(resumed.model, whole.model)
    # the losses of the steps after the stop are those of the whole run
    after = [s for s in whole.history["step"] if s > stop_after]
    resumed_loss = dict(zip(resumed.history["step"], resumed.history["loss"]))
    whole_loss = dict(zip(whole.history["step"], whole.history["loss"]))
    for step in after:
        if step - 2 >= stop_after:  # a log entry whose window lies after the stop
            assert resumed_loss[step] == whole_loss[step]


def test_resuming_twice_and_a_finished_run(data, whole_runs, tmp_path):
    settings = _settings(data)
    path = tmp_path / "run.pt"
    run = nw.train_number_words("de", stop=StopFlag(after=2), **settings)
    for stop_after in (5, None):  # stop again at 5, then finish
        nw.save_checkpoint(run.model, path, run.metrics, training=run.training)
        run = nw.train_number_words("de", resume=nw.load_resumable(path),
                                    stop=StopFlag(after=stop_after), **settings)
    assert not run.stopped
    _assert_same_weights(run.model, whole_runs[1].model)
    nw.save_checkpoint(run.model, path, run.metrics, training=run.training)
    again = nw.train_number_words("de", resume=nw.load_resumable(path), **settings)
    assert again.metrics["steps"] == STEPS  # nothing left to train
    _assert_same_weights(again.model, whole_runs[1].model)


def test_sigterm_in_the_middle_of_training_stops_after_that_step(data, whole_runs, tmp_path):
    settings = _settings(data, log_every=1)
    stop = StopFlag()

    def deliver_sigterm(step, history):
        if step == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # as a scheduler would, during step 3's log

    with stop.catch_signals():
        first = _train_with_callback(settings, stop, deliver_sigterm)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored
    assert stop.signum == signal.SIGTERM and first.stopped and first.metrics["steps"] == 3
    path = nw.save_checkpoint(first.model, tmp_path / "run.pt", training=first.training)
    resumed = nw.train_number_words("de", resume=nw.load_resumable(path), **_settings(data))
    _assert_same_weights(resumed.model, whole_runs[1].model)


def _train_with_callback(settings, stop, callback):
    """train_number_words with an extra callback after each logged step (it has none of
    its own besides validation): wrap the library's train(), as the shared trainer calls it."""
    original = trainer.train

    def train(*args, **kwargs):
        validate = kwargs["callback"]

        def both(step, history):
            validate(step, history)
            callback(step, history)
        return original(*args, **{**kwargs, "callback": both})

    trainer.train = train
    try:
        return nw.train_number_words("de", stop=stop, **settings)
    finally:
        trainer.train = original


def test_resume_refuses_other_settings(data, tmp_path):
    run = nw.train_number_words("de", stop=StopFlag(after=2), **_settings(data))
    path = nw.save_checkpoint(run.model, tmp_path / "run.pt", training=run.training)
    checkpoint = nw.load_resumable(path)
    with pytest.raises(ValueError, match="other settings.*batch_size: saved 12, now 16"):
        nw.train_number_words("de", resume=checkpoint, **{**_settings(data), "batch_size": 16})
    other = NumberWordsData("de", train_size=48, n_test=20, n_valid=5, seed=0)
    with pytest.raises(ValueError, match="other settings.*data: saved"):
        nw.train_number_words("de", resume=checkpoint, **_settings(other))


def test_a_time_budget_continues_with_the_time_left(data, tmp_path):
    settings = _settings(data, max_seconds=600.0)
    first = nw.train_number_words("de", stop=StopFlag(after=3), **settings)
    used = first.training["seconds"]
    assert used > 0 and first.history["seconds"][-1] <= used
    path = nw.save_checkpoint(first.model, tmp_path / "run.pt", training=first.training)
    resumed = nw.train_number_words("de", resume=nw.load_resumable(path), **settings)
    later = [s for step, s in zip(resumed.history["step"], resumed.history["seconds"])
             if step > 3]
    assert later and min(later) > used  # the clock went on from the time already used
    assert resumed.metrics["train_seconds"] > used


# ---------------------------------------------------------------------------------------
# The data position


@pytest.mark.parametrize("position", [0, 1, 4, 6, 9, 13])
def test_batcher_continues_from_its_state(position):
    src = torch.randint(1, 9, (40, 5))
    tgt = torch.randint(1, 9, (40, 6))
    reference = iter(BucketBatcher(src, tgt, batch_size=6, seed=3, pool_batches=2))
    for _ in range(position):  # 7 batches per pass: positions in the 1st, 2nd, 3rd pass
        next(reference)
    batcher = BucketBatcher(src, tgt, batch_size=6, seed=3, pool_batches=2)
    saved = iter(batcher)
    for _ in range(position):
        next(saved)
    state = batcher.state_dict()
    restored = BucketBatcher(src, tgt, batch_size=6, seed=3, pool_batches=2)
    restored.load_state_dict(state)
    for (a_src, a_tgt), (b_src, b_tgt) in zip(
            (next(reference) for _ in range(10)), (b for b, _ in zip(restored, range(10)))):
        assert torch.equal(a_src, b_src) and torch.equal(a_tgt, b_tgt)


def test_batcher_state_bad_input():
    src = torch.randint(1, 9, (10, 4))
    batcher = BucketBatcher(src, src, batch_size=4)
    with pytest.raises(ValueError, match="BucketBatcher.state_dict"):
        batcher.load_state_dict({"epoch": 0})
    with pytest.raises(ValueError, match="state\\['batch'\\] must be <= 3"):
        batcher.load_state_dict({**batcher.state_dict(), "batch": 7})
    with pytest.raises(ValueError, match="not a random state"):
        batcher.load_state_dict({**batcher.state_dict(), "rng": {"bit_generator": "MT1"}})


# ---------------------------------------------------------------------------------------
# Checkpoint files


@pytest.fixture(scope="module")
def stopped_checkpoint(data, tmp_path_factory):
    run = nw.train_number_words("de", stop=StopFlag(after=2), **_settings(data))
    path = tmp_path_factory.mktemp("ckpt") / "run.pt"
    nw.save_checkpoint(run.model, path, run.metrics, training=run.training)
    return path


def test_a_resumable_checkpoint_is_an_ordinary_one_too(stopped_checkpoint):
    model = nw.load_checkpoint(stopped_checkpoint)
    assert isinstance(model, nw.NumberTranslator) and model.metrics["steps"] == 2
    assert isinstance(nw.translate(model, "ninety-seven"), str)


def test_an_ordinary_checkpoint_cannot_resume(stopped_checkpoint, tmp_path):
    model = nw.load_checkpoint(stopped_checkpoint)
    path = nw.save_checkpoint(model, tmp_path / "plain.pt")  # no training state
    with pytest.raises(ValueError, match="no training state.*load_checkpoint can load it"):
        nw.load_resumable(path)


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage", "missing"])
def test_damaged_checkpoints_give_a_clear_error(stopped_checkpoint, tmp_path, damage):
    path = tmp_path / "run.pt"
    good = stopped_checkpoint.read_bytes()
    content = {"truncated": good[: len(good) // 2], "empty": b"",
               "garbage": b"not a checkpoint" * 100}.get(damage)
    if content is not None:
        path.write_bytes(content)
    expected = {"truncated": "truncated, damaged", "empty": "empty \\(0 bytes\\)",
                "garbage": "not a readable checkpoint", "missing": "does not exist"}[damage]
    with pytest.raises((ValueError, FileNotFoundError), match=expected):
        nw.load_resumable(path)


def test_a_crash_while_saving_leaves_the_old_checkpoint(stopped_checkpoint, tmp_path,
                                                        monkeypatch):
    path = tmp_path / "run.pt"
    path.write_bytes(stopped_checkpoint.read_bytes())
    before = path.read_bytes()
    model = nw.load_checkpoint(path)

    def dies_half_way(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt  # Ctrl-C, or a full disk (OSError), in the middle

    monkeypatch.setattr(torch, "save", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        nw.save_checkpoint(model, path)
    with pytest.raises(KeyboardInterrupt):
        atomic_save({"x": 1}, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["run.pt"]  # no temporary file left either


# ---------------------------------------------------------------------------------------
# The command line

CLI = ["--lang", "de", "--steps", "60", "--train-size", "96", "--test-size", "20",
       "--batch-size", "16", "--beam", "1", "--device", "cpu"]


def test_cli_stop_after_then_resume_is_the_uninterrupted_run(tmp_path, capsys):
    _stop_resume_equals_whole(CLI, tmp_path, capsys)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_run_resumes_bit_for_bit_with_deterministic(tmp_path, capsys):
    """The resume contract on CUDA: bit for bit with --deterministic (deterministic
    algorithms and cuBLAS); the flag is a setting the resumed command must repeat."""
    cuda = [*CLI[:-1], "cuda", "--deterministic"]
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        _stop_resume_equals_whole(cuda, tmp_path, capsys)
    finally:
        torch.use_deterministic_algorithms(deterministic, warn_only=True)


def test_the_deterministic_setting_is_recorded_and_old_checkpoints_are_not_refused():
    saved = {"training": {"run": {"seed": 0, "threads": 1, "deterministic": False}}}
    with pytest.raises(ResumeMismatch, match="deterministic: saved False, now True"):
        check_resumable(saved, {"seed": 0, "threads": 1, "deterministic": True})
    check_resumable(saved, {"seed": 0, "threads": 1, "deterministic": False})
    older = {"training": {"run": {"seed": 0}}}  # saved before threads and deterministic
    check_resumable(older, {"seed": 0, "threads": 1, "deterministic": True})
    with pytest.raises(ResumeMismatch, match="seed: saved 0, now 1"):
        check_resumable(older, {"seed": 1, "threads": 1, "deterministic": True})


def _stop_resume_equals_whole(cli, tmp_path, capsys):
    whole, sliced = tmp_path / "whole.pt", tmp_path / "sliced.pt"
    assert nw.main([*cli, "--out", str(whole)]) == 0
    capsys.readouterr()
    assert nw.main([*cli, "--out", str(sliced), "--stop-after", "25"]) == nw.EXIT_STOPPED
    printed = capsys.readouterr().out
    assert "stopped after step 25" in printed and f"--resume {sliced}" in printed
    assert "test exact match" not in printed  # a stopped run is not tested
    assert nw.load_resumable(sliced)["training"]["step"] == 25
    assert nw.main([*cli, "--out", str(sliced), "--resume", str(sliced)]) == 0
    assert "resuming" in capsys.readouterr().out
    _assert_same_weights(nw.load_checkpoint(sliced), nw.load_checkpoint(whole))
    assert sorted(os.listdir(tmp_path)) == ["sliced.pt", "whole.pt"]


def test_cli_sigterm_writes_a_resumable_checkpoint(tmp_path):
    """A real SIGTERM from outside, while the progress bar runs: exit status 75 and a
    resumable checkpoint at --out; the same command with --resume finishes the run with
    the weights of a run never stopped."""
    out = tmp_path / "de.pt"
    proc = subprocess.Popen(
        [sys.executable, "-m", "transformer_lib.examples.number_words", *CLI,
         "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
    output = b""
    try:
        os.set_blocking(proc.stdout.fileno(), False)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            output += proc.stdout.read() or b""
            if any(int(n) >= 2 for n in re.findall(rb"\| *(\d+)/60 \[", output)):
                proc.send_signal(signal.SIGTERM)
                break
            time.sleep(0.02)
        os.set_blocking(proc.stdout.fileno(), True)
        output += proc.communicate(timeout=60)[0]
    finally:
        kill_tree(proc)
    text = output.decode(errors="replace")
    assert proc.returncode == nw.EXIT_STOPPED, text
    assert "SIGTERM: stopping after this step" in text
    step = nw.load_resumable(out)["training"]["step"]
    assert 2 <= step <= 60 and os.listdir(tmp_path) == ["de.pt"]
    assert nw.main([*CLI, "--out", str(out), "--resume", str(out)]) == 0
    whole = tmp_path / "whole.pt"
    assert nw.main([*CLI, "--out", str(whole)]) == 0
    _assert_same_weights(nw.load_checkpoint(out), nw.load_checkpoint(whole))


@pytest.mark.parametrize("extra, message", [
    (["--resume", "{missing}"], "argument --resume: no checkpoint at"),
    (["--resume", "{truncated}"], "argument --resume: .* truncated"),
    (["--batch-size", "2", "--accumulate", "3"], "argument --batch-size: .* at least 3"),
    (["--precision", "fp16"], "argument --precision: precision 'fp16' needs a CUDA"),
    (["--resume", "{other}", "--seed", "1"], "argument --resume: .*seed: saved 0, now 1"),
    (["--resume", "{other}", "--threads", "2"], "argument --resume: .*threads: saved 1, now 2"),
    (["--resume", "{other}", "--deterministic", "false"],
     "argument --resume: .*deterministic: saved True, now False"),
    (["--deterministic", "maybe"], "argument --deterministic: must be true or false"),
])
def test_cli_refuses_bad_resume_and_settings(tmp_path, capsys, stopped_checkpoint,
                                             extra, message):
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(stopped_checkpoint.read_bytes()[:1000])
    other = tmp_path / "other.pt"
    assert nw.main([*CLI, "--out", str(other), "--stop-after", "1"]) == nw.EXIT_STOPPED
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    names = {"missing": tmp_path / "missing.pt", "truncated": truncated, "other": other}
    extra = [e.format(**names) for e in extra]
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        with pytest.raises(SystemExit) as exit_info:
            nw.main([*CLI, "--out", str(tmp_path / "out.pt"), *extra])
    finally:  # --threads 2 and --deterministic false are set before the resume check
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic, warn_only=True)
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)
    # nothing was written: the damaged or other checkpoint is as it was
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
