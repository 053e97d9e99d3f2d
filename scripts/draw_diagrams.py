"""Draw the book's diagrams and keep the chapters' copies of them in sync.

Every diagram is drawn here, with Matplotlib, from code: one function per diagram,
registered in ``DIAGRAMS`` with its alt text. The SVG files in ``book/images/`` are this
script's output (committed, byte-stable: a fixed ``svg.hashsalt``, no date, fonts loaded
from Matplotlib's own files); ``intro.md`` shows ``architecture.svg`` directly.

A chapter places a diagram with a *diagram cell*: a Markdown cell whose first line is
``<!-- diagram: NAME -->`` and which holds a caption paragraph starting with
``**Figure.**``. ``sync`` writes the image between the two: a PNG of the same drawing,
inline as a base64 ``data:`` URI in an ``<img>`` with the registry's alt text. Inline,
because Google Colab shows neither notebook attachments nor files next to the notebook;
PNG, because Colab does not show inline SVG images in Markdown (JupyterLab and the HTML
book show both).

    python scripts/draw_diagrams.py            # write every book/images/NAME.svg
    python scripts/draw_diagrams.py --out DIR  # ... into DIR instead (the tests do)
    python scripts/draw_diagrams.py sync book/*.ipynb  # (re)write the diagram cells
    python scripts/draw_diagrams.py check book/*.ipynb book/intro.md
        # exit 1 if an SVG or a diagram cell is stale, a marker names no diagram, or a
        # diagram is placed nowhere among the files given
"""
from __future__ import annotations

import argparse
import base64
import functools
import html
import io
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.font_manager import FontProperties  # noqa: E402
from matplotlib.patches import Circle, FancyBboxPatch, Rectangle  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "book" / "images"
MARKER = re.compile(r"^<!-- diagram: ([a-z_]+) -->$")
CAPTION = "**Figure.**"

# Fonts from Matplotlib's own files, never a system font of the same name: the drawings
# (and so the committed SVGs and the chapters' PNGs) must not depend on the machine.
_TTF = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
FONTS = {
    "sans": _TTF / "DejaVuSans.ttf", "bold": _TTF / "DejaVuSans-Bold.ttf",
    "italic": _TTF / "DejaVuSans-Oblique.ttf", "mono": _TTF / "DejaVuSansMono.ttf"
}
RC = {
    "svg.hashsalt": "tested-transformer", "svg.fonttype": "path", "path.simplify": False
}

# Colours of the paper's figure 1, on an opaque white panel: legible on light and dark
# pages.
INK, GREY, PANEL = "#222222", "#6b6b6b", "#ffffff"
FILL = {
    "attn": "#f9d9b0", "ffn": "#c4e3f3", "norm": "#f4f1a6", "embed": "#f8c9ca",
    "pe": "#ffffff", "out": "#dcd0f3", "loss": "#e8e8e8", "token": "#eeeeee",
    "mask": "#f2c0c0", "soft": "#d6ecd2"
}
RESIDUAL = "#1f6f8b"  # residual connections
MEMORY = "#c1121f"  # the encoder's output, read by cross-attention
BADGE = "#3d405b"  # chapter badges
HEADS = ["#f4a259", "#5b8e7d", "#8e7dbe"]  # one colour per head (chapter 5 uses H = 3)


# ------------------------------------------------------------------------------------
# Drawing helpers. One axes unit is one inch, so that font sizes (points) and boxes
# (inches) agree.
# ------------------------------------------------------------------------------------
def canvas(width: float, height: float):
    fig = plt.figure(figsize=(width, height), facecolor=PANEL)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def text(ax, x, y, s, size=10, style="sans", color=INK, ha="center", va="center", **kw):
    font = FontProperties(fname=FONTS[style], size=size)
    return ax.text(x, y, s, fontproperties=font, color=color, ha=ha, va=va,
                   linespacing=1.25, **kw)


def box(ax, x, y, w, h, label, fill, size=10, style="sans", badge=None, edge=INK,
        lw=1.1, dashed=False):
    """A rounded box centred at (x, y), with a chapter ``badge`` at its right end."""
    ax.add_patch(
        FancyBboxPatch((x - w / 2, y - h / 2), w, h,
                       boxstyle="round,pad=0,rounding_size=0.07", facecolor=fill,
                       edgecolor=edge, linewidth=lw,
                       linestyle=(0, (4, 3)) if dashed else "solid"))
    if label:
        text(ax, x - (0.22 if badge is not None else 0), y, label, size=size,
             style=style)
    if badge is not None:
        chapter_badge(ax, x + w / 2 - 0.3, y, badge)


def chapter_badge(ax, x, y, label, size=8.5):
    text(
        ax, x, y, str(label), size=size, style="bold", color="white",
        bbox=dict(boxstyle="round,pad=0.28,rounding_size=0.35", facecolor=BADGE,
                  edgecolor="none"))


def arrow(ax, points, color=INK, lw=1.2, head=11):
    """A polyline through ``points`` with an arrow head at the last one."""
    xs, ys = zip(*points)
    if len(points) > 2:
        ax.plot(xs[:-1], ys[:-1], color=color, lw=lw, solid_capstyle="butt",
                solid_joinstyle="miter")
    ax.annotate(
        "", xy=points[-1], xytext=points[-2],
        arrowprops=dict(arrowstyle="-|>", color=color, lw=lw, shrinkA=0, shrinkB=0,
                        mutation_scale=head))


def line(ax, points, color=INK, lw=1.2):
    xs, ys = zip(*points)
    ax.plot(xs, ys, color=color, lw=lw, solid_capstyle="butt", solid_joinstyle="miter")


def dot(ax, x, y, color=INK, r=0.035):
    ax.add_patch(Circle((x, y), r, facecolor=color, edgecolor="none", zorder=3))


