"""The plotting helpers draw what they are given, label it, and refuse mismatched labels."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import transformer_lib as tl  # noqa: E402
from transformer_lib import viz  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_heatmap_shows_the_values_with_labels_and_colorbar():
    weights = torch.softmax(torch.randn(3, 4, requires_grad=True), dim=-1)  # needs detaching
    fig = viz.show_heatmap(weights, row_labels=["a", "b", "c"], col_labels=list("wxyz"), title="T")
    ax = fig.axes[0]
    np.testing.assert_allclose(ax.images[0].get_array(), weights.detach().numpy())
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_xticklabels()] == list("wxyz")
    assert ax.get_title() == "T" and ax.get_xlabel() == "key" and ax.get_ylabel() == "query"
    assert len(fig.axes) == 2, "expected a colour bar"


def test_heatmap_rejects_wrong_label_count_and_rank():
    with pytest.raises(ValueError, match="row_labels has 2 labels, but the matrix has 3"):
        viz.show_heatmap(torch.zeros(3, 4), row_labels=["a", "b"])
    with pytest.raises(ValueError, match="2-D matrix, got shape \\(2, 3, 4\\)"):
        viz.show_heatmap(torch.zeros(2, 3, 4))


def test_heatmaps_grid_shares_one_scale():
    maps = torch.softmax(torch.randn(2, 3, 4, 5), dim=-1)  # layers x heads
    fig = viz.show_heatmaps(maps, row_titles=["layer 1", "layer 2"],
                            col_titles=["h1", "h2", "h3"], col_labels=list("abcde"))
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 6
    assert len({im.get_clim() for im in images}) == 1, "all panels must share one colour scale"
    np.testing.assert_allclose(images[4].get_array(), maps[1, 1].numpy())


def test_mask_is_drawn_as_blocked_and_allowed():
    mask = tl.causal_mask(4)
    fig = viz.show_mask(mask)  # (1, 1, 4, 4): singleton dims dropped
    array = fig.axes[0].images[0].get_array()
    np.testing.assert_array_equal(array, mask[0, 0].numpy().astype(int))
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["may attend", "blocked (True)"]


def test_positional_plots_and_lines():
    table = tl.sinusoidal_table(20, 8)
    fig = viz.plot_positional_table(table)
    np.testing.assert_allclose(fig.axes[0].images[0].get_array(), table.numpy())
    # columns j, not pairs i (chapter 2 keeps the two apart)
    assert fig.axes[0].get_xlabel() == "column j of the table (pair i = j // 2)"
    fig = viz.plot_positional_curves(table, dims=(0, 1))
    lines = fig.axes[0].get_lines()
    np.testing.assert_allclose(lines[1].get_ydata(), table[:, 1].numpy())
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["column 0 (sin, pair 0)", "column 1 (cos, pair 0)"]


def test_lines_on_log_axes():
    ranks = np.arange(1, 101)
    fig = viz.plot_lines(ranks, {"Zipf": 1000 / ranks}, logx=True, logy=True)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert viz.plot_lines(ranks, {"a": ranks}).axes[0].get_xscale() == "linear"


def test_history_plot_has_one_panel_per_key():
    history = {"step": [1, 2, 3], "loss": [3.0, 2.0, 1.5], "acc": [0.1, 0.4, 0.6], "lr": [1e-4] * 3}
    fig = viz.plot_history(history, keys=("loss", "acc", "lr"))
    assert len(fig.axes) == 3
    np.testing.assert_allclose(fig.axes[0].get_lines()[0].get_ydata(), history["loss"])


def test_learning_curves_show_the_mean_of_the_runs_in_their_band():
    runs = [{"step": [100, 200, 300], "bleu": [1.0, 2.0, 3.0], "loss": [5.0, 4.0, 4.5],
             "train_loss": [5.5, 4.5, 4.0]},
            {"step": [100, 200, 300], "bleu": [3.0, 4.0, 5.0], "loss": [6.0, 5.0, 5.5],
             "train_loss": [None, 4.5, 3.0]},
            {"step": [100, 200], "bleu": [2.0, 3.0]}]  # an older run: BLEU only
    fig = viz.plot_learning_curves(runs, title="t")
    losses, bleu = fig.axes[0], fig.axes[1]
    # the BLEU line is the mean over the runs at each step; its band the min-max
    np.testing.assert_allclose(bleu.get_lines()[0].get_ydata(), [2.0, 3.0, 4.0])
    band = bleu.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == 1.0 and band.max() == 5.0
    lines = {tuple(line.get_ydata()) for line in losses.get_lines()}
    assert (5.5, 4.5, 3.5) in lines  # training loss, mean of the runs that have it
    assert (5.5, 4.5, 5.0) in lines  # validation loss, mean of the two runs
    with pytest.raises(ValueError, match=r"runs\[0\] has no \['bleu'\]"):
        viz.plot_learning_curves([{"step": [1]}])
    with pytest.raises(ValueError, match="2 values of 'loss' for 1 steps"):
        viz.plot_learning_curves([{"step": [1], "bleu": [1.0], "loss": [1.0, 2.0]}])
    with pytest.raises(ValueError, match="non-empty list"):
        viz.plot_learning_curves([])


def test_masks_side_by_side_share_one_legend():
    tgt = torch.tensor([[1, 5, 6, 0]])
    src = torch.tensor([[3, 4, 0]])
    fig = viz.show_masks([tl.decoder_self_mask(tgt), tl.cross_mask(src, 4)],
                         titles=["decoder self", "cross"])
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 2 and len(fig.legends) == 1
    assert all(ax.get_legend() is None for ax in panels)
    assert panels[1].images[0].get_array().shape == (4, 3)
    with pytest.raises(ValueError, match="titles must have one entry per mask \\(2\\), got 1"):
        viz.show_masks([tl.causal_mask(3), tl.causal_mask(3)], titles=["only one"])
