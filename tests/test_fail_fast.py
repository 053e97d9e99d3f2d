"""Fail fast, lose nothing: the capstone CLI refuses bad arguments before any work, and
``load_checkpoint`` / ``save_checkpoint`` say which file is wrong and how (issue 14)."""

from __future__ import annotations

import os
import pickle
import re

import pytest
import torch

from transformer_lib.data import Vocab
from transformer_lib.examples import (
    NumberTranslator,
    load_checkpoint,
    number_words,
    save_checkpoint,
)
from transformer_lib.translate import checkpoints

TINY = dict(
    d_model=8,
    num_heads=2,
    num_encoder_layers=1,
    num_decoder_layers=1,
    d_ff=16,
    dropout=0.0,
    max_len=16,
)


@pytest.fixture
def no_work(monkeypatch):
    """Make building data or training fail the test: the CLI must stop before both."""

    def forbidden(*args, **kwargs):
        raise AssertionError(
            "the CLI started working before it had checked its arguments"
        )

    monkeypatch.setattr(number_words, "NumberWordsData", forbidden)
    monkeypatch.setattr(number_words, "train_number_words", forbidden)


def _run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        number_words.main(argv)
    return exit_info.value.code, capsys.readouterr().err


BAD_ARGUMENTS = [
    (["--steps", "0"], r"argument --steps: must be >= 1, got 0"),
    (["--steps", "-5"], r"argument --steps: must be >= 1, got -5"),
    (["--steps", "ten"], r"argument --steps: must be an int, got 'ten'"),
    (["--minutes", "0"], r"argument --minutes: must be a finite number > 0, got 0"),
    (["--minutes", "nan"], r"argument --minutes: must be a finite number > 0, got nan"),
    (["--train-size", "0"], r"argument --train-size: must be >= 1, got 0"),
    (["--test-size", "0"], r"argument --test-size: must be >= 1, got 0"),
    (
        ["--test-size", "900000"],
        r"argument --test-size: cannot hold out 900000 numbers",
    ),
    (["--batch-size", "0"], r"argument --batch-size: must be >= 1, got 0"),
    (["--warmup", "0"], r"argument --warmup: must be >= 1, got 0"),
    (
        ["--lr-factor", "-1"],
        r"argument --lr-factor: must be a finite number > 0, got -1",
    ),
    (["--beam", "0"], r"argument --beam: must be >= 1, got 0"),
    (["--threads", "0"], r"argument --threads: must be >= 1, got 0"),
    (["--seed", "-1"], r"argument --seed: must be >= 0, got -1"),
    (
        ["--device", "gpu0"],
        r"argument --device: expected a device such as cpu or cuda, got 'gpu0'",
    ),
]


@pytest.mark.parametrize(
    "argv, message", BAD_ARGUMENTS, ids=[" ".join(a) for a, _ in BAD_ARGUMENTS]
)
def test_cli_refuses_bad_arguments_before_any_work(
    argv, message, no_work, capsys, tmp_path
):
    code, err = _run_cli(argv + ["--out", str(tmp_path / "m.pt")], capsys)
    assert code == 2
    assert re.search(message, err), err


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cli_refuses_cuda_without_cuda(no_work, capsys, tmp_path):
    code, err = _run_cli(["--device", "cuda", "--out", str(tmp_path / "m.pt")], capsys)
    assert (
        code == 2
        and "argument --device: cuda was asked for, but CUDA is not available" in err
    )


def test_cli_refuses_a_folder_as_out(no_work, capsys, tmp_path):
    code, err = _run_cli(["--out", str(tmp_path)], capsys)
    assert code == 2 and f"argument --out: '{tmp_path}' is a folder" in err


def test_cli_refuses_a_missing_folder(no_work, capsys, tmp_path):
    out = tmp_path / "no" / "such" / "folder" / "m.pt"
    code, err = _run_cli(["--out", str(out)], capsys)
    assert code == 2 and "does not exist; create it first" in err
    assert not (tmp_path / "no").exists()


def test_cli_refuses_a_file_as_folder(no_work, capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    code, err = _run_cli(["--out", str(tmp_path / "file" / "m.pt")], capsys)
    assert code == 2 and "is not a folder" in err


def test_cli_refuses_an_unwritable_folder(no_work, capsys, tmp_path, monkeypatch):
    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() != 0:  # a real read-only folder (root may write anywhere)
        folder.chmod(0o555)
    else:  # as root, make the probe fail the way a read-only folder would

        def denied(*args, **kwargs):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(checkpoints.tempfile, "mkstemp", denied)
    try:
        code, err = _run_cli(["--out", str(folder / "m.pt")], capsys)
    finally:
        folder.chmod(0o755)
    assert code == 2 and f"argument --out: cannot write to the folder '{folder}'" in err
    assert os.listdir(folder) == []


def test_check_output_path_leaves_nothing_behind(tmp_path):
    number_words.check_output_path(str(tmp_path / "m.pt"))
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------


@pytest.fixture
def tiny_model():
    torch.manual_seed(0)
    return NumberTranslator(
        Vocab(["one", "two", "-"]), Vocab(["eins", "zwei"]), "de", **TINY
    )


def _assert_clear(error, path, *phrases):
    message = str(error)
    assert str(path) in message, message
    for phrase in phrases:
        assert phrase in message, message
    assert "weights_only" not in message  # never the unsafe advice, nor a chained one
    assert error.__cause__ is None
    assert error.__context__ is None or error.__suppress_context__


def test_round_trip_still_works(tiny_model, tmp_path):
    path = save_checkpoint(tiny_model, tmp_path / "m.pt", {"score": 0.5})
    loaded = load_checkpoint(path)
    assert loaded.config == tiny_model.config and loaded.metrics == {"score": 0.5}


def test_load_missing_file(tmp_path):
    path = tmp_path / "missing.pt"
    with pytest.raises(FileNotFoundError) as caught:
        load_checkpoint(path)
    _assert_clear(caught.value, path, "does not exist")


def test_load_folder(tmp_path):
    with pytest.raises(ValueError) as caught:
        load_checkpoint(tmp_path)
    _assert_clear(caught.value, tmp_path, "is a folder")


def test_load_empty_file(tmp_path):
    path = tmp_path / "empty.pt"
    path.write_bytes(b"")
    with pytest.raises(ValueError) as caught:
        load_checkpoint(path)
    _assert_clear(caught.value, path, "is empty (0 bytes)")


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.99])
def test_load_truncated_file(tiny_model, tmp_path, keep):
    path = tmp_path / "m.pt"
    save_checkpoint(tiny_model, path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ValueError) as caught:
        load_checkpoint(path)
    _assert_clear(caught.value, path, "is not a readable checkpoint")


