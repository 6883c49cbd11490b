"""Query-relevant snippets of web-search hits: the query words' surface keys
(:func:`snippet_keys`) and the densest early window of the article text (:func:`make_snippet`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import tantivy

from kit.web.zim.text import Analyzer, _clip, _one_line, fold_surface

SNIPPET_CHARS = 250

# Snippets. tantivy's SnippetGenerator re-tokenizes (and stems) the whole stored document for each
# hit: ~0.4 ms per hit on these articles, 40x the cost of ranking. Finding the query words' surface
# forms with str.find and picking the densest window costs ~80 us per hit on the shared archives
# (~100 us before the stem cache and lazy accent folding; a case-insensitive regex pass was slower,
# ~160 us; the old worst case, a 200,000-character scan, took >1 ms).
_SURFACE = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).filter(
    tantivy.Filter.lowercase()).build()


def snippet_keys(query: str, analyzer: Analyzer) -> list[tuple[str, str]]:
    """(surface key, stem) for each indexed word of ``query``: the key is the common prefix of the
    lowercase word and its stem (``countries``/``countri`` -> ``countri``; the word itself when
    that prefix is under 3 characters), used to find candidate words quickly. Keys are
    accent-folded (:func:`~kit.web.zim.text.fold_surface`), like the text :func:`make_snippet` scans."""
    keys: list[tuple[str, str]] = []
    for word in map(fold_surface, _SURFACE.analyze(query)):
        stems = analyzer.analyze(word)
        if not stems:
            continue  # stop word: not indexed, not highlighted
        stem = stems[0]
        n = 0
        while n < min(len(word), len(stem)) and word[n] == stem[n]:
            n += 1
        key = (word[:n] if n >= 3 else word, stem)
        if key not in keys:
            keys.append(key)
    return keys


#: Growing prefixes of the text scanned for query terms, each only when the previous one has none:
#: the lead (where the best snippets usually are), then wider. Work per hit is bounded by where the
#: first term occurs, not by the article's length (profile on the shared archives: the old jump from
#: 3,000 to 200,000 characters was most of the search call's time).
_WORD = re.compile(r"\w+")
_SNIPPET_REGIONS = (3_000, 24_000, 200_000)
_SNIPPET_LEAD = _SNIPPET_REGIONS[0]
_SNIPPET_SCAN = _SNIPPET_REGIONS[-1]  # characters scanned at most
_HITS_PER_KEY = 12
#: Characters of an article's text that decide its snippet whenever a query term occurs in the lead
#: region: the region plus one window (a window starts before the region's end and spans at most
#: ``limit + 40`` characters). The store keeps this prefix of each body (issue 32: the rest is read
#: from the archive for the hits whose terms lie beyond it; :func:`lead_snippet`).
LEAD_TEXT_CHARS = _SNIPPET_LEAD + SNIPPET_CHARS + 40


class _StemCache:
    """Analyzed form of a candidate word, per analyzer, shared by all calls (words repeat across
    hits and queries: one ``analyze`` per distinct word instead of one per occurrence and call).
    Bounded: cleared past ``cap`` words. Thread-safe for the backend's concurrent searches (dict
    get/set are atomic; a race only computes a stem twice)."""

    def __init__(self, cap: int = 200_000):
        self.cap = cap
        self._by_analyzer: dict[int, tuple[object, dict[str, str]]] = {}

    def table(self, analyzer) -> dict[str, str]:
        got = self._by_analyzer.get(id(analyzer))
        if got is None or got[0] is not analyzer:  # new analyzer (or a reused id)
            if len(self._by_analyzer) > 64:
                self._by_analyzer.clear()
            got = self._by_analyzer[id(analyzer)] = (analyzer, {})
        if len(got[1]) > self.cap:
            got[1].clear()
        return got[1]


_STEMS = _StemCache()


def lead_snippet(prefix: str, keys: Sequence[tuple[str, str]], analyzer: Analyzer) -> str | None:
    """:func:`make_snippet` of a text of which ``prefix`` holds the first :data:`LEAD_TEXT_CHARS`
    characters (the store's copy of a long body, issue 32): the full text's snippet when a query
    term occurs in the lead region, else ``None`` (the terms may lie beyond the prefix: the caller
    reads the full text). A shorter ``prefix`` is the whole text: its snippet is returned."""
    return _snippet(prefix, keys, analyzer, SNIPPET_CHARS, len(prefix) < LEAD_TEXT_CHARS)


def make_snippet(text: str, keys: Sequence[tuple[str, str]], analyzer: Analyzer,
                 limit: int = SNIPPET_CHARS) -> str:
    """A one-line passage of ``text`` (at most ``limit`` characters) around the earliest cluster
    with the most distinct query terms; the text's start when no term occurs.

    A candidate is a word starting with a key (see :func:`snippet_keys`) whose analyzed form is
    the key's stem, so ``village`` does not count for ``ville``. The scan runs over the
    lowercased text, accent-folded (same length) when a key is missing from the plain lowercase
    text, so ``heliosynchrone`` finds ``héliosynchrone``. Work is bounded: the prefixes of
    :data:`_SNIPPET_REGIONS` are scanned in turn (the window is chosen in the first with a term),
    at most 12 occurrences per key, stems cached across calls (issue 17 part 5).
    """
    snippet = _snippet(text, keys, analyzer, limit, True)
    assert snippet is not None  # a complete text always has one
    return snippet


def _snippet(text: str, keys: Sequence[tuple[str, str]], analyzer: Analyzer, limit: int,
             complete: bool) -> str | None:
    """:func:`make_snippet`; ``complete=False``: ``None`` when no term is in the lead region."""
    stem_of = _STEMS.table(analyzer)

    def find(low: str, cap: int) -> list[tuple[int, int]]:
        """Up to ``cap`` verified occurrences of each key in ``low`` (lowercased text)."""
        hits: list[tuple[int, int]] = []  # (position, key index)
        for ki, (key, stem) in enumerate(keys):
            pos = low.find(key)
            found = 0
            while pos != -1 and found < cap:
                if pos == 0 or not low[pos - 1].isalnum():
                    word = _WORD.match(low, pos).group()
                    got = stem_of.get(word)
                    if got is None:
                        toks = analyzer.analyze(word)
                        got = stem_of[word] = toks[0] if toks else ""
                    if got == stem:
                        hits.append((pos, ki))
                        found += 1
                pos = low.find(key, pos + len(key))
        return hits

    hits: list[tuple[int, int]] = []
    for i, end in enumerate(_SNIPPET_REGIONS):
        if i and len(text) <= _SNIPPET_REGIONS[i - 1]:
            break  # the previous region was already the whole text
        region = text[:end].lower()
        hits = find(region, _HITS_PER_KEY)
        # Fold accents (costly on non-ASCII text) only when a key has no plain occurrence.
        if len({k for _, k in hits}) < len(keys) and not region.isascii():
            hits = find(fold_surface(region), _HITS_PER_KEY)
        if hits:
            break
        if not complete:
            return None  # the terms may lie beyond the prefix: the full text decides
    if not hits:
        return _clip(_one_line(text[: limit + 40]), limit)
    hits.sort()
    # Earliest window with the most distinct keys (two pointers over the sorted hits: linear).
    lead = limit // 6  # context kept before the first matched word
    span = limit - lead - 20
    counts: dict[int, int] = {}
    best, best_distinct, j = 0, 0, 0
    for i, (pos, _) in enumerate(hits):
        while j < len(hits) and hits[j][0] < pos + span:
            counts[hits[j][1]] = counts.get(hits[j][1], 0) + 1
            j += 1
        if len(counts) > best_distinct:
            best, best_distinct = max(0, pos - lead), len(counts)
            if best_distinct == len(keys):
                break
        k = hits[i][1]
        counts[k] -= 1
        if not counts[k]:
            del counts[k]
    start = best
    if not complete and start + limit + 40 > len(text):
        # Lowercasing can lengthen text (capital İ -> i + dot): a window placed from positions in
        # the lowered lead may reach past the prefix, where only the full text decides.
        return None
    if start > 0:
        space = text.rfind(" ", 0, start)
        nl = text.rfind("\n", 0, start)
        start = max(space, nl) + 1 if max(space, nl) >= start - 30 else start
    window = _one_line(text[start: start + limit + 40])
    snippet = _clip(window, limit - (1 if start > 0 else 0))
    return ("…" + snippet) if start > 0 else snippet
