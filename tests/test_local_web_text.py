"""The local web's text is clean (issue 14, part 5): valid result URLs that fetch back, plain-text
titles, Unicode-normalized text and queries, no licence footers or decorative images in the index,
comparable scores across language indexes.

Real-archive tests use the four shared ZIM archives; faults that the shared archives do not show
(spaces, ``?``, ``#``, ``%`` in entry paths as in Project Gutenberg archives; ``<i>`` in ZIM
titles as in older mwoffliner archives; decomposed Unicode) use a small ZIM written with
``libzim.writer`` in the test.
"""

from __future__ import annotations

import io
import json
import re
import unicodedata

import libzim.writer
import pytest
from conftest import ZimItem as _Item
from PIL import Image

from kit.harness.tools import ToolContext, web_search
from kit.paths import zim_paths
from kit.policy.demonstrator import DemonstratorPolicy
from kit.types import ContentPart, Message
from kit.web.text_clean import is_decorative_image, plain_text
from kit.web.urls import is_valid_url, zim_url
from kit.web.zim import LocalZimWeb

MAXI = "wikipedia_en_ray_charles_maxi_2023-09"
LEGACY = "wikipedia_en_ray_charles_2015-06"
MINI = "wikipedia_en_100_mini_2022-10"
FRENCH = "wikipedia_fr_test_2017-07"


@pytest.fixture(scope="module")
def web(data_dir) -> LocalZimWeb:
    found = {p.stem: p for p in zim_paths(data_dir)}
    if {MAXI, LEGACY, MINI, FRENCH} - set(found):
        pytest.skip("shared ZIM archives missing")
    w = LocalZimWeb([found[s] for s in (MAXI, LEGACY, MINI, FRENCH)])
    w.ensure_ready()
    return w


# --------------------------------------------------------------------------------------------------
# A small Gutenberg / legacy-style archive
# --------------------------------------------------------------------------------------------------
def _png(size: tuple[int, int], seed: int) -> bytes:
    img = Image.effect_noise(size, 60 + seed).convert("RGB")
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def _page(title_html: str, body: str) -> str:
    return (f'<html><head><meta charset="utf-8"><title>{title_html}</title></head><body>'
            f"<h1>{title_html}</h1>{body}"
            '<div><div style="clear:both">This article is issued from <a href="https://en.'
            'wikipedia.org/wiki/X?oldid=1">Wikipedia</a>. The text is licensed under <a href="'
            'http://creativecommons.org/licenses/by-sa/4.0/">Creative Commons - Attribution - '
            "Sharealike</a>. Additional terms may apply for the media files.</div></div>"
            "</body></html>")


#: path -> (ZIM title, HTML body). Paths as Gutenberg and StackExchange archives write them.
ODD_PAGES = {
    "A/Moby Dick; Or, The Whale.2701.html": (
        "Moby Dick; Or, The Whale",
        "<p>Call me Ishmael. Some years ago, never mind how long precisely, having little money "
        "in my purse, I thought I would sail about a little and see the watery part of the world."
        '</p><img src="../I/whale.png" alt="a whale"><img src="../I/identicon_7f3a.png">'
        '<img src="../I/rule.png">'),
    "A/100% Pure?.html": ("100% Pure?", "<p>A question about purity of cotton yarn.</p>"),
    "A/C# and F#.html": ("C# and F#", "<p>Two programming languages for the dotnet runtime.</p>"),
    "A/Blue_(album)": (
        "<i>Blue</i> (album)",
        "<p>Blue is the fourth studio album by Joni Mitchell, released in 1971.</p>"),
    "A/Blue_album_list": (
        "List of blue albums",
        "<p>Blue album, blue album, blue album: albums named Blue. Blue album. Blue.</p>"),
    "A/Singer": (
        "Singer",
        f"<h2>{unicodedata.normalize('NFD', 'Beyoncé')} <i>live</i></h2>"
        f"<p>{unicodedata.normalize('NFD', 'Beyoncé')} Knowles is a singer; her "
        "col\u00adlaborators include many producers.</p>"),
}

