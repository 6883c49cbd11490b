"""JupyterLab in a real browser (issue 18 part 4): the kit's progress bars render as ipywidgets.

Starts JupyterLab on 127.0.0.1 (a free port, a token, a temporary root folder and temporary Jupyter
config, runtime, settings and workspace folders, so the user's own settings play no part) over a one-cell
notebook whose kernelspec is the kit's (``mmsearch-kit``, :mod:`kit.kernel`), drives Debian's Chromium
headless through playwright (``executable_path``: no browser download), runs the cell and checks what a
researcher would see: an ipywidgets progress bar (``.widget-hprogress``) reading "demo" and "3/3", no
"IProgress not found" text (tqdm's fallback when ipywidgets is missing), and the kit's kernel in the
toolbar and in the server's session. A second notebook, the negative control, hides ipywidgets from its
kernel (``sys.modules["ipywidgets"] = None``: what a missing package does) and must show tqdm's red
"IProgress not found" and a text bar, which the same checks must catch. The screenshot is kept in the test's folder; with
``KIT_SCREENSHOT_DIR=docs/img`` it is also written as ``jupyterlab_progress.png`` (the docs' picture).

Skipped, with the reason, without Chromium, playwright, JupyterLab or the kit's kernel. About 15-30 s: a
server, a kernel and a browser start.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from kit.figures import chromium_path
from kit.kernel import KERNEL_DISPLAY_NAME, KERNEL_NAME

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

CELL = 'from kit.progress import progress\nfor _ in progress(range(3), desc="demo"):\n    pass'
FALLBACK_TEXT = "IProgress not found"  # tqdm.notebook's warning when ipywidgets cannot be imported
# the negative control: the kernel cannot import ipywidgets, so tqdm.auto falls back to text with the warning
NO_WIDGETS = 'import sys\nsys.modules["ipywidgets"] = None  # as if ipywidgets were not installed\n'
SERVER_START_S = 40.0
WIDGET_WAIT_MS = 30_000


def _skip_reason() -> str | None:
    if chromium_path() is None:
        return "no chromium binary (make setup installs the Debian package as root; elsewhere: apt-get install chromium)"
    for mod, extra in (("playwright", "dev"), ("jupyterlab", "dev")):
        try:
            __import__(mod)
        except ImportError:
            return f"{mod} is not installed (pip install -e '.[{extra}]')"
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec(KERNEL_NAME)
    except NoSuchKernel:
        return f"the kit's kernel {KERNEL_NAME!r} is not installed (make setup)"
    return None


SKIP = _skip_reason()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _notebook(path: Path, source: str = CELL) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": KERNEL_NAME, "display_name": KERNEL_DISPLAY_NAME, "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(source)]
    nbformat.write(nb, str(path))


def _get_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - 127.0.0.1 only
        return json.loads(r.read())


@pytest.fixture
def lab(tmp_path):
    """A running JupyterLab: yields ``(base_url, token, root)``; stopped (and its kernels with it) after."""
    root, jdir = tmp_path / "root", tmp_path / "jupyter"
    root.mkdir()
    _notebook(root / "demo.ipynb")
    _notebook(root / "fallback.ipynb", NO_WIDGETS + CELL)
    # no "official Jupyter news?" toast over the screenshot (and no request for it)
    settings = jdir / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false",
                                                                           "checkForUpdates": False}))
    # every cell in the DOM (no windowing: a cell scrolled out of view would have no outputs to check)
    tracker = jdir / "settings" / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    port, token = _free_port(), secrets.token_hex(16)
    # a kernel run as in JupyterLab (not headless); the kernels found as _skip_reason found them (data dir and
    # JUPYTER_PATH kept); the user's config, settings and workspaces left out
    env = {k: v for k, v in os.environ.items() if k not in ("KIT_HEADLESS", "KIT_PROGRESS")}
    env.update(JUPYTER_CONFIG_DIR=str(jdir / "config"), JUPYTER_RUNTIME_DIR=str(jdir / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(jdir / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(jdir / "workspaces"),
               PYTHONUNBUFFERED="1")
    log = (tmp_path / "lab.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip", "127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0",
         "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         "--LabApp.extension_manager=readonly",  # offline: no PyPI queries for the extension manager
         *(["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else [])],  # CI containers run as root
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            try:
                _get_json(f"{base}/api/status?token={token}")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start (exit {proc.poll()}):\n"
                                f"{(tmp_path / 'lab.log').read_text()[-3000:]}")
                time.sleep(0.3)
        yield base, token, root
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _save_screenshot(png: bytes, tmp_path: Path) -> Path:
    """The screenshot into the test's folder and, with ``KIT_SCREENSHOT_DIR``, there as a palette PNG."""
    import io

    from PIL import Image

    out = tmp_path / "jupyterlab_progress.png"
    out.write_bytes(png)
    if target := os.environ.get("KIT_SCREENSHOT_DIR"):
        Path(target).mkdir(parents=True, exist_ok=True)
        img = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=128)
        img.save(Path(target) / out.name, optimize=True)
    return out


