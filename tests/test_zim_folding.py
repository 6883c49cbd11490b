"""Text matching fits the language (issue 27, part 5): case and accent folding for Greek (final
sigma, polytonic accents and breathings, acute and grave), Cyrillic (case, ``ё``, stress marks) and
accented Latin, on index and query alike, exact forms ranked first; a full duplicate of an article
body is indexed once, the copy an alias of it. Archives are written here with ``libzim.writer``."""

from __future__ import annotations

from pathlib import Path

import libzim.writer
import pytest

from kit.web.zim import LocalZimWeb
from kit.web.zim import build as build_mod
from kit.web.zim.text import fold_surface, fold_text, text_analyzer


class _Item(libzim.writer.Item):
    def __init__(self, path: str, title: str, html: str):
        super().__init__()
        self.path, self.title, self.html = path, title, html

    def get_path(self):
        return self.path

    def get_title(self):
        return self.title

    def get_mimetype(self):
        return "text/html"

    def get_contentprovider(self):
        return libzim.writer.StringProvider(self.html)

    def get_hints(self):
        return {libzim.writer.Hint.FRONT_ARTICLE: True}


FILLER = ("The archive keeps this page among others about history, places, music and science. "
          "It has several sentences so that every page has a body of a usual length. ")


def _archive(path: Path, language: str, pages: dict[str, str]) -> Path:
    creator = libzim.writer.Creator(str(path)).config_indexing(False, language).config_compression(
        libzim.writer.Compression.none)
    with creator:
        creator.add_metadata("Language", language)
        for title, text in pages.items():
            html = (f"<html><head><meta charset='utf-8'><title>{title}</title></head>"
                    f"<body><p>{text}</p></body></html>")
            creator.add_item(_Item("A/" + title.replace(" ", "_"), title, html))
    return path


PAGES = {
    "Logos accented": "Ο λόγος της φιλοσοφίας. " + FILLER,
    "Logos plain": "Ο λογος της φιλοσοφιας. " + FILLER,
    "Anthropos polytonic": "Ὁ ἄνθρωπος καὶ ἡ ᾠδή τῶν Ἀθηνῶν. " + FILLER,
    "Moskva stressed": "Москва́ — столица. Ёлка стоит на площади. Это сло́во. " + FILLER,
    "Elka plain": "Зимой ставят елку в парке. " + FILLER,
    # the plain page first in entry order: an accent-blind ranking ties them and keeps this order
    "Beyonce 1 plain": "Beyonce sang at the Theatre. " + FILLER,
    "Beyonce 2 accented": "Beyoncé sang at the Théâtre. " + FILLER,
    "Filler one": FILLER * 2,
    "Filler two": "Another page about rivers. " + FILLER,
    "Bees original": "Honeybees build wax combs in hollow trees and tend their queen. " + FILLER * 2,
    "Bees full copy": "Honeybees build wax combs in hollow trees and tend their queen. " + FILLER * 2,
}


@pytest.fixture(autouse=True)
def inline_build(monkeypatch):
    monkeypatch.setattr(build_mod, "PARALLEL_MIN_ENTRIES", 10**9)


@pytest.fixture(scope="module")
def web(tmp_path_factory) -> LocalZimWeb:
    d = tmp_path_factory.mktemp("folding")
    w = LocalZimWeb([_archive(d / "fold.zim", "eng", PAGES)], index_dir=d / "idx")
    w.ensure_ready()
    return w


def _titles(web: LocalZimWeb, query: str, n: int = 5) -> list[str]:
    return [h.title for h in web.search_sync(query, n)]


@pytest.mark.parametrize("query", ["λόγος", "λογος", "ΛΟΓΟΣ", "Λόγος", "λὸγος", "ΛΌΓΟΣ"])
def test_greek_case_accents_and_final_sigma(web, query):
    assert set(_titles(web, query)[:2]) == {"Logos accented", "Logos plain"}


def test_greek_exact_form_first(web):
    assert _titles(web, "λόγος")[:2] == ["Logos accented", "Logos plain"]
    assert _titles(web, "λογος")[:2] == ["Logos plain", "Logos accented"]


def test_polytonic_greek_is_folded(web):
    for query in ("ανθρωπος", "ΑΝΘΡΩΠΟΣ", "ἄνθρωπος", "ανθρώπος", "ωδη", "αθηνων"):
        assert _titles(web, query)[:1] == ["Anthropos polytonic"], query


def test_cyrillic_case_yo_and_stress_marks(web):
    for query, title in (("москва", "Moskva stressed"), ("МОСКВА", "Moskva stressed"),
                         ("ёлка", "Moskva stressed"), ("ЕЛКА", "Moskva stressed"),
                         ("ёлку", "Elka plain"), ("слово", "Moskva stressed")):
        assert title in _titles(web, query, 3), query


def test_latin_exact_form_first_and_accent_insensitive(web):
    assert _titles(web, "Beyoncé")[:2] == ["Beyonce 2 accented", "Beyonce 1 plain"]
    assert _titles(web, "THÉÂTRE")[:2] == ["Beyonce 2 accented", "Beyonce 1 plain"]
    # an ASCII query matches both alike (its exact form is not told apart: see docs/local_web.md)
    for q in ("beyonce", "THEATRE"):
        assert set(_titles(web, q)[:2]) == {"Beyonce 2 accented", "Beyonce 1 plain"}, q


