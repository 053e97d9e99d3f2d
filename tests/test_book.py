"""The HTML book: a strict build, then every page in headless Chromium with no network.

The build goes to a temporary folder (or set BOOK_HTML=path/to/_build/html to test a build you
already have). Screenshots of every page land in _build/screenshots/ for a person to look at.
"""
from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from conftest import need, tool

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import draw_diagrams  # noqa: E402
SCREENSHOTS = ROOT / "_build" / "screenshots"
# the CLI installed next to this Python (jupyter_book has no __main__ module)
JUPYTER_BOOK = tool("jupyter-book") or "jupyter-book"
CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--no-first-run", "--disable-quic", "--disable-component-update", "--disable-sync"]


def toc_pages() -> list[str]:
    """Every page of _toc.yml, as paths without suffix (e.g. 'book/03_masks')."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [chapter["file"] for chapter in part["chapters"]]
    return pages


def diagrams_on(page_path: str) -> int:
    """How many diagrams (scripts/draw_diagrams.py) the page places: cells, or SVG figures."""
    source = next(ROOT.glob(f"{page_path}.*"), None)
    if source is None or source.suffix not in {".ipynb", ".md"}:
        return 0
    return sum(len(where) for where in draw_diagrams.placements([source]).values())


def chapter_notebooks() -> list[Path]:
    return sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))


def test_every_chapter_is_in_the_toc():
    listed = set(toc_pages())
    missing = [nb.name for nb in chapter_notebooks() if f"book/{nb.stem}" not in listed]
    assert not missing, f"chapters missing from _toc.yml: {missing}"


@pytest.mark.parametrize("config", ["_config.yml", "_config_student.yml"])
def test_the_build_ignores_a_virtualenv_in_the_checkout(tmp_path, config):
    # The README's quick start makes .venv/ at the repository root, then builds the book there;
    # Sphinx reads every source file it finds that exclude_patterns does not exclude.
    from sphinx.util.matching import get_matching_files

    for name in [".venv/lib/python3.11/site-packages/pkg/README.md", "venv/lib/x/README.md",
                 "env/lib/python3.11/site-packages/pkg/LICENSE.md", "book/intro.md",
                 "book/01_word_embedding.ipynb"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("---\n: not yaml\n---\n")
    patterns = yaml.safe_load((ROOT / config).read_text())["exclude_patterns"]
    found = sorted(get_matching_files(tmp_path, exclude_patterns=patterns))
    assert found == ["book/01_word_embedding.ipynb", "book/intro.md"], found


@pytest.fixture(scope="session")
def built_html(tmp_path_factory) -> Path:
    given = os.environ.get("BOOK_HTML")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("book")
    result = subprocess.run(
        [JUPYTER_BOOK, "build", str(ROOT), "-W", "-n", "--keep-going",
         "--path-output", str(out)],
        capture_output=True, text=True, timeout=900)
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"strict build failed:\n{log[-6000:]}"
    return out / "_build" / "html"


def test_strict_build_has_every_page(built_html):
    for page in toc_pages():
        assert (built_html / f"{page}.html").is_file(), f"{page}.html was not built"
    assert (built_html / "_static" / "mathjax" / "tex-chtml.js").is_file(), "MathJax is not served locally"


@pytest.fixture(scope="session")
def server(built_html):
    handler = functools.partial(_QuietHandler, directory=str(built_html))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")  # closed after this module: Playwright's event loop must not
def browser():                    # outlive it (nbclient in later tests calls asyncio.run)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    need(chromium, "no Chromium on this machine (apt-get install chromium); the browser test needs one")
    try:
        import playwright.sync_api as playwright
    except ImportError:
        need(False, "Playwright is not installed (pip install -r requirements.txt)")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@pytest.mark.parametrize("page_path", toc_pages())
def test_page_renders_offline(page_path, server, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems = []
    page.on("pageerror", lambda error: problems.append(f"JavaScript error: {error}"))
    page.on("console", lambda msg: msg.type == "error" and problems.append(f"console error: {msg.text}"))
    page.on("requestfailed", lambda req: problems.append(f"request failed: {req.url} ({req.failure})"))
    page.on("response", lambda resp: resp.status >= 400 and problems.append(f"HTTP {resp.status}: {resp.url}"))

    def only_local(route):
        if route.request.url.startswith(server):
            route.continue_()
        else:  # the book must not need the network: record and refuse
            problems.append(f"request to the network: {route.request.url}")
            route.abort()

    page.route("**/*", only_local)
    page.goto(f"{server}/{page_path}.html", wait_until="load")
    has_math = page.evaluate("document.querySelectorAll('.math, div.math, span.math').length") > 0
    if has_math:
        page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=20000)
        page.evaluate("MathJax.startup.promise")
        typeset = page.evaluate("document.querySelectorAll('mjx-container').length")
        errors = page.evaluate("document.querySelectorAll('mjx-merror').length")
        assert typeset > 0, "the page has math but MathJax typeset none of it"
        assert errors == 0, f"MathJax reported {errors} errors"
        # A display equation wider than the text column is cut off at its right edge
        # (MathJax does not break lines): split it, e.g. with \begin{aligned}.
        too_wide = page.evaluate(
            """() => Array.from(document.querySelectorAll('mjx-container[display="true"]'))
                .map(c => [c.querySelector('mjx-math').getBoundingClientRect().width,
                           c.getBoundingClientRect().width, c.textContent.slice(0, 60)])
                .filter(([inner, outer]) => inner > outer + 1)""")
        assert not too_wide, f"display equations wider than the page (px, px, text): {too_wide}"
    broken = page.evaluate(
        "Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)")
    assert not broken, f"images that did not load: {broken}"
    shown = page.evaluate(  # diagram cells hold an inline PNG with alt text; intro.md an SVG
        "Array.from(document.images).filter(i => i.complete && i.naturalWidth > 0 && i.alt &&"
        " (i.src.startsWith('data:image/png;base64,') || i.src.endsWith('.svg'))).length")
    assert shown == diagrams_on(page_path), f"{diagrams_on(page_path)} diagrams placed, {shown} shown"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{Path(page_path).name}.png"), full_page=False)
    page.close()
    assert not problems, "\n".join(problems)


#: Code cells allowed to scroll sideways at 1280 px: none. wide_code.css (book/_ext/static) gives
#: code cells about 920 px there, 105 columns of the code font: every line within the project's
#: 100-column limit fits. A cell listed here as "page: first line" would need a reason.
CODE_THAT_MAY_SCROLL: set[str] = set()


@pytest.mark.parametrize("page_path", toc_pages())
def test_code_cells_show_whole_lines(page_path, server, browser):
    # At 1280 px the theme's text column alone holds about 80 columns of code, so before
    # wide_code.css most cells scrolled sideways (309 in the book); the code cells now reach into
    # the right margin, and the page itself must not become wider than the window.
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(server)
               else route.abort())
    page.goto(f"{server}/{page_path}.html", wait_until="load")
    scrolling = page.evaluate(
        """() => Array.from(document.querySelectorAll('div.cell_input pre'))
            .filter(pre => pre.scrollWidth > pre.clientWidth + 1)
            .map(pre => [pre.scrollWidth, pre.clientWidth,
                         pre.textContent.split('\\n')[0].slice(0, 60)])""")
    page_width = page.evaluate("document.documentElement.scrollWidth")
    page.close()
    unexpected = [cell for cell in scrolling
                  if f"{page_path}: {cell[2]}" not in CODE_THAT_MAY_SCROLL]
    assert not unexpected, ("code cells that scroll sideways at 1280 px "
                            f"(content px, shown px, first line): {unexpected}")
    assert page_width <= 1280, f"the page is {page_width} px wide in a 1280 px window"
