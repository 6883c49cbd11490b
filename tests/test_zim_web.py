"""Tests of the local offline web over the shared Kiwix ZIM archives (kit/web/zim.py).

The shared module fixture indexes all archives once into the kit cache (``MMSEARCH_KIT_CACHE``,
default ``~/.cache/mmsearch-kit``; a first run builds in seconds, later runs reuse it). Tests that
check building, caching and corruption use their own temporary index folders.
"""

from __future__ import annotations

import asyncio
import io
import os
import random
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from kit.paths import zim_paths
from kit.types import BackendError, SearchBackend
from kit.web import zim as zimmod
from kit.web.urls import zim_url
from kit.web.zim import LocalZimWeb, ZimError

MAXI = "wikipedia_en_ray_charles_maxi_2023-09"  # new-style paths: A/Ray_Charles, I/x.webp
LEGACY = "wikipedia_en_ray_charles_2015-06"  # legacy: A/Ray_Charles.html, I/m/..., no full text
MINI = "wikipedia_en_100_mini_2022-10"
FRENCH = "wikipedia_fr_test_2017-07"


@pytest.fixture(scope="module")
def paths(data_dir) -> dict[str, Path]:
    found = {p.stem: p for p in zim_paths(data_dir)}
    missing = {MAXI, LEGACY, MINI, FRENCH} - set(found)
    if missing:
        pytest.skip(f"shared ZIM archives missing: {sorted(missing)}")
    return found


@pytest.fixture(scope="module")
def web(paths) -> LocalZimWeb:
    w = LocalZimWeb(list(paths.values()))
    w.ensure_ready()
    return w


def _decode(data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(data))
    img.load()
    return img


def _jpeg(img: Image.Image, scale: float, quality: int) -> bytes:
    img = img.convert("RGB")
    img = img.resize((max(8, round(img.width * scale)), max(8, round(img.height * scale))),
                     Image.LANCZOS)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality)
    return buf.getvalue()


# --------------------------------------------------------------------------------------------------
# Web search
# --------------------------------------------------------------------------------------------------
def test_is_a_search_backend(web):
    assert isinstance(web, SearchBackend)
    assert web.name == "zim"