#: Pages for the reviewer's findings (not searched by title in the URL test above): headings with
#: escaped markup, a title with a raw ``<`` that is text, and articles whose paths differ only by
#: a raw ``#``/``?`` suffix (``A/C`` vs ``A/C#_(programming_language)``).
EXTRA_PAGES = {
    "A/Markup_notes": (
        "C++ <templates>",
        "<h2>Using &lt;br&gt; tags</h2><p>Line breaks in legacy markup.</p>"
        "<h2>Case a&lt;b</h2><p>Comparison of two values.</p>"
        "<h3>The &amp;lt; entity</h3><p>Escaping the less-than sign.</p>"),
    "A/C": ("C", "<p>C is a letter of the Latin alphabet.</p>"),
    "A/C#_(programming_language)": (
        "C# (programming language)", "<p>C sharp is a language of the dotnet runtime.</p>"),
    "A/What": ("What", "<p>What is an interrogative pronoun.</p>"),
    "A/What?": ("What?", "<p>What? is a song title with a question mark.</p>"),
}


@pytest.fixture(scope="module")
def odd_web(tmp_path_factory) -> LocalZimWeb:
    d = tmp_path_factory.mktemp("oddzim")
    path = d / "gutenberg_en_test.zim"
    with libzim.writer.Creator(str(path)).config_indexing(False, "eng") as creator:
        creator.add_metadata("Language", "eng")
        for p, (title, body) in {**ODD_PAGES, **EXTRA_PAGES}.items():
            creator.add_item(_Item(p, title, "text/html", _page(title, body)))
        creator.add_item(_Item("I/whale.png", "", "image/png", _png((240, 160), 1)))
        creator.add_item(_Item("I/identicon_7f3a.png", "", "image/png", _png((80, 80), 2)))
        creator.add_item(_Item("I/rule.png", "", "image/png", _png((900, 40), 3)))
    w = LocalZimWeb([path], index_dir=d / "idx")
    w.ensure_ready()
    return w


# --------------------------------------------------------------------------------------------------
# URLs
# --------------------------------------------------------------------------------------------------
def test_every_result_url_of_the_shared_archives_is_valid_and_fetches_back(web):
    """Every article search can return, in every shared archive: its result URL is a valid URL and
    resolves (as ``web_extract`` does) to that article."""
    bad: dict[str, list[str]] = {}
    for arch in web.archives:
        for art in arch.articles:
            url = arch.url(art["path"])
            got = web.resolve_url(url)[1].path if is_valid_url(url) else None
            if got != art["path"]:
                bad.setdefault(arch.stem, []).append(url)
    assert not bad, {k: (len(v), v[:3]) for k, v in bad.items()}
    # A full fetch of the odd ones (quotes, non-ASCII, parentheses) returns the same page.
    for stem, path in ((LEGACY, 'A/David_"Fathead"_Newman.html'),
                       (FRENCH, "A/Orbite_héliosynchrone.html"), (MINI, "A/Côte_d'Ivoire")):
        arch = web._archive(stem)
        if arch.entry(path) is None:
            continue
        page = web.fetch_sync(arch.url(path))
        assert page.url == arch.url(path) and is_valid_url(page.url)


def test_search_urls_with_spaces_question_marks_and_hashes_fetch_back(odd_web):
    arch = odd_web.archives[0]
    for path, (title, _) in ODD_PAGES.items():
        hits = odd_web.search_sync(plain_text(title), 3)
        url = next(h.url for h in hits if h.title == plain_text(title))
        assert url == zim_url(arch.stem, path) and is_valid_url(url), url
        page = odd_web.fetch_sync(url)
        assert page.url == url and page.title == plain_text(title)
    # Image URLs in fetched pages are valid too.
    page = odd_web.fetch_sync(zim_url(arch.stem, "A/Moby Dick; Or, The Whale.2701.html"))
    assert [i.image_url for i in page.images] == [zim_url(arch.stem, "I/whale.png")]


@pytest.mark.parametrize("given,path", [
    ("A/C#_(programming_language)", "A/C#_(programming_language)"),
    ("A/C%23_(programming_language)", "A/C#_(programming_language)"),
    ("A/What?", "A/What?"), ("A/What%3F", "A/What?"), ("A/What", "A/What"), ("A/C", "A/C"),
    ("A/Singer#Career", "A/Singer"), ("A/Singer?action=raw", "A/Singer"),
    ("A/C%23_(programming_language)#History", "A/C#_(programming_language)"),
])
def test_raw_hash_or_question_mark_fetches_the_named_article(odd_web, given, path):
    """Legacy or agent-typed URLs with a raw ``#``/``?`` that belongs to the entry path fetch that
    entry, not the article named by the text before it (attack M5); a real fragment or query
    after an existing path is still dropped."""
    arch = odd_web.archives[0]
    for url in (f"zim://{arch.stem}/{given}", given):
        page = odd_web.fetch_sync(url)
        assert page.url == zim_url(arch.stem, path), (url, page.url)


