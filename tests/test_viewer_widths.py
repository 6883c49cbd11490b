"""Viewer pages fit a 1,280-px and a 1,920-px window (issue 29 part 3): rendered in headless Chromium (the
Debian package, driven by playwright's ``executable_path``: no browser download), no element sticks out of
its container, the page never scrolls sideways and no table needs a scroll box (every column visible).

Sites: results/smoke/01_harness_demo compared with a copy of itself, and results/smoke/06_evaluation
(five benchmarks, two configurations). Skipped, with the reason, without Chromium or playwright.
``KIT_VIEWER_SHOTS=DIR`` also saves the index and comparison screenshots at both widths into DIR
(docs/img/viewer_index_1280.png etc.).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

from kit.figures import chromium_path
from kit.view import build_site

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "results" / "smoke" / "01_harness_demo"
EVAL = ROOT / "results" / "smoke" / "06_evaluation"
WIDTHS = (1280, 1920)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def _skip_reason() -> str | None:
    if chromium_path() is None:
        return "no chromium binary (Debian: apt-get install -y chromium)"
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (a dev extra of the kit: pip install -e .[dev])"
    if not (DEMO / "demonstrator" / "episodes.jsonl").is_file() or not (EVAL / "predictions").is_dir():
        return "results/smoke is not in this checkout"
    return None


SKIP = _skip_reason()

# Every rendered element must lie inside its parent's box (a parent that scrolls counts only when it needs
# to: that hides columns), the document must not be wider than the window, and no element's content may be
# wider than its box unless the element wraps or scrolls it visibly (none does here: scroll boxes must fit).
OVERFLOW_JS = """() => {
  const bad = [], W = document.documentElement.clientWidth;
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (el.className && typeof el.className === 'string' ? '.' + el.className.trim().split(/\\s+/).join('.') : '') +
    ' "' + (el.textContent || '').trim().slice(0, 40) + '"';
  if (document.documentElement.scrollWidth > W + 1)
    bad.push('page is ' + document.documentElement.scrollWidth + ' px wide in a ' + W + '-px window');
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;  // not rendered (closed <details>, hidden rows)
    const st = getComputedStyle(el);
    if (st.display === 'inline' || st.display === 'contents') continue;  // measured through its block
    if (r.right > W + 1) bad.push(name(el) + ' ends at ' + Math.round(r.right) + ' px, beyond the window');
    const p = el.parentElement;
    if (p && p !== document.body && p !== document.documentElement) {
      const q = p.getBoundingClientRect();
      if (r.right > q.right + 1 || r.left < q.left - 1)
        bad.push(name(el) + ' sticks out of its container ' + name(p));
    }
    if (el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 0 && st.display !== 'table')
      bad.push(name(el) + ': content ' + el.scrollWidth + ' px in a ' + el.clientWidth + '-px box' +
               (st.overflowX === 'auto' || st.overflowX === 'scroll' ? ' (a scroll box: columns hidden)' : ''));
  }
  return bad;
}"""


def _copy_demo(dest: Path) -> Path:
    for sub in ("demonstrator", "model"):
        shutil.copytree(DEMO / sub, dest / sub, ignore=shutil.ignore_patterns("transcripts"))
    return dest


@pytest.fixture(scope="module")
def sites(tmp_path_factory) -> dict[str, Path]:
    if SKIP:
        pytest.skip(SKIP)
    tmp = tmp_path_factory.mktemp("widths")
    before, after = _copy_demo(tmp / "01_harness_demo"), _copy_demo(tmp / "01_harness_demo_after")
    return {"demo": build_site([before, after], tmp / "demo_site", image_max_side=192).parent,
            "eval": build_site([EVAL], tmp / "eval_site", image_max_side=192).parent}


def _pages(site: Path) -> list[Path]:
    """The index, every comparison and the two longest episode pages (most turns, calls and tables)."""
    episodes = sorted(site.rglob("episodes/*/*.html"), key=lambda p: -p.stat().st_size)[:2]
    return [site / "index.html", *sorted(site.glob("compare-*.html")), *episodes]


@pytest.mark.skipif(SKIP is not None, reason=SKIP or "")
def test_viewer_pages_fit_1280_and_1920_px(sites: dict[str, Path]):
    from playwright.sync_api import sync_playwright

    shots = os.environ.get("KIT_VIEWER_SHOTS")
    problems: dict[str, list[str]] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            for width in WIDTHS:
                page = browser.new_page(viewport={"width": width, "height": 900})
                for kind, site in sites.items():
                    for html in _pages(site):
                        page.goto(html.as_uri())
                        assert page.evaluate("document.documentElement.clientWidth") == width
                        bad = page.evaluate(OVERFLOW_JS)
                        if bad:
                            problems[f"{width}px {kind} {html.relative_to(site)}"] = bad[:8]
                        if shots and kind == "eval" and html.name in ("index.html", "compare-1.html"):
                            stem = "viewer_index" if html.name == "index.html" else "viewer_compare"
                            Path(shots).mkdir(parents=True, exist_ok=True)
                            page.screenshot(path=str(Path(shots) / f"{stem}_{width}.png"))
                page.close()
        finally:
            browser.close()
    assert not problems, "\n".join(f"{k}:\n  " + "\n  ".join(v) for k, v in problems.items())


def test_the_overflow_check_catches_a_table_wider_than_the_window(tmp_path: Path):
    """Negative control: a fixed-width table inside a scroll box is reported, so a passing run means something."""
    if SKIP:
        pytest.skip(SKIP)
    from playwright.sync_api import sync_playwright

    html = tmp_path / "wide.html"
    html.write_text("<!doctype html><html><body><div style='overflow-x:auto'><table><tr>"
                    + "".join(f"<td style='white-space:nowrap'>column number {i} of a wide table</td>" for i in range(30))
                    + "</tr></table></div><p style='width:3000px'>x</p></body></html>")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 600})
            page.goto(html.as_uri())
            bad = page.evaluate(OVERFLOW_JS)
        finally:
            browser.close()
    assert any("scroll box" in b for b in bad) and any("page is" in b for b in bad), bad
