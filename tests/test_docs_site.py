"""The docs site (issue 15 part 7): README.md and docs/*.md link only to what exists, and the mkdocs site
builds with every warning (broken link, missing anchor, page left out of the nav) an error.

The link check needs nothing beyond the standard library and always runs; the strict build needs the
``docs`` extra (``pip install -e ".[docs]"``, which ``make setup`` installs) and skips without it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import yaml

from kit.paths import PROJECT_ROOT

DOCS = PROJECT_ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def slugify(heading: str) -> str:
    """The anchor Python-Markdown's ``toc`` (mkdocs) gives a heading; GitHub's agrees on the headings used
    here (ASCII words, spaces, hyphens): markup dropped, NFKD to ASCII, punctuation removed, lower case,
    runs of spaces and hyphens -> one hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _prose(text: str) -> str:
    """``text`` without fenced blocks and code spans (a link written inside code is not a link)."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def anchors(page: Path) -> set[str]:
    return {slugify(h) for h in HEADING.findall(FENCE.sub("", page.read_text(encoding="utf-8")))}


def broken_links(page: Path, root: Path = PROJECT_ROOT, docs: Path = DOCS) -> list[str]:
    """Every relative link of ``page`` whose file (or, for a Markdown target, anchor) is missing, and every
    link from a page under ``docs`` that leaves it (mkdocs can only link within its docs_dir)."""
    bad = []
    for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page.resolve()
        if page.resolve().is_relative_to(docs.resolve()) and not dest.is_relative_to(docs.resolve()):
            bad.append(f"{target} (leaves docs/: name the file in a code span instead)")
        elif not dest.exists():
            bad.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target} (no heading with anchor #{anchor} in {dest.name})")
    return bad


def test_slugify_matches_the_anchors_linked_from_the_pages():
    assert slugify("Turn grammar") == "turn-grammar"
    assert slugify("`bwrap`: the real sandbox") == "bwrap-the-real-sandbox"
    assert slugify("Notebook 05's smoke profile") == "notebook-05s-smoke-profile"
    assert slugify("RL: FA-GSPO and Long-MDR staging (notebook 05)") == "rl-fa-gspo-and-long-mdr-staging-notebook-05"


def test_the_link_check_finds_missing_files_anchors_and_links_out_of_docs(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\n## Real section\n")
    (tmp_path / "outside.md").write_text("x")
    (docs / "b.md").write_text("[ok](a.md#real-section) [anchor](a.md#nope) [gone](c.md) [out](../outside.md)\n"
                               "`[code](c.md)` [web](https://example.org/x.md)\n\n```\n[fenced](c.md)\n```\n")
    assert broken_links(docs / "b.md", tmp_path, docs) == [
        "a.md#nope (no heading with anchor #nope in a.md)", "c.md (no such file)",
        "../outside.md (leaves docs/: name the file in a code span instead)"]


@pytest.mark.parametrize("page", [PROJECT_ROOT / "README.md", *PAGES], ids=lambda p: p.name)
def test_every_relative_link_points_to_an_existing_file_and_anchor(page):
    assert broken_links(page) == []


def test_every_page_is_in_the_site_nav_and_the_build_turns_warnings_into_errors():
    cfg = yaml.safe_load((PROJECT_ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def nav_files(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from nav_files(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from nav_files(value)

    assert sorted(nav_files(cfg["nav"])) == sorted(p.name for p in PAGES)
    assert cfg["strict"] is True
    assert cfg["validation"]["links"] == {"not_found": "warn", "anchors": "warn", "absolute_links": "warn",
                                          "unrecognized_links": "warn"}


def test_the_readme_is_a_newcomer_page_that_names_the_test_command_and_links_the_docs():
    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    start, end = readme.index("<!-- results:start -->"), readme.index("<!-- results:end -->")
    handwritten = (readme[:start] + readme[end:]).splitlines()  # the results section is generated
    assert len(handwritten) <= 120, f"README grew to {len(handwritten)} hand-written lines: move detail to docs/"
    assert "make test " in readme and "make demo " in readme
    linked = {Path(t.partition("#")[0]).name for t in LINK.findall(_prose(readme)) if t.startswith("docs/")}
    assert linked >= {"index.md", "harness.md", "rules.md", "tools.md", "models.md", "local_web.md", "isolation.md",
                      "data.md", "vfold.md", "training.md", "rl.md", "evaluation.md", "publishing.md",
                      "results.md", "benchmarks.md"}


@pytest.mark.slow  # ~2-3 s; make test (CI) runs it, make test-fast does not
@pytest.mark.skipif(not (importlib.util.find_spec("mkdocs") and importlib.util.find_spec("material")),
                    reason='mkdocs-material is not installed (pip install -e ".[docs]"; make setup installs it)')
def test_the_site_builds_strictly(tmp_path):
    # no -q: mkdocs' strict mode counts the warnings it logs, and -q stops them being logged (build passes)
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith(("WARNING", "ERROR"))]
    assert proc.returncode == 0 and not warnings, proc.stderr[-3000:]
    assert (tmp_path / "site" / "harness.html").is_file()  # use_directory_urls: false (readable from file://)
    site = tmp_path / "site"
    # offline: no page loads a script from the network (the offline plugin's CDN Worker shim is replaced by ours)
    remote = [(p.name, m) for p in site.glob("*.html")
              for m in re.findall(r'<script[^>]+src="(https?://[^"]+)"', p.read_text(encoding="utf-8"))]
    assert remote == [], remote
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (make setup installs it): the offline search check needs a browser")
    # from file://, every request off the machine refused (a proxy that does not exist): search still answers
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--proxy-server=127.0.0.1:9",
                          "--virtual-time-budget=10000", "--dump-dom", (site / "index.html").as_uri() + "?q=harness"],
                         capture_output=True, text=True, timeout=120).stdout
    meta = re.search(r'<div class="md-search-result__meta">([^<]*)', dom)
    assert meta and re.match(r"\d+ matching documents?", meta.group(1)), meta and meta.group(1)
    assert dom.count("md-search-result__item") >= 3
    # lunr's key fixed in the worker the site ships (file:// and http alike)
    (worker,) = site.glob("assets/javascripts/workers/search.*.min.js")
    assert worker.read_text(encoding="utf-8").count('+"|"+') == 1
    if importlib.util.find_spec("playwright") is not None:
        assert _search_over_http(site, "harness", chromium) >= 3


def _search_over_http(site: Path, query: str, chromium: str) -> int:
    """Matching documents the site's search shows for ``query`` when served over http (a real Worker,
    not the file:// shim); fails on any page error."""
    import functools
    import http.server
    import threading

    from playwright.sync_api import sync_playwright

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/index.html?q={query}")
            page.wait_for_function("() => /matching/.test(document.querySelector("
                                   "'.md-search-result__meta')?.textContent || '')", timeout=30_000)
            meta = page.eval_on_selector(".md-search-result__meta", "e => e.textContent")
            browser.close()
    finally:
        server.shutdown()
    assert not errors, errors
    return int(re.match(r"\s*(\d+)", meta).group(1))


