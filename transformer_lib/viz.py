"""The book's one plotting module: heatmaps of masks and attention, positional-encoding plots,
grids of heads, training curves.

Model code never imports this module. Every function draws with matplotlib and returns the
``Figure`` (or the ``Axes`` it drew into, when you pass ``ax=``). In a notebook, assign the result
(``fig = viz.show_heatmap(...)``) so the figure is shown once. (A trailing ``;`` hides the repeat in
Jupyter, but not under nbval, which then sees an extra output.)
Tensors may live on any device and may require grad: they are detached and moved to the CPU here.
"""
from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from ._checks import check_int, check_optional_positive_int

ATTENTION_CMAP = "Blues"
MASK_COLORS = ListedColormap(["#f4f1de", "#3d405b"])  # allowed (light), blocked (dark)


def _to_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().to("cpu")
        if x.dtype == torch.bool:
            x = x.to(torch.int64)
        return x.float().numpy() if x.is_floating_point() else x.numpy()
    return np.asarray(x)


def _check_table(table) -> np.ndarray:
    values = _to_numpy(table)
    if values.ndim != 2:
        raise ValueError(
            f"table must be 2-D (max_len, d_model), got shape {tuple(values.shape)}")
    return values


def _check_labels(name: str, labels, size: int) -> None:
    if labels is not None and len(labels) != size:
        raise ValueError(f"{name} has {len(labels)} labels, but the matrix has {size} of that axis")


def show_heatmap(matrix, *, row_labels: Sequence[str] | None = None,
                 col_labels: Sequence[str] | None = None, title: str | None = None,
                 xlabel: str = "key", ylabel: str = "query", cmap: str = ATTENTION_CMAP,
                 vmin: float | None = None, vmax: float | None = None, colorbar: bool = True,
                 colorbar_label: str | None = None, annotate: bool = False, fmt: str = ".2f",
                 ax=None, figsize=None):
    """One labelled heatmap of a 2-D matrix (Lq, Lk): an attention map, a score matrix, a table.

    Rows are queries (top to bottom), columns keys (left to right). ``annotate=True`` writes each
    value in its cell (good for small matrices). Returns the Figure, or ``ax`` if given.
    """
    values = _to_numpy(matrix)
    if values.ndim != 2:
        raise ValueError(f"show_heatmap needs a 2-D matrix, got shape {tuple(values.shape)}")
    _check_labels("row_labels", row_labels, values.shape[0])
    _check_labels("col_labels", col_labels, values.shape[1])
    own_figure = ax is None
    if own_figure:
        rows, cols = values.shape
        figsize = figsize or (min(1.2 + 0.5 * cols, 10), min(1.0 + 0.45 * rows, 8))
        fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    image = ax.imshow(values, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto",
                      interpolation="nearest")
    _label_axes(ax, values.shape, row_labels, col_labels, xlabel, ylabel, title)
    if annotate:
        _annotate(ax, values, image, fmt)
    if colorbar:
        bar = ax.figure.colorbar(image, ax=ax, shrink=0.9)
        if colorbar_label:
            bar.set_label(colorbar_label)
    return ax.figure if own_figure else ax


def show_heatmaps(matrices, *, row_titles: Sequence[str] | None = None,
                  col_titles: Sequence[str] | None = None,
                  row_labels: Sequence[str] | None = None, col_labels: Sequence[str] | None = None,
                  title: str | None = None, xlabel: str = "key", ylabel: str = "query",
                  cmap: str = ATTENTION_CMAP, vmin: float | None = 0.0, vmax: float | None = None,
                  colorbar_label: str = "attention weight", cell_size: float = 2.2):
    """A grid of heatmaps sharing one colour scale and one colour bar.

    ``matrices`` has shape (R, C, Lq, Lk) (e.g. layers x heads) or (C, Lq, Lk) (one row, e.g. the
    heads of one layer), as a tensor or nested lists of 2-D tensors. Token labels go on the outer
    axes only. Returns the Figure.
    """
    if isinstance(matrices, (list, tuple)):
        matrices = torch.stack([torch.stack(list(row)) if isinstance(row, (list, tuple)) else row
                                for row in matrices])
    values = _to_numpy(matrices)
    if values.ndim == 3:
        values = values[None]
    if values.ndim != 4:
        raise ValueError(f"show_heatmaps needs (R, C, Lq, Lk) or (C, Lq, Lk), got shape {tuple(values.shape)}")
    n_rows, n_cols, lq, lk = values.shape
    _check_labels("row_labels", row_labels, lq)
    _check_labels("col_labels", col_labels, lk)
    vmax = float(values.max()) if vmax is None else vmax
    fig, axes = plt.subplots(n_rows, n_cols, squeeze=False, layout="constrained",
                             figsize=(1.0 + cell_size * n_cols, 0.8 + cell_size * n_rows * max(lq / lk, 0.4)))
    for r in range(n_rows):
        for c in range(n_cols):
            ax = axes[r, c]
            image = ax.imshow(values[r, c], cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto",
                              interpolation="nearest")
            _label_axes(ax, (lq, lk), row_labels if c == 0 else None,
                        col_labels if r == n_rows - 1 else None,
                        xlabel if r == n_rows - 1 else None, ylabel if c == 0 else None, None)
            if c != 0:
                ax.set_yticks([])
            if r != n_rows - 1:
                ax.set_xticks([])
            if r == 0 and col_titles is not None:
                ax.set_title(col_titles[c], fontsize=10)
            if c == 0 and row_titles is not None:
                ax.set_ylabel(f"{row_titles[r]}\n{ylabel or ''}".strip())
    bar = fig.colorbar(image, ax=axes, shrink=0.8)
    bar.set_label(colorbar_label)
    if title:
        fig.suptitle(title)
    return fig


