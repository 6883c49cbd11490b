"""Executed notebooks read well when opened later (issue 29 part 6): in JupyterLab, in static previews.

1. ``test_headless_bars_are_saved_as_final_text``: a papermill run (``KIT_HEADLESS=1``, the kit's kernel) of a
   small notebook whose bars come from the kit (:func:`kit.progress.progress`), ``tqdm.auto`` directly,
   transformers, huggingface_hub and a datasets ``map``, with transformers / huggingface_hub / datasets imported
   *before* the kit; the saved notebook must hold no widget output and, per bar, one text line with its final
   count ("16/16"), never a frozen "0%".
2. ``test_transcript_styles_are_inline``: the transcript's look rides on ``style=`` attributes (which
   JupyterLab's sanitizer, GitHub and nbviewer keep), with no ``<style>`` block.
3. ``test_executed_notebooks_in_jupyterlab`` (marker ``browser``): each committed executed notebook
   (``results/smoke/*/NN_*.ipynb``; or the ``.ipynb`` files named in ``KIT_JUPYTERLAB_NOTEBOOKS``,
   ``os.pathsep``-separated, e.g. fresh runs into /tmp) opened in JupyterLab as a reader opens it (untrusted,
   sanitized): no progress output reads a frozen "0% ... 0/N" and no widget is left without its state, and the
   transcript's message blocks have a computed background and border. Screenshots go to the test's folder and,
   with ``KIT_SCREENSHOT_DIR=docs/img``, to ``docs/img/jupyterlab_NN.png``.

The browser test skips, with the reason, without Chromium, playwright, JupyterLab or the kit's kernel
(:mod:`tests.test_jupyterlab`); the papermill test skips without papermill or the kit's kernel.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from kit.kernel import KERNEL_NAME
from tests.test_jupyterlab import SKIP as BROWSER_SKIP
from tests.test_jupyterlab import lab  # noqa: F401 - the fixture: a JupyterLab over a temporary root

ROOT = Path(__file__).resolve().parents[1]
# a tqdm bar frozen at its start: "episodes:   0%|          | 0/16 [00:00<?, ?episode/s]"
FROZEN = re.compile(r"(?:^|\s)0%\|.*\|\s*0/[1-9]\d*\b", re.M)
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def _kernel_missing() -> str | None:
    try:
        import papermill  # noqa: F401
        from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    except ImportError as e:
        return f"{e.name} is not installed"
    try:
        KernelSpecManager().get_kernel_spec(KERNEL_NAME)
    except NoSuchKernel:
        return f"the kit's kernel {KERNEL_NAME!r} is not installed (make setup)"
    return None


# --- 1. headless bars are text, saved with their final state ----------------------------------------------

BAR_CELLS = [
    # third-party modules first: their tqdm classes are bound before the kit is imported
    "import huggingface_hub.utils, datasets, transformers.utils.logging as tl\n"
    "from datasets.utils.logging import enable_progress_bar\n"
    "enable_progress_bar(); tl.enable_progress_bar()",
    "from kit.progress import progress\nfor _ in progress(range(16), desc='episodes', unit='episode'):\n    pass",
    "from tqdm.auto import tqdm, trange\nfor _ in tqdm(range(4), desc='direct'):\n    pass",
    "for _ in huggingface_hub.utils.tqdm(range(3), desc='Fetching 3 files'):\n    pass",
    "for _ in tl.tqdm(range(57), desc='Loading weights'):\n    pass",
    "ds = datasets.Dataset.from_dict({'a': list(range(5))}).map(lambda r: r, desc='Map rows')",
    "bar = progress(total=6, desc='manual', unit='step')\nbar.update(2); bar.update(4); bar.close()",
    "for _ in progress(range(3), desc='transient', leave=False):\n    pass\nprint('after')",
]
FINAL = {1: ("episodes", "16/16"), 2: ("direct", "4/4"), 3: ("Fetching 3 files", "3/3"),
         4: ("Loading weights", "57/57"), 5: ("Map rows", "5/5"), 6: ("manual", "6/6")}


def _outputs_text(cell) -> list[str]:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(o["text"] if isinstance(o["text"], str) else "".join(o["text"]))
        for mime, value in o.get("data", {}).items():
            if mime.startswith("text/"):
                out.append(value if isinstance(value, str) else "".join(value))
    return out


@pytest.mark.timeout(240)
@pytest.mark.skipif(_kernel_missing() is not None, reason=_kernel_missing() or "")
def test_headless_bars_are_saved_as_final_text(tmp_path, monkeypatch):
    import nbformat
    import papermill as pm

    from kit.kernel import kernelspec, local_kernel_manager_class

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = kernelspec()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in BAR_CELLS]
    src, dest = tmp_path / "bars.ipynb", tmp_path / "bars.out.ipynb"
    nbformat.write(nb, str(src))
    monkeypatch.setenv("KIT_HEADLESS", "1")  # as kit.cli notebook sets it
    monkeypatch.delenv("KIT_PROGRESS", raising=False)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf_datasets"))
    pm.execute_notebook(str(src), str(dest), kernel_name=KERNEL_NAME, cwd=str(tmp_path), progress_bar=False,
                        kernel_manager_class=local_kernel_manager_class())
    saved = json.loads(dest.read_text())
    cells = [c for c in saved["cells"] if c["cell_type"] == "code"]
    widgets = [(i, o["data"].get("text/plain")) for i, c in enumerate(cells) for o in c.get("outputs", [])
               if WIDGET_MIME in o.get("data", {})]
    assert widgets == [], f"widget bars saved (a reader sees them frozen): {widgets}"
    for i, (desc, count) in FINAL.items():
        texts = _outputs_text(cells[i])
        bars = [t for t in texts if desc in t]
        assert len(bars) == 1, (desc, texts)  # one output per bar, updated in place: no trail of redraws
        assert count in bars[0] and "100%" in bars[0] and "\r" not in bars[0], (desc, bars)
        assert not FROZEN.search(bars[0]), bars
    transient = _outputs_text(cells[7])
    assert "after\n" in transient and not any("transient" in t for t in transient), transient  # leave=False: gone
    assert not any(FROZEN.search(t) for c in cells for t in _outputs_text(c))


def test_text_bar_outside_a_kernel_is_unchanged(monkeypatch):
    """Outside a kernel nothing is swapped: a pipe or CI log keeps tqdm's text bar on stderr."""
    import tqdm.auto

    from kit import progress as kp

    bases = tqdm.auto.tqdm.__bases__
    assert kp.install_headless_text_bars() is False
    assert tqdm.auto.tqdm.__bases__ == bases


