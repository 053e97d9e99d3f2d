"""Interactive explorers (ipywidgets) for the book, each with a static fallback.

In a live kernel (Jupyter, Colab) an explorer is a set of controls above a figure that redraws as
you move them. A static page cannot run widget callbacks, so every explorer's output also carries a
PNG of its default state; the HTML book is configured to show that picture instead of an empty
widget box (``nb_mime_priority_overrides`` in ``_config.yml``). Its plain-text form is a short,
deterministic description, so stored outputs pass nbval.

    from transformer_lib import widgets
    widgets.positional_explorer()
"""
from __future__ import annotations

import base64
import io
from collections.abc import Callable

import matplotlib.pyplot as plt
import numpy as np
import torch

from . import viz
from ._checks import check_instance, check_int
from .masks import cross_mask, decoder_self_mask, padding_mask
from .positional import sinusoidal_table


class Explorer:
    """Controls plus a figure drawn by ``draw(**values)``; see the module docstring.

    ``controls`` maps each keyword of ``draw`` to an ipywidgets control. ``static_figure()`` draws
    the current state without any widget machinery (used for the fallback and in tests).
    """

    def __init__(self, title: str, controls: dict, draw: Callable[..., plt.Figure]):
        self.title = title
        self.controls = controls
        self.draw = draw
        self._widget = None
        self._image = None

    def values(self) -> dict:
        return {name: control.value for name, control in self.controls.items()}

    def static_figure(self) -> plt.Figure:
        return self.draw(**self.values())

    def png(self) -> bytes:
        """The current state's figure as PNG bytes."""
        fig = self.static_figure()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=80, bbox_inches="tight", metadata={"Software": None})
        plt.close(fig)
        return buffer.getvalue()

    def widget(self):
        """The live ipywidgets box (built on first use): controls above an image of the figure.

        The figure is shown as an ``ipywidgets.Image`` whose bytes are replaced when a control
        moves, rather than through an Output widget, so nothing is printed into the cell's outputs.
        """
        if self._widget is None:
            import ipywidgets

            self._image = ipywidgets.Image(value=self.png(), format="png")
            for control in self.controls.values():
                control.observe(self._redraw, names="value")
            self._widget = ipywidgets.VBox(
                [ipywidgets.HTML(f"<b>{self.title}</b>"),
                 ipywidgets.HBox(list(self.controls.values())), self._image])
        return self._widget

    def _redraw(self, change=None):
        self._image.value = self.png()

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v!r}" for k, v in self.values().items())
        return f"{self.title} ({settings}): interactive in Jupyter, a static figure in the HTML book"

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = widget_view(self.widget())
        bundle["image/png"] = base64.b64encode(self._image.value).decode("ascii")
        bundle["text/plain"] = repr(self)
        return bundle


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def widget_view(widget) -> dict:
    """The MIME bundle that shows a live ipywidgets widget, on ipywidgets 7 and 8 alike.

    ipywidgets 8 widgets have ``_repr_mimebundle_``. ipywidgets 7 (Colab's version for years) display
    through ``_ipython_display_`` instead, which publishes this same view by itself; we build the
    view here so that one bundle can carry the widget and the static PNG together.
    """
    if hasattr(widget, "_repr_mimebundle_"):  # ipywidgets >= 8
        return dict(widget._repr_mimebundle_())
    return {WIDGET_VIEW: {"version_major": 2, "version_minor": 0,  # ipywidgets 7
                          "model_id": widget.model_id},
            "text/plain": repr(widget)}


def _int_slider(description, value, low, high, step=1):
    import ipywidgets

    return ipywidgets.IntSlider(value=value, min=low, max=high, step=step, description=description,
                                continuous_update=False, style={"description_width": "initial"})