def show_mask(mask, *, row_labels: Sequence[str] | None = None,
              col_labels: Sequence[str] | None = None, title: str | None = None,
              xlabel: str = "key", ylabel: str = "query", ax=None):
    """A boolean mask (Lq, Lk), True = blocked, drawn in two colours with a legend.

    Leading singleton dimensions (e.g. the (1, 1, L, L) of ``tl.causal_mask``) are dropped.
    """
    values = _to_numpy(mask)
    while values.ndim > 2 and values.shape[0] == 1:
        values = values[0]
    if values.ndim == 1:
        values = values[None]
    if values.ndim != 2:
        raise ValueError(f"show_mask needs a 2-D mask after dropping size-1 dimensions, got {tuple(values.shape)}")
    own_figure = ax is None
    if own_figure:
        rows, cols = values.shape
        fig, ax = plt.subplots(figsize=(min(2.2 + 0.45 * cols, 10), min(1.0 + 0.45 * rows, 8)),
                               layout="constrained")
    ax.imshow(values.astype(int), cmap=MASK_COLORS, vmin=0, vmax=1, aspect="auto",
              interpolation="nearest")
    _label_axes(ax, values.shape, row_labels, col_labels, xlabel, ylabel, title)
    ax.legend(handles=[Patch(color=MASK_COLORS(0), label="may attend"),
                       Patch(color=MASK_COLORS(1), label="blocked (True)")],
              loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    return ax.figure if own_figure else ax


def plot_positional_table(table, *, title: str = "Sinusoidal positional encoding",
                          ax=None):
    """The (max_len, d_model) positional table as a heatmap: position down, column j across
    (column j holds the sine, j even, or the cosine, j odd, of pair i = j // 2)."""
    values = _check_table(table)
    own_figure = ax is None
    if own_figure:
        fig, ax = plt.subplots(figsize=(8, 4), layout="constrained")
    image = ax.imshow(values, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    ax.set_xlabel("column j of the table (pair i = j // 2)")
    ax.set_ylabel("position")
    ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, label="PE value")
    return ax.figure if own_figure else ax


def plot_lines(x, series: dict, *, title: str | None = None, xlabel: str = "", ylabel: str = "",
               logy: bool = False, ax=None, legend_title: str | None = None, markers: bool = False,
               logx: bool = False):
    """Several named curves over a shared x axis: ``series = {"label": y_values, ...}``.
    ``logx`` and ``logy`` put an axis on a log scale (both: a power law is a straight line)."""
    xs = _to_numpy(x)
    own_figure = ax is None
    if own_figure:
        fig, ax = plt.subplots(figsize=(8, 3.6), layout="constrained")
    for label, ys in series.items():
        ax.plot(xs, _to_numpy(ys), label=str(label), marker="o" if markers else None, markersize=3)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    if logx:
        ax.set_xscale("log")
    if title:
        ax.set_title(title)
    if len(series) > 1:
        ax.legend(title=legend_title, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    return ax.figure if own_figure else ax


def plot_positional_curves(table, dims: Sequence[int] = (0, 1, 4, 5, 10, 11), *,
                           title: str = "Positional encoding, one curve per column", ax=None):
    """PE[pos, j] against position for a few columns j: fast waves first, slow ones later."""
    values = _check_table(table)
    for d in dims:
        check_int("dims", d, 0, values.shape[1] - 1)
    positions = np.arange(values.shape[0])
    kind = {0: "sin", 1: "cos"}
    # j names a column, i a sine/cosine pair (the paper's 2i, 2i+1): column j is in pair j // 2
    series = {f"column {d} ({kind[d % 2]}, pair {d // 2})": values[:, d] for d in dims}
    return plot_lines(positions, series, title=title, xlabel="position", ylabel="PE value", ax=ax)


def plot_history(history: dict, *, keys: Sequence[str] = ("loss", "acc"), x: str = "step",
                 title: str | None = None):
    """Training curves from ``tl.train``'s history, one panel per key. Returns the Figure."""
    missing = [k for k in (x, *keys) if k not in history]
    if missing:
        raise ValueError(
            f"history has no {missing} (keys, x); it has {sorted(history)}")
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.4), squeeze=False,
                             layout="constrained")
    names = {"loss": "training loss", "acc": "token accuracy", "lr": "learning rate"}
    for ax, key in zip(axes[0], keys):
        ax.plot(history[x], history[key])
        ax.set_xlabel(x)
        ax.set_ylabel(names.get(key, key))
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    return fig


