"""The faster build and fetch paths of the local web (issue 32, parts 2 and 5) give what the old
ones gave: extracted article records, perceptual hashes and fetched Markdown compared with
fixtures recorded from the code before the change (``tests/fixtures/zim_*_before.json``: sha256
of each article's record, each image's hash outcome, each page's Markdown), on every article and
image of the shared archives. Also the parts of the fast paths the shared archives do not reach
(pages needing Unicode normalization, footer phrases with case-folding letters) against their
slow equivalents, and the cluster cache sizing of the build workers."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from pathlib import Path

import lxml.etree
import lxml.html
import pytest

from kit.paths import zim_paths
from kit.web import text_clean
from kit.web.zim.archive import _ZimArchive
from kit.web.zim.build import _base_mime, extract_chunk, hash_image
from kit.web.zim.html import _extract_article, _parse_html
from kit.web.zim.images import RASTER_MIMES

FIXTURES = Path(__file__).parent / "fixtures"


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, ensure_ascii=False).encode()).hexdigest()


def _archives(tmp_path_factory) -> list[_ZimArchive]:
    paths = zim_paths()
    if not paths:
        pytest.skip("shared ZIM archives not available")
    root = tmp_path_factory.mktemp("zidx")
    return [_ZimArchive(p, root) for p in paths]


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    return _archives(tmp_path_factory)


def test_extracts_identical_to_before(archives):
    """Every article record the build stores (path, title, first sentence, text, image
    references) is the one the code before issue 32 extracted."""
    want = json.loads((FIXTURES / "zim_extracts_before.json").read_text(encoding="utf-8"))
    got = {}
    for a in archives:
        arts, _, _ = extract_chunk(str(a.file), 0, a.entry_count, a.main_path, a.new_scheme)
        for rec in arts:
            got[f"{a.stem}/{rec[0]}"] = _sha([*rec[:4], [list(r) for r in rec[4]]])
    assert len(want) == 325
    assert sorted(got) == sorted(want)
    assert [k for k in want if got[k] != want[k]] == []


def test_image_hashes_identical_to_before(archives):
    """Every image entry's outcome (skip reason, size, pHash + dHash of the image and its 5% and
    10% center crops) is bit for bit the one of the code before issue 32."""
    want = json.loads((FIXTURES / "zim_hashes_before.json").read_text(encoding="utf-8"))
    got = {}
    for a in archives:
        for eid in range(a.entry_count):
            entry = a.archive._get_entry_by_id(eid)
            if entry.is_redirect:
                continue
            item = entry.get_item()
            mime = _base_mime(item.mimetype)
            if mime in RASTER_MIMES or mime == "image/svg+xml":
                reason, info, hs = hash_image(entry.path, mime, bytes(item.content))
                got[f"{a.stem}/{entry.path}"] = [reason, list(info) if info else None,
                                                 hs.hex() if hs else None]
    assert sum(1 for v in want.values() if v[0] == "") == 241  # hashed images
    assert got == want


def test_fetch_markdown_identical_to_before(tmp_path):
    """Every article fetched as Markdown, with its images, is the page the code before issue 32
    rendered."""
    from kit.web.zim import LocalZimWeb

    if not zim_paths():
        pytest.skip("shared ZIM archives not available")
    want = json.loads((FIXTURES / "zim_markdown_before.json").read_text(encoding="utf-8"))
    web = LocalZimWeb(zim_paths(), index_dir=tmp_path)
    by_stem = {a.stem: a for a in web.archives}
    bad = []
    for key, exp in want.items():
        stem, path = key.split("/", 1)
        page = web.fetch_sync(by_stem[stem].url(path))
        imgs = [[h.image_url, h.caption, h.mime, hashlib.sha256(h.content).hexdigest()]
                for h in page.images]
        got = {"markdown": hashlib.sha256(page.markdown.encode()).hexdigest(),
               "images": _sha(imgs), "title": page.title}
        if got != exp:
            bad.append(key)
    assert bad == []


# ---- fast paths the shared archives do not exercise ---------------------------------------------
def _slow_normalize(root) -> None:
    """normalize_tree before issue 32: every element visited."""
    for el in root.iter():
        if el.text and not el.text.isascii():
            el.text = text_clean.normalize_text(el.text)
        if el.tail and not el.tail.isascii():
            el.tail = text_clean.normalize_text(el.tail)
        if isinstance(el.tag, str):
            for attr in ("alt", "title"):
                val = el.get(attr)
                if val and not val.isascii():
                    el.set(attr, text_clean.normalize_text(val))


@pytest.mark.parametrize("body", [
    "<p>Beyonce\u0301 and caf\u00e9</p>",  # decomposed in a text node
    "<p>plain <b>x</b>e\u0301 tail</p>",  # decomposed in a tail
    "<p>soft\u00adhyphen and zero\u200bwidth</p>",  # invisible characters
    '<p><img src="a.png" alt="Beyonce\u0301"> <a title="x\u200by">l</a></p>',  # attributes
    "<p>a&lt;\u0338b</p>",  # '<' + U+0338 composes to U+226E: escaped in the serialization
    "<!-- c\u200bomment --><p>x</p>",  # a comment
    "<p>all NFC: caf\u00e9 \u00e9t\u00e9</p>",  # nothing to do
])
def test_normalize_tree_fast_path_matches_full_pass(body):
    html = f"<html><body>{body}</body></html>".encode()
    fast, slow = _parse_html(html), _parse_html(html)
    text = text_clean.normalize_tree(fast)
    _slow_normalize(slow)
    assert lxml.etree.tostring(fast, encoding="unicode") == lxml.etree.tostring(slow,
                                                                                 encoding="unicode")
    if text is not None:  # returned only when nothing changed
        assert text == text_clean.text_content(slow)
    assert unicodedata.is_normalized("NFC", text_clean.text_content(fast))


@pytest.mark.parametrize("text", [
    "x This article is issued from Wikipedia", "THIS ARTICLE IS ISSUED FROM", "Retrieved from “x”",
    "Thi\u017f article is i\u017f\u017fued from",  # long s: re.I folds it to s
    "nothing here", "Content is available under CC", "Text is available under the Creative",
])
def test_footer_phrase_check_matches_regex(text):
    assert text_clean._has_footer_phrase(text) == bool(text_clean._FOOTER_ANYWHERE.search(text))


def test_plain_etree_and_lxml_html_trees_extract_alike():
    """The plain-element parse gives the lxml.html tree: same serialization, and the helpers
    work on both kinds of element."""
    html = (b"<html><head><title>T</title></head><body><div id='mw-content-text'><h2>S</h2>"
            b"<p>One <b>two</b> three.</p><div class='navbox'>nav</div>"
            b"<sup id='cite_ref-1'>[1]</sup>tail</div></body></html>")
    a, b = _parse_html(html), lxml.html.document_fromstring(html)
    assert lxml.etree.tostring(a) == lxml.etree.tostring(b)
    assert text_clean.text_content(a) == b.text_content()
    art = _extract_article("A/T", "T", html)
    assert art.text == "S\nOne two three.\ntail" and art.first_sentence == "S"  # no 30-char <p>
    nav = b.find(".//div[@class='navbox']")
    text_clean.drop_tree(nav)
    assert "nav" not in b.text_content()


# ---- reading in cluster order ---------------------------------------------------------------------
def test_dirents_read_from_the_file_are_libzims_entries(archives):
    """The build reads entries' cluster numbers from the ZIM file's own directory (python-libzim
    does not expose them): its entry i is libzim's entry id i (same path) on every shared
    archive, and the cluster order is a permutation of the chunk's ids."""
    import struct

    from kit.web.zim import build as b

    try:
        for a in archives:
            f, url_ptr, count = b._dirent_reader(str(a.file))
            assert count == a.entry_count
            for eid in range(count):
                f.seek(url_ptr + 8 * eid)
                (ptr,) = struct.unpack("<Q", f.read(8))
                f.seek(ptr)
                d = f.read(1024)
                mime, _plen, ns = struct.unpack_from("<HBc", d)
                off = 12 if mime >= 0xFFFD else 16
                url = d[off:d.index(b"\0", off)].decode()
                path = a.archive._get_entry_by_id(eid).path
                assert path in (f"{ns.decode()}/{url}", url if ns == b"C" else None)
            f.close()
            order = b.cluster_order(str(a.file), 0, count)
            assert sorted(order) == list(range(count))
    finally:
        b._release_worker_state()


def test_cluster_cache_sizing():
    from kit.web.zim.build import CLUSTER_CACHE_BUDGET, cluster_cache_bytes

    assert cluster_cache_bytes(1 << 20, 4) == 16 << 20  # never under libzim's default
    assert cluster_cache_bytes(100 << 20, 2) == 400 << 20  # the decompressed archive
    assert cluster_cache_bytes(100 << 30, 8) == CLUSTER_CACHE_BUDGET // 8  # the budget


def test_build_restores_the_cluster_cache(tmp_path, archives):
    """An inline build sizes this process's libzim cluster cache for itself and puts it back."""
    import libzim

    from kit.web.zim.build import build_archive

    before = libzim.get_cluster_cache_max_size()
    small = min(archives, key=lambda a: a.file.stat().st_size)
    counts = build_archive(small, tmp_path, workers=1)
    assert counts["articles"] > 0
    assert libzim.get_cluster_cache_max_size() == before