def grid(ax, x0, y0, values, cell=0.34, fills=None, size=8, style="mono",
         edge="#555555", text_color=INK):
    """A table of cells, top-left corner at (x0, y0); ``fills``: each cell's colour."""
    for r, row in enumerate(values):
        for c, value in enumerate(row):
            fill = fills[r][c] if fills else "#ffffff"
            ax.add_patch(
                Rectangle((x0 + c * cell, y0 - (r + 1) * cell), cell, cell,
                          facecolor=fill, edgecolor=edge, linewidth=0.7))
            if value != "":
                text(ax, x0 + (c + 0.5) * cell, y0 - (r + 0.5) * cell, value, size=size,
                     style=style, color=text_color)


def residual(ax, x_branch, y_branch, x_side, y_enter, x_box_edge):
    """The residual path: from the main line at (x_branch, y_branch), out to x_side,
    along it to y_enter, then into the side of an Add & Norm box whose edge is at
    x_box_edge."""
    dot(ax, x_branch, y_branch, RESIDUAL)
    arrow(ax, [(x_branch, y_branch), (x_side, y_branch), (x_side, y_enter),
               (x_box_edge, y_enter)], color=RESIDUAL, lw=1.6)


# ------------------------------------------------------------------------------------
# The diagrams
# ------------------------------------------------------------------------------------
def _map_column(ax, x, bw, tokens, embedding, top, layer, chapter):
    """The bottom of a column of the map: tokens, embedding, positional encoding and the
    dashed frame of the repeated layer, from 2.75 up to ``top``, with its chapter."""
    box(ax, x, 0.55, bw, 0.62, tokens, FILL["token"], size=9.5)
    box(ax, x, 1.5, bw, 0.5, embedding, FILL["embed"], badge=1, size=9.5)
    box(ax, x, 2.3, bw, 0.45, "+ positional encoding", FILL["pe"], badge=2, size=9.5)
    arrow(ax, [(x, 0.86), (x, 1.25)])
    arrow(ax, [(x, 1.75), (x, 2.075)])
    arrow(ax, [(x, 2.525), (x, 3.24)])
    box(ax, x, (2.75 + top) / 2, bw + 1.0, top - 2.75, "", "#f6f6f6", edge="#8a8a8a",
        dashed=True)
    text(ax, x - bw / 2 - 0.4, top - 0.15, layer, size=9.5, style="italic",
         color="#444444", ha="left")
    chapter_badge(ax, x + bw / 2 + 0.22, top - 0.15, chapter)


def _stack(ax, x, bw, blocks):
    """Boxes (y, height, label, fill, chapter), bottom to top, with arrows between."""
    for (y0, h0, *_), (y1, h1, *_) in zip(blocks, blocks[1:]):
        arrow(ax, [(x, y0 + h0 / 2), (x, y1 - h1 / 2)])
    for y, h, label, fill, chapter in blocks:
        box(ax, x, y, bw, h, label, FILL[fill], badge=chapter, size=9.5)


def draw_architecture():
    """The paper's figure 1 with the chapter that builds each block."""
    fig, ax = canvas(9.6, 11.0)
    ex, dx, bw = 2.6, 6.95, 3.0  # encoder and decoder column centres, box width
    text(ax, 4.8, 10.65, "The Transformer, and the chapter that builds each part",
         size=13, style="bold")

    # Encoder column: residual paths on its left.
    _map_column(ax, ex, bw, "source tokens, padded\n(B, Ls) int64",
                "Input embedding × √d_model", 6.65, "Encoder layer × N", 7)
    enc = {"attn": 3.55, "n1": 4.45, "ffn": 5.25, "n2": 6.05}
    _stack(ax, ex, bw, [
        (enc["attn"], 0.62, "Multi-head self-attention\n(padding mask)", "attn",
         "4, 5"),
        (enc["n1"], 0.4, "Add & Norm", "norm", 6),
        (enc["ffn"], 0.5, "Feed-forward", "ffn", 6),
        (enc["n2"], 0.4, "Add & Norm", "norm", 6)])
    side = ex - bw / 2 - 0.25
    residual(ax, ex, 2.9, side, enc["n1"], ex - bw / 2)
    residual(ax, ex, 4.82, side, enc["n2"], ex - bw / 2)

    # Decoder column: residual paths on its right, the memory comes in from the left.
    _map_column(ax, dx, bw, "target tokens, shifted right\n<bos> y1 y2 …  (B, Lt)",
                "Output embedding × √d_model", 8.45, "Decoder layer × N", 8)
    dec = {"self": 3.55, "n1": 4.45, "cross": 5.35, "n2": 6.25, "ffn": 7.05, "n3": 7.8}
    _stack(ax, dx, bw, [
        (dec["self"], 0.62, "Masked multi-head self-attn.\n(causal + padding mask)",
         "attn", "3, 5"),
        (dec["n1"], 0.4, "Add & Norm", "norm", 6),
        (dec["cross"], 0.62, "Multi-head cross-attention\n(source padding mask)",
         "attn", "3, 5"),
        (dec["n2"], 0.4, "Add & Norm", "norm", 6),
        (dec["ffn"], 0.5, "Feed-forward", "ffn", 6),
        (dec["n3"], 0.4, "Add & Norm", "norm", 6)])
    side = dx + bw / 2 + 0.25
    residual(ax, dx, 2.9, side, dec["n1"], dx + bw / 2)
    residual(ax, dx, 4.82, side, dec["n2"], dx + bw / 2)
    residual(ax, dx, 6.62, side, dec["n3"], dx + bw / 2)

    # Output layer and loss.
    box(ax, dx, 9.05, bw, 0.5, "Linear → logits (B, Lt, V)", FILL["out"], badge=8,
        size=9.5)
    box(ax, dx, 9.95, bw, 0.62,
        "softmax + masked cross-entropy,\nlabel smoothing, schedule", FILL["loss"],
        badge=9, size=9.5)
    arrow(ax, [(dx, 8.0), (dx, 8.8)])
    arrow(ax, [(dx, 9.3), (dx, 9.64)])

    # The memory: the encoder's output goes up, across, and into every cross-attention.
    route = dx - bw / 2 - 0.3
    line(ax, [(ex, 6.25), (ex, 7.35), (route, 7.35), (route, dec["cross"])],
         color=MEMORY, lw=1.8)
    arrow(ax, [(route, dec["cross"]), (dx - bw / 2, dec["cross"])], color=MEMORY,
          lw=1.8)
    text(ax, (ex + route) / 2 - 0.2, 7.5,
         "memory (B, Ls, d_model):\nkeys and values of every\n"
         "cross-attention", size=9, color=MEMORY, va="bottom")

    # Legend and the chapters that use everything.
    lx, ly = 0.35, 9.75
    line(ax, [(lx, ly), (lx + 0.5, ly)], color=RESIDUAL, lw=1.6)
    text(ax, lx + 0.62, ly, "residual connection: x + sublayer(x)", size=9, ha="left")
    line(ax, [(lx, ly - 0.35), (lx + 0.5, ly - 0.35)], color=MEMORY, lw=1.8)
    text(ax, lx + 0.62, ly - 0.35, "encoder output (memory)", size=9, ha="left")
    chapter_badge(ax, lx + 0.25, ly - 0.72, "n")
    text(ax, lx + 0.62, ly - 0.72, "the chapter that builds the block", size=9,
         ha="left")
    text(
        ax, ex, 8.45, "Chapter 10 trains it all on a real task;\n"
        "chapter 11 catalogues the classic bugs;\n"
        "chapter 12 runs it with real pretrained weights;\n"
        "chapter 13 trains it on several processes.", size=9.5, style="italic")
    return fig