# --- 2. the transcript's styles survive sanitizers -----------------------------------------------------------

def _record(tmp_path):
    import asyncio

    from kit.harness.episode import Task
    from kit.harness.loop import Harness
    from kit.policy.scripted import ScriptedPolicy, tool_call_text
    from tests.conftest import MemoryBackend

    pol = ScriptedPolicy([tool_call_text("web_search_for_image", {"query": "x", "num": 1}), "no action",
                          "<response>see <IMG: search_image_1.png></response>"])
    return asyncio.run(Harness(pol, MemoryBackend()).run(Task(id="t", question="q"), tmp_path / "ws"))


def test_transcript_styles_are_inline(tmp_path):
    from html.parser import HTMLParser

    from kit.harness.transcript import render_transcript

    rec = _record(tmp_path)
    html = render_transcript(rec)
    assert "<style" not in html  # dropped by JupyterLab (untrusted), GitHub and nbviewer

    class Blocks(HTMLParser):
        def __init__(self):
            super().__init__()
            self.found: list[tuple[str, str]] = []

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if {"msg", "final", "badge", "transcript"} & set((a.get("class") or "").split()):
                self.found.append((a["class"], a.get("style") or ""))

    p = Blocks()
    p.feed(html)
    classes = " ".join(c for c, _ in p.found)
    for needed in ("transcript", "msg system", "msg user", "msg assistant", "intervention", "badge", "final"):
        assert needed in classes, classes
    for cls, style in p.found:
        assert "background" in style, (cls, style)
        if cls.startswith(("msg", "final")):
            assert "border" in style, (cls, style)
    frag = render_transcript(rec, fragment=True)  # for notebook outputs: no <title> to show as text
    assert frag.startswith('<div class="transcript"') and "<title" not in frag and "<body" not in frag
    assert frag.strip() in html
    by_class = dict(p.found)
    assert "#eef5ff" in by_class["msg user"] and "#f3fff0" in by_class["msg assistant"]
    assert "dashed #d9480f" in next(s for c, s in p.found if "intervention" in c)


