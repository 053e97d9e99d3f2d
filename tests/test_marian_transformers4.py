"""tests/test_marian.py on the transformers Google Colab ships (4.57.1), not ours (5).

transformers 4 and 5 build different models from the same ``MarianConfig`` (which
embeddings are tied, how many rows the decoder embedding has: see
``transformer_lib.marian``), and readers run the book on Colab. This module installs
Colab's version, with its dependencies, into a private folder (``pip install --target``;
the numpy and torch it may bring are removed, so the virtualenv's own are used), puts
that folder first on ``PYTHONPATH`` and runs the whole Marian test module there. It
also saves ``to_marian`` directories with one version and loads them with the other.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import need

ROOT = Path(__file__).resolve().parents[1]
# The version Colab pins, read where the Colab check reads it.
PIN = next(line.strip() for line in (ROOT / "scripts" / "colab_pins.txt").open()
           if line.startswith("transformers=="))
VERSION = PIN.split("==")[1]
KEEP_OURS = ("numpy", "torch")  # never shadow the virtualenv's own builds


@pytest.fixture(scope="module")
def transformers4(tmp_path_factory):
    target = tmp_path_factory.mktemp("transformers4")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-cache-dir",
         "--disable-pip-version-check", "--target", str(target), PIN],
        capture_output=True, text=True, timeout=600)
    need(install.returncode == 0, f"cannot install {PIN} (no package registry?): "
         + install.stderr[-500:])
    for path in target.iterdir():
        if path.name.lower().startswith(KEEP_OURS):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join(
        filter(None, [str(target), os.environ.get("PYTHONPATH")])))
    return target, env


def test_the_pinned_version_is_a_transformers_4():
    assert VERSION.startswith("4."), f"{PIN}: this module is for transformers 4"


def test_marian_tests_pass_on_transformers_4(transformers4):
    target, env = transformers4
    code = ("import numpy, torch, transformers; "
            "print(transformers.__version__, transformers.__file__, numpy.__file__, "
            "torch.__file__, sep='\\n')")
    found = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    assert found[0] == VERSION
    assert Path(found[1]).is_relative_to(target)
    assert not any(Path(p).is_relative_to(target) for p in found[2:4]), found
    # TT_REQUIRE_ALL=1: a test that would skip for want of transformers fails instead
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_marian.py", "-q",
         "-p", "no:cacheprovider"], cwd=ROOT, env=dict(env, TT_REQUIRE_ALL="1"),
        capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-1000:]
    assert " passed" in run.stdout.splitlines()[-1], run.stdout[-500:]


# Save to_marian directories (action "save") or load them and print their largest logit
# difference from the same tl.Transformer, or the error (action "load").
EXCHANGE = """
import json, sys, torch, transformers, transformer_lib as tl
from transformer_lib.interop import to_marian
transformers.logging.set_verbosity_error()
action, cases = sys.argv[1], json.loads(sys.argv[2])
results = {}
for directory, (src_vocab, tgt_vocab) in cases.items():
    torch.manual_seed(0)
    ours = tl.Transformer(src_vocab, tgt_vocab, d_model=16, num_heads=2, max_len=20,
                          num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
                          output_bias=True).eval()
    with torch.no_grad():
        ours.generator.bias.normal_()
    if action == "save":
        to_marian(ours, bos_id=1, eos_id=2).save_pretrained(directory)
        continue
    try:
        loaded = transformers.MarianMTModel.from_pretrained(directory)
    except Exception as error:
        results[directory] = str(error)[-300:]
        continue
    src = torch.randint(1, src_vocab, (3, 6))
    tgt_in = torch.randint(1, tgt_vocab, (3, 5))
    with torch.no_grad():
        logits = loaded(input_ids=src, decoder_input_ids=tgt_in).logits
        results[directory] = (logits - ours(src, tgt_in)).abs().max().item()
print(json.dumps(results))
"""


@pytest.mark.parametrize("writer", ["4", "5"])
def test_to_marian_directories_cross_major_versions(transformers4, tmp_path, writer):
    """A larger (or equal) target vocabulary: the directory loads into the other major
    version with equal logits. A smaller one: that version refuses it, loudly."""
    need(importlib.util.find_spec("transformers") is not None,
         "transformers is not installed (pip install 'transformer_lib[hf]')")
    _, env4 = transformers4
    env5 = dict(os.environ, HF_HUB_OFFLINE="1")
    save_env, load_env = (env4, env5) if writer == "4" else (env5, env4)
    cases = {str(tmp_path / "larger-target"): (17, 31),
             str(tmp_path / "smaller-target"): (31, 23)}

    def run(action, env):
        command = [sys.executable, "-c", EXCHANGE, action, json.dumps(cases)]
        done = subprocess.run(command, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    run("save", save_env)
    results = json.loads(run("load", load_env).splitlines()[-1])
    assert results[str(tmp_path / "larger-target")] <= 2e-4
    # 4: "size mismatch for weight", 5: "You set `ignore_mismatched_sizes` to `False`"
    assert "mismatch" in results[str(tmp_path / "smaller-target")]