def draw_attention_flow():
    """Scaled dot-product attention step by step, with shapes and a 4 x 4 example."""
    fig, ax = canvas(9.6, 6.7)
    text(ax, 4.8, 6.42, "Scaled dot-product attention:  softmax(Q Kᵀ / √d_k) V",
         size=13, style="bold")
    y, w, h = 3.95, 1.3, 0.78  # the row of operations
    xs = [2.45, 4.05, 5.65, 7.25, 8.75]
    steps = [("MatMul\nQ Kᵀ", FILL["attn"], "scores\n(B, Lq, Lk)"),
             ("Scale\n÷ √d_k", FILL["attn"], "(B, Lq, Lk)"),
             ("Mask\nblocked → −∞", FILL["mask"], "(B, Lq, Lk)"),
             ("Softmax\nover the keys", FILL["soft"], "weights\n(B, Lq, Lk)"),
             ("MatMul\nweights · V", FILL["attn"], None)]
    for x, (label, fill, shape) in zip(xs, steps):
        box(ax, x, y, w, h, label, fill, size=10)
        if shape:
            text(ax, x, y - h / 2 - 0.1, shape, size=9, style="mono", color=GREY,
                 va="top")
    for x0, x1 in zip(xs, xs[1:]):
        arrow(ax, [(x0 + w / 2, y), (x1 - w / 2, y)])
    # Inputs: Q and K from the left, the mask and V from above, the context out below.
    box(ax, 0.8, y + 0.55, 1.25, 0.62, "Q\n(B, Lq, d_k)", FILL["token"], size=9,
        style="mono")
    box(ax, 0.8, y - 0.55, 1.25, 0.62, "K\n(B, Lk, d_k)", FILL["token"], size=9,
        style="mono")
    arrow(ax, [(1.425, y + 0.55), (1.6, y + 0.55), (1.6, y + 0.18),
               (xs[0] - w / 2, y + 0.18)])
    arrow(ax, [(1.425, y - 0.55), (1.6, y - 0.55), (1.6, y - 0.18),
               (xs[0] - w / 2, y - 0.18)])
    box(ax, xs[2], 5.55, 1.55, 0.62, "mask (B, 1, Lk)\nTrue = blocked", FILL["mask"],
        size=9, style="mono")
    arrow(ax, [(xs[2], 5.24), (xs[2], y + h / 2)])
    box(ax, xs[4], 5.55, 1.3, 0.62, "V\n(B, Lk, d_v)", FILL["token"], size=9,
        style="mono")
    arrow(ax, [(xs[4], 5.24), (xs[4], y + h / 2)])
    box(ax, xs[4], 2.35, 1.3, 0.62, "context\n(B, Lq, d_v)", FILL["token"], size=9,
        style="mono")
    arrow(ax, [(xs[4], y - h / 2), (xs[4], 2.66)])

    # A worked example under the row: one sentence, 'the cat <pad> <pad>'.
    scores = [[1.1, 2.4, 0.3, -0.5], [0.2, 0.6, 1.0, 0.7], [0.8, 0.9, -0.2, 0.4],
              [0.5, 1.1, 0.1, 0.0]]
    weights = []
    for row in scores:  # the softmax over the two real keys; the padded ones get 0
        e = [math.exp(s) for s in row[:2]]
        weights.append([e[0] / sum(e), e[1] / sum(e), 0.0, 0.0])
    keys = ["the", "cat", "pad", "pad"]
    cell, top = 0.4, 2.0
    panels = [(0.85, "scaled scores", [[f"{s:.1f}" for s in row]
                                       for row in scores], [["#ffffff"] * 4] * 4),
              (3.45, "masked", [[f"{s:.1f}" for s in row[:2]] + ["−∞", "−∞"]
                                for row in scores],
               [["#ffffff", "#ffffff", FILL["mask"], FILL["mask"]]] * 4),
              (6.05, "weights", [[f"{p:.2f}" if p else "0" for p in row]
                                 for row in weights], [[_green(p) for p in row]
                                                       for row in weights])]
    text(
        ax, 0.25, top + 0.62, "Example, one sentence 'the cat <pad> <pad>' "
        "(rows: queries, columns: keys):", size=9.5, style="italic", ha="left",
        color=GREY)
    for x0, title, values, fills in panels:
        text(ax, x0 + 2 * cell, top + 0.3, title, size=9, style="bold")
        for c, key in enumerate(keys):
            text(ax, x0 + (c + 0.5) * cell, top + 0.1, key, size=8, color=GREY)
        grid(ax, x0, top, values, cell=cell, fills=fills, size=8)
        for r, query in enumerate(keys):
            text(ax, x0 - 0.06, top - (r + 0.5) * cell, query, size=8, color=GREY,
                 ha="right")
    for x0 in (0.85, 3.45):
        arrow(ax, [(x0 + 4 * cell + 0.12, top - 2 * cell),
                   (x0 + 2.6 - 0.38, top - 2 * cell)], color=GREY, lw=1.0)
    text(ax, 6.05 + 2 * cell, top - 4 * cell - 0.2, "each row sums to 1", size=9,
         color=GREY)
    text(
        ax, xs[4], 1.25,
        "In multi-head attention\n(chapter 5) every head\ndoes this at once:\n"
        "weights (B, H, Lq, Lk),\nmask (B, 1, 1, Lk)", size=9, color=GREY, va="center")
    return fig


