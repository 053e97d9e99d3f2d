"""Sphinx extension for the student build of the book: remove every solution, code cells included.

sphinx-exercise's own ``hide_solutions: true`` drops ``{solution}`` directives, but with *gated*
solutions (``{solution-start}`` ... ``{solution-end}``, which the chapters use so that code cells
can belong to a solution) it leaves the content between the markers in the page and then fails
on the orphaned ``solution-end`` node (sphinx-exercise 1.2.1: "NotImplementedError: ... departing
unknown node type: solution_end_node").

This extension makes ``hide_solutions: true`` work for both kinds. When it is on, it switches
sphinx-exercise's option off (so that gated solutions are first merged into ordinary solution
nodes, their code cells inside) and then deletes every solution node from the document, right
after the merge and before anything is indexed or written. Use it in the student config::

    sphinx:
      extra_extensions: [sphinx_exercise, ..., transformer_lib.assignments.hide_solutions]
      config:
        hide_solutions: true

With ``hide_solutions`` false (the normal build), the extension does nothing.
"""
from __future__ import annotations

from sphinx.transforms import SphinxTransform


class RemoveSolutions(SphinxTransform):
    """Delete solution nodes (after sphinx-exercise merged the gated ones, priority 10)."""

    default_priority = 11

    def apply(self, **kwargs) -> None:
        if not getattr(self.app, "_tt_remove_solutions", False):
            return
        from sphinx_exercise.nodes import solution_end_node, solution_node, solution_start_node

        for kind in (solution_node, solution_start_node, solution_end_node):
            for node in list(self.document.findall(kind)):
                node.parent.remove(node)


def _take_over(app, config) -> None:
    app._tt_remove_solutions = bool(config.hide_solutions)
    if app._tt_remove_solutions:
        # Let sphinx-exercise build every solution node; RemoveSolutions deletes them afterwards.
        config.hide_solutions = False


def setup(app):
    app.setup_extension("sphinx_exercise")
    app.connect("config-inited", _take_over, priority=900)
    app.add_transform(RemoveSolutions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
