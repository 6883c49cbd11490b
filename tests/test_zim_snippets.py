"""Query-aware snippets of the local web (kit.web.zim.snippets, issue 17 part 5): query terms in the
snippet when the text has them, bounded length, bounded work per hit (stems cached across calls, the
text scanned in growing regions instead of 200,000 characters at once)."""

from __future__ import annotations

import random
from urllib.parse import unquote

import pytest

from kit.paths import zim_paths
from kit.web.zim import SNIPPET_CHARS, LocalZimWeb, make_snippet, snippet_keys, text_analyzer

EN = text_analyzer("english")
FR = text_analyzer("french")
FILLER = "The committee met again in the spring and adjourned without a decision. "


class CountingAnalyzer:
    """Wraps a real analyzer and counts ``analyze`` calls."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def analyze(self, text):
        self.calls += 1
        return self.inner.analyze(text)


class SliceLog(str):
    """A str that records the stop of every slice taken from it (how far a scan reads)."""

    stops: list[int]

    def __getitem__(self, key):
        if isinstance(key, slice):
            self.stops.append(len(self) if key.stop is None else key.stop)
        return str.__getitem__(self, key)


def _snip(text: str, query: str, analyzer=EN, limit: int = SNIPPET_CHARS) -> str:
    return make_snippet(text, snippet_keys(query, EN if analyzer is EN else FR), analyzer, limit)


@pytest.mark.parametrize("at", [0, 1_000, 10_000, 60_000, 150_000])
def test_snippet_contains_query_terms_wherever_they_occur(at):
    text = FILLER * (at // len(FILLER)) + "Nearby stood the famous lighthouse of Alexandria. " + FILLER * 50
    snippet = _snip(text, "lighthouse Alexandria")
    assert "lighthouse" in snippet and "Alexandria" in snippet, snippet


def test_snippet_prefers_window_with_most_distinct_terms():
    text = (FILLER * 5 + "A lighthouse here. " + FILLER * 5
            + "The lighthouse of Alexandria was a wonder. " + FILLER * 5)
    assert "Alexandria" in _snip(text, "lighthouse Alexandria")


@pytest.mark.parametrize("limit", [60, 120, SNIPPET_CHARS])
def test_snippet_length_bounded_and_one_line(limit):
    text = ("Line one.\n" + FILLER * 40 + "\nThe lighthouse stood\n\ntall. " + FILLER * 40)
    for query in ("lighthouse", "nothing matches this zzzq"):
        snippet = _snip(text, query, limit=limit)
        assert 0 < len(snippet) <= limit and "\n" not in snippet, snippet


def test_stems_are_cached_across_calls():
    """The stem of a candidate word is computed once per analyzer, not once per hit."""
    counting = CountingAnalyzer(EN)
    text = FILLER * 3 + "Countries and their country codes. " + FILLER * 3
    keys = snippet_keys("countries", EN)
    first = make_snippet(text, keys, counting)
    assert counting.calls > 0
    counting.calls = 0
    assert make_snippet(text, keys, counting) == first
    assert counting.calls == 0


def test_stem_check_still_rejects_prefix_words():
    """``village`` starts with the key of ``ville`` but is another word: not a match."""
    text = "The village square. " + FILLER * 10 + "La ville de Paris. " + FILLER
    assert "ville de Paris" in make_snippet(text, snippet_keys("ville", FR), FR)


def test_accented_form_found_by_unaccented_query():
    text = FILLER * 20 + "Une orbite héliosynchrone est utilisée. " + FILLER * 5
    assert "héliosynchrone" in make_snippet(text, snippet_keys("heliosynchrone", FR), FR)


def test_scan_reads_a_bounded_region_when_term_is_near():
    """A term just past the lead is found without reading the text's first 200,000 characters."""
    text = SliceLog(FILLER * 70 + "The lighthouse of Alexandria. " + FILLER * 3_000)
    text.stops = []
    assert "lighthouse" in make_snippet(text, snippet_keys("lighthouse", EN), EN)
    assert max(text.stops) <= 30_000, text.stops


def test_shared_archive_snippets_have_query_terms_whenever_the_article_does(data_dir):
    """Real data: for 60 seeded queries (titles and text phrases) over the shared archives, every
    hit whose body (first 200,000 characters, the scan bound) has a query term gets a snippet
    with one, and no snippet is empty or over the bound."""
    paths = zim_paths(data_dir)
    if not paths:
        pytest.skip("shared ZIM archives missing")
    web = LocalZimWeb(paths)
    corpus = {(stem, path): (lang, title, text) for stem, lang, path, title, text in web.corpus()}
    rng = random.Random(0)
    docs = sorted(corpus.items())
    queries = [t for _, (_, t, _) in rng.sample(docs, 30)]
    for _, (_, _, text) in rng.sample(docs, 30):
        words = text.split("\n", 1)[-1].split()
        i = rng.randrange(max(1, len(words) - 3))
        queries.append(" ".join(words[i:i + 3]))
    checked = 0
    for q in queries:
        for hit in web.search_sync(q, 5):
            assert 0 < len(hit.snippet) <= SNIPPET_CHARS, hit
            stem, _, path = hit.url.removeprefix("zim://").partition("/")
            _lang, _title, text = corpus[(stem, unquote(path))]
            analyzer = web.analyzer_for(stem)
            qterms = set(analyzer.analyze(q))
            if qterms & set(analyzer.analyze(text.split("\n", 1)[-1][:200_000])):
                checked += 1
                assert qterms & set(analyzer.analyze(hit.snippet)), (q, hit.title, hit.snippet)
    assert checked > 150