_CURVES = {"loss": "validation loss (no smoothing, no dropout)",
           "train_loss": "training loss (smoothing and dropout on)"}


def plot_learning_curves(runs: Sequence[dict], *, title: str | None = None):
    """The validation curves of several runs of one recipe (seeds), as
    ``benchmarks/real_corpus.py`` stores them: each run a dict of lists over the
    validation steps, ``step``, ``bleu`` (greedy BLEU of validation sentences) and,
    where measured, ``loss`` (teacher-forced validation loss) and ``train_loss``. Two
    panels drawn with seaborn: the losses and the BLEU against the step, each line the
    mean over runs in a band from the lowest to the highest. A validation loss that
    turns up while the training loss still falls is over-fitting; both still falling
    where the budget ends, under-fitting. Returns the Figure."""
    import pandas as pd
    import seaborn as sns

    if isinstance(runs, dict) or not runs:
        raise ValueError("runs must be a non-empty list of curves (dicts)")
    rows = []
    for number, run in enumerate(runs):
        missing = [k for k in ("step", "bleu") if k not in run]
        if missing:
            raise ValueError(f"runs[{number}] has no {missing}; it has {sorted(run)}")
        for key in ("bleu", *_CURVES):
            values = run.get(key) or []
            if values and len(values) != len(run["step"]):
                raise ValueError(f"runs[{number}]: {len(values)} values of {key!r} for "
                                 f"{len(run['step'])} steps")
            rows += [dict(run=number, step=step, curve=_CURVES.get(key, key), value=v)
                     for step, v in zip(run["step"], values) if v is not None]
    frame = pd.DataFrame(rows)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
    band = ("pi", 100)  # from the lowest run to the highest
    losses = frame[frame.curve != "bleu"]
    if len(losses):
        sns.lineplot(losses, x="step", y="value", hue="curve", errorbar=band, marker="o",
                     ax=axes[0])
        axes[0].legend(fontsize=8)
    axes[0].set_ylabel("loss (nats per token)")
    sns.lineplot(frame[frame.curve == "bleu"], x="step", y="value", errorbar=band,
                 marker="o", ax=axes[1])
    axes[1].set_ylabel("validation BLEU (greedy)")
    for ax in axes:
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    return fig


def _label_axes(ax, shape, row_labels, col_labels, xlabel, ylabel, title):
    rows, cols = shape
    if row_labels is not None:
        ax.set_yticks(range(rows), labels=list(row_labels))
    if col_labels is not None:
        col_labels = [str(label) for label in col_labels]
        crowded = cols > 8 or max(len(label) for label in col_labels) * cols > 24
        ax.set_xticks(range(cols), labels=col_labels, rotation=90 if crowded else 0)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)


def _annotate(ax, values, image, fmt):
    norm = image.norm
    for (i, j), v in np.ndenumerate(values):
        shade = norm(v) if np.isfinite(v) else 0.0
        ax.text(j, i, format(v, fmt), ha="center", va="center", fontsize=8,
                color="white" if shade > 0.6 else "black")


def show_masks(masks, *, titles: Sequence[str] | None = None, row_labels=None, col_labels=None,
               ncols: int | None = None, title: str | None = None, xlabel: str = "key",
               ylabel: str = "query", panel_size: tuple[float, float] = (3.0, 2.4)):
    """Several boolean masks (True = blocked) side by side, with one shared legend.

    ``masks`` is a sequence of masks, each 2-D after dropping leading size-1 dimensions (they may
    differ in shape, e.g. a decoder self-attention mask next to a cross-attention mask).
    ``row_labels`` and ``col_labels`` are sequences with one list of tokens (or None) per mask.
    Returns the Figure.
    """
    check_optional_positive_int("ncols", ncols)
    masks = list(masks)
    n = len(masks)
    if n == 0:
        raise ValueError("show_masks needs at least one mask, got 0")
    for name, seq in (("titles", titles), ("row_labels", row_labels), ("col_labels", col_labels)):
        if seq is not None and len(seq) != n:
            raise ValueError(f"{name} must have one entry per mask ({n}), got {len(seq)}")
    ncols = min(n, 3) if ncols is None else ncols
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(nrows, ncols, squeeze=False, layout="constrained",
                             figsize=(panel_size[0] * ncols + 1.6, panel_size[1] * nrows + 0.4))
    for index, ax in enumerate(axes.flat):
        if index >= n:
            ax.set_axis_off()
            continue
        show_mask(masks[index], ax=ax, title=titles[index] if titles else None,
                  row_labels=row_labels[index] if row_labels else None,
                  col_labels=col_labels[index] if col_labels else None,
                  xlabel=xlabel, ylabel=ylabel)
        ax.get_legend().remove()
    fig.legend(handles=[Patch(color=MASK_COLORS(0), label="may attend"),
                        Patch(color=MASK_COLORS(1), label="blocked (True)")],
               loc="outside right upper", frameon=False)
    if title:
        fig.suptitle(title)
    return fig