def test_snippets_find_folded_greek(web):
    hit = web.search_sync("ΛΟΓΟΣ", 2)
    assert any("λόγος" in h.snippet or "λογος" in h.snippet for h in hit)


def test_duplicate_bodies_indexed_once(web):
    hits = web.search_sync("honeybees wax combs queen", 10)
    urls = [h.url for h in hits]
    assert len(urls) == len(set(urls))
    bees = [h.title for h in hits if h.title.startswith("Bees")]
    assert len(bees) == 1  # the first copy in entry order ("Bees full copy" < "Bees original")
    # either title finds that one copy, once; both pages are still fetchable
    for title in ("Bees full copy", "Bees original"):
        assert _titles(web, title, 3)[0] == bees[0]
        assert _titles(web, title, 10).count(bees[0]) == 1
        assert "Honeybees" in web.fetch_sync(f"zim://fold/A/{title.replace(' ', '_')}").markdown
    arch = web.archives[0]
    with arch.store_reads() as store:
        assert len(store.aliases()) == 1


def test_folding_uses_the_stdlib_rules():
    assert fold_text("ΛΟΓΟΣ λόγος ᾠδή") == "λογοσ λογοσ ωδη"
    assert fold_text("Ёлка сло́во новый") == "елка слово новый"  # й is a letter of its own
    assert fold_text("plain ascii") == "plain ascii"
    low = "λόγος héliosynchrone ёлка"
    assert len(fold_surface(low)) == len(low)
    assert fold_surface(low) == "λογοσ heliosynchrone елка"
    greek = text_analyzer("greek")
    assert greek.analyze("ΛΟΓΟΣ") == greek.analyze("λόγος") == greek.analyze("λογος")
    russian = text_analyzer("russian")
    assert russian.analyze("Ёлки") == russian.analyze("елки")


@pytest.fixture(params=["c", "python"])
def scanner(request, monkeypatch):
    """Each test below once with the non-ASCII runs found in C (``_textscan``, which must be built
    here) and once with the regular expressions an install without a C compiler uses."""
    from kit.web.zim import text as text_mod

    if request.param == "c":
        if text_mod._textscan is None:
            pytest.fail("kit.web.zim._textscan is not built (pip install -e . builds it)")
    else:
        monkeypatch.setattr(text_mod, "_textscan", None)
    return request.param


def test_fold_text_is_the_substitution_over_the_whole_text(scanner):
    """fold_text substitutes within the non-ASCII runs only (found in C, or line by line): the same
    text as the substitution over the whole text, on random strings with newlines, marks and
    mixed scripts."""
    import random

    from kit.web.zim.text import _NON_ASCII, _index_fold_run, fold_document

    rng = random.Random(1)
    alphabet = "ab \n\n\r—é日ßΣςΛό\u0301\u0308ёй.İ\x7f\U0001d400"
    for _ in range(30_000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 20)))
        assert fold_text(s) == fold_document(s)[0] == _NON_ASCII.sub(_index_fold_run, s), repr(s)


def test_exact_words_are_the_patterns_matches_over_the_whole_text(scanner):
    """exact_words runs its pattern on the pieces between ASCII non-word runs that hold a non-ASCII
    character only: the same words as the pattern over the whole text, on random strings of
    word, non-word, ASCII and non-ASCII characters and on mixed-script examples."""
    import random

    from kit.web.zim.text import _NON_ASCII_WORD, exact_words, fold_document

    def whole(text: str) -> str:
        return "" if text.isascii() else " ".join(_NON_ASCII_WORD.findall(text)).casefold()

    rng = random.Random(0)
    alphabet = "ab_1Z9 -\n\t—–é日ßΣ\u0301.,'`^[{\x7f\x00°′\U0001d400"
    for _ in range(50_000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 16)))
        assert exact_words(s) == fold_document(s)[1] == whole(s), repr(s)
    for s in ("34°12′S 18°25′E", "Zürich–Genève (1990–1995)", "naïve—x", "λόγος_λογος", "café's",
              "é", "xé", "éx", "a—b—c d", "日本語_x—y"):
        assert exact_words(s) == fold_document(s)[1] == whole(s)


def test_nonascii_runs_in_c():
    """The C scan returns the maximal runs of characters above U+007F, as ``_NON_ASCII`` finds them,
    for every string kind (Latin-1, BMP, astral) and refuses what is not a str."""
    from kit.web.zim import text as text_mod

    scan = text_mod._textscan
    if scan is None:
        pytest.fail("kit.web.zim._textscan is not built (pip install -e . builds it)")
    for s in ("", "ascii only", "é", "aéb", "\x7f\x80", "ÿÿ x ÿ", "日本 語", "a\U0001d400b\U0001d401",
              "—" * 5000 + "x"):
        assert scan.nonascii_runs(s) == [m.span() for m in text_mod._NON_ASCII.finditer(s)], repr(s)
    with pytest.raises(TypeError):
        scan.nonascii_runs(b"bytes")