def _green(share: float) -> str:
    """White for 0, a full green for 1: the colour of an attention weight."""
    return matplotlib.colors.to_hex(
        (1 - 0.5 * share, 1 - 0.2 * share, 1 - 0.55 * share))


def _tint(color: str, share: float = 0.55) -> str:
    """``color`` mixed with white: ``share`` of the colour."""
    r, g, b = matplotlib.colors.to_rgb(color)
    return matplotlib.colors.to_hex(
        (1 - share * (1 - r), 1 - share * (1 - g), 1 - share * (1 - b)))


def draw_heads_split_merge():
    """Split into heads (view + transpose), attend, merge; and the bare-view trap."""
    fig, ax = canvas(9.6, 7.9)
    text(ax, 4.8, 7.62, "Multi-head attention: split into heads, attend, merge",
         size=13, style="bold")
    L, H, dk, cell = 4, 3, 2, 0.36
    d = H * dk
    tags = [[10 * p + f for f in range(d)]
            for p in range(L)]  # entry = 10 position + feature
    head_fill = [[_tint(HEADS[f // dk]) for f in range(d)] for _ in range(L)]
    ax_, bx, cx = 0.95, 5.0, 8.75  # columns: (L, d_model) tables, heads, attention
    step = dk * cell + 0.3  # from one head's table to the next

    def heads(x0, top, blocks, fills, numbers=True, labels=True):
        for h, (block, fill) in enumerate(zip(blocks, fills)):
            grid(ax, x0 + h * step, top,
                 [[str(v) if numbers else "" for v in row] for row in block], cell=cell,
                 fills=fill, size=8.5)
            if labels:
                text(ax, x0 + h * step + cell, top + 0.17, f"head {h}", size=9,
                     color=HEADS[h], style="bold")

    def tokens(x0, top):
        for p in range(L):
            text(ax, x0 - 0.08, top - (p + 0.5) * cell, f"token {p}", size=8.5,
                 ha="right", color=GREY)

    # Row 1: the projected queries of one sentence, split the right way.
    top = 6.75
    text(ax, ax_ + 3 * cell, top + 0.5, "entry = 10 × position + feature", size=9,
         color=GREY)
    for h in range(H):
        text(ax, ax_ + (h * dk + 1) * cell, top + 0.17, f"head {h}", size=9,
             color=HEADS[h], style="bold")
    grid(ax, ax_, top, [[str(v) for v in row] for row in tags], cell=cell,
         fills=head_fill, size=8.5)
    tokens(ax_, top)
    text(ax, ax_ + 3 * cell, top - L * cell - 0.12, "q_proj(x): (B, L, d_model)\n"
         "= (2, 4, 6)", size=9, style="mono", va="top")
    right = [[[row[h * dk + j] for j in range(dk)] for row in tags] for h in range(H)]
    heads(bx, top, right, [[[_tint(HEADS[h])] * dk] * L for h in range(H)])
    text(
        ax, bx + (2 * step + dk * cell) / 2, top - L * cell - 0.12,
        "(B, H, L, d_k) = (2, 3, 4, 2): every head\n"
        "holds all 4 tokens, 2 features each",
        size=9, style="mono", va="top")
    mid = top - 2 * cell
    arrow(ax, [(ax_ + d * cell + 0.12, mid), (bx - 0.12, mid)])
    text(ax, (ax_ + d * cell + bx) / 2, mid + 0.12,
         ".view(B, L, H, d_k)\n.transpose(1, 2)", size=9, style="mono", va="bottom")

    # Attention in every head, on the right, spanning rows 1 and 2.
    top2 = 4.05
    mid2 = top2 - 2 * cell
    box(ax, cx, (mid + mid2) / 2, 1.3, mid - mid2 + 0.9,
        "attention\nin every\nhead at once\n(chapter 4)\n\nweights\n(B, H, L, L)",
        FILL["attn"], size=9.5)
    arrow(ax, [(bx + 2 * step + dk * cell + 0.12, mid), (cx - 0.65, mid)])

    # Row 2: each head's context, merged back.
    arrow(ax, [(cx - 0.65, mid2), (bx + 2 * step + dk * cell + 0.12, mid2)])
    heads(bx, top2, [[[""] * dk] * L] * H, [[[HEADS[h]] * dk] * L for h in range(H)],
          numbers=False)
    text(ax, bx + (2 * step + dk * cell) / 2, top2 - L * cell - 0.12,
         "context per head: (B, H, L, d_k)", size=9, style="mono", va="top")
    grid(ax, ax_, top2, [[""] * d] * L, cell=cell,
         fills=[[HEADS[f // dk] for f in range(d)]] * L)
    tokens(ax_, top2)
    text(ax, ax_ + 3 * cell, top2 - L * cell - 0.12, "Concat: (B, L, d_model),\n"
         "then out_proj (W^O)", size=9, style="mono", va="top")
    arrow(ax, [(bx - 0.12, mid2), (ax_ + d * cell + 0.12, mid2)])
    text(ax, (ax_ + d * cell + bx) / 2, mid2 + 0.12, ".transpose(1, 2)\n"
         ".reshape(B, L, d_model)", size=9, style="mono", va="bottom")

    # Row 3: the trap. Same shape, but each "head" holds consecutive numbers in memory.
    line(ax, [(0.3, 2.05), (9.3, 2.05)], color="#cccccc", lw=0.8)
    top3 = 1.6
    flat = [v for row in tags for v in row]
    wrong = [[flat[h * L * dk + i * dk:h * L * dk + (i + 1) * dk] for i in range(L)]
             for h in range(H)]
    fills = [[[_tint(HEADS[(v % 10) // dk]) for v in row] for row in block]
             for block in wrong]
    heads(bx, top3, wrong, fills)
    text(ax, 2.35, top3 - 2 * cell,
         "✗  .view(B, H, L, d_k)\n    without the transpose",
         size=10, style="bold", color=MEMORY)
    text(
        ax, cx + 0.65, top3 - 2 * cell, "same shape, wrong\ncontent: head 0 holds\n"
        "token 0's six features\nand two of token 1's", size=9, color=MEMORY,
        ha="right")
    return fig


def _frame(ax, x, w, bottom, top, label):
    """The dashed frame of a repeated layer, from ``bottom`` to ``top``."""
    box(ax, x, (bottom + top) / 2, w, top - bottom, "", "#f7f7f7", edge="#8a8a8a",
        dashed=True)
    text(ax, x - w / 2 + 0.12, top - 0.18, label, size=9.5, style="italic",
         color="#444444", ha="left")


def _layer(name, size, cx, bw, blocks, x_label, out_label):
    """A figure with one layer: title and formula, the "x N" frame, input and output,
    and the column of sublayers with their residual paths. Returns (fig, ax)."""
    width, height = size
    fig, ax = canvas(width, height)
    text(ax, width / 2, height - 0.28, f"One {name} layer (post-norm, as in the paper)",
         size=13, style="bold")
    text(ax, width / 2, height - 0.65,
         "each sublayer:  x = LayerNorm(x + dropout(sublayer(x)))", size=9.5,
         style="mono", color=GREY)
    top = blocks[-1][0] + blocks[-1][1] / 2 + 0.45  # the frame's top
    _frame(ax, cx - 0.1, bw + 1.5, 0.85, top, "× N  (the paper: N = 6)")
    box(ax, cx, 0.45, 2.7, 0.5, x_label, FILL["token"], size=9.5, style="mono")
    box(ax, cx, top + 0.55, 2.7, 0.5, out_label, FILL["token"], size=9.5, style="mono")
    _encoder_or_decoder(ax, cx, bw, blocks, 0.7, top + 0.3)
    return fig, ax


def draw_encoder_layer():
    """One post-norm encoder layer with its two residual connections."""
    cx, bw = 3.1, 3.2
    ffn = "Feed-forward\nLinear d_model → d_ff, ReLU,\nLinear d_ff → d_model"
    blocks = [  # (y, height, label, fill, font size), bottom to top
        (1.85, 0.72, "Multi-head self-attention\nq = k = v = x", FILL["attn"], 10),
        (2.95, 0.45, "Add & Norm", FILL["norm"], 10),
        (4.25, 0.9, ffn, FILL["ffn"], 9.5),
        (5.45, 0.45, "Add & Norm", FILL["norm"], 10),
    ]
    fig, ax = _layer("encoder", (7.8, 7.9), cx, bw, blocks, "x  (B, L, d_model)",
                     "out  (B, L, d_model)")
    box(ax, 6.6, 1.85, 1.5, 0.66, "padding mask\n(B, 1, 1, L)", FILL["mask"], size=9,
        style="mono")
    arrow(ax, [(5.85, 1.85), (cx + bw / 2, 1.85)])
    text(
        ax, 6.6, 4.25,
        "pre-norm\n(norm_first=True)\nputs LayerNorm at\nthe start of each\n"
        "branch instead:\nx + dropout(\nsublayer(LN(x)))", size=9, color=GREY)
    return fig


def _encoder_or_decoder(ax, cx, bw, blocks, bottom, top):
    """Arrows up the column, the boxes, and a residual path from below each sublayer
    (every box that is not an Add & Norm) into the Add & Norm that follows it."""
    for (y0, h0, *_), (y1, h1, *_) in zip(blocks, blocks[1:]):
        arrow(ax, [(cx, y0 + h0 / 2), (cx, y1 - h1 / 2)])
    arrow(ax, [(cx, bottom), (cx, blocks[0][0] - blocks[0][1] / 2)])
    arrow(ax, [(cx, blocks[-1][0] + blocks[-1][1] / 2), (cx, top)])
    side = cx - bw / 2 - 0.35
    below = bottom
    for (y, h, label, *_), (y_next, *_) in zip(blocks, blocks[1:]):
        if label != "Add & Norm":
            y_branch = (below + y - h / 2) / 2
            residual(ax, cx, y_branch, side, y_next, cx - bw / 2)
            text(ax, side - 0.1, (y_branch + y_next) / 2, "residual", size=9,
                 color=RESIDUAL, ha="right", rotation=90)
        below = y + h / 2
    for (y, h, label, fill, size) in blocks:
        box(ax, cx, y, bw, h, label, fill, size=size)


def draw_decoder_layer():
    """One post-norm decoder layer: masked self-attention, cross-attention, FFN."""
    cx, bw = 3.3, 3.3
    ys = {"self": 1.85, "n1": 2.95, "cross": 4.3, "n2": 5.45, "ffn": 6.6, "n3": 7.65}
    self_attn = "Masked multi-head\nself-attention, q = k = v = y"
    cross = "Multi-head cross-attention\nq from the decoder,\nk = v = memory"
    ffn = "Feed-forward\nd_model → d_ff → d_model"
    blocks = [  # (y, height, label, fill, font size), bottom to top
        (ys["self"], 0.72, self_attn, FILL["attn"], 10),
        (ys["n1"], 0.45, "Add & Norm", FILL["norm"], 10),
        (ys["cross"], 0.9, cross, FILL["attn"], 10),
        (ys["n2"], 0.45, "Add & Norm", FILL["norm"], 10),
        (ys["ffn"], 0.72, ffn, FILL["ffn"], 10),
        (ys["n3"], 0.45, "Add & Norm", FILL["norm"], 10),
    ]
    fig, ax = _layer("decoder", (8.2, 10.1), cx, bw, blocks, "y  (B, Lt, d_model)",
                     "out  (B, Lt, d_model)")
    mx = 6.95  # masks and memory, on the right
    box(ax, mx, ys["self"], 1.9, 0.9,
        "causal | padding\n(B, 1, Lt, Lt)\ndecoder_self_mask", FILL["mask"], size=9,
        style="mono")
    arrow(ax, [(mx - 0.95, ys["self"]), (cx + bw / 2, ys["self"])])
    box(ax, mx, ys["cross"] + 0.62, 1.9, 0.66, "memory\n(B, Ls, d_model)",
        FILL["token"], size=9, style="mono", edge=MEMORY, lw=1.6)
    arrow(ax, [(mx - 0.95, ys["cross"] + 0.62), (5.55, ys["cross"] + 0.62),
               (5.55, ys["cross"] + 0.17), (cx + bw / 2, ys["cross"] + 0.17)],
          color=MEMORY, lw=1.6)
    text(ax, mx, ys["cross"] + 1.02, "the encoder's output", size=9, color=MEMORY,
         va="bottom")
    box(ax, mx, ys["cross"] - 0.62, 1.9, 0.66, "source padding\n(B, 1, 1, Ls)",
        FILL["mask"], size=9, style="mono")
    arrow(ax, [(mx - 0.95, ys["cross"] - 0.62), (5.55, ys["cross"] - 0.62),
               (5.55, ys["cross"] - 0.17), (cx + bw / 2, ys["cross"] - 0.17)])
    return fig


def draw_teacher_forcing():
    """The shift between the decoder's input and the targets it is trained on."""
    fig, ax = canvas(9.2, 6.7)
    text(ax, 4.6, 6.42, "Teacher forcing: the decoder reads the target shifted right",
         size=13, style="bold")
    sentence = ["<bos>", "ein", "hund", "lief", "auf", "<eos>"]
    colour = dict(
        zip(sentence,
            ["#e3e3e3", "#f8c9ca", "#c4e3f3", "#d6ecd2", "#f9d9b0", "#dcd0f3"]))
    w, step, x0 = 1.0, 1.14, 2.55  # token boxes; x0 is the centre of position 0
    xs = [x0 + k * step for k in range(6)]

    def token(x, y, tok, h=0.46, size=9.5, fill=None):
        box(ax, x, y, w, h, tok, fill or colour.get(tok, "#ffffff"), size=size,
            style="mono")

    # The whole target sentence, and its two slices.
    yt = 5.2
    text(ax, xs[0] - 0.7, yt, "tgt", size=10, style="bold", ha="right")
    for x, tok in zip(xs, sentence):
        token(x, yt, tok)

    def bracket(x_from, x_to, y, up, label):
        tick = 0.12 if up else -0.12
        line(ax, [(x_from, y - tick), (x_from, y), (x_to, y), (x_to, y - tick)],
             color=GREY, lw=1.1)
        text(ax, (x_from + x_to) / 2, y + (0.07 if up else -0.07), label, size=9,
             style="mono", color=GREY, va="bottom" if up else "top")

    bracket(xs[1] - w / 2, xs[5] + w / 2, yt + 0.38, True,
            "tgt_out = tgt[:, 1:]  (targets)")
    bracket(xs[0] - w / 2, xs[4] + w / 2, yt - 0.38, False,
            "tgt_in = tgt[:, :-1]  (decoder input)")

    # Aligned by position: what the decoder reads and what it must predict.
    y_in, y_dec, y_out = 1.85, 2.8, 3.75
    for i in range(5):
        token(xs[i], y_in, sentence[i])
        token(xs[i], y_out, sentence[i + 1])
        text(ax, xs[i], y_in - 0.4, f"position {i}", size=8.5, color=GREY)
        arrow(ax, [(xs[i], y_in + 0.23), (xs[i], y_dec - 0.36)], color=GREY, lw=1.0)
        arrow(ax, [(xs[i], y_dec + 0.36), (xs[i], y_out - 0.23)], color=GREY, lw=1.0)
    box(
        ax, (xs[0] + xs[4]) / 2, y_dec, xs[4] - xs[0] + w, 0.72,
        "decoder + output layer → logits (B, Lt, V)\n"
        "causal mask: position i reads tgt_in[0..i] only", FILL["attn"], size=9.5)
    text(ax, xs[0] - 0.7, y_in, "tgt_in", size=10, style="bold", ha="right")
    text(ax, xs[0] - 0.7, y_out, "tgt_out", size=10, style="bold", ha="right")
    text(ax, xs[0] - 0.7, y_out - 0.35, "the loss's\ntargets", size=8.5, ha="right",
         color=GREY, va="top")
    text(ax, xs[5], (y_in + y_out) / 2, "each word is\nthe target at\nposition i and\n"
         "the input at\nposition i + 1", size=9, color=GREY)

    # A padded sentence of the same batch: its padded targets do not count.
    yp_in, yp_out = 0.45, 0.95
    short_in = ["<bos>", "die", "katze", "<pad>", "<pad>"]
    short_out = ["die", "katze", "<eos>", "<pad>", "<pad>"]
    pale = {
        "<bos>": "#e3e3e3", "die": "#f8c9ca", "katze": "#c4e3f3", "<eos>": "#dcd0f3",
        "<pad>": "#ffffff"
    }
    for i in range(5):
        token(xs[i], yp_in, short_in[i], h=0.36, size=9, fill=pale[short_in[i]])
        token(xs[i], yp_out, short_out[i], h=0.36, size=9, fill=pale[short_out[i]])
    for i in (3, 4):
        line(ax, [(xs[i] - w / 2 + 0.1, yp_out), (xs[i] + w / 2 - 0.1, yp_out)],
             color=MEMORY, lw=1.3)
    text(ax, xs[0] - 0.7, yp_out, "padded:\ntgt_out", size=9, ha="right", style="bold")
    text(ax, xs[0] - 0.7, yp_in, "tgt_in", size=9, ha="right", style="bold")
    text(ax, xs[5], (yp_in + yp_out) / 2,
         "padded targets:\nignored by the loss\n(chapter 9)", size=9, color=MEMORY)
    line(ax, [(0.3, 1.35), (8.9, 1.35)], color="#cccccc", lw=0.8)
    return fig


@dataclass(frozen=True)
class Diagram:
    draw: Callable
    alt: str
    width: int  # display width in pixels, in the chapters


DIAGRAMS = {
    "architecture": Diagram(draw_architecture, width=720, alt=(
        "The Transformer drawn as two columns of blocks. Encoder, left: source "
        "tokens, input embedding, positional encoding, then an encoder layer repeated "
        "N times: multi-head self-attention, Add & Norm, feed-forward, Add & Norm, "
        "with a residual arrow around each sublayer into its Add & Norm. Decoder, "
        "right: target tokens shifted right, output embedding, positional encoding, "
        "then a decoder layer repeated N times: masked self-attention, Add & Norm, "
        "cross-attention reading the encoder's output (the memory), Add & Norm, "
        "feed-forward, Add & Norm, each with a residual arrow; then a linear layer to "
        "logits and the loss. Each block carries the number of the chapter that "
        "builds it.")),
    "attention_flow": Diagram(draw_attention_flow, width=760, alt=(
        "Scaled dot-product attention as a column of steps: Q of shape (B, Lq, d_k) "
        "and K of shape (B, Lk, d_k) are multiplied, Q times K transposed, giving "
        "scores (B, Lq, Lk); the scores are divided by the square root of d_k; the "
        "mask (True = blocked) sets blocked scores to minus infinity; a softmax over "
        "the keys turns each row into weights that sum to 1; the weights times V (B, "
        "Lk, d_v) give the context (B, Lq, d_v). Beside the steps, a 4 by 4 example "
        "for 'the cat <pad> <pad>': the scores, the same scores with the two padded "
        "key columns set to minus infinity, and the weights, zero in those columns.")),
    "heads_split_merge": Diagram(draw_heads_split_merge, width=760, alt=(
        "The projected queries of one sentence, a 4 by 6 table whose entry at "
        "position p and feature f is 10p + f, with its columns coloured in three "
        "pairs, one per head. view(B, L, H, d_k) then transpose(1, 2) cut it into "
        "three 4 by 2 tables, one per head, each holding all four tokens. Attention "
        "runs in each head; the heads' context tables are transposed back and "
        "reshaped into one 4 by 6 table (the concat) and projected by out_proj. "
        "Below, the trap: view(B, H, L, d_k) alone gives head 0 the entries 0 1, 2 3, "
        "4 5, 10 11: token 0's six features and two of token 1's.")),
    "encoder_layer": Diagram(draw_encoder_layer, width=560, alt=(
        "One encoder layer, bottom to top: the input x (B, L, d_model) goes into "
        "multi-head self-attention (queries, keys and values all x, padding mask (B, "
        "1, 1, L)) with dropout, then Add & Norm, where a residual arrow brings x "
        "around the attention and adds it before LayerNorm; then a feed-forward "
        "network (Linear to d_ff, ReLU, Linear back to d_model, dropout) and a second "
        "Add & Norm with its own residual arrow. The output has the input's shape, so "
        "N such layers stack.")),
    "decoder_layer": Diagram(draw_decoder_layer, width=600, alt=(
        "One decoder layer, bottom to top: the input y (B, Lt, d_model) goes into "
        "masked multi-head self-attention (causal or padding mask (B, 1, Lt, Lt)), "
        "Add & Norm; then cross-attention, whose queries come from the decoder and "
        "whose keys and values are the encoder's output, the memory (B, Ls, d_model), "
        "with the source padding mask (B, 1, 1, Ls); Add & Norm; then the "
        "feed-forward network and a third Add & Norm. A residual arrow goes around "
        "each of the three sublayers into its Add & Norm.")),
    "teacher_forcing": Diagram(draw_teacher_forcing, width=740, alt=(
        "Teacher forcing for the target sentence '<bos> ein hund lief auf <eos>'. The "
        "decoder input tgt_in is '<bos> ein hund lief auf' (all but the last token) "
        "and the targets are 'ein hund lief auf <eos>' (all but the first), so "
        "position i reads tgt_in up to i, through the causal mask, and is trained to "
        "predict targets[i], the next token. A padded sentence, '<bos> die katze "
        "<pad> <pad>' against 'die katze <eos> <pad> <pad>', shows that the padded "
        "targets are ignored by the loss.")),
}


# ------------------------------------------------------------------------------------
# Output: SVG files, PNG bytes, the <img> of a diagram cell
# ------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def render(name: str, fmt: str) -> bytes:
    """The diagram ``name`` as SVG or PNG bytes, the same on every machine."""
    with plt.rc_context(RC):
        fig = DIAGRAMS[name].draw()
        out = io.BytesIO()
        metadata = {"Date": None, "Creator": None
                    } if fmt == "svg" else {"Software": None}
        fig.savefig(out, format=fmt, dpi=120, facecolor=PANEL, metadata=metadata)
        plt.close(fig)
    return out.getvalue()


def write_svgs(folder: Path = IMAGES) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in DIAGRAMS:
        path = folder / f"{name}.svg"
        path.write_bytes(render(name, "svg"))
        paths.append(path)
    return paths


def image_html(name: str) -> str:
    """The <img> of a diagram cell: the PNG inline, so that Colab shows it too."""
    data = base64.b64encode(render(name, "png")).decode("ascii")
    alt = html.escape(DIAGRAMS[name].alt, quote=True)
    return (f'<img alt="{alt}" width="{DIAGRAMS[name].width}" '
            f'src="data:image/png;base64,{data}">')


def split_cell(source: str) -> tuple[str, str, str] | None:
    """(name, image part, caption part) of a diagram cell's source, or None."""
    lines = source.split("\n")
    match = MARKER.match(lines[0].strip()) if lines else None
    if not match:
        return None
    for i, line_ in enumerate(lines[1:], start=1):
        if line_.startswith(CAPTION):
            return match.group(1), "\n".join(lines[1:i]), "\n".join(lines[i:])
    return match.group(1), "\n".join(lines[1:]), ""


def cell_source(name: str, caption: str) -> str:
    return f"<!-- diagram: {name} -->\n{image_html(name)}\n\n{caption}"


def diagram_cells(path: Path):
    """(index, name, caption, cell) for every diagram cell of a notebook."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for index, cell in enumerate(nb.cells):
        parts = split_cell(cell.source) if cell.cell_type == "markdown" else None
        if parts:
            yield index, parts[0], parts[2], cell


def placements(paths) -> dict[str, list[str]]:
    """The files that place each diagram: notebooks' diagram cells, SVGs in Markdown."""
    found = {name: [] for name in DIAGRAMS}
    for path in map(Path, paths):
        if path.suffix == ".ipynb":
            names = [name for _, name, _, _ in diagram_cells(path)]
        else:
            names = re.findall(r"images/([a-z_]+)\.svg",
                               path.read_text(encoding="utf-8"))
        for name in names:
            found.setdefault(name, []).append(path.name)
    return found


def sync(paths) -> list[str]:
    """Rewrite the image of every diagram cell; returns the notebooks that changed."""
    import nbformat

    changed = []
    for path in map(Path, paths):
        if path.suffix != ".ipynb":
            continue
        nb = nbformat.read(path, as_version=4)
        dirty = False
        for cell in nb.cells:
            parts = split_cell(cell.source) if cell.cell_type == "markdown" else None
            if not parts:
                continue
            name, _, caption = parts
            if name not in DIAGRAMS:
                raise SystemExit(
                    f"{path}: no diagram named {name!r} (known: {list(DIAGRAMS)})")
            new = cell_source(name, caption)
            if new != cell.source:
                cell.source, dirty = new, True
        if dirty:
            nbformat.write(nb, path)
            changed.append(str(path))
    return changed


def check(paths, images: Path = IMAGES) -> list[str]:
    """What is out of date: SVGs, diagram cells; and unknown or unplaced names."""
    problems = []
    for name in DIAGRAMS:
        svg = images / f"{name}.svg"
        if not svg.is_file() or svg.read_bytes() != render(name, "svg"):
            problems.append(
                f"{svg.relative_to(ROOT) if svg.is_relative_to(ROOT) else svg} "
                "is stale: run python scripts/draw_diagrams.py")
    for path in map(Path, paths):
        if path.suffix != ".ipynb":
            continue
        for index, name, caption, cell in diagram_cells(path):
            if name not in DIAGRAMS:
                problems.append(f"{path.name} cell {index}: no diagram named {name!r}")
            elif not caption:
                problems.append(
                    f"{path.name} cell {index}: no '{CAPTION}' caption paragraph")
            elif cell.source != cell_source(name, caption):
                problems.append(f"{path.name} cell {index}: {name} is out of date: run "
                                "python scripts/draw_diagrams.py sync book/*.ipynb")
    for name, where in placements(paths).items():
        if not where:
            problems.append(f"{name} is placed in none of the files given")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", nargs="?", choices=("draw", "sync", "check"),
                        default="draw")
    parser.add_argument("paths", nargs="*",
                        help="chapters (and intro.md) for sync and check")
    parser.add_argument("--out", type=Path, default=IMAGES,
                        help="folder for the SVG files")
    args = parser.parse_args(argv)
    if args.command == "draw":
        for path in write_svgs(args.out):
            print(f"wrote {path}")
        return 0
    if args.command == "sync":
        for path in sync(args.paths):
            print(f"synced {path}")
        return 0
    problems = check(args.paths)
    print("\n".join(problems) if problems else "diagrams: all in sync")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
