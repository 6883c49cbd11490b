"""The collection's BM25 index build at scale (issue 17, part 2): committed every
``COMMIT_DOCS`` documents so a SIGKILLed build resumes from its last commit and gives the same
search results as an uninterrupted one; the (segment, doc) -> key table read in bounded batches,
right on multi-segment indexes; Python memory of the build not growing with the archive."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc

import pytest
import tantivy
from test_zim_build_streaming import WORDS, write_archive

from kit.web.zim import LocalZimWeb, build_images
from kit.web.zim import build as build_mod
from kit.web.zim import index as index_mod
from kit.web.zim import runner as runner_mod

QUERIES = ["castle river", "glacier number 42", "violin history", "article 7 " + WORDS[7],
           "comet", "quartz canyon tundra", "item 999"]


@pytest.fixture(scope="module")
def zims(tmp_path_factory):
    d = tmp_path_factory.mktemp("collzim")
    return {n: write_archive(d / f"gen_{n}.zim", n) for n in (100, 1000)}


@pytest.fixture(autouse=True)
def inline_build(monkeypatch):
    monkeypatch.setattr(build_mod, "PARALLEL_MIN_ENTRIES", 10**9)


def _results(web: LocalZimWeb) -> tuple:
    """Every match's score (whole rankings, equal scores put in path order) and the top-10
    scores. Among documents of equal score, tantivy's order (and so which of several tied at
    the 10th score it returns) follows the segment layout, which a resumed build changes."""
    text = [sorted(web.rank_sync(q, 2000), key=lambda t: (-t[2], t[1])) for q in QUERIES]
    top10 = [[s for _, _, s in web.rank_sync(q, 10)] for q in QUERIES]
    images = [sorted((h.image_url, h.page_url) for h in web.image_search_sync(q, 100))
              for q in QUERIES]
    return text, top10, images


_KILLED = """
import os, signal, sys
from kit.web.zim import LocalZimWeb
from kit.web.zim import build as b, index as ix
b.PARALLEL_MIN_ENTRIES = 10**9
ix.COMMIT_DOCS = 100
web = LocalZimWeb([sys.argv[1]], index_dir=sys.argv[2])
web.archives[0].ensure_ready()  # the archive's extract: complete
real = ix._Collection._text_docs
def dying(self, *a):
    for n, doc in enumerate(real(self, *a)):
        if n == 450:  # 4 commits of 100 are on disk: die like `kill -9`
            os.kill(os.getpid(), signal.SIGKILL)
        yield doc
