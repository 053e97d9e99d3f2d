"""The explorers: a live widget and a static PNG of the default state in one output."""
from __future__ import annotations

import base64

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import transformer_lib as tl  # noqa: E402
from transformer_lib import widgets  # noqa: E402

PNG_MAGIC = b"\x89PNG"


def small_maps():
    tl.set_seed(0)
    model = tl.Transformer(12, 12, d_model=16, num_heads=2, num_encoder_layers=2,
                           num_decoder_layers=1, d_ff=32).eval()
    src = torch.tensor([[3, 4, 5], [6, 7, 0]])
    tgt = torch.tensor([[1, 8, 9, 10], [1, 11, 0, 0]])
    _, maps = model(src, tgt, return_attention=True)
    return maps, [["a", "b", "c"], ["d", "e"]], [["<bos>", "x", "y", "z"], ["<bos>", "w"]]


@pytest.mark.parametrize("make", [
    widgets.positional_explorer, widgets.softmax_explorer, widgets.mask_explorer,
    lambda: widgets.attention_explorer(*small_maps()),
], ids=["positional", "softmax", "masks", "attention"])
def test_explorer_bundle_has_widget_png_and_stable_text(make):
    explorer = make()
    bundle = explorer._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert base64.b64decode(bundle["image/png"]).startswith(PNG_MAGIC)
    assert bundle["text/plain"] == repr(make()), "the text form must be deterministic (nbval compares it)"
    assert "static figure" in bundle["text/plain"]
    plt.close("all")


def test_controls_change_the_figure():
    explorer = widgets.mask_explorer(src_len=2, tgt_len=3)
    before = explorer.static_figure().axes[1].images[0].get_array().copy()
    explorer.controls["tgt_len"].value = 6
    after = explorer.static_figure().axes[1].images[0].get_array()
    assert (before != after).any()
    plt.close("all")


def test_attention_explorer_crops_padding():
    maps, src_labels, tgt_labels = small_maps()
    explorer = widgets.attention_explorer(maps, src_labels, tgt_labels)
    explorer.controls["example"].value = 1  # the padded example: 2 target rows, 2 source columns
    image = explorer.static_figure().axes[0].images[0].get_array()
    assert image.shape == (2, 2)
    plt.close("all")


def test_attention_explorer_labels_rows_by_the_books_convention():
    # cross-attention rows: the token each position writes; decoder self-attention: the
    # tokens it reads, on both axes (chapter 8); the axes say which
    maps, src_labels, tgt_labels = small_maps()
    outputs = [["x", "y", "z", "<eos>"], ["w", "<eos>"]]
    explorer = widgets.attention_explorer(maps, src_labels, outputs, tgt_in_labels=tgt_labels)
    explorer.controls["kind"].value = "decoder"
    explorer.controls["layer"].value = 0
    ax = explorer.static_figure().axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == tgt_labels[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == tgt_labels[0]
    assert ax.get_ylabel() == "query (decoder input)"
    assert ax.get_title() == "decoder attention, layer 0, head 0"
    explorer.controls["kind"].value = "cross"
    ax = explorer.static_figure().axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == outputs[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == src_labels[0]
    assert ax.get_ylabel() == "writes (target token)"
    plt.close("all")


def test_attention_explorer_rejects_labels_for_the_wrong_batch():
    maps, src_labels, tgt_labels = small_maps()
    with pytest.raises(ValueError, match=r"src_labels must hold one list of tokens per example \(2\), got 1"):
        widgets.attention_explorer(maps, src_labels[:1], tgt_labels)


def _bar_heights(fig):
    """The heights of the 'scaled' bars of a softmax_explorer figure (the second bar series)."""
    ax = fig.axes[0]
    heights = torch.tensor([patch.get_height() for patch in ax.containers[1]])
    plt.close(fig)
    return heights


def test_softmax_explorer_keeps_its_data_when_d_k_moves():
    """One step of d_k adds one dimension to the same q and k; it must not draw new vectors."""
    explorer = widgets.softmax_explorer(d_k=64, length=10)
    before = _bar_heights(explorer.static_figure())
    explorer.controls["d_k"].value = 65
    after = _bar_heights(explorer.static_figure())
    assert before.argmax() == after.argmax()
    assert torch.corrcoef(torch.stack([before, after]))[0, 1] > 0.9
    explorer.controls["length"].value = 11  # one more key: the first ten keep their scores
    longer = _bar_heights(explorer.static_figure())
    ratio = longer[:10] / after
    assert torch.allclose(ratio, ratio[0].expand(10), rtol=1e-5), "softmax over 11 keys rescales the 10"


def test_softmax_explorer_refuses_settings_outside_its_sliders():
    with pytest.raises(ValueError, match="d_k"):
        widgets.softmax_explorer(d_k=1000)


def test_widget_view_for_ipywidgets_7_style_widgets():
    """ipywidgets 7 widgets have no _repr_mimebundle_; widget_view builds the same view."""

    class Widget7:
        model_id = "abc123"

    bundle = widgets.widget_view(Widget7())
    assert bundle[widgets.WIDGET_VIEW] == {"version_major": 2, "version_minor": 0, "model_id": "abc123"}


def test_attention_explorer_takes_a_dict_with_more_keys_but_not_fewer():
    # nw.attention_batch returns the maps together with "source", "target", ...
    maps, src_labels, tgt_labels = small_maps()
    batch = dict(maps, source=src_labels, target=tgt_labels, translation=["x", "y"])
    explorer = widgets.attention_explorer(batch, src_labels, tgt_labels)
    assert explorer.static_figure().axes[0].images[0].get_array().shape == (4, 3)
    without_cross = {k: v for k, v in maps.items() if k != "cross"}
    with pytest.raises(ValueError, match=r"maps must have the keys 'encoder', 'decoder' and "
                                         r"'cross', got \['decoder', 'encoder'\]"):
        widgets.attention_explorer(without_cross, src_labels, tgt_labels)
    plt.close("all")