def positional_explorer(d_model: int = 64, max_position: int = 64) -> Explorer:
    """The sinusoidal table for a chosen width and range of positions, with a few of its curves."""
    check_int("d_model", d_model, 8, 256)  # the sliders' ranges
    check_int("max_position", max_position, 8, 512)

    def draw(d_model, max_position):
        table = sinusoidal_table(max_position, d_model)
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6), layout="constrained")
        viz.plot_positional_table(table, title=f"PE table, d_model={d_model}", ax=left)
        dims = [d for d in (0, 1, d_model // 4, d_model // 2) if d < d_model]
        viz.plot_positional_curves(table, dims=sorted(set(dims)), ax=right,
                                   title="PE[pos, j] for a few columns j")
        return fig

    controls = {"d_model": _int_slider("d_model", d_model, 8, 256, 8),
                "max_position": _int_slider("positions", max_position, 8, 512, 8)}
    return Explorer("Positional encoding explorer", controls, draw)


def softmax_explorer(d_k: int = 64, length: int = 10, seed: int = 0) -> Explorer:
    """Softmax of random dot products q.k for a chosen d_k, with and without the 1/sqrt(d_k) scale.

    Unscaled scores have variance d_k, so the softmax saturates (one weight near 1) as d_k grows.
    """

    # Draw the data once, for the largest d_k and number of keys the sliders allow, and slice it:
    # moving one slider then changes only that setting, never the random vectors themselves.
    max_d_k, max_length = 512, 30
    check_int("d_k", d_k, 1, max_d_k)
    check_int("length", length, 2, max_length)
    check_int("seed", seed, minimum=0)
    generator = torch.Generator().manual_seed(seed)
    q_all = torch.randn(1, max_d_k, generator=generator)  # (1, max_d_k)
    k_all = torch.randn(max_length, max_d_k, generator=generator)  # (max_length, max_d_k)

    def draw(d_k, length, temperature):
        q, k = q_all[:, :d_k], k_all[:length, :d_k]  # (1, d_k), (length, d_k)
        scores = (q @ k.T)[0]  # (length,)
        series = {"unscaled: softmax(q.k)": torch.softmax(scores / temperature, -1),
                  "scaled: softmax(q.k / sqrt(d_k))": torch.softmax(scores / (temperature * d_k**0.5), -1)}
        fig, ax = plt.subplots(figsize=(8, 3.4), layout="constrained")
        width = 0.4
        for offset, (label, weights) in zip((-width / 2, width / 2), series.items()):
            ax.bar(np.arange(length) + offset, weights.numpy(), width=width, label=label)
        ax.set_xlabel("key")
        ax.set_ylabel("attention weight")
        ax.set_ylim(0, 1)
        ax.set_title(f"One query over {length} keys, d_k={d_k}, temperature {temperature}")
        ax.legend(frameon=False)
        return fig

    import ipywidgets

    controls = {"d_k": _int_slider("d_k", d_k, 1, max_d_k),
                "length": _int_slider("keys", length, 2, max_length),
                "temperature": ipywidgets.FloatLogSlider(
                    value=1.0, base=10, min=-1, max=1, step=0.1, description="temperature",
                    continuous_update=False, style={"description_width": "initial"})}
    return Explorer("Softmax scaling explorer", controls, draw)


def mask_explorer(src_len: int = 4, tgt_len: int = 5, max_len: int = 8) -> Explorer:
    """The three masks of one example: source padding, decoder self-attention, cross-attention.

    The example's real lengths are chosen with sliders; the batch is padded to ``max_len``.
    """
    check_int("max_len", max_len, minimum=1)
    check_int("src_len", src_len, 1, max_len)
    check_int("tgt_len", tgt_len, 1, max_len)

    def draw(src_len, tgt_len):
        src = torch.zeros(1, max_len, dtype=torch.long)
        tgt = torch.zeros(1, max_len, dtype=torch.long)
        src[0, :src_len] = torch.arange(3, 3 + src_len)
        tgt[0, :tgt_len] = torch.arange(3, 3 + tgt_len)
        src_labels = [f"s{i}" if i < src_len else "<pad>" for i in range(max_len)]
        tgt_labels = [f"t{i}" if i < tgt_len else "<pad>" for i in range(max_len)]
        return viz.show_masks(
            [padding_mask(src).expand(1, 1, max_len, max_len), decoder_self_mask(tgt), cross_mask(src, max_len)],
            titles=["encoder self-attention", "decoder self-attention", "cross-attention"],
            row_labels=[src_labels, tgt_labels, tgt_labels], col_labels=[src_labels, tgt_labels, src_labels],
            panel_size=(3.8, 3.4))

    controls = {"src_len": _int_slider("source length", src_len, 1, max_len),
                "tgt_len": _int_slider("target length", tgt_len, 1, max_len)}
    return Explorer("Mask builder", controls, draw)


def attention_explorer(maps: dict, src_labels: list, tgt_labels: list,
                       tgt_in_labels: list | None = None) -> Explorer:
    """Browse a trained model's attention: which map (encoder / decoder / cross), layer, head, example.

    ``maps`` is the dict returned by ``Transformer(src, tgt_in, return_attention=True)``: for each
    kind a list, one per layer, of (B, H, Lq, Lk) tensors. ``src_labels[b]`` and ``tgt_labels[b]``
    are the token strings of example b; their lengths crop away the padding. The book's
    convention (chapter 8), named on the axes: the rows of a cross-attention map are labelled
    with ``tgt_labels``, the token each decoder position writes; decoder self-attention keeps
    the tokens the decoder reads, ``tgt_in_labels`` (default: ``tgt_labels``), on both axes.
    With teacher forcing these differ: the row that writes token i reads <bos> or token i - 1.
    Layers and heads are numbered from 0, as the tensors index them.
    """
    import ipywidgets

    check_instance("maps", maps, dict,
                   "the dict of Transformer(..., return_attention=True)")
    missing = {"encoder", "decoder", "cross"} - set(maps)
    if missing:  # other keys (nw.attention_batch adds "source", "target", ...) are ignored
        raise ValueError(f"maps must have the keys 'encoder', 'decoder' and 'cross', "
                         f"got {sorted(maps)}")
    if tgt_in_labels is None:
        tgt_in_labels = tgt_labels
    num_layers = len(maps["encoder"])
    batch, num_heads = maps["encoder"][0].shape[:2]
    for name, labels in (("src_labels", src_labels), ("tgt_labels", tgt_labels),
                         ("tgt_in_labels", tgt_in_labels)):
        if len(labels) != batch:
            raise ValueError(f"{name} must hold one list of tokens per example ({batch}), got {len(labels)}")
    rows_cols = {"encoder": (src_labels, src_labels), "decoder": (tgt_in_labels, tgt_in_labels),
                 "cross": (tgt_labels, src_labels)}
    axes = {"encoder": ("query (source)", "key (source)"),
            "decoder": ("query (decoder input)", "key (decoder input)"),
            "cross": ("writes (target token)", "key (source)")}

    def draw(kind, layer, head, example):
        rows, cols = (labels[example] for labels in rows_cols[kind])
        weights = maps[kind][layer][example, head, : len(rows), : len(cols)]  # (Lq, Lk), no padding
        # Wide enough for the title even when a short example has only a few columns.
        figsize = (max(4.6, 1.8 + 0.55 * len(cols)), max(3.4, 1.3 + 0.45 * len(rows)))
        ylabel, xlabel = axes[kind]
        return viz.show_heatmap(weights, row_labels=rows, col_labels=cols, vmin=0.0, vmax=1.0,
                                title=f"{kind} attention, layer {layer}, head {head}",
                                xlabel=xlabel, ylabel=ylabel,
                                colorbar_label="attention weight", figsize=figsize)

    controls = {"kind": ipywidgets.Dropdown(options=["cross", "encoder", "decoder"], value="cross",
                                            description="attention"),
                "layer": _int_slider("layer", 0, 0, num_layers - 1),
                "head": _int_slider("head", 0, 0, num_heads - 1),
                "example": _int_slider("example", 0, 0, batch - 1)}
    return Explorer("Attention explorer", controls, draw)


__all__ = ["Explorer", "attention_explorer", "mask_explorer", "positional_explorer", "softmax_explorer",
           "widget_view"]