ix._Collection._text_docs = dying
web.ensure_ready()
"""


def test_killed_collection_build_resumes_and_equals_uninterrupted(zims, tmp_path, monkeypatch):
    idx = tmp_path / "idx"
    proc = subprocess.run([sys.executable, "-c", _KILLED, str(zims[1000]), str(idx)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    web = LocalZimWeb([zims[1000]], index_dir=idx)
    assert not web.collection.dir.exists()  # no half index loads
    assert list((idx / "collections").glob(".*.work"))  # the killed build's work is kept
    monkeypatch.setattr(index_mod, "COMMIT_DOCS", 100)
    web.ensure_ready()
    m = json.loads((web.collection.dir / "manifest.json").read_text())
    assert m["resumed_docs"] == 400  # 4 commits kept, not redone
    assert m["commits"] == 6  # 400..999 indexed again, committed every 100
    assert web.collection.searchable[0].text_searcher.num_docs == 1000
    monkeypatch.setattr(index_mod, "COMMIT_DOCS", 10**9)
    ref = LocalZimWeb([zims[1000]], index_dir=tmp_path / "ref")
    ref.ensure_ready()
    got, want = _results(web), _results(ref)
    assert all(got[0]) and any(got[2]) and max(map(len, got[0])) > 100
    assert got == want


def test_keymap_is_right_on_a_multi_segment_index(zims, tmp_path, monkeypatch):
    monkeypatch.setattr(index_mod, "COMMIT_DOCS", 150)  # 7 segments (tantivy merges 8 or more)
    monkeypatch.setattr(index_mod, "_KEYMAP_BATCH", 50)  # batches that straddle segments
    web = LocalZimWeb([zims[1000]], index_dir=tmp_path)
    web.ensure_ready()
    li = web.collection.searchable[0]
    ts = li.text_searcher
    assert ts.num_segments > 1
    # Reference: every document's address from a search, its key from the fast field.
    hits = ts.search(tantivy.Query.all_query(), limit=ts.num_docs, count=False).hits
    addrs = [a for _, a in hits]
    want = dict(zip(((a.segment_ord, a.doc) for a in addrs), ts.fast_field_values("key", addrs),
                    strict=True))
    got = {(s, d): k for s, t in enumerate(li.keymap) for d, k in enumerate(t)}
    assert got == want and len(got) == 1000
    with pytest.raises(ValueError, match="do not match"):
        index_mod._address_keys(ts, [1000])


def test_collection_build_memory_does_not_grow_with_the_archive(zims, tmp_path, monkeypatch):
    # Batches smaller than the small archive, so both sizes run at the caps.
    monkeypatch.setattr(index_mod, "_KEYMAP_BATCH", 64)
    monkeypatch.setattr(index_mod, "_READ_BATCH", 32)
    # The text index and its key table; an image document's size follows its occurrences
    # (here every 12th page shows the same image), which is its content, not build state.
    monkeypatch.setattr(index_mod._Collection, "_image_docs", lambda self, lang, start: iter(()))
    peaks = {}
    for n, path in zims.items():
        web = LocalZimWeb([path], index_dir=tmp_path / str(n))
        for a in web.archives:
            a.ensure_ready()
        out = tmp_path / f"coll{n}"
        out.mkdir()
        tracemalloc.start()
        web.collection.build(out)
        peaks[n] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    print("collection build peaks", peaks)
    # 900 more articles: the stored key table grows by 8 bytes each; nothing else may.
    assert peaks[1000] < peaks[100] + 8 * 900 + 16_000, peaks


def test_articles_are_stored_in_zstd_blocks_with_a_trained_dictionary(zims, tmp_path, monkeypatch):
    import sqlite3

    from kit.web.zim import store as store_mod

    arch = LocalZimWeb([zims[1000]], index_dir=tmp_path / "i").archives[0]
    monkeypatch.setattr(build_mod, "ARTICLE_CHUNK", 100)  # chunks end in the middle of blocks
    monkeypatch.setattr(store_mod, "ZDICT_SAMPLES", 15_000)  # trained after the first ~100 texts
    outs = {}
    for name, workers in (("inline", 1), ("pool", 2)):
        outs[name] = tmp_path / name
        outs[name].mkdir()
        arch.build(outs[name], workers=workers)
    monkeypatch.setattr(store_mod, "ZDICT_SAMPLES", 10**12)  # never: blocks without one
    outs["plain"] = tmp_path / "plain"
    outs["plain"].mkdir()
    arch.build(outs["plain"], workers=1)
    dumps = {}
    for name, out in outs.items():
        db = sqlite3.connect(out / store_mod.STORE_FILE)
        assert db.execute("PRAGMA page_size").fetchone()[0] == store_mod.PAGE_SIZE
        dumps[name] = (db.execute("SELECT id, data FROM blocks ORDER BY id").fetchall(),
                       db.execute("SELECT value FROM meta WHERE key = 'zdict'").fetchall())
        db.close()
    blocks, zdict = dumps["inline"]
    assert zdict and len(zdict[0][0]) > 1000
    # every block after the dictionary (none is written before it), one per BLOCK articles
    assert [i for i, _ in blocks] == list(range(-(-1000 // store_mod.BLOCK)))
    assert {d[0] for _, d in blocks} == {1}
    assert dumps["pool"] == dumps["inline"]  # extracted in the workers: the same bytes
    assert not dumps["plain"][1] and {d[0] for _, d in dumps["plain"][0]} == {0}
    assert sum(len(d) for _, d in blocks) < 0.85 * sum(len(d) for _, d in dumps["plain"][0])
    stores = {n: store_mod.ArchiveStore(o / store_mod.STORE_FILE) for n, o in outs.items()}
    texts = {n: [t for _, _, _, t in s.iter_articles(batch=64)] for n, s in stores.items()}
    assert texts["inline"] == texts["plain"] and len(texts["plain"]) == 1000
    assert [i for i, *_ in stores["inline"].iter_articles(batch=7, start=995)] == list(range(995, 1000))
    assert stores["inline"].record(999)[3] == texts["plain"][999]
    assert stores["inline"].article(999) == stores["plain"].article(999)
    with pytest.raises(IndexError):
        stores["inline"].article(1000)
    with pytest.raises(ValueError, match="dictionary"):
        store_mod.TextCodec().unpack(blocks[-1][1])


def test_block_records_round_trip_and_paths_derived_from_titles():
    from kit.web.zim.store import pack_records, unpack_records

    recs = [("Ray_Charles", "Ray Charles", "He was a pianist.", "Text\nwith lines"),
            ("A/Ray_Charles.html", "Ray Charles", "", ""),  # an old-scheme path: kept
            ("Caf\u00e9_(x)", "Caf\u00e9 (x)", "\u00e9", "\u4e2d\u6587 \x00 nul")]
    packed = pack_records(recs)
    assert unpack_records(packed) == recs
    assert packed.count(b"Ray_Charles") == 1  # the derivable path is not stored
    for bad in (b"", packed[:-1], packed + b"x", b"\xff\xff\xff\xff"):
        with pytest.raises(ValueError, match="not an article block"):
            unpack_records(bad)


def test_title_lookup_survives_hash_collisions(zims, tmp_path, monkeypatch):
    from kit.web.zim import store as store_mod

    monkeypatch.setattr(store_mod, "title_hash", lambda folded: 7)  # every title collides
    monkeypatch.setattr(build_mod, "title_hash", lambda folded: 7)
    arch = LocalZimWeb([zims[100]], index_dir=tmp_path).archives[0]
    arch.ensure_ready()
    for doc in (0, 41, 99):
        title = arch.articles[doc]["title"]
        assert arch.title_map.get(title.casefold()) == doc and title.casefold() in arch.title_map
    assert arch.title_map.get("no such title") is None


def test_a_work_folder_with_more_documents_is_rebuilt(zims, tmp_path, caplog):
    big = LocalZimWeb([zims[1000]], index_dir=tmp_path / "big")
    small = LocalZimWeb([zims[100]], index_dir=tmp_path / "small")
    for web in (big, small):
        for a in web.archives:
            a.ensure_ready()
    out = tmp_path / "work"
    out.mkdir()
    big.collection.build(out)  # 1,000 committed documents: not the small collection's work
    with caplog.at_level("WARNING", logger="kit.web.zim.index"):
        m = small.collection.build(out)
    # (a work folder is named by its members and format, so this needs a kit that changed its
    # build without bumping INDEX_FORMAT; the text index is then redone, not trusted)
    assert m["resumed_docs"] < 100
    assert any("rebuilding it" in r.getMessage() for r in caplog.records)
    text = tantivy.Index.open(str(out / "text_english"))
    assert text.searcher().num_docs == 100


def test_pool_workers_replaced_every_few_chunks_give_the_same_store(zims, tmp_path, monkeypatch):
    import sqlite3

    from kit.web.zim.store import STORE_FILE

    monkeypatch.setattr(build_mod, "ARTICLE_CHUNK", 24)
    monkeypatch.setattr(build_images, "IMAGE_CHUNK", 5)
    monkeypatch.setattr(runner_mod, "WORKER_TASKS", 2)  # 5 article chunks: each worker replaced
    arch = LocalZimWeb([zims[100]], index_dir=tmp_path / "i").archives[0]
    dumps = []
    for name, workers in (("one", 1), ("two", 2)):
        (tmp_path / name).mkdir()
        arch.build(tmp_path / name, workers=workers)
        db = sqlite3.connect(tmp_path / name / STORE_FILE)
        dumps.append([db.execute(f"SELECT * FROM {t} ORDER BY {order}").fetchall()
                      for t, order in (("blocks", "id"), ("titles", "key, id"),
                                       ("images", "rowid"), ("occurrences", "rowid"),
                                       ("page_titles", "doc"))])
        db.close()
    assert dumps[0] == dumps[1] and len(dumps[0][1]) == 100  # one title row an article


def test_ties_at_the_cut_do_not_depend_on_the_segment_layout(zims, tmp_path, monkeypatch):
    """Equal BM25 scores (the generated articles repeat their words every len(WORDS) articles) are
    ordered by key, whatever segments the build left: a multi-segment build ranks like a single one."""
    single = LocalZimWeb([zims[1000]], index_dir=tmp_path / "one")
    monkeypatch.setattr(index_mod, "COMMIT_DOCS", 150)  # 7 segments
    multi = LocalZimWeb([zims[1000]], index_dir=tmp_path / "many")
    multi.ensure_ready()
    assert multi.collection.searchable[0].text_searcher.num_segments > 1
    for q in ("comet", "castle river", "violin history"):
        full = single.rank_sync(q, 1000)
        top = full[0][2]
        tied = [h for h in full if h[2] == top]
        assert len(tied) > 3, (q, len(tied))  # the cut at 3 falls inside a tie
        for num in (1, 3, len(tied)):
            assert multi.rank_sync(q, num) == single.rank_sync(q, num) == full[:num], (q, num)


def test_a_damaged_article_block_is_a_clear_error(zims, tmp_path):
    import shutil
    import sqlite3

    from kit.web.zim import store as store_mod

    arch = LocalZimWeb([zims[100]], index_dir=tmp_path / "i").archives[0]
    arch.ensure_ready()
    copy = tmp_path / "copy.sqlite"
    shutil.copy(arch.index_dir / store_mod.STORE_FILE, copy)
    db = sqlite3.connect(copy)
    with db:
        db.execute("UPDATE blocks SET data = substr(data, 1, length(data) / 2) WHERE id = 1")
        db.execute("DELETE FROM blocks WHERE id = 2")
    db.close()
    store = store_mod.ArchiveStore(copy)
    assert store.article(0) == arch.articles[0]  # block 0 is intact
    with pytest.raises(ValueError, match="article block 1 is damaged"):
        store.article(store_mod.BLOCK)
    with pytest.raises(ValueError, match="article block 2 is missing"):
        store.record(2 * store_mod.BLOCK)
    with pytest.raises(ValueError, match="article block 2 is missing"):
        store.records([0, 2 * store_mod.BLOCK])


def test_search_over_a_damaged_store_is_a_backend_error(zims, tmp_path):
    import sqlite3

    from kit.types import BackendError
    from kit.web.zim import store as store_mod

    web = LocalZimWeb([zims[100]], index_dir=tmp_path)
    assert web.search_sync("castle", 3)
    db = sqlite3.connect(web.archives[0].index_dir / store_mod.STORE_FILE)
    with db:
        db.execute("UPDATE blocks SET data = x'01ffff'")
    db.close()
    again = LocalZimWeb([zims[100]], index_dir=tmp_path)  # a cold start over the damaged store
    disagree = "gen_100.zim: index and store disagree.*damaged.*delete"
    with pytest.raises(BackendError, match=disagree):
        again.search_sync("castle", 3)
    # ranking names its hits from the collection's heads table (issue 32), not the store
    assert again.rank_sync("castle", 3) == web.rank_sync("castle", 3)
    # so does image search: a hit's page path comes from the heads table too, no block is read
    assert again.image_search_sync("castle picture", 3) == web.image_search_sync("castle picture", 3)
    # a Wikipedia URL whose slug is not a path goes through the title table and its block
    with pytest.raises(BackendError, match=disagree):
        again.fetch_sync("https://en.wikipedia.org/wiki/article_7_" + WORDS[7].upper())
    assert again.fetch_sync("zim://gen_100/A/Article_7").title  # the archive itself is intact


def test_a_frame_header_claiming_huge_content_is_refused_before_allocating():
    import zstandard

    from kit.web.zim import store as store_mod

    codec = store_mod.TextCodec()
    frame = codec.pack(b"x" * 1000)
    assert codec.unpack(frame) == b"x" * 1000
    # a frame whose header claims 2**40 bytes (as a damaged header could): magic, descriptor
    # (8-byte content size, single segment), the size, one empty raw block
    claim = b"\x28\xb5\x2f\xfd" + bytes([0b1110_0000]) + (1 << 40).to_bytes(8, "little")
    assert zstandard.frame_content_size(claim + b"\x01\x00\x00") == 1 << 40
    with pytest.raises(ValueError, match="claims 1099511627776 bytes"):
        codec.unpack(bytes((0,)) + claim + b"\x01\x00\x00")


def test_every_flipped_bit_of_a_block_is_an_error_not_other_text(zims, tmp_path):
    """zstd's content checksum: a block with one bit flipped anywhere in its frame decodes to an
    error (before it, ~60 % of single-bit flips decoded to altered articles, no error)."""
    import random

    from kit.web.zim import store as store_mod

    arch = LocalZimWeb([zims[100]], index_dir=tmp_path / "i").archives[0]
    arch.ensure_ready()
    (data,) = arch.store.db.execute("SELECT data FROM blocks WHERE id = 1").fetchone()
    codec = arch.store.codec
    assert store_mod.unpack_records(codec.unpack(data))
    rng = random.Random(0)
    for bit in rng.sample(range(8, 8 * len(data)), 200):  # past the marker byte
        bad = bytearray(data)
        bad[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(ValueError, match="article block 1 is damaged"):
            arch.store._unpack(1, bytes(bad))


@pytest.mark.parametrize("damage, call, match", [
    ("UPDATE blocks SET data = 5 WHERE id = 0", "search", "stored as int"),
    ("UPDATE occurrences SET doc = 'x'", "image", "occurrence on missing article 'x'"),
    ("UPDATE occurrences SET position = 'x'", "image", "position 'x'"),
    ("DELETE FROM blocks WHERE id = 1", "corpus", "article block 1 is missing"),
    ("DELETE FROM blocks WHERE id = 3", "rebuild", "article block 3 is missing"),
])
def test_a_store_with_odd_values_or_gaps_is_a_backend_error(zims, tmp_path, damage, call, match):
    """SQLite keeps any type in any column, and a pass over the articles used to skip a missing
    block silently (the collection then indexed fewer documents and was rebuilt on every call)."""
    import shutil
    import sqlite3

    from kit.types import BackendError
    from kit.web.zim import store as store_mod

    web = LocalZimWeb([zims[100]], index_dir=tmp_path)
    assert web.search_sync("castle", 3) and web.image_search_sync("castle picture", 3)
    with sqlite3.connect(web.archives[0].index_dir / store_mod.STORE_FILE) as db:
        db.execute(damage)
    db.close()
    if call == "rebuild":
        shutil.rmtree(web.collection.dir)
    again = LocalZimWeb([zims[100]], index_dir=tmp_path)
    with pytest.raises(BackendError, match=f"index and store disagree.*{match}.*delete"):
        if call == "search":
            again.search_sync("article", 100)
        elif call == "image":
            again.image_search_sync("castle picture", 3)
        elif call == "corpus":
            list(again.corpus())
        else:
            again.search_sync("castle", 3)


def test_hostile_strings_and_damaged_collection_keys_are_backend_errors(zims, tmp_path):
    from kit.types import BackendError

    web = LocalZimWeb([zims[100]], index_dir=tmp_path)
    for call in (web.search_sync, web.rank_sync, web.image_search_sync):
        with pytest.raises(BackendError, match="query is not valid Unicode"):
            call("castle \ud800", 3)  # a lone surrogate: tantivy raised UnicodeEncodeError
    for url in ("zim://gen_100/A/\ud800", "https://en.wikipedia.org/wiki/Castle\ud800"):
        with pytest.raises(BackendError, match="URL is not valid Unicode"):
            web.fetch_sync(url)
    with pytest.raises(BackendError, match="malformed URL"):
        web.fetch_sync("https://[::1/x")  # urlsplit raised ValueError
    for bad in (None, 5, b"zim://gen_100/A/Article_7"):
        with pytest.raises(BackendError, match="a URL must be a string"):
            web.fetch_sync(bad)
    web.ensure_ready()
    web.collection.members = []  # as if the index's keys named an archive it does not hold
    for call in (web.search_sync, web.rank_sync, web.image_search_sync):
        with pytest.raises(BackendError, match=f"names archive member 0 of 0.*delete {web.collection.dir}"):
            call("castle picture", 3)
