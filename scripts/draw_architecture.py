"""Draw the book's map: the Transformer of the paper's figure 1, each block labelled with the
chapter that builds it. Writes book/images/architecture.png.

    python scripts/draw_architecture.py
"""
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

COLORS = {"attn": "#f6d6ad", "ffn": "#b9e3c6", "norm": "#f3f0a8", "embed": "#f7c6c7",
          "pe": "#ffffff", "out": "#c9d7f2", "loss": "#e0d4f5"}


def box(ax, x, y, w, h, text, color, chapter=None):
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                facecolor=color, edgecolor="#333333", linewidth=1.2))
    ax.text(x, y, text, ha="center", va="center", fontsize=9.5)
    if chapter is not None:
        ax.text(x + w / 2 + 0.08, y, f"{chapter}", ha="left", va="center", fontsize=8.5,
                color="white", fontweight="bold",
                bbox=dict(boxstyle="round,pad=0.3", facecolor="#3d405b", edgecolor="none"))


def arrow(ax, x0, y0, x1, y1):
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                arrowprops=dict(arrowstyle="-|>", color="#333333", linewidth=1.1, shrinkA=0, shrinkB=0))


def main(out=Path(__file__).resolve().parents[1] / "book" / "images" / "architecture.png"):
    fig, ax = plt.subplots(figsize=(8.6, 9.6))
    ax.set_xlim(0, 8.6)
    ax.set_ylim(0, 9.7)
    ax.axis("off")
    enc_x, dec_x, w = 2.1, 6.2, 2.6

    # Encoder column
    box(ax, enc_x, 0.45, w, 0.5, "source tokens\n(padded batch)", "#eeeeee")
    box(ax, enc_x, 1.35, w, 0.55, "Input embedding", COLORS["embed"], 1)
    box(ax, enc_x, 2.2, w, 0.5, "+ positional encoding", COLORS["pe"], 2)
    ax.add_patch(FancyBboxPatch((enc_x - 1.55, 2.75), 3.1, 3.55, boxstyle="round,pad=0.02",
                                facecolor="#f7f7f7", edgecolor="#888888", linestyle="--"))
    ax.text(enc_x - 1.45, 6.15, "Encoder layer ×N  (7)", fontsize=9, va="top", color="#555555")
    box(ax, enc_x, 3.3, w, 0.6, "Multi-head\nself-attention", COLORS["attn"], "4, 5")
    box(ax, enc_x, 4.1, w, 0.4, "Add & Norm", COLORS["norm"], 6)
    box(ax, enc_x, 4.85, w, 0.55, "Feed-forward", COLORS["ffn"], 6)
    box(ax, enc_x, 5.6, w, 0.4, "Add & Norm", COLORS["norm"], 6)
    for y0, y1 in ((0.7, 1.07), (1.62, 1.95), (2.45, 3.0), (3.6, 3.9), (4.3, 4.57), (5.12, 5.4)):
        arrow(ax, enc_x, y0, enc_x, y1)

    # Decoder column
    box(ax, dec_x, 0.45, w, 0.5, "target tokens, shifted right\n(BOS y1 y2 ...)", "#eeeeee")
    box(ax, dec_x, 1.35, w, 0.55, "Output embedding", COLORS["embed"], 1)
    box(ax, dec_x, 2.2, w, 0.5, "+ positional encoding", COLORS["pe"], 2)
    ax.add_patch(FancyBboxPatch((dec_x - 1.55, 2.75), 3.1, 5.0, boxstyle="round,pad=0.02",
                                facecolor="#f7f7f7", edgecolor="#888888", linestyle="--"))
    ax.text(dec_x - 1.45, 7.6, "Decoder layer ×N  (8)", fontsize=9, va="top", color="#555555")
    box(ax, dec_x, 3.3, w, 0.6, "Masked multi-head\nself-attention", COLORS["attn"], "3, 5")
    box(ax, dec_x, 4.05, w, 0.38, "Add & Norm", COLORS["norm"], 6)
    box(ax, dec_x, 4.8, w, 0.6, "Multi-head\ncross-attention", COLORS["attn"], "3, 5")
    box(ax, dec_x, 5.55, w, 0.38, "Add & Norm", COLORS["norm"], 6)
    box(ax, dec_x, 6.3, w, 0.55, "Feed-forward", COLORS["ffn"], 6)
    box(ax, dec_x, 7.05, w, 0.38, "Add & Norm", COLORS["norm"], 6)
    for y0, y1 in ((0.7, 1.07), (1.62, 1.95), (2.45, 3.0), (3.6, 3.86), (4.24, 4.5), (5.1, 5.36),
                   (5.74, 6.02), (6.57, 6.86), (7.24, 8.0)):
        arrow(ax, dec_x, y0, dec_x, y1)
    # memory: the encoder's output goes up, across, and into every decoder layer's cross-attention
    route_x = dec_x - w / 2 - 0.35
    ax.plot([enc_x, enc_x, route_x, route_x], [5.8, 6.75, 6.75, 4.8], color="#c1121f", linewidth=1.6)
    arrow_red = dict(arrowstyle="-|>", color="#c1121f", linewidth=1.6, shrinkA=0, shrinkB=0)
    ax.annotate("", xy=(dec_x - w / 2, 4.8), xytext=(route_x, 4.8), arrowprops=arrow_red)
    ax.text((enc_x + route_x) / 2, 6.85, "memory: keys and values\nfor cross-attention", ha="center",
            va="bottom", fontsize=8.5, color="#c1121f")
    box(ax, dec_x, 8.3, w, 0.5, "Linear + softmax", COLORS["out"])
    box(ax, dec_x, 9.2, w + 0.3, 0.55, "loss masking, label smoothing,\nlearning-rate schedule", COLORS["loss"], 9)
    arrow(ax, dec_x, 8.55, dec_x, 8.92)
    ax.text(enc_x, 8.75, "Chapter 10 trains it all on a real task;\nchapter 11 catalogues the classic bugs.",
            ha="center", va="center", fontsize=9.5, style="italic")
    ax.set_title("The Transformer, and the chapter that builds each part", fontsize=12)
    fig.savefig(out, dpi=110, bbox_inches="tight", metadata={"Software": None})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
