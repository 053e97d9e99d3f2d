"""Utilities: seeding, device choice, showing library source."""
from __future__ import annotations

import inspect
import random

import numpy as np
import pytest
import torch

import transformer_lib as tl

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def restore_determinism():
    """set_seed switches on deterministic algorithms globally; put the old setting back."""
    before = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.use_deterministic_algorithms(before, warn_only=warn_only)


def test_set_seed_makes_random_numbers_repeatable(restore_determinism):
    tl.set_seed(123)
    first = (torch.rand(5), np.random.rand(3), random.random())
    tl.set_seed(123)
    second = (torch.rand(5), np.random.rand(3), random.random())
    assert torch.equal(first[0], second[0])
    assert np.array_equal(first[1], second[1])
    assert first[2] == second[2]
    tl.set_seed(124)
    assert not torch.equal(torch.rand(5), first[0])  # a different seed gives different numbers


def test_set_seed_makes_model_initialisation_repeatable(restore_determinism):
    tl.set_seed(7)
    a = tl.MultiHeadAttention(8, 2).q_proj.weight
    tl.set_seed(7)
    b = tl.MultiHeadAttention(8, 2).q_proj.weight
    assert torch.equal(a, b)


def test_set_seed_is_deterministic_by_default_only_where_it_is_free(restore_determinism):
    # None (the default): deterministic on a CPU-only machine, PyTorch's fast kernels with CUDA
    torch.use_deterministic_algorithms(False)
    tl.set_seed(0)
    assert torch.are_deterministic_algorithms_enabled() == (not torch.cuda.is_available())
    torch.use_deterministic_algorithms(False)
    tl.set_seed(0, deterministic=True)
    assert torch.are_deterministic_algorithms_enabled()
    tl.set_seed(0, deterministic=False)
    assert not torch.are_deterministic_algorithms_enabled()


def test_set_seed_rejects_a_non_bool_deterministic():
    with pytest.raises(TypeError, match="deterministic"):
        tl.set_seed(0, deterministic="yes")


def test_get_device_returns_a_usable_device():
    device = tl.get_device()
    assert isinstance(device, torch.device)
    assert device.type in {"cuda", "mps", "cpu"}
    if torch.cuda.is_available():
        assert device.type == "cuda"
    assert torch.ones(2, device=device).sum().item() == 2.0


def test_show_source_prints_outside_ipython(capsys):
    tl.show_source(tl.LayerNorm)
    out = capsys.readouterr().out
    assert "class LayerNorm(nn.Module):" in out
    assert "def forward(self, x" in out


def test_show_source_of_a_function(capsys):
    tl.show_source(tl.noam_lr)
    out = capsys.readouterr().out
    assert out.lstrip().startswith("def noam_lr(")
    assert "warmup" in out


def test_count_parameters_counts_shared_tensors_once_and_skips_frozen_ones():
    layer = torch.nn.Linear(4, 3)  # 4*3 + 3
    assert tl.count_parameters(layer) == 15
    pair = torch.nn.Sequential(layer, layer)  # the same module twice: one set of tensors
    assert tl.count_parameters(pair) == 15
    layer.bias.requires_grad_(False)
    assert tl.count_parameters(layer) == 12


def test_source_code_is_stored_as_text_that_the_front_end_highlights():
    from IPython.core.formatters import DisplayFormatter

    shown = tl.utils.SourceCode(inspect.getsource(tl.noam_lr))
    data, _ = DisplayFormatter().format(shown)
    assert set(data) == {"text/markdown", "text/plain"}  # no pre-rendered HTML or LaTeX
    assert data["text/markdown"].startswith("```python\ndef noam_lr(")
    assert data["text/markdown"].endswith("\n```")
    assert data["text/plain"].startswith("def noam_lr(")


def test_source_code_fence_outlasts_backticks_in_the_source():
    source = 'def f():\n    """Example:\n\n    ```python\n    f()\n    ```\n    """\n'
    markdown = tl.utils.SourceCode(source)._repr_markdown_()
    assert markdown.startswith("````python\n") and markdown.endswith("\n````")
