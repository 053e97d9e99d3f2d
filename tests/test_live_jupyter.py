"""A chapter in a live JupyterLab, driven by a headless Chromium as a student would use it.

The test starts JupyterLab on localhost (no token, private settings and runtime folders) on a
private copy of chapter 3, opens it, and checks what a student sees:
- opening the notebook does not mark it modified (it is stored in the form Lab writes back);
- the exercises read as text, and their solutions start collapsed;
- after "Run All", the mask explorer shows its controls and its figure, and moving a slider
  redraws the figure;
- no JavaScript error appears in the page's console.
It skips, saying why, only where there is no Chromium (under CI's TT_REQUIRE_ALL=1 it fails).
Every wait has a timeout, so a broken server or browser fails the test instead of hanging it.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import need, tool

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "book" / "03_masks.ipynb"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--no-first-run"]
# Lab settings for a quiet, testable page: no news or update checks (no network here), and every
# cell in the DOM (Lab otherwise renders only the cells in view).
SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        {"fetchNews": "false", "checkForUpdates": False},
}


# In the notebook's model (not the DOM, where collapsed cells hide their prompts): every code cell
# has an execution count and the kernel is idle.
EXECUTION_COUNTS = """() => window.jupyterapp.shell.currentWidget.content.widgets
    .filter(cell => cell.model.type === 'code').map(cell => cell.model.executionCount)"""
RUN_FINISHED = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
    const counts = panel.content.widgets.filter(cell => cell.model.type === 'code')
        .map(cell => cell.model.executionCount);
    return kernel && kernel.status === 'idle' && counts.length > 0
        && counts.every(count => count !== null);
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, seconds: float, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with code {server.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"JupyterLab did not answer at {url} within {seconds} s")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    need(chromium, "no Chromium on this machine (apt-get install chromium); the live Jupyter test "
                   "needs one")
    jupyter = tool("jupyter")
    need(jupyter, "JupyterLab is not installed (pip install -r requirements.txt)")
    home = tmp_path_factory.mktemp("lab")
    notebooks = home / "book"
    notebooks.mkdir()
    shutil.copy(CHAPTER, notebooks / CHAPTER.name)
    for name, values in SETTINGS.items():
        target = home / "settings" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(values))
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "JUPYTER_CONFIG_DIR": str(home / "config"),
           "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    port = free_port()
    command = [jupyter, "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
               f"--ServerApp.root_dir={notebooks}", "--IdentityProvider.token=",
               "--ServerApp.password=", "--LabApp.expose_app_in_browser=True",
               "--ServerApp.disable_check_xsrf=True"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    log = open(home / "lab.log", "w")
    server = subprocess.Popen(command, cwd=notebooks, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(f"http://127.0.0.1:{port}/api/status", 90, server)
        yield {"url": f"http://127.0.0.1:{port}", "chromium": chromium,
               "notebook": notebooks / CHAPTER.name, "log": home / "lab.log"}
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def solution_lines(path: Path) -> list[str]:
    """One distinctive line from the body of every solution cell (Lab previews only the first)."""
    import nbformat

    cells = nbformat.read(path, as_version=4).cells
    solutions = [c for c in cells if "solution" in c.metadata.get("tags", [])]
    elsewhere = "\n".join(c.source for c in cells if c not in solutions)
    lines = []
    for cell in solutions:
        body = [line for line in cell.source.splitlines()[1:] if len(line.strip()) > 20
                and not line.startswith(("<", "#")) and line.strip() not in elsewhere]
        lines += body[:1]
    assert lines, "the chapter has no solution cells to check"
    return lines


def test_a_chapter_runs_in_jupyterlab_and_its_explorer_redraws(lab):
    import playwright.sync_api as playwright

    stored = lab["notebook"].read_bytes()
    errors = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=lab["chromium"], args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(60_000)
            page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
            page.on("console", lambda msg: errors.append(f"console: {msg.text}")
                    if msg.type == "error" else None)
            page.goto(f"{lab['url']}/lab/tree/{CHAPTER.name}")
            page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=90_000)
            page.wait_for_function("() => window.jupyterapp && document.querySelector("
                                   "'.jp-NotebookPanel .jp-Notebook-cell') !== null")
            # Wait until the markdown is rendered and the kernel is up, then let Lab settle: a
            # dirty mark would appear by now.
            page.wait_for_function("() => document.querySelector('.jp-NotebookPanel')"
                                   ".innerText.includes('Exercise.')", timeout=90_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']",
                                   timeout=90_000)
            page.wait_for_timeout(2_000)

            # Opened, not modified: the tab of a changed document carries .jp-mod-dirty.
            assert page.locator(".lm-TabBar-tab.jp-mod-dirty").count() == 0, \
                "opening the chapter marked it modified: it is not stored in the form Lab writes"

            # Exercises read as text (no raw directive syntax), solutions start collapsed.
            text = page.locator(".jp-NotebookPanel").inner_text()
            assert "Exercise." in text
            assert ":label:" not in text and ":class: dropdown" not in text
            for line in solution_lines(lab["notebook"]):
                assert line not in text, f"a solution is in plain view: {line!r}"
            collapsed = page.locator(".jp-Cell .jp-InputPlaceholder").count()
            assert collapsed >= 6, f"expected every solution collapsed, found {collapsed}"

            # Run every cell, as a student would with Run > Run All Cells.
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            try:
                page.wait_for_function(RUN_FINISHED,
                                       timeout=int(os.environ.get("TT_LAB_RUN_TIMEOUT", "240")) * 1000)
            except playwright.TimeoutError:
                prompts = page.evaluate(EXECUTION_COUNTS)
                page.screenshot(path=str(lab["log"].with_name("run-all.png")), full_page=True)
                raise AssertionError(f"Run All did not finish; prompts: {prompts}; "
                                     f"see {lab['log']}") from None
            assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
                                " .jp-RenderedText:has-text('Traceback')").count() == 0
            slider = page.locator(".widget-slider").first
            slider.wait_for(timeout=60_000)
            image = page.locator(".widget-image").first
            image.wait_for()
            before = image.get_attribute("src")
            # Move the "source length" slider one step with the keyboard, as a student can.
            handle = page.locator(".widget-slider .noUi-handle").first
            handle.focus()
            page.keyboard.press("ArrowRight")
            page.wait_for_function("(before) => document.querySelector('.widget-image').src "
                                   "!== before", arg=before, timeout=60_000)
            readout = page.locator(".widget-slider .widget-readout").first.inner_text()
            assert readout.strip() == "5", f"the slider moved to {readout!r}, not from 4 to 5"
        finally:
            browser.close()
    benign = ("favicon",)
    errors = [e for e in errors if not any(b in e for b in benign)]
    assert not errors, "JavaScript errors in JupyterLab:\n" + "\n".join(errors)
    assert lab["notebook"].read_bytes() == stored, "JupyterLab wrote the notebook back"