def test_zim_path_candidates_try_raw_hash_and_question_mark_as_given_first():
    from kit.web.urls import zim_path_candidates

    assert list(zim_path_candidates("A/C#_(x)"))[0] == "A/C#_(x)"
    assert list(zim_path_candidates("A/What?"))[0] == "A/What?"
    assert list(zim_path_candidates("A/What%3F"))[0] == "A/What?"
    assert list(zim_path_candidates("A/Moby%20Dick#ch1")).index("A/Moby Dick") < 3


async def test_demonstrator_reads_a_gutenberg_result_url_and_extracts_it(odd_web):
    """The kit's own demonstrator copies ``URL: (\\S+)`` from the search observation into
    ``web_extract``: with a raw space in the path it used to request a truncated URL."""
    question = "Who says 'Call me Ishmael' in Moby Dick?"
    obs = await web_search({"query": ["Moby Dick Ishmael"], "num": 3},
                           ToolContext(registry=None, backend=odd_web, config=None))
    tools = [{"function": {"name": n}} for n in ("web_search", "web_extract",
                                                  "web_search_for_image")]
    messages = [Message(role="user", content=[ContentPart(type="text", text=question)]),
                Message(role="assistant", content=[ContentPart(type="text", text="...")]),
                Message(role="tool", name="web_search",
                        content=[ContentPart(type="text", text=obs.text)])]
    text = DemonstratorPolicy().next_text(messages, tools)
    call = json.loads(re.search(r"<tool_call>\s*(\{.*\})\s*</tool_call>", text, re.S).group(1))
    assert call["name"] == "web_extract"
    page = await odd_web.fetch(call["arguments"]["urls"][0])
    assert page.title == "Moby Dick; Or, The Whale"


# --------------------------------------------------------------------------------------------------
# Titles and headings
# --------------------------------------------------------------------------------------------------
def test_marked_up_titles_are_plain_and_get_the_exact_title_boost(odd_web):
    hits = odd_web.search_sync("Blue (album)", 3)
    assert hits[0].title == "Blue (album)", [h.title for h in hits]
    assert all("<" not in h.title for h in hits)
    page = odd_web.fetch_sync(hits[0].url)
    assert page.title == "Blue (album)" and page.markdown.startswith("# Blue (album)\n")
    # Headings in fetched Markdown are plain text (no emphasis from <i> inside <h2>).
    singer = odd_web.fetch_sync(zim_url(odd_web.archives[0].stem, "A/Singer"))
    assert "## Beyoncé live\n" in singer.markdown


def test_plain_text_rules():
    assert plain_text("<i>Blue</i> (album)") == "Blue (album)"
    assert plain_text("Genius &amp; Friends") == "Genius & Friends"
    # Entities are decoded once: escaped markup is the literal text it spells (attack M4).
    assert plain_text("&lt;i&gt;Blue&lt;/i&gt;") == "<i>Blue</i>"
    assert plain_text("R&B") == "R&B" and plain_text("a < b") == "a < b"
    assert plain_text(unicodedata.normalize("NFD", "Beyoncé")) == "Beyoncé"


#: (title as stored, plain text) for the reviewer's finding M4: one parse, only known inline tags
#: (and style/script with their content) are markup, entities decoded exactly once.
PLAIN_TEXT_CASES = [
    ("x<y", "x<y"), ("if a<b && c>d", "if a<b && c>d"), ("Hello<world>", "Hello<world>"),
    ("C++ <templates>", "C++ <templates>"), ("&#60;script&#62;", "<script>"),
    ("&lt;br&gt;", "<br>"), ("<style>x{}</style>T", "T"), ("<script>alert(1)</script>T", "T"),
    ("a <b", "a <b"), ("<b>", ""), ("&amp;lt;", "&lt;"), ("AT&T &notation", "AT&T &notation"),
    ("<I CLASS='x'>Blue</I> (album)", "Blue (album)"), ("a<br/>b", "a b"),
    ("<span title=\"a>b\">X</span>", "X"), ("Ω&#x3a9; &nbsp;x", "ΩΩ x"),
    ("<!-- note -->Title", "Title"), ("About <script> tags", "About <script> tags"),
]


@pytest.mark.parametrize("stored,plain", PLAIN_TEXT_CASES)
def test_plain_text_parses_once_and_only_known_tags_are_markup(stored, plain):
    assert plain_text(stored) == plain


