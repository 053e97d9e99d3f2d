"""Chapters give their stored outputs in the environments readers and CI runners have.

- **Another device.** A chapter that puts its model on ``tl.get_device()`` (a GPU in
  Colab) must build every tensor for that model on the model's device, and print only
  CPU tensors. Here the CPU plays a second device (``other_device.py``) in the kernel
  that nbval starts, so a tensor built on the wrong side stops the chapter as a GPU would.
- **A headless Matplotlib backend.** CI runners and GPU servers often set
  ``MPLBACKEND=Agg``; then Jupyter's inline backend is not chosen for the kernel and no
  figure is displayed, unless the chapter asks for it (``%matplotlib inline``).

Each runs nbval in strict mode in a child process, as the README's test command does.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

import transformer_lib as tl
from other_device import DEVICE, DeviceMismatch, OtherDevice, on_device

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))


def code_of(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "\n".join(cell.source for cell in nb.cells if cell.cell_type == "code")


# The chapters whose models go to a device (the others build everything on the CPU).
# Chapter 14 trains for minutes, and the second device's Python hook on every operation
# would make that an hour; all its model code is the library's corpus trainer and
# search, which test_the_corpus_trainer_keeps_to_the_models_device runs on the device.
TOO_SLOW = {"14_real_sentences.ipynb"}
ON_A_DEVICE = [path for path in CHAPTERS
               if "tl.get_device()" in code_of(path) and path.name not in TOO_SLOW]
# Figure-heavy chapters that run in seconds.
FIGURES = [ROOT / "book" / name for name in ("02_positional_encoding.ipynb",
                                             "03_masks.ipynb", "04_attention.ipynb")]


def run_nbval(paths, env: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pytest", "--nbval", "-q", "-p", "no:cacheprovider",
               "-o", "addopts=", *map(str, paths)]
    return subprocess.run(command, cwd=ROOT, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=900)


def other_device_env(tmp_path: Path) -> tuple[dict, Path]:
    """An IPython profile whose startup file installs the second device in the kernel;
    the kernel writes how many tensors it made there to the returned report file."""
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    report = tmp_path / "device_tensors.txt"
    (startup / "00-other-device.py").write_text(
        f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"
        f"import other_device\nother_device.install(report={str(report)!r})\n")
    return {"IPYTHONDIR": str(tmp_path / "ipython")}, report


def model_on(device):
    return tl.Transformer(11, 11, d_model=16, num_heads=2, num_encoder_layers=1,
                          num_decoder_layers=1, d_ff=32).to(device).eval()


def test_the_second_device_refuses_what_a_gpu_refuses():
    with OtherDevice() as mode:
        model = model_on(DEVICE)
        src = torch.tensor([[3, 4, 5]], device=DEVICE)
        memory = model.encode(src)
        assert memory.device == DEVICE and on_device(memory)
        # chapter 10's old beam_by_hand: the decoder input built on the CPU
        with pytest.raises(ValueError, match="tgt_in is on cpu, but the module's weights"):
            model.decode(torch.tensor([[1, 2]]), memory, src)
        logits = model.decode(torch.tensor([[1, 2]], device=src.device), memory, src)
        with pytest.raises(DeviceMismatch, match="call .cpu"):
            print(logits)
        with pytest.raises(DeviceMismatch, match="model's device"):
            logits + torch.ones(11)  # a CPU tensor with more than one element
        assert not on_device(logits.cpu()) and on_device(logits)  # .cpu() copies
        print(logits[0, 0].cpu(), f"{logits.sum():.2f}", logits.argmax().item())
        assert tl.greedy_decode(model, src, 4, 1, 2).device == DEVICE
        assert mode.results > 0


def test_values_are_the_cpus_own():
    torch.manual_seed(0)
    model = model_on("cpu")
    src = torch.tensor([[3, 4, 5]])
    expected = tl.beam_search(model, src, 3, 5, 1, 2)
    with OtherDevice():
        model.to(DEVICE)
        found = tl.beam_search(model, src.to(DEVICE), 3, 5, 1, 2)
        assert on_device(found)
        assert torch.equal(found.cpu(), expected)


@pytest.mark.parametrize("path", ON_A_DEVICE, ids=lambda p: p.name)
def test_chapter_passes_with_its_model_on_another_device(path, tmp_path):
    env, report = other_device_env(tmp_path)
    result = run_nbval([path], env, tmp_path)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert report.is_file() and int(report.read_text()) > 0, "the second device was not used"


def test_the_device_check_catches_a_tensor_built_on_the_cpu(tmp_path):
    cells = ["import torch\nimport transformer_lib as tl\n"
             "model = tl.Transformer(11, 11, d_model=16, num_heads=2, num_encoder_layers=1,"
             " num_decoder_layers=1, d_ff=32).to(tl.get_device())",
             "memory = model.encode(torch.tensor([[3, 4, 5]]))"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    path = tmp_path / "bug.ipynb"
    nbformat.write(nb, path)
    assert run_nbval([path], {}, tmp_path).returncode == 0  # on the CPU alone: fine
    env, _ = other_device_env(tmp_path)
    result = run_nbval([path], env, tmp_path)
    assert result.returncode != 0 and "is on cpu, but the module's weights" in result.stdout


def test_chapters_show_figures_with_a_headless_backend(tmp_path):
    result = run_nbval(FIGURES, {"MPLBACKEND": "Agg"}, tmp_path)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_chooses_the_inline_backend(path):
    """Every chapter with a figure asks for the inline backend in its import cell (the
    first code cell after the Colab setup), with a comment saying why."""
    nb = nbformat.read(path, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    has_figure = any("image/png" in output.get("data", {})
                     for cell in code for output in cell.outputs)
    if not has_figure:
        pytest.skip("no figure")
    lines = code[1].source.splitlines()
    assert "%matplotlib inline" in lines, f"{path.name}: cell {nb.cells.index(code[1])}"
    where = lines.index("%matplotlib inline")
    assert where > 0 and lines[where - 1].startswith("#") and "MPLBACKEND" in lines[where - 1]


def test_the_corpus_trainer_keeps_to_the_models_device():
    """What chapter 14 runs, on the second device: the corpus trainer, greedy and beam
    translation and the sacreBLEU evaluation build every tensor on the model's device."""
    from transformer_lib.data import Corpus
    from transformer_lib.translate.evaluate import evaluate
    from transformer_lib.translate.pipeline import train_corpus
    from transformer_lib.translate.search import translate_texts

    words = ["eins", "zwei", "drei", "vier", "Haus", "Katze", "Hund", "rot"]
    english = ["one", "two", "three", "four", "house", "cat", "dog", "red"]
    pairs = [(f"{a} {b} .", f"{c} {d} .") for a, c in zip(words, english)
             for b, d in zip(words[::-1], english[::-1])]
    corpus = Corpus("toy", "de", "en", pairs[:40], pairs[40:50], pairs[50:60])
    with OtherDevice() as mode:
        run = train_corpus(corpus, steps=3, preset="tiny", vocab_size=60, batch_size=8,
                           device=DEVICE, progress=False, valid_every=2, valid_size=4)
        assert on_device(next(run.model.parameters()))
        assert len(translate_texts(run.model, ["eins Haus ."], beam_size=2)) == 1
        result = evaluate(run.model, corpus.test[:4])
        assert "bleu" in result and mode.results > 0
