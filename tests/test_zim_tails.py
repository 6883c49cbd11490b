"""The store keeps a prefix of each body and a compressed image context (issue 32, "<= 2 KB an
article"): results must be what the full text gave. Snippets, ``corpus()``, a new collection built
after the tails file was dropped (the archive extracted again) and image contexts are compared with
a web that kept the full text (``keep_text=True``), on the shared archives and on real-weight
generated pages whose bodies are ~7k characters."""

from __future__ import annotations

import logging
import sqlite3
import sys
from pathlib import Path

import pytest

from kit.paths import zim_paths
from kit.types import BackendError
from kit.web.zim import LocalZimWeb
from kit.web.zim import archive as archive_mod
from kit.web.zim.snippets import LEAD_TEXT_CHARS, lead_snippet, make_snippet, snippet_keys
from kit.web.zim.store import STORE_FILE
from kit.web.zim.tails import TAILS_FILE, TEXT_PREFIX
from kit.web.zim.text import analyzer_language, text_analyzer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

#: Words from the shared archives' text, deep in long articles as well as in leads.
QUERIES = ["Ray Charles", "piano", "Georgia", "1950s", "Quincy Jones", "Mars", "relativity", "war",
           "plants", "capitale", "Warrington", "héliosynchrone", "heroin", "Grammy", "orbit", "album",
           "church", "record label", "Atlantic", "divorce", "Einstein", "France", "population",
           "river", "London", "award", "death", "film", "tour", "Brother Ray", "Hallelujah",
           "country music", "Genius", "Swing Time", "cocaine", "Chicago", "saxophone", "Tangerine"]


@pytest.fixture(scope="module")
def realistic(tmp_path_factory, data_dir) -> Path:
    from gen_zim_archive import generate

    sources = sorted((data_dir / "zim").glob("wikipedia_en_*.zim"))
    if not sources:
        pytest.skip("no English shared ZIM archive")
    out = tmp_path_factory.mktemp("tails") / "realistic.zim"
    generate(out, 200, seed=5, sources=sources, compress=False, progress=False)
    return out


def _webs(paths, root: Path) -> tuple[LocalZimWeb, LocalZimWeb]:
    kept = LocalZimWeb(paths, root / "kept", keep_text=True)
    kept.ensure_ready()
    dropped = LocalZimWeb(paths, root / "dropped")
    dropped.ensure_ready()
    return kept, dropped


def _fallbacks(monkeypatch) -> list:
    calls: list = []
    real = archive_mod._ZimArchive.full_texts
    monkeypatch.setattr(archive_mod._ZimArchive, "full_texts",
                        lambda self, docs: calls.append(list(docs)) or real(self, docs))
    return calls


def test_prefix_is_the_snippet_lead_and_one_window():
    import bench_zim_scale

    assert TEXT_PREFIX == LEAD_TEXT_CHARS == 3_000 + 250 + 40
    assert bench_zim_scale.TAILS_FILE == TAILS_FILE


def test_lead_snippet_is_the_full_texts_or_none():
    an = text_analyzer(analyzer_language("en"))
    text = ("Lead words about rivers and castles. " * 90 + "The glacier appears only here. "
            + "Filler sentence. " * 400)
    assert len(text) > LEAD_TEXT_CHARS
    prefix = text[:LEAD_TEXT_CHARS]
    for q in ("river castle", "castles", "lead"):
        keys = snippet_keys(q, an)
        assert lead_snippet(prefix, keys, an) == make_snippet(text, keys, an)
    assert lead_snippet(prefix, snippet_keys("glacier", an), an) is None  # beyond the lead
    short = "A short body about a glacier."
    assert lead_snippet(short, snippet_keys("comet", an), an) == make_snippet(short, snippet_keys("comet", an), an)


