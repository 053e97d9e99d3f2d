"""The explorers on ipywidgets 7.7.1, the version Colab's runtime pinned for years.

ipywidgets 7 widgets have no ``_repr_mimebundle_`` (they display through ``_ipython_display_``), so
an explorer built only for ipywidgets 8 fails there. This test installs ipywidgets 7.7.1 into a
private folder (``pip install --target``, no other package changes), puts it first on the kernel's
path, and runs every explorer in a real Jupyter kernel: it must display a widget view and its PNG,
and moving a slider must redraw the figure.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import need

PACKAGES = ["ipywidgets==7.7.1", "widgetsnbextension~=3.6.0", "jupyterlab_widgets~=1.0",
            "ipython_genutils==0.2.0"]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

CODE = """
import ipywidgets, torch
import transformer_lib as tl
from transformer_lib import widgets
assert ipywidgets.__version__ == "7.7.1", ipywidgets.__version__
tl.set_seed(0)
model = tl.Transformer(12, 12, d_model=16, num_heads=2, num_encoder_layers=1,
                       num_decoder_layers=1, d_ff=32).eval()
_, maps = model(torch.tensor([[3, 4, 5]]), torch.tensor([[1, 8]]), return_attention=True)
explorers = {
    "positional": (widgets.positional_explorer(), "d_model", 128),
    "softmax": (widgets.softmax_explorer(), "d_k", 8),
    "masks": (widgets.mask_explorer(), "tgt_len", 2),
    "attention": (widgets.attention_explorer(maps, [["a", "b", "c"]], [["x", "y"]]), "kind",
                  "encoder"),
}
"""


@pytest.fixture(scope="module")
def ipywidgets7(tmp_path_factory):
    target = tmp_path_factory.mktemp("ipywidgets7")
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                              str(target), *PACKAGES], capture_output=True, text=True, timeout=600)
    need(install.returncode == 0, "cannot install ipywidgets 7.7.1 (no package registry?): "
         + install.stderr[-500:])
    return target


def test_explorers_display_and_redraw_on_ipywidgets_7(ipywidgets7, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ipywidgets7),
                                                                   os.environ.get("PYTHONPATH")])))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(CODE)]
    for name in ("positional", "softmax", "masks", "attention"):
        nb.cells.append(nbformat.v4.new_code_cell(f"explorers[{name!r}][0]"))
        nb.cells.append(nbformat.v4.new_code_cell(
            f"explorer, control, value = explorers[{name!r}]\n"
            "before = explorer._image.value\n"
            "explorer.controls[control].value = value\n"
            "print(before != explorer._image.value)"))
    NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    for display, redraw in zip(nb.cells[1::2], nb.cells[2::2]):
        (output,) = display.outputs
        assert output.output_type == "execute_result", json.dumps(output)[:500]
        assert output.data[WIDGET_VIEW]["model_id"], "no live widget view"
        assert output.data["image/png"], "no static PNG beside the widget"
        assert redraw.outputs[0]["text"] == "True\n", f"{display.source}: slider did not redraw"