# --- 3. the executed notebooks in JupyterLab -----------------------------------------------------------------

def executed_notebooks() -> list[Path]:
    """The notebooks the browser test opens: ``KIT_JUPYTERLAB_NOTEBOOKS`` (paths, ``os.pathsep``-separated)
    or the committed executed notebooks ``results/smoke/<NN_name>/<NN_name>.ipynb``."""
    if named := os.environ.get("KIT_JUPYTERLAB_NOTEBOOKS"):
        return [Path(p) for p in named.split(os.pathsep) if p]
    return sorted(p for p in (ROOT / "results" / "smoke").glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb")
                  if p.stem == p.parent.name)


def _browser_skip() -> str | None:
    if BROWSER_SKIP:
        return BROWSER_SKIP
    if not executed_notebooks():
        return "no executed notebooks (make sequence writes results/smoke/*/NN_*.ipynb)"
    return None


# what the page shows of one opened notebook: every output's text, the widget rows, the transcript blocks'
# computed styles, and JupyterLab's widget errors
PAGE_PROBE = """panel => {
  const outs = [...panel.querySelectorAll('.jp-OutputArea-output')];
  const blocks = [...panel.querySelectorAll('.jp-OutputArea-output .transcript .msg, .jp-OutputArea-output .transcript .final')];
  return {
    outputs: outs.map(o => o.innerText),
    widgets: [...panel.querySelectorAll('.widget-hprogress')].map(w => (w.closest('.widget-hbox') || w).innerText),
    blocks: blocks.map(b => { const s = getComputedStyle(b);
      return {cls: b.className, bg: s.backgroundColor, border: s.borderTopWidth + ' ' + s.borderTopStyle}; }),
    transcripts: panel.querySelectorAll('.jp-OutputArea-output .transcript').length,
    transcript_leads: [...panel.querySelectorAll('.jp-OutputArea-output .transcript')].map(t => {
      const out = t.closest('.jp-OutputArea-output'); const r = document.createRange();
      r.setStart(out, 0); r.setEndBefore(t); return r.toString(); }),
  };
}"""


def _probe_notebook(page, base: str, token: str, name: str, tmp_path: Path) -> dict:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.goto(f"{base}/lab/tree/{name}?reset&token={token}", wait_until="domcontentloaded", timeout=30_000)
    panel = page.locator(".jp-NotebookPanel:visible").first
    try:
        panel.locator(".jp-OutputArea-output").first.wait_for(timeout=30_000)
        page.wait_for_timeout(1500)  # widget outputs and images settle
    except PlaywrightTimeout as e:
        (tmp_path / f"failed_{name}.png").write_bytes(page.screenshot())
        pytest.fail(f"{name}: no output shown ({e.message.splitlines()[0]})")
    return panel.evaluate(PAGE_PROBE)


def _notebook_problems(name: str, view: dict, saved_text: str) -> list[str]:
    out = []
    for text in view["outputs"] + view["widgets"]:
        if m := FROZEN.search(text):
            out.append(f"{name}: a progress bar frozen at its start: {m.group(0).strip()!r}")
    for text in view["outputs"]:
        if "Error displaying widget" in text or "model not found" in text:
            out.append(f"{name}: a widget without its saved state: {text[:120]!r}")
    if 'class="msg' in saved_text or "class=\\\"msg" in saved_text:  # the notebook shows a transcript
        if not view["blocks"]:
            out.append(f"{name}: a transcript output but no .msg blocks shown (sanitized away?)")
        for lead in view["transcript_leads"]:  # text shown before the transcript in its output (a <title>'s)
            if lead.strip():
                out.append(f"{name}: stray text above the transcript: {lead.strip()[:80]!r} "
                           "(display render_transcript(..., fragment=True))")
        for b in view["blocks"]:
            if b["bg"] in ("rgba(0, 0, 0, 0)", "transparent", "rgb(255, 255, 255)") or b["border"].startswith("0px") \
                    or b["border"].endswith("none"):
                out.append(f"{name}: transcript block {b['cls']!r} unstyled (background {b['bg']}, border {b['border']})")
    return out