@pytest.mark.parametrize("stem", [MAXI, LEGACY, MINI, FRENCH])
def test_each_archive_finds_articles_by_title(web, stem):
    arch = web._archive(stem)
    assert len(arch.articles) >= 3
    picks = [arch.articles[i] for i in (0, len(arch.articles) // 2, len(arch.articles) - 1)]
    for art in picks:
        hits = web.search_sync(art["title"], 3)
        assert arch.url(art["path"]) in [h.url for h in hits], (art["title"], hits)


def test_ray_charles_title_query_ranks_the_article_first(web):
    hits = web.search_sync("Ray Charles", 5)
    assert hits[0].title == "Ray Charles"
    assert {h.url for h in hits[:2]} == {f"zim://{MAXI}/A/Ray_Charles",
                                         f"zim://{LEGACY}/A/Ray_Charles.html"}


def test_hits_carry_url_and_snippet_and_no_snapshot_date_as_publication_date(web):
    """Issue 28: the archive's snapshot date is not when a page was published (a 1958 album page is not
    "published 2023-09-04"): a hit has no date rather than a false one, and the model is not told one."""
    hits = web.search_sync("Hit the Road Jack Percy Mayfield", 5)
    assert len(hits) == 5
    stems = {MAXI, LEGACY, MINI, FRENCH}
    for h in hits:
        m = re.fullmatch(r"zim://([^/]+)/(.+)", h.url)
        assert m and m.group(1) in stems
        assert h.date is None
        assert 0 < len(h.snippet) <= zimmod.SNIPPET_CHARS
        assert "\n" not in h.snippet


@pytest.mark.parametrize("query", ["Georgia on My Mind", "Hit the Road Jack", "amphibians skin",
                                   "Warrington ville", "orbite héliosynchrone",
                                   "Nixon oval office"])
def test_snippets_contain_query_words(web, query):
    hits = web.search_sync(query, 5)
    assert hits
    words = [w.lower() for w in re.findall(r"\w+", query) if len(w) > 3]
    for h in hits:
        low = h.snippet.lower()
        assert any(w[:5] in low for w in words), (query, h.title, h.snippet)


def test_french_archive_is_searched_with_french_analysis(web):
    # "héliosynchrones" (plural) and the unaccented form both reach the singular title.
    for q in ("orbites héliosynchrones", "orbite heliosynchrone"):
        hits = web.search_sync(q, 3)
        assert hits[0].url == zim_url(FRENCH, "A/Orbite_héliosynchrone.html"), (q, hits)


@pytest.mark.parametrize("query", ['"unbalanced quote', "title:Ray AND (Charles", "*?~^",
                                   "C++ / C#", "ñandú 日本語 🎹", "NOT OR AND", "a" * 5000,
                                   "\x00\x01 ray"])
def test_arbitrary_text_never_raises(web, query):
    assert isinstance(web.search_sync(query, 5), list)
    assert isinstance(web.image_search_sync(query, 5), list)


def test_empty_query_and_bad_num_raise_backend_error(web):
    for q in ("", "   \n\t"):
        with pytest.raises(BackendError, match="empty query"):
            web.search_sync(q, 5)
        with pytest.raises(BackendError, match="empty query"):
            web.image_search_sync(q, 5)
    with pytest.raises(BackendError, match="num"):
        web.search_sync("Ray Charles", 0)
    with pytest.raises(BackendError, match="string"):
        web.search_sync(None, 5)  # type: ignore[arg-type]


def test_query_without_indexed_words_returns_nothing(web, paths):
    assert web.search_sync("?! … — ()", 5) == []
    english_only = LocalZimWeb([paths[MINI]])  # "the" is a stop word in English, not in French
    assert english_only.search_sync("the of and", 5) == []
    assert english_only.search_sync("the amphibian", 1)[0].title == "Amphibian"


def test_never_empty_where_rank_bm25_matches(web):
    """Same documents, same tokenization: whenever rank-bm25 finds a match, the kit returns hits."""
    from rank_bm25 import BM25Okapi

    corpus = [c for c in web.corpus() if c[1] == "english"]
    analyzer = web.analyzer_for(MAXI)
    bm25 = BM25Okapi([analyzer.analyze(c[4]) for c in corpus], k1=1.2, b=0.75)
    rng = random.Random(7)
    queries = []
    for _ in range(60):
        words = rng.choice(corpus)[4].split()
        i = rng.randrange(0, len(words) - 2)
        queries.append(" ".join(words[i:i + rng.choice((1, 2, 3))]))
    checked = 0
    for q in queries:
        if (bm25.get_scores(analyzer.analyze(q)) > 0).any():
            checked += 1
            assert web.rank_sync(q, 5), q
    assert checked >= 40


def test_rank_sync_agrees_with_search_sync(web):
    q = "Ray Charles Atlantic Records"
    ranked = web.rank_sync(q, 5)
    hits = web.search_sync(q, 5)
    assert [zim_url(s, p) for s, p, _ in ranked] == [h.url for h in hits]
    scores = [s for _, _, s in ranked]
    assert scores == sorted(scores, reverse=True)


# --------------------------------------------------------------------------------------------------
# Text-to-image search
# --------------------------------------------------------------------------------------------------
def test_image_search_finds_image_by_caption_words(web):
    hits = web.image_search_sync("Nixon meeting oval office", 3)
    assert hits and "Nixon" in hits[0].image_url
    h = hits[0]
    assert h.domain in (MAXI, LEGACY)
    assert h.page_url.startswith(f"zim://{h.domain}/A/Ray_Charles")
    assert "Nixon" in h.caption
    img = _decode(h.content)
    assert img.width >= zimmod.MIN_IMAGE_LONG_SIDE or img.height >= zimmod.MIN_IMAGE_LONG_SIDE
    assert h.mime in ("image/webp", "image/jpeg")


def test_image_search_french_caption_and_no_duplicates(web):
    hits = web.image_search_sync("hôtel de ville Warrington", 5)
    assert hits[0].image_url == f"zim://{FRENCH}/I/m/Warrington_Town_Hall.jpg"
    assert hits[0].caption == "L'hôtel de ville"
    urls = [h.image_url for h in web.image_search_sync("Ray Charles", 20)]
    assert len(urls) == len(set(urls)) == 20


def test_image_search_skips_svg_and_icons(web):
    for stem in (MAXI, LEGACY, FRENCH):
        arch = web._archive(stem)
        for rec in arch.images:
            assert rec.mime in zimmod.RASTER_MIMES
            assert not zimmod._is_decorative(rec.width, rec.height)
    assert web._archive(FRENCH).manifest["skipped_images"]["svg"] > 0


# --------------------------------------------------------------------------------------------------
# Reverse image search
# --------------------------------------------------------------------------------------------------
def _unique_image(web, stem):
    """An image of ``stem`` whose picture appears on one page and nowhere else in the archives."""
    arch = web._archive(stem)
    all_hashes = np.concatenate([a.hashes[:, 0, :] for a in web.archives])
    for i, rec in enumerate(arch.images):
        if len({o["doc"] for o in rec.occurrences}) != 1:
            continue
        p, d = arch.hashes[i, 0]
        dist = (np.bitwise_count(all_hashes[:, 0] ^ p) + np.bitwise_count(all_hashes[:, 1] ^ d))
        if (dist <= zimmod.MATCH_DISTANCE + 6).sum() == 1:  # no twin in any archive
            return arch, rec
    raise AssertionError(f"no unique image in {stem}")


@pytest.mark.parametrize("stem", [MAXI, LEGACY, FRENCH])
def test_reverse_search_resized_recompressed_copy_finds_its_page(web, stem):
    arch, rec = _unique_image(web, stem)
    original = _decode(arch.read(arch.entry(rec.path))[1])
    query = _jpeg(original, 0.7, 60)
    result = web.reverse_image_search_sync(query, 5)
    page = arch.articles[rec.occurrences[0]["doc"]]
    assert result.pages[0].url == arch.url(page["path"])
    assert result.knowledge_graph is not None
    assert result.knowledge_graph.title == page["title"]
    assert result.knowledge_graph.description == page["first"]
    assert result.thumbnails[0].image_url == arch.url(rec.path)
    assert _decode(result.thumbnails[0].content).size == (rec.width, rec.height)


def test_reverse_search_survives_slight_crop(web):
    arch, rec = _unique_image(web, MAXI)
    img = _decode(arch.read(arch.entry(rec.path))[1]).convert("RGB")
    w, h = img.size
    cropped = img.crop((int(w * 0.05), int(h * 0.05), w - int(w * 0.05), h - int(h * 0.05)))
    result = web.reverse_image_search_sync(_jpeg(cropped, 1.5, 80), 3)
    assert result.pages[0].url == arch.url(arch.articles[rec.occurrences[0]["doc"]]["path"])


def test_reverse_search_unrelated_picture_matches_nothing(web):
    rng = np.random.default_rng(0)
    noise = Image.fromarray(rng.integers(0, 255, (180, 240, 3), dtype=np.uint8))
    result = web.reverse_image_search_sync(_jpeg(noise, 1.0, 90), 5)
    assert result.knowledge_graph is None
    assert result.pages == [] and result.thumbnails == []


def test_reverse_search_rejects_bad_bytes(web, monkeypatch):
    arch, rec = _unique_image(web, LEGACY)
    good = _jpeg(_decode(arch.read(arch.entry(rec.path))[1]), 1.0, 90)
    png_header_only = b"\x89PNG\r\n\x1a\n" + b"\0" * 64
    for bad, message in ((b"", "empty"), (b"definitely not an image", "not a raster image"),
                         (good[: len(good) // 2], "truncated"),
                         (png_header_only, "not a raster image"), ("text", "must be bytes")):
        with pytest.raises(BackendError, match=message):
            web.reverse_image_search_sync(bad, 5)
    with pytest.raises(BackendError, match="too small"):
        web.reverse_image_search_sync(_jpeg(Image.new("RGB", (20, 20)), 1.0, 90), 5)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(BackendError, match="decompression"):
        web.reverse_image_search_sync(good, 5)


# --------------------------------------------------------------------------------------------------
# Fetch
# --------------------------------------------------------------------------------------------------
def _check_page_images(page):
    assert page.images
    urls = [i.image_url for i in page.images]
    assert len(urls) == len(set(urls))
    positions = [page.markdown.find(f"]({u})") for u in urls]
    assert all(p >= 0 for p in positions), "every page image is placed in the Markdown"
    assert positions == sorted(positions), "images come in page order"
    for img in page.images:
        assert img.page_url == page.url
        _decode(img.content)


def test_fetch_new_scheme_article_with_images(web):
    page = web.fetch_sync(f"zim://{MAXI}/A/Ray_Charles")
    assert page.title == "Ray Charles" and page.content_type == "text/html"
    assert page.markdown.startswith("# Ray Charles\n")
    assert "## Early life and education" in page.markdown
    assert "| Born |" in page.markdown  # infobox table kept
    assert "<script" not in page.markdown and "mw-parser-output" not in page.markdown
    # Citation markers are stripped (the source has a few literal "[35]" in its text).
    assert "in 1959.[" not in page.markdown
    assert len(re.findall(r"\[\d+\]", page.markdown)) <= 3
    _check_page_images(page)
    assert page.images[0].caption == "Charles in 1969"


def test_fetch_legacy_article_with_images(web):
    page = web.fetch_sync(f"zim://{LEGACY}/A/Ray_Charles.html")
    assert page.title == "Ray Charles"
    assert "Ray Charles Robinson" in page.markdown
    assert len(re.findall(r"\[\d+\]", page.markdown)) <= 3
    _check_page_images(page)
    assert page.images[0].image_url == f"zim://{LEGACY}/I/m/Ray_Charles_(cropped).jpg"
    assert page.images[0].mime == "image/jpeg"


def test_fetch_french_article(web):
    page = web.fetch_sync(f"zim://{FRENCH}/A/Warrington.html")
    assert "ville anglaise" in page.markdown
    _check_page_images(page)
    assert f"zim://{FRENCH}/I/m/Warrington_Town_Hall.jpg" in [i.image_url for i in page.images]
    # URL-encoded and plain forms of a non-ASCII path name the same entry; the page's URL is
    # the percent-encoded one (kit/web/urls.py)
    enc = web.fetch_sync(f"zim://{FRENCH}/A/Orbite_h%C3%A9liosynchrone.html")
    assert enc.url == f"zim://{FRENCH}/A/Orbite_h%C3%A9liosynchrone.html"
    assert web.fetch_sync(f"zim://{FRENCH}/A/Orbite_héliosynchrone.html").url == enc.url


def test_fetch_accepts_bare_paths_and_wikipedia_urls(web):
    assert web.fetch_sync("A/Amphibian").url == f"zim://{MINI}/A/Amphibian"
    page = web.fetch_sync("https://en.wikipedia.org/wiki/Hit_the_Road_Jack")
    assert page.url == f"zim://{MAXI}/A/Hit_the_Road_Jack"  # newest English snapshot first
    assert web.fetch_sync("https://fr.wikipedia.org/wiki/Warrington").url.startswith(
        f"zim://{FRENCH}/")


def _entry_exists(web, url):
    try:
        web.resolve_url(url)
        return True
    except BackendError:
        return False


def test_fetch_keep_links_rewrites_internal_links(paths):
    text_link = re.compile(r"(?<!!)\[[^\]]+\]\((zim://[^)]+)\)")
    linked = LocalZimWeb([paths[MAXI]], keep_links=True)
    md = linked.fetch_sync(f"zim://{MAXI}/A/Hit_the_Road_Jack").markdown
    targets = text_link.findall(md)
    assert f"zim://{MAXI}/A/Ray_Charles" in targets
    assert all(_entry_exists(linked, t) for t in targets)
    assert "](#" not in md  # in-page anchors are reduced to their text
    plain = LocalZimWeb([paths[MAXI]]).fetch_sync(f"zim://{MAXI}/A/Hit_the_Road_Jack").markdown
    assert text_link.findall(plain) == []
    assert "Percy Mayfield" in plain


def test_fetch_follows_redirects(web):
    arch = web._archive(MAXI)
    import libzim.reader

    zim = libzim.reader.Archive(str(arch.file))
    for i in range(zim.all_entry_count):
        e = zim._get_entry_by_id(i)
        if e.is_redirect and e.path.startswith("A/"):
            target = e.get_redirect_entry()
            if target.path.startswith("A/") and not target.is_redirect:
                break
    else:
        pytest.skip("no article redirect in the archive")
    page = web.fetch_sync(f"zim://{MAXI}/{e.path}")
    assert page.url == f"zim://{MAXI}/{target.path}"


def test_fetch_image_url_returns_the_image(web):
    hit = web.image_search_sync("Nixon meeting oval office", 1)[0]
    page = web.fetch_sync(hit.image_url)
    assert page.content_type == hit.mime
    assert page.images[0].content == hit.content


def test_fetch_errors(web):
    with pytest.raises(BackendError, match="not found") as exc:
        web.fetch_sync(f"zim://{MAXI}/A/No_Such_Article_Anywhere")
    assert exc.value.retryable is False
    with pytest.raises(BackendError, match="not found"):
        web.fetch_sync("zim://no_such_archive/A/Ray_Charles")
    with pytest.raises(BackendError, match="not found"):
        web.fetch_sync("https://en.wikipedia.org/wiki/Quantum_chromodynamics")
    with pytest.raises(BackendError, match="only zim://"):
        web.fetch_sync("https://example.com/page")
    with pytest.raises(BackendError, match="only zim://"):
        web.fetch_sync("ftp://example.com/file")
    with pytest.raises(BackendError, match="not a page or image"):
        web.fetch_sync(f"zim://{MAXI}/-/script.js")
    with pytest.raises(BackendError, match="empty URL"):
        web.fetch_sync("  ")


@pytest.mark.parametrize("path", ["M/Counter", "M/Title", "M/Language", "-/favicon",
                                  "-/inserted_style.css", "X/fulltext/xapian"])
def test_archive_metadata_and_layout_entries_are_not_pages(web, path):
    """Metadata (``M/``), layout (``-/``: favicon, styles) and search-index entries of a ZIM
    archive are not articles or images: fetching them is refused like any non-page entry, by
    ``zim://`` URL, bare path or Wikipedia title (attack L6)."""
    arch = web._archive(MAXI)
    if arch.entry(path) is None:
        pytest.skip(f"{path} not in {MAXI}")
    for url in (f"zim://{MAXI}/{path}", path):
        with pytest.raises(BackendError, match="not a page or image") as exc:
            web.fetch_sync(url)
        assert exc.value.retryable is False and "archive" in str(exc.value)
    if path.startswith("M/"):
        with pytest.raises(BackendError):
            web.fetch_sync(f"https://en.wikipedia.org/wiki/{path}")


# --------------------------------------------------------------------------------------------------
# Construction, caching, concurrency
# --------------------------------------------------------------------------------------------------
def test_bogus_missing_and_duplicate_archives_fail_clearly(tmp_path, paths):
    bogus = tmp_path / "bogus.zim"
    bogus.write_bytes(os.urandom(4096))
    with pytest.raises(ZimError, match="bogus.zim"):
        LocalZimWeb([bogus], index_dir=tmp_path / "idx")
    with pytest.raises(ZimError, match="does not exist"):
        LocalZimWeb([tmp_path / "missing.zim"], index_dir=tmp_path / "idx")
    with pytest.raises(ZimError, match="no ZIM archives"):
        LocalZimWeb([], index_dir=tmp_path / "idx")
    twin = tmp_path / "twin"
    twin.mkdir()
    (twin / f"{FRENCH}.zim").symlink_to(paths[FRENCH])
    with pytest.raises(ZimError, match="share the stem"):
        LocalZimWeb([paths[FRENCH], twin / f"{FRENCH}.zim"], index_dir=tmp_path / "idx")
    truncated = tmp_path / "truncated.zim"
    truncated.write_bytes(paths[FRENCH].read_bytes()[:4000])
    with pytest.raises(ZimError, match="truncated.zim"):
        LocalZimWeb([truncated], index_dir=tmp_path / "idx")


def test_index_is_cached_and_reused(tmp_path, paths, monkeypatch):
    first = LocalZimWeb([paths[FRENCH]], index_dir=tmp_path)
    assert first.ensure_ready() == [FRENCH, "<collection>"]
    assert first.archives[0].key[:16] == "dbc328766d45c2b9"  # from the ZIM header: UUID, stored MD5, size
    assert first.archives[0].manifest["sha256"][:16] == "4e95c980c4044a06"  # the prefix listed in the data README
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    mtimes = {p: p.stat().st_mtime_ns for p in files}

    def no_build(*_args, **_kwargs):
        raise AssertionError("index rebuilt although the cache is valid")

    monkeypatch.setattr(zimmod._ZimArchive, "build", no_build)
    monkeypatch.setattr(zimmod._Collection, "build", no_build)
    second = LocalZimWeb([paths[FRENCH]], index_dir=tmp_path)
    assert second.ensure_ready() == []
    assert second.search_sync("Warrington", 1)[0].title == "Warrington"
    assert {p: p.stat().st_mtime_ns for p in files} == mtimes


def test_corrupt_cache_is_rebuilt_deterministically(tmp_path, paths):
    web1 = LocalZimWeb([paths[FRENCH]], index_dir=tmp_path)
    web1.ensure_ready()
    d = Path(web1.archives[0].index_dir)
    before = {n: (d / n).read_bytes() for n in ("store.sqlite", "hashes.npy")}
    (d / "hashes.npy").write_bytes(b"garbage")
    web2 = LocalZimWeb([paths[FRENCH]], index_dir=tmp_path)
    assert web2.ensure_ready() == [FRENCH]
    assert {n: (d / n).read_bytes() for n in before} == before
    assert web2.search_sync("Warrington", 1)[0].title == "Warrington"


async def test_async_methods_and_concurrent_callers(web):
    queries = ["Ray Charles", "Georgia on My Mind", "Warrington", "amphibian", "Bob Dylan"] * 4
    expected = [web.search_sync(q, 5) for q in queries]
    got = await asyncio.gather(*(web.search(q, 5) for q in queries))
    assert got == expected
    page, images, rev = await asyncio.gather(
        web.fetch(f"zim://{MAXI}/A/Ray_Charles"), web.image_search("piano", 3),
        web.reverse_image_search(web._archive(MAXI).read(
            web._archive(MAXI).entry(web._archive(MAXI).images[0].path))[1], 3))
    assert page.title == "Ray Charles" and images and rev.pages
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(lambda q: web.search_sync(q, 5), queries))
        pages = list(pool.map(web.fetch_sync, [f"zim://{LEGACY}/A/Ray_Charles.html"] * 4))
    assert threaded == expected
    assert len({p.markdown for p in pages}) == 1


async def test_async_first_call_builds_index_off_the_event_loop(tmp_path, paths):
    web = LocalZimWeb([paths[FRENCH]], index_dir=tmp_path)
    hits, pages = await asyncio.gather(web.search("Warrington", 2),
                                       web.image_search("Warrington", 2))
    assert hits[0].title == "Warrington" and pages
