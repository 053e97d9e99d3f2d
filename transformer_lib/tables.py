"""Tables for the chapters: HTML in Jupyter and the book, aligned text everywhere else.

A ``Table`` is what a chapter cell returns to show rows of names or numbers. Jupyter
displays its ``_repr_html_``; its ``repr`` is the same table as plain text, which is what
a terminal prints and what nbval compares, so the stored output checks the contents and
not just "an HTML object". Model code never imports this module.
"""
from __future__ import annotations

import html
from collections.abc import Sequence


class Table:
    """``header`` (column titles) and ``rows`` (lists of strings, one per row).

    The columns whose index is in ``code`` are set in a monospaced font in HTML
    (names from code).
    """

    def __init__(self, header: Sequence[str], rows: Sequence[Sequence[str]],
                 code: Sequence[int] = ()):
        self.header = [str(h) for h in header]
        self.rows = [[str(cell) for cell in row] for row in rows]
        for i, row in enumerate(self.rows):
            if len(row) != len(self.header):
                raise ValueError(f"row {i} has {len(row)} cells, the header "
                                 f"{len(self.header)}")
        self.code = set(code)

    def __repr__(self) -> str:
        lines = [self.header] + self.rows
        widths = [max(len(line[j]) for line in lines) for j in range(len(self.header))]

        def text(line):
            return "  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip()

        rule = "  ".join("-" * w for w in widths)
        return "\n".join([text(self.header), rule] + [text(row) for row in self.rows])

    def _repr_html_(self) -> str:
        def cell(j, value):
            value = html.escape(value)
            return f"<td><code>{value}</code></td>" if j in self.code else f"<td>{value}</td>"

        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.header)
        body = "".join("<tr>" + "".join(cell(j, v) for j, v in enumerate(row)) + "</tr>"
                       for row in self.rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def weight_table(pairs) -> Table:
    """The weight map of ``marian_weight_map`` as a table, one row per module (its
    weight and bias together), the layer number written ``{i}``, and which part of each
    tensor runs along ``d_model`` (the axis that ``to_marian`` reorders)."""
    rows = {}
    for theirs, ours, axis in pairs:
        theirs, ours = (n.replace(".layers.0.", ".layers.{i}.") for n in (theirs, ours))
        if "{i}" not in ours and ".layers." in ours:
            continue  # layers 1, 2, ...: the same rows as layer 0
        module, _, kind = ours.rpartition(".")  # kind: weight or bias
        if theirs.endswith("." + kind):  # not final_logits_bias, a name of its own
            theirs, ours = theirs[:-len(kind) - 1], module
        if axis is None:
            part = None
        elif kind == "bias" or "norm" in ours:  # a vector: its only axis is d_model
            part = kind
        else:
            part = f"{kind} {'columns' if axis == 1 else 'rows'}"
        rows.setdefault((theirs, ours), []).extend([part] if part else [])
    return Table(["Marian (Hugging Face)", "ours", "reordered along d_model"],
                 [[t, o, ", ".join(parts) or "-"] for (t, o), parts in rows.items()],
                 code=(0, 1))
