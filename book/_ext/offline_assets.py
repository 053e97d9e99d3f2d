"""Sphinx extension: make the HTML book work without a network, and without JavaScript errors.

MathJax normally comes from a CDN, so formulas stay raw LaTeX in a classroom with poor internet (or on
a machine with none). This extension copies MathJax 3, as shipped inside the PyPI package
``sphinx-mathjax-offline`` (whose own extension cannot be imported: its folder name has hyphens), into
the build's ``_static/mathjax``; ``_config.yml`` points ``mathjax_path`` at it.

It also widens code cells (``static/wide_code.css`` and ``.js``, served from the build's
``_static``): whole lines of code at 1280 px, no sideways scrolling.
"""
from __future__ import annotations

import os
from importlib import metadata

from docutils import nodes
from sphinx.util.fileutil import copy_asset

#: MathJax files the pages need: the TeX-to-CommonHTML bundle, its fonts, the extensions and
#: accessibility parts it may load lazily. The speech-rule engine ("sre", several MB) is left out.
NEEDED = ("tex-chtml.js", "output", "input", "a11y", "ui", "adaptors")


def mathjax_source() -> str:
    """The folder of MathJax files inside the installed sphinx-mathjax-offline distribution."""
    dist = metadata.distribution("sphinx-mathjax-offline")
    return str(dist.locate_file("sphinx-mathjax-offline/static/mathjax"))


def copy_mathjax(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    source = mathjax_source()
    target = os.path.join(app.outdir, "_static", "mathjax")
    for name in NEEDED:
        path = os.path.join(source, name)
        if os.path.isdir(path):
            copy_asset(path, os.path.join(target, name))
        else:
            os.makedirs(target, exist_ok=True)
            copy_asset(path, target)


def drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    """Keep one copy of each script. sphinx-thebe's set-up runs twice under jupyter-book 1, so its
    inline ``const THEBE_JS_URL = ...`` appears twice and the second copy is a JavaScript error."""
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        # an inline script's filename is None or "" depending on who added it
        key = (getattr(script, "filename", None) or "",
               repr(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique  # in place: later handlers (MathJax's) append to this very list


#: This folder's stylesheets and scripts, added to every HTML page.
STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
CSS_FILES = ("wide_code.css",)
JS_FILES = ("wide_code.js",)


def serve_static(app, config):
    """Copy ``static/`` into the build's ``_static`` (Sphinx copies each html_static_path entry)."""
    if STATIC not in config.html_static_path:
        config.html_static_path.append(STATIC)


def mark_code_cells_wide(app, doctree, docname):
    """Give each notebook code cell whose source is shown the class ``wide-code`` (wide_code.css).

    Not the theme's ``full-width``: that one widens from 992 px up, where the right margin is not
    there yet, and folds the contents only once the cell is a third of the way up the screen,
    after they have covered it."""
    for cell in doctree.findall(nodes.container):
        if cell.get("nb_element") != "cell_code" or "wide-code" in cell["classes"]:
            continue
        if any(inner.get("nb_element") == "cell_code_source"
               for inner in cell.findall(nodes.container)):
            cell["classes"].append("wide-code")


def setup(app):
    app.connect("build-finished", copy_mathjax)
    app.connect("config-inited", serve_static)
    for name in CSS_FILES:
        app.add_css_file(name)
    for name in JS_FILES:
        app.add_js_file(name, loading_method="defer")
    app.connect("doctree-resolved", mark_code_cells_wide)
    # Early: the event stops at the first handler that returns a value (emit_firstresult).
    app.connect("html-page-context", drop_duplicate_scripts, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
