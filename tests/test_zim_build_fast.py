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
import random
import re
import unicodedata
from pathlib import Path

import lxml.etree
import lxml.html
import numpy as np
import pytest

from kit.images import SAME_PICTURE_DISTANCE
from kit.paths import zim_paths
from kit.web import text_clean
from kit.web.zim import text as ztext
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


def test_image_outcomes_identical_to_before(archives):
    """Every image entry's outcome (skip reason, size) is the one of the code before issue 32, and
    its pHash + dHash (of the image and its 5% and 10% center crops) the one recorded then but for
    the resampling (INDEX_REDUCING_GAP, index format 12): a few bits apart, far under the
    same-picture threshold. Before that change they were equal bit for bit."""
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
    assert {k: v[:2] for k, v in got.items()} == {k: v[:2] for k, v in want.items()}
    dist = []
    for k, (_, _, hs) in want.items():
        if hs:
            old, new = (np.frombuffer(bytes.fromhex(x), dtype=np.uint64) for x in (hs, got[k][2]))
            dist += [int(np.unpackbits((old[i:i + 2] ^ new[i:i + 2]).view(np.uint8)).sum())
                     for i in range(0, len(old), 2)]
    assert len(dist) == 3 * 241
    assert np.mean(dist) <= 3.0 and max(dist) <= SAME_PICTURE_DISTANCE // 2, (np.mean(dist), max(dist))


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
    "Cet article est issu de W", 'Retrieved from "https://x"', "retrieved from \"x\"",
])
def test_footer_phrase_check_matches_regex(text):
    assert text_clean._has_footer_phrase(text) == bool(text_clean._FOOTER_ANYWHERE.search(text))


def test_footer_phrase_check_matches_regex_on_random_texts():
    """The substring tests agree with the regex on phrases in random case, cut or joined by
    non-ASCII characters (which the ASCII pre-test removes), and with case-folding letters."""
    rnd = random.Random(2)
    phrases = ["This article is issued from", 'Retrieved from "', "Retrieved from \u201c",
               "Cet article est issu de", "Text is available under the Creative Commons",
               "Content is available under"]
    noise = ["\u00e9", "\u201c", "\u017f", "\u212a", "\u0131", " ", "x", "\n"]
    hits = 0
    for _ in range(4000):
        p = "".join(c.upper() if rnd.random() < 0.3 else c for c in rnd.choice(phrases))
        if rnd.random() < 0.5:  # cut the phrase with a character
            i = rnd.randrange(len(p) + 1)
            p = p[:i] + rnd.choice(noise) + p[i:]
        text = "".join(rnd.choice(noise) for _ in range(rnd.randint(0, 4))) + p + rnd.choice(noise)
        want = bool(text_clean._FOOTER_ANYWHERE.search(text))
        hits += want
        assert text_clean._has_footer_phrase(text) == want, repr(text)
    assert 500 < hits < 3500


def test_collapse_ws_matches_the_regex():
    """Page text's whitespace runs collapsed by ``str.replace`` (issue 32) equal the regex
    substitution they replace, on random strings of every whitespace kind and the lines and
    one-line forms built on them."""
    ws = re.compile("[" + ztext._WS_CHARS + "]+")
    rnd = random.Random(0)
    alphabet = ztext._WS_CHARS + "\n\u3000\u2003\x1c\x85\u2028\u202fab\u00e9"
    for _ in range(20000):
        s = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 60)))
        assert ztext._collapse_ws(s) == ws.sub(" ", s)
        lines = (ln.strip() for ln in ws.sub(" ", s).split("\n"))
        assert ztext._norm_ws(s) == "\n".join(ln for ln in lines if ln)
        assert ztext._one_line(s) == ws.sub(" ", s.replace("\n", " ")).strip()


def test_normalize_text_matches_translate_then_nfc():
    """normalize_text's shortcuts (a text with nothing to change returned as it is, invisible
    characters deleted by regex) give NFC of the text with ``_INVISIBLE`` deleted by translate."""
    rnd = random.Random(1)
    alphabet = "ae\u0301\u00e9\u00ad\u200b\u200e\u2060\ufeff\u0316\u0300 x\u1100\u1161\uac00"
    for _ in range(20000):
        s = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 12)))
        want = unicodedata.normalize("NFC", s.translate(text_clean._INVISIBLE))
        assert text_clean.normalize_text(s) == want, repr(s)


def test_invisible_check_matches_the_regex():
    """``_has_invisible`` (the regex over the non-ASCII characters only) is the regex's search."""
    rnd = random.Random(2)
    alphabet = "ab \n\u00e9\u00ad\u061c\u180e\u200b\u202a\u2064\u2069\ufeff\ud800\U0001f600\u4e2d\x7f\x80"
    for _ in range(20000):
        s = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 12)))
        assert text_clean._has_invisible(s) == bool(text_clean._INVISIBLE_RE.search(s)), repr(s)


def _slow_footer_blocks(root) -> list:
    """The footer-block scan before issue 32: every block's text built."""
    return [el for el in root.iter("div", "footer", "section", "p")
            if len(t := text_clean.text_content(el)) <= text_clean._FOOTER_MAX_CHARS
            and text_clean._FOOTER_TEXT.match(t)]


@pytest.mark.parametrize("seed", range(40))
def test_footer_blocks_prune_matches_full_scan(seed):
    """Footer blocks found in reverse order, skipping the ancestors of long blocks, are the ones
    a scan of every block finds, in the same order: random nestings of blocks with footer phrases
    and texts around the 600-character limit."""
    rnd = random.Random(seed)
    texts = ["This article is issued from Wikipedia. ", "Retrieved from \"x\" ", "Body text. ",
             "  cet article est issu de W ", "y" * 250, "z" * 590]

    def block(depth: int) -> str:
        tag = rnd.choice(["div", "section", "footer", "p", "span", "td"])
        inner = "".join(block(depth + 1) if depth < 4 and rnd.random() < 0.45
                        else rnd.choice(texts) for _ in range(rnd.randint(1, 4)))
        return f"<{tag}>{inner}</{tag}>"

    root = _parse_html(f"<html><body>{block(0)}{block(0)}</body></html>".encode())
    assert text_clean._footer_blocks(root) == _slow_footer_blocks(root)


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