def test_lead_snippet_with_text_that_lowercasing_lengthens():
    """Capital İ lowercases to two characters: windows placed from the lowered lead can reach
    past the prefix, where the lead snippet must give way to the full text (never differ)."""
    an = text_analyzer(analyzer_language("en"))
    nones = 0
    for at in range(2_600, 3_000, 40):
        text = ("İzmir İnce " * 300)[:at] + " glacier " + "filler words here " * 300
        prefix = text[:LEAD_TEXT_CHARS]
        keys = snippet_keys("glacier", an)
        got = lead_snippet(prefix, keys, an)
        nones += got is None
        assert got is None or got == make_snippet(text, keys, an), at
    assert nones  # the case arises: the window would have been cut at the prefix


def test_shared_archives_give_the_full_texts_results(data_dir, tmp_path, monkeypatch):
    paths = sorted(zim_paths(data_dir))
    kept, dropped = _webs(paths, tmp_path)
    assert all((a.index_dir / TAILS_FILE).is_file() for a in kept.archives)
    assert not any((a.index_dir / TAILS_FILE).exists() for a in dropped.archives)
    calls = _fallbacks(monkeypatch)
    for q in QUERIES:
        assert kept.search_sync(q, 10) == dropped.search_sync(q, 10), q
        assert kept.image_search_sync(q, 5) == dropped.image_search_sync(q, 5), q
    assert len(calls) > 10  # long bodies whose terms lie beyond the lead: read in full
    assert list(kept.corpus()) == list(dropped.corpus())
    want = [(s, lg, p, t, f"{t}\n") for s, lg, p, t, _ in kept.corpus()]
    monkeypatch.setattr(archive_mod, "iter_full_texts", None)  # titles only: no text read at all
    assert list(dropped.corpus(text=False)) == want
    for a, b in zip(kept.archives, dropped.archives, strict=True):
        n = len(a.articles)
        for doc in (0, n // 2, n - 1):
            assert a.article_text(doc) == b.article_text(doc)
        for i in range(0, len(a.images), max(1, len(a.images) // 7)):
            assert a.images[i] == b.images[i]  # contexts decompressed alike


def test_stored_text_is_a_prefix_and_contexts_are_compressed(realistic, tmp_path):
    kept, dropped = _webs([realistic], tmp_path)
    arch = dropped.archives[0]
    db = sqlite3.connect(arch.index_dir / STORE_FILE)
    assert {type(c) for (c,) in db.execute("SELECT context FROM occurrences")} == {bytes}
    db.close()
    long = 0
    for doc, path, _title, text in kept.archives[0].iter_full_texts():
        stored = arch.store.record(doc)[3]
        assert text.startswith(stored) and len(stored) == min(len(text), TEXT_PREFIX), path
        long += len(text) > TEXT_PREFIX
    assert long > 100  # real-weight pages: most bodies have a tail
    store_bytes = (arch.index_dir / STORE_FILE).stat().st_size
    tails_bytes = (kept.archives[0].index_dir / TAILS_FILE).stat().st_size
    assert tails_bytes > store_bytes / 2  # what dropping the tails saves
    occs = [o for i in range(len(arch.images)) for o in arch.images[i].occurrences]
    assert sum(bool(o["context"]) for o in occs) > len(occs) / 2


def test_a_new_collection_after_the_tails_were_dropped_extracts_again(realistic, tmp_path, data_dir,
                                                                       monkeypatch):
    from kit.web.zim import fulltext

    other = sorted(data_dir.glob("zim/wikipedia_fr_*.zim"))[:1]
    kept, dropped = _webs([realistic, *other], tmp_path)
    alone = LocalZimWeb([realistic], tmp_path / "dropped")  # same archive cache, new collection
    assert not (alone.archives[0].index_dir / TAILS_FILE).exists()
    extracted = []
    real = fulltext._reextracted
    monkeypatch.setattr(fulltext, "_reextracted", lambda arch, *a: extracted.append(arch.stem) or real(arch, *a))
    alone.ensure_ready()
    assert extracted == [realistic.stem]
    ref = LocalZimWeb([realistic], tmp_path / "kept", keep_text=True)
    for q in ("river", "album tour", "population census", "the war", "church organ"):
        assert alone.search_sync(q, 10) == ref.search_sync(q, 10), q
        assert alone.image_search_sync(q, 5) == ref.image_search_sync(q, 5), q
    assert not (alone.archives[0].index_dir / TAILS_FILE).exists()


def test_a_damaged_tail_or_changed_archive_is_a_backend_error(realistic, tmp_path, monkeypatch):
    web = LocalZimWeb([realistic], tmp_path / "i", keep_text=True)
    web.ensure_ready()
    arch = web.archives[0]
    doc = next(d for d, _, _, t in arch.iter_full_texts() if len(t) > TEXT_PREFIX)
    db = sqlite3.connect(arch.index_dir / TAILS_FILE)
    with db:
        db.execute("UPDATE tails SET data = substr(data, 1, length(data) / 2)")
    db.close()
    with pytest.raises(BackendError, match="tail block .* is damaged"):
        arch.article_text(doc)
    arch.drop_tails()
    full = arch.article_text(doc)  # read again from the archive
    assert len(full) > TEXT_PREFIX and full.startswith(arch.store.record(doc)[3])
    from kit.web.zim import fulltext, html

    real = html._extract_article

    def changed(path, title, html):
        art = real(path, title, html)
        art.text = "Another text. " + art.text
        return art
    monkeypatch.setattr(fulltext, "_extract_article", changed)
    monkeypatch.setattr(html, "_extract_article", changed)  # the chunked re-extraction's
    with pytest.raises(BackendError, match="disagree .*extracts to another text"):
        arch.article_text(doc)
    with pytest.raises(BackendError, match="disagree"):
        list(arch.iter_full_texts())


def test_a_hit_whose_page_no_longer_reads_gets_its_lead_snippet(realistic, tmp_path, monkeypatch, caplog):
    """Search does not fail on one hit whose full text cannot be read again (archive replaced or
    damaged): that hit's snippet comes from its stored lead, with a warning."""
    _kept, dropped = _webs([realistic], tmp_path)
    calls = _fallbacks(monkeypatch)
    q = next(q for q in QUERIES if dropped.search_sync(q, 10) and calls)
    want = dropped.search_sync(q, 10)

    def broken(self, docs):
        raise BackendError("cannot read the page again")

    monkeypatch.setattr(archive_mod._ZimArchive, "full_texts", broken)
    with caplog.at_level(logging.WARNING, logger="kit.web.zim.fulltext"):
        got = dropped.search_sync(q, 10)
    assert [(h.title, h.url) for h in got] == [(h.title, h.url) for h in want]
    assert all(h.snippet for h in got)
    assert any("from its stored lead" in r.getMessage() for r in caplog.records)


def test_extracting_again_goes_on_inline_when_the_pool_breaks(realistic, tmp_path, monkeypatch, caplog):
    """Full texts without the tails file come from the archive extracted again in a process pool;
    a pool that breaks midway (a worker killed) leaves the rest to this process, same texts."""
    from concurrent.futures.process import BrokenProcessPool

    from kit.web.zim import fulltext
    from kit.web.zim import runner as runner_mod

    kept, dropped = _webs([realistic], tmp_path)
    want = list(kept.archives[0].iter_full_texts())
    real_map = runner_mod._Runner.map

    def breaks(self, fn, jobs):
        if self.pool is None:
            yield from real_map(self, fn, jobs)
            return
        it = real_map(self, fn, jobs)
        yield next(it)
        yield next(it)
        raise BrokenProcessPool("a worker died")

    monkeypatch.setattr(runner_mod._Runner, "map", breaks)
    monkeypatch.setattr(fulltext, "ARTICLE_CHUNK", 32)
    arch = dropped.archives[0]
    with caplog.at_level(logging.WARNING, logger="kit.web.zim.fulltext"):
        got = list(fulltext._reextracted(arch, arch.store, 0, workers=2))
    assert got == want
    assert any("continuing in this process" in r.getMessage() for r in caplog.records)