def _run_notebook(page, base: str, token: str, name: str, tmp_path: Path, *, widget: bool) -> dict[str, str]:
    """Open ``name`` in JupyterLab, run its first cell, wait until it ran (and, with ``widget``, until a
    progress widget reads 3/3); return what the page shows: ``row`` (the widget bar's text, "" when none),
    ``outputs`` (the cell's output area), ``body`` (the whole page) and ``kernel`` (the toolbar's kernel)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    # ?reset: a fresh workspace, so only this notebook is open
    page.goto(f"{base}/lab/tree/{name}?reset&token={token}", wait_until="domcontentloaded", timeout=30_000)
    panel = page.locator(".jp-NotebookPanel:visible").first
    try:
        # the status bar reads "<kernel> | Idle" once the kernel's websocket is connected; a cell run before
        # that is not executed
        page.wait_for_function("t => document.body.innerText.includes(t)", arg=f"{KERNEL_DISPLAY_NAME} | Idle",
                               timeout=WIDGET_WAIT_MS)
        panel.locator(".jp-Cell .jp-InputArea-editor").first.click()
        page.keyboard.press("Shift+Enter")
        prompt = panel.locator(".jp-Cell .jp-InputPrompt").first
        page.wait_for_function("el => el.innerText.includes('[1]')", arg=prompt.element_handle(),
                               timeout=WIDGET_WAIT_MS)
        # tqdm.notebook's bar: an HBox of description, FloatProgress (.widget-hprogress) and counter
        row = panel.locator(".jp-OutputArea-output .widget-hbox").filter(has=page.locator(".widget-hprogress"))
        if widget:
            page.wait_for_function("el => /3\\/3/.test(el.innerText)", arg=row.first.element_handle(),
                                   timeout=WIDGET_WAIT_MS)
    except PlaywrightTimeout as e:  # say what the page showed instead of a bare timeout
        (tmp_path / "failed.png").write_bytes(page.screenshot())
        pytest.fail(f"{name}: {e.message.splitlines()[0]}; page text: {page.locator('body').inner_text()[-1500:]!r} "
                    f"(screenshot {tmp_path / 'failed.png'})")
    return {"row": row.first.inner_text() if row.count() else "",
            "outputs": panel.locator(".jp-OutputArea").first.inner_text(),
            "body": page.locator("body").inner_text(),
            "kernel": panel.locator(".jp-KernelName").first.inner_text().strip()}


def _problems(view: dict[str, str]) -> list[str]:
    """What a researcher would call broken in ``view`` (from :func:`_run_notebook`); [] when it is right."""
    out = []
    if not ("demo" in view["row"] and "3/3" in view["row"]):
        out.append(f"no ipywidgets progress bar reading 'demo' and '3/3' (widget text {view['row']!r})")
    if FALLBACK_TEXT in view["outputs"] or FALLBACK_TEXT in view["body"]:
        out.append(f"{FALLBACK_TEXT!r} shown: {view['outputs'][:300]!r}")
    if view["kernel"] != KERNEL_DISPLAY_NAME:
        out.append(f"kernel shown is {view['kernel']!r}, not the kit's {KERNEL_DISPLAY_NAME!r}")
    return out


@pytest.mark.skipif(SKIP is not None, reason=SKIP or "")
def test_progress_widget_renders_in_jupyterlab(lab, tmp_path):
    """The kit's bar renders as a widget under the kit's kernel; the negative control (ipywidgets hidden from
    the kernel, what a missing widget package looks like) must be caught by the same checks."""
    from playwright.sync_api import sync_playwright

    base, token, _ = lab
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            good = _run_notebook(page, base, token, "demo.ipynb", tmp_path, widget=True)
            png = page.screenshot(full_page=False)
            fallback = _run_notebook(page, base, token, "fallback.ipynb", tmp_path, widget=False)
            (tmp_path / "fallback.png").write_bytes(page.screenshot())  # what a missing ipywidgets looks like
        finally:
            browser.close()
    shot = _save_screenshot(png, tmp_path)
    assert _problems(good) == [], good
    caught = _problems(fallback)
    assert len(caught) == 2 and FALLBACK_TEXT in caught[1] and "3/3" in fallback["outputs"], (caught, fallback)
    sessions = _get_json(f"{base}/api/sessions?token={token}")
    assert sorted(s["kernel"]["name"] for s in sessions) == [KERNEL_NAME, KERNEL_NAME], sessions
    assert shot.stat().st_size > 10_000