@pytest.mark.parametrize(
    "content", [b"not a checkpoint at all\n" * 20, bytes(range(256)) * 4]
)
def test_load_garbage(tmp_path, content):
    path = tmp_path / "garbage.pt"
    path.write_bytes(content)
    with pytest.raises(ValueError) as caught:
        load_checkpoint(path)
    _assert_clear(caught.value, path, "is not a readable checkpoint")


class _Anything:
    """An arbitrary Python object: weights_only loading refuses to rebuild it."""


def test_load_pickle_with_objects_is_refused_without_unsafe_advice(tmp_path):
    path = tmp_path / "objects.pt"
    torch.save({"format": number_words.CHECKPOINT_FORMAT, "x": _Anything()}, path)
    with pytest.raises(ValueError) as caught:
        load_checkpoint(path)
    _assert_clear(
        caught.value, path, "holds Python objects other than tensors", "refused"
    )


def test_load_plain_pickle(tmp_path):
    path = tmp_path / "plain.pkl"
    with open(path, "wb") as f:
        pickle.dump({"format": number_words.CHECKPOINT_FORMAT}, f, protocol=4)
    with pytest.raises(ValueError) as caught:
        load_checkpoint(path)
    _assert_clear(caught.value, path, "is not a readable checkpoint")


@pytest.mark.parametrize(
    "state, phrase",
    [
        ([1, 2, 3], "expected format 'transformer_lib.number_words/1', got 'list'"),
        (
            {"state_dict": {}},
            "expected format 'transformer_lib.number_words/1', got None",
        ),
        (
            {"format": "transformer_lib.number_words/0"},
            "got 'transformer_lib.number_words/0'",
        ),
        (
            {"format": number_words.CHECKPOINT_FORMAT, "config": {}},
            "it lacks ['state_dict'",
        ),
    ],
)
def test_load_other_formats(tmp_path, state, phrase):
    path = tmp_path / "other.pt"
    torch.save(state, path)
    with pytest.raises(ValueError) as caught:
        load_checkpoint(path)
    _assert_clear(caught.value, path, "is not a number-words checkpoint", phrase)


def _edited_checkpoint(model, path, edit):
    save_checkpoint(model, path)
    state = torch.load(path, weights_only=True)
    edit(state)
    torch.save(state, path)


@pytest.mark.parametrize(
    "edit, phrase",
    [
        (lambda s: s["config"].update(d_ff=32), "size mismatch"),
        (
            lambda s: s["config"].update(layers=3),
            "unexpected keyword argument 'layers'",
        ),
        (
            lambda s: s["config"].update(tgt_vocab_size=99),
            "tgt_vocab_size differs from its vocabulary",
        ),
        (lambda s: s["state_dict"].pop("generator.weight"), "Missing key(s)"),
        (
            lambda s: s.update(src_vocab=["a", "b"]),
            "a saved vocabulary must start with",
        ),
        (
            lambda s: s["config"].update(num_heads=3),
            "d_model=8 is not divisible by num_heads=3",
        ),
    ],
)
def test_load_other_configs(tiny_model, tmp_path, edit, phrase):
    path = tmp_path / "m.pt"
    _edited_checkpoint(tiny_model, path, edit)
    with pytest.raises(ValueError) as caught:
        load_checkpoint(path)
    _assert_clear(caught.value, path, "is not a number-words checkpoint", phrase)


def test_save_refuses_a_folder(tiny_model, tmp_path):
    with pytest.raises(
        IsADirectoryError, match="it is a folder; give a file name such as"
    ):
        save_checkpoint(tiny_model, tmp_path)
    assert os.listdir(tmp_path) == []


def test_save_refuses_bad_metrics_and_models(tiny_model, tmp_path):
    with pytest.raises(
        TypeError, match=r"metrics\['score'\] must be a number, got str"
    ):
        save_checkpoint(tiny_model, tmp_path / "m.pt", {"score": "high"})
    with pytest.raises(TypeError, match="model must be a NumberTranslator, got Linear"):
        save_checkpoint(torch.nn.Linear(2, 2), tmp_path / "m.pt")
    assert os.listdir(tmp_path) == []