def test_headings_are_decoded_once(odd_web):
    """Heading text from the page parser is already plain: it is not parsed as HTML a second
    time (attack M3: ``<h2>Using &lt;br&gt; tags</h2>`` became ``Using tags``)."""
    arch = odd_web.archives[0]
    page = odd_web.fetch_sync(zim_url(arch.stem, "A/Markup_notes"))
    headings = [ln for ln in page.markdown.splitlines() if ln.startswith("#")]
    assert headings == ["# C++ <templates>", "## Using <br> tags", "## Case a<b",
                        "### The &lt; entity"], headings
    text = next(t for _s, _l, p, _t, t in odd_web.corpus() if p == "A/Markup_notes")
    assert "Using <br> tags" in text and "Case a<b" in text and "The &lt; entity" in text
    hits = odd_web.search_sync("C++ templates", 3)
    assert hits[0].title == "C++ <templates>", [h.title for h in hits]


def test_shared_archive_titles_are_plain_text(web):
    for arch in web.archives:
        for art in arch.articles:
            assert art["title"] == plain_text(art["title"]), art
    assert web.search_sync("Genius & Friends", 1)[0].title == "Genius & Friends"


# --------------------------------------------------------------------------------------------------
# Unicode
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("query", ["Beyoncé", unicodedata.normalize("NFD", "Beyoncé"), "Beyonce",
                                   "BEYONCÉ", "collaborators"])
def test_queries_find_text_stored_decomposed_or_with_soft_hyphens(odd_web, query):
    hits = odd_web.search_sync(query, 3)
    assert hits and hits[0].title == "Singer", (query, hits)
    snippet = hits[0].snippet
    assert unicodedata.is_normalized("NFC", snippet) and "\u00ad" not in snippet


#: Accented words of the shared archives whose unaccented spelling missed them (the stemmer ran
#: before accent folding: ``torme`` -> ``torm`` but ``tormé`` -> ``torme``), with the article
#: they lead to.
ACCENTED = [("Tormé", MAXI, "A/Ingredients_in_a_Recipe_for_Soul"), ("Cortés", MINI, "A/Aztecs"),
            ("Poincaré", MINI, "A/Group_(mathematics)"),
            ("lumière", FRENCH, "A/Orbite_héliosynchrone.html"),
            ("routière", FRENCH, "A/Warrington.html")]


@pytest.mark.parametrize("word,stem,path", ACCENTED)
def test_accent_insensitive_queries_on_the_shared_archives(web, word, stem, path):
    """An unaccented query ranks like the accented one (English and French analyzers fold
    accents before stemming); the displayed text keeps its accents."""
    from kit.web.text_clean import fold_accents

    accented = web.search_sync(word, 3)
    plain = web.search_sync(fold_accents(word), 3)
    assert zim_url(stem, path) in [h.url for h in accented]
    assert [h.url for h in plain] == [h.url for h in accented]
    assert word.lower() in plain[0].snippet.lower()  # snippet found the accented form


def test_unaccented_french_title_query(web):
    hits = web.search_sync("Sven-Ake Johansson accordeoniste", 1)
    assert hits[0].title == "Sven-Åke Johansson"


# --------------------------------------------------------------------------------------------------
# Boilerplate
# --------------------------------------------------------------------------------------------------
FOOTER_PHRASES = ("This article is issued from", "Text is available under", "is licensed under",
                  "Creative Commons Attribution", "Retrieved from", "Notices d'autorité")


def test_licence_footers_and_authority_lines_are_not_indexed(web, odd_web):
    leaks = {}
    for stem, _lang, path, _title, text in list(web.corpus()) + list(odd_web.corpus()):
        for phrase in FOOTER_PHRASES:
            if phrase.lower() in text.lower():
                leaks.setdefault(phrase, []).append(f"{stem}/{path}")
    assert not leaks, {k: (len(v), v[:2]) for k, v in leaks.items()}
    md = web.fetch_sync(zim_url(LEGACY, "A/A_Fool_for_You.html")).markdown
    assert "issued from Wikipedia" not in md and "Jerry Wexler" in md
    assert web.search_sync("issued from Wikipedia version Creative Commons Attribution Share "
                           "Alike media files", 3) == [] or all(
        "issued from" not in h.snippet for h in web.search_sync("issued from Wikipedia", 5))