def _hook_and_bundle():
    """(``scripts/docs_lunr_hook.patch_worker``, the installed Material search worker's text)."""
    pytest.importorskip("material")
    sys.path.insert(0, str(PROJECT_ROOT / "scripts"))
    try:
        from docs_lunr_hook import patch_worker
    finally:
        sys.path.remove(str(PROJECT_ROOT / "scripts"))
    import material

    (bundle,) = (Path(material.__file__).parent / "templates/assets/javascripts/workers").glob("search.*.min.js")
    return patch_worker, bundle.read_text(encoding="utf-8")


def test_the_lunr_patch_applies_once_and_refuses_a_bundle_it_does_not_know():
    from mkdocs.exceptions import PluginError

    patch_worker, text = _hook_and_bundle()
    patched = patch_worker(text)
    assert '+"|"+' in patched and len(patched) == len(text) + len('"|"+' + '+":"')
    with pytest.raises(PluginError, match="found 0 times"):
        patch_worker(text.replace("TokenSet.prototype.toString", "TokenSet.prototype.asString"))


def test_the_docs_hook_leaves_a_patched_worker_as_it_is():
    """``mkdocs build --dirty`` keeps the worker the hook patched before: a second run is a no-op."""
    patch_worker, text = _hook_and_bundle()
    once = patch_worker(text)
    assert patch_worker(once) == once
