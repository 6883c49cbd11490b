"""Image search and reverse image search read the archive store in a bounded number of SQL
statements per search (issue 17: one look-up per occurrence made common images expensive), with
results identical to the per-item look-ups they replaced.

``tests/fixtures/zim_image_results.json`` holds every field of the results (titles, URLs,
captions, snippets, knowledge graph) as the per-item code returned them; it was recorded with
``ZIM_IMAGE_RECORD=1 pytest tests/test_zim_image_queries.py`` before the change.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

import pytest

from kit.web.zim import LocalZimWeb

FIXTURE = Path(__file__).parent / "fixtures" / "zim_image_results.json"
IMAGE_QUERIES = ["Ray Charles", "Ray Charles portrait", "piano", "Warrington Town Hall", "map",
                 "flag", "Earth from space", "statue", "concert stage", "hôtel de ville"]
#: Reverse image queries: every image at these fractions of each archive's image list.
REVERSE_AT = (0.0, 0.2, 0.4, 0.6, 0.8)


@pytest.fixture(scope="module")
def web(shared_zim_web) -> LocalZimWeb:
    return shared_zim_web


def _reverse_queries(web: LocalZimWeb) -> dict[str, bytes]:
    out = {}
    for arch in sorted(web.archives, key=lambda a: a.stem):
        n = len(arch.images)
        for i in sorted({int(f * n) for f in REVERSE_AT} if n else set()):
            path = arch.images[i].path
            out[f"{arch.stem}/{path}"] = arch.read(arch.entry(path))[1]
    return out


def _image_hit(h) -> list:
    return [h.title, h.image_url, h.page_url, h.domain, h.caption, h.mime, len(h.content)]


def _results(web: LocalZimWeb, reverse: dict[str, bytes]) -> dict:
    out: dict = {"image": {}, "reverse": {}}
    for q in IMAGE_QUERIES:
        out["image"][q] = [_image_hit(h) for h in web.image_search_sync(q, 20)]
    for key, data in reverse.items():
        res = web.reverse_image_search_sync(data, 10)
        kg = res.knowledge_graph
        out["reverse"][key] = {
            "pages": [[h.title, h.url, h.snippet, h.date] for h in res.pages],
            "thumbnails": [_image_hit(h) for h in res.thumbnails],
            "knowledge_graph": [kg.title, kg.description, kg.url] if kg else None,
        }
    return out


@contextmanager
def _count_sql(web: LocalZimWeb):
    """Count the SQL statements run on every archive store (sqlite3 trace callback), from cold
    article-block caches."""
    counter = [0]

    def trace(_stmt: str) -> None:
        counter[0] += 1

    for arch in web.archives:
        arch.store._blocks.clear()
        arch.store.db.set_trace_callback(trace)
    try:
        yield counter
    finally:
        for arch in web.archives:
            arch.store.db.set_trace_callback(None)


def test_results_equal_the_per_item_lookups(web):
    got = _results(web, _reverse_queries(web))
    if os.environ.get("ZIM_IMAGE_RECORD") == "1":
        FIXTURE.write_text(json.dumps(got, indent=1, ensure_ascii=False, sort_keys=True) + "\n",
                           encoding="utf-8")
    want = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert sum(len(v) for v in want["image"].values()) >= 60  # the set is not trivially empty
    assert sum(len(v["pages"]) for v in want["reverse"].values()) >= 20
    assert got == want


def test_image_search_runs_at_most_two_statements_per_archive(web):
    for q in ("Ray Charles", "piano", "map"):
        with _count_sql(web) as n:
            hits = web.image_search_sync(q, 20)
        assert hits
        assert n[0] <= 2 * len(web.archives), (q, n[0])  # images + occurrences, pages' blocks


def test_reverse_search_runs_at_most_two_statements_per_matching_archive(web):
    queries = _reverse_queries(web)
    for key, data in list(queries.items())[:8]:
        with _count_sql(web) as n:
            res = web.reverse_image_search_sync(data, 10)
        assert res.pages, key
        assert n[0] <= 2 * len(web.archives), (key, n[0])


def test_reverse_search_reads_only_the_pages_it_shows(web, monkeypatch):
    """All matches are ranked from the image records; page records (article blocks) are read for
    the ``num`` pages and thumbnails shown only (a common picture matches on thousands of pages)."""
    requested: list[int] = []
    for arch in web.archives:
        real = arch.store.records

        def spy(ids, real=real):
            requested.extend(ids)
            return real(ids)

        monkeypatch.setattr(arch.store, "records", spy)
    many = 0
    for data in list(_reverse_queries(web).values())[:8]:
        requested.clear()
        full = web.reverse_image_search_sync(data, 50)
        many = max(many, len(full.pages))
        requested.clear()
        res = web.reverse_image_search_sync(data, 1)
        assert res.pages == full.pages[:1]
        assert len(set(requested)) <= 2, requested  # one page, one thumbnail's page
    assert many >= 2  # some query matched on several pages


def test_images_with_pages_equals_the_tables_across_in_lists(web, monkeypatch):
    """Every field of ``images_with_pages`` against plain per-image SQL over ``images`` and
    ``occurrences`` and the pages' own records (blocks): one statement an IN list, a second for
    the blocks only with ``pages=True``."""
    from kit.web.zim import store

    IN_MAX = 40
    monkeypatch.setattr(store, "IN_MAX", IN_MAX)  # the shared archives have <= 133 images
    arch = max(web.archives, key=lambda a: len(a.images))
    n = len(arch.images)
    assert n > 2 * IN_MAX  # several IN lists
    ids = list(range(n))
    with _count_sql(web) as count:
        got = arch.store.images_with_pages(ids[::-1] + [0])  # any order, duplicates
    assert count[0] == -(-n // IN_MAX)  # one statement an IN list, no block read
    with _count_sql(web) as count:
        with_pages = arch.store.images_with_pages(ids, pages=True)
    assert -(-n // IN_MAX) < count[0] <= 2 * -(-n // IN_MAX)
    assert sorted(got) == sorted(with_pages) == ids
    db = arch.store.db
    for i in ids:
        rec = got[i]
        assert (rec.path, rec.mime, rec.width, rec.height) == db.execute(
            "SELECT path, mime, width, height FROM images WHERE id = ?", (i,)).fetchone()
        rows = db.execute("SELECT doc, position, alt, caption FROM occurrences "
                          "WHERE image = ? ORDER BY doc, position", (i,)).fetchall()
        assert rows and [(o["doc"], o["position"], o["alt"], o["caption"])
                         for o in rec.occurrences] == rows
        assert "context" not in rec.occurrences[0]  # searches do not decompress it
        for o, op in zip(rec.occurrences, with_pages[i].occurrences, strict=True):
            path, title, first, _ = arch.store.record(o["doc"])
            assert o["page_title"] == title and "page_path" not in o
            assert {k: op[k] for k in ("page_path", "page_title", "page_first")} == {
                "page_path": path, "page_title": title, "page_first": first}
    with pytest.raises(IndexError, match=f"no image {n}"):
        arch.store.images_with_pages([0, n])


def test_store_that_lacks_an_indexed_image_is_a_backend_error(web, monkeypatch):
    from kit.types import BackendError

    hit = web.image_search_sync("Ray Charles", 1)[0]
    arch = web._archive(hit.domain)

    def missing(ids, **_kw):
        raise IndexError(f"no image {max(ids)}")

    monkeypatch.setattr(arch.store, "images_with_pages", missing)
    with pytest.raises(BackendError, match="index and store disagree"):
        web.image_search_sync("Ray Charles", 1)


@pytest.mark.parametrize("bad, error", [(-1, IndexError), (2**63, IndexError), (1.7, TypeError),
                                        ("3", TypeError), (None, TypeError), (True, TypeError)])
def test_images_with_pages_refuses_ids_that_are_not_store_ids(web, bad, error):
    store = web.archives[0].store
    with pytest.raises(error, match="no image|ids are ints"):
        store.images_with_pages([0, bad])


def test_an_image_without_occurrences_is_a_clear_error_and_a_backend_error(web, tmp_path, monkeypatch):
    import shutil
    import sqlite3

    from kit.types import BackendError
    from kit.web.zim.store import ArchiveStore

    hit = web.image_search_sync("Ray Charles", 1)[0]
    arch = web._archive(hit.domain)
    (i,) = arch.store.db.execute("SELECT image FROM occurrences ORDER BY image LIMIT 1").fetchone()
    copy = tmp_path / arch.store.path.name
    shutil.copy(arch.store.path, copy)
    with sqlite3.connect(copy) as db:
        db.execute("DELETE FROM occurrences WHERE image = ?", (i,))
    damaged = ArchiveStore(copy)
    with pytest.raises(IndexError, match=f"image {i} has no occurrences"):
        damaged.images_with_pages([i])
    monkeypatch.setattr(arch, "store", damaged)
    with pytest.raises(BackendError, match=f"index and store disagree \\(image {i} has no occurrences\\)"):
        arch_records = type(web)._records
        arch_records(arch, [i])