def _save_shot(page, target_js: str | None, key: str, tmp_path: Path) -> Path:
    """A screenshot of the open notebook, scrolled to the element ``target_js`` (a JS expression over
    ``panel``) finds, when it finds one."""
    import io

    from PIL import Image

    if target_js:
        page.locator(".jp-NotebookPanel:visible").first.evaluate(
            f"panel => {{ const el = {target_js}; if (el) el.scrollIntoView({{block: 'start'}}); }}")
        page.wait_for_timeout(400)
    png = page.screenshot(full_page=False)
    out = tmp_path / f"jupyterlab_{key}.png"
    out.write_bytes(png)
    if folder := os.environ.get("KIT_SCREENSHOT_DIR"):
        Path(folder).mkdir(parents=True, exist_ok=True)
        Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=128).save(Path(folder) / out.name, optimize=True)
    return out


# where each screenshot looks: the transcript, else the first finished bar, else the notebook's top
TRANSCRIPT_JS = "panel.querySelector('.jp-OutputArea-output .transcript')"
BAR_JS = ("[...panel.querySelectorAll('.jp-OutputArea-output')].find(o => /100%\\|/.test(o.innerText))"
          "?.closest('.jp-Cell')")


def _rich_outputs(saved: dict) -> int:
    """How many display / result outputs the saved notebook holds (streams may be merged when shown)."""
    return sum(o.get("output_type") in ("display_data", "execute_result")
               for c in saved["cells"] for o in c.get("outputs", []))


@pytest.mark.browser
@pytest.mark.timeout(600)
def test_executed_notebooks_in_jupyterlab(tmp_path, request):
    """Each executed notebook, opened in JupyterLab (untrusted: what a reader of the saved file gets), shows
    its progress bars finished and its transcript styled."""
    reason = _browser_skip()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    from kit.figures import chromium_path

    notebooks = executed_notebooks()
    problems: list[str] = []
    shots: list[Path] = []
    # the lab fixture of tests/test_jupyterlab.py serves a temporary root: the notebooks are copied there
    # (JupyterLab never writes to results/); its own two demo notebooks are left unopened
    base, token, root = request.getfixturevalue("lab")  # after the skip check: no server when skipped
    names = []
    for nb in notebooks:
        key = nb.stem[:2] if nb.stem[:2].isdigit() else nb.stem
        name = f"{nb.stem}.ipynb"
        shutil.copyfile(nb, root / name)
        names.append((key, name, nb.read_text(encoding="utf-8")))
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            for key, name, saved in names:
                view = _probe_notebook(page, base, token, name, tmp_path)
                problems += _notebook_problems(name, view, saved)
                if len(view["outputs"]) < (want := _rich_outputs(json.loads(saved))):
                    problems.append(f"{name}: {len(view['outputs'])} outputs shown, the file has {want} rich ones")
                target = TRANSCRIPT_JS if view["transcripts"] else BAR_JS
                shots.append(_save_shot(page, target, key, tmp_path))
        finally:
            browser.close()
    assert problems == [], "\n".join(problems)
    assert all(s.stat().st_size > 10_000 for s in shots), shots


if __name__ == "__main__":  # pragma: no cover - python tests/test_jupyterlab_saved.py [NB.ipynb ...]
    if sys.argv[1:]:
        os.environ["KIT_JUPYTERLAB_NOTEBOOKS"] = os.pathsep.join(sys.argv[1:])
    raise SystemExit(pytest.main([__file__, "-k", "jupyterlab", "-v"]))