# --------------------------------------------------------------------------------------------------
# Decorative images
# --------------------------------------------------------------------------------------------------
#: Images referenced by the shared archives' articles (size in px) and whether they are decoration.
ARCHIVE_IMAGES = [
    ("I/m/fileicon-ogg.png", 120, 120, True), ("I/m/Star_full.svg.png", 11, 11, True),
    ("I/Star_half.svg.png.webp", 11, 11, True), ("I/Nuvola_apps_arts.svg.png.webp", 16, 16, True),
    ("I/Rating-Christgau-dud.svg.png.webp", 17, 13, True),
    ("I/m/Flag_of_Denmark.svg.png", 20, 15, True), ("I/m/City_locator_14.svg.png", 16, 16, True),
    ("I/m/Flag_of_England.svg.png", 45, 27, True), ("I/m/Loudspeaker.svg.png", 11, 11, True),
    ("I/Symbol_category_class.svg.png.webp", 16, 16, True),
    ("I/Commons-logo.svg.png.webp", 12, 16, True), ("I/m/Saxophone-icon.svg.png", 24, 24, True),
    ("I/m/Ray_Charles_(cropped).jpg", 220, 293, False), ("I/m/Nannylogo.PNG", 240, 160, False),
    ("I/m/United_Kingdom_adm_location_map.svg.png", 280, 433, False),
    ("I/m/Warrington_Town_Hall.jpg", 220, 165, False),
    ("I/Ray_Charles_classic_piano_pose.jpg.webp", 220, 180, False),
]


@pytest.mark.parametrize("path,w,h,decorative", ARCHIVE_IMAGES)
def test_decorative_image_rule(path, w, h, decorative):
    assert is_decorative_image(path, w, h) is decorative


def test_decorative_images_are_not_indexed_as_evidence(web, odd_web):
    legacy = web._archive(LEGACY)
    assert not [r.path for r in legacy.images if "fileicon" in r.path]
    assert legacy.manifest["skipped_images"]["decorative"] >= 36
    for arch in web.archives + odd_web.archives:
        for rec in arch.images:
            assert not is_decorative_image(rec.path, rec.width, rec.height), rec.path
    # Identicon (by name) and a 900 x 40 rule (by shape) are neither indexed nor page images.
    assert [r.path for r in odd_web.archives[0].images] == ["I/whale.png"]
    assert [h.image_url for h in odd_web.image_search_sync("identicon rule whale", 5)] == [
        zim_url(odd_web.archives[0].stem, "I/whale.png")]
    page = web.fetch_sync(zim_url(LEGACY, "A/Eleanor_Rigby.html"))
    assert not [i for i in page.images if "fileicon" in i.image_url]


# --------------------------------------------------------------------------------------------------
# Score merging across language indexes
# --------------------------------------------------------------------------------------------------
#: French queries whose answer is a French article while the English index (322 articles, larger
#: idf) returns higher raw BM25 scores for pages sharing one word.
FRENCH_QUERIES = [
    ("percussionniste suédois de free jazz", "A/Sven-Åke_Johansson.html"),
    ("Mariestad Suède Berlin", "A/Sven-Åke_Johansson.html"),
    ("orbite géocentrique rétrograde", "A/Orbite_héliosynchrone.html"),
    ("satellite orbite soleil", "A/Orbite_héliosynchrone.html"),
    ("inclinaison altitude orbite", "A/Orbite_héliosynchrone.html"),
    ("ville du comté de Cheshire", "A/Warrington.html"),
    ("Warrington ville anglaise", "A/Warrington.html"),
    ("accordéoniste suédois", "A/Sven-Åke_Johansson.html"),
]


@pytest.mark.parametrize("query,path", FRENCH_QUERIES)
def test_french_query_ranks_the_french_article_first(web, query, path):
    hits = web.search_sync(query, 3)
    assert hits[0].url == zim_url(FRENCH, path), [h.url for h in hits]


def test_merged_scores_are_on_one_scale(web):
    # Content scores are shares of the query's bound (0..1); exact titles stay on top.
    for q in ("satellite orbite soleil", "Ray Charles piano", "percussionniste suédois"):
        scores = [s for _, _, s in web.rank_sync(q, 10)]
        assert scores == sorted(scores, reverse=True) and all(0 < s <= 1 for s in scores), q
    assert web.rank_sync("Ray Charles", 1)[0][2] > 1
    english = [s for s, _, _ in web.rank_sync("Ray Charles Atlantic Records Georgia", 5)]
    assert FRENCH not in english
