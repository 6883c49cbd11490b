"""Text analysis of the local web: the tantivy analyzer (one per language, used for indexing and
querying alike) and the plain-text helpers (whitespace, clipping, first sentence, file-name words)
that HTML extraction, snippets and the backend share."""

from __future__ import annotations

import importlib
import posixpath
import re
import unicodedata
from types import ModuleType
from urllib.parse import unquote

import tantivy

# ISO 639 codes (ZIM "Language" metadata is ISO 639-3) -> tantivy stemmer / stop-word language.
_LANGUAGES = {
    "eng": "english", "en": "english", "fra": "french", "fre": "french", "fr": "french",
    "deu": "german", "ger": "german", "de": "german", "spa": "spanish", "es": "spanish",
    "ita": "italian", "it": "italian", "por": "portuguese", "pt": "portuguese",
    "nld": "dutch", "dut": "dutch", "nl": "dutch", "swe": "swedish", "sv": "swedish",
    "dan": "danish", "da": "danish", "fin": "finnish", "fi": "finnish",
    "hun": "hungarian", "hu": "hungarian", "nor": "norwegian", "nob": "norwegian",
    "nno": "norwegian", "no": "norwegian", "nb": "norwegian", "rus": "russian", "ru": "russian",
    "ara": "arabic", "ar": "arabic", "ell": "greek", "gre": "greek", "el": "greek",
    "ron": "romanian", "rum": "romanian", "ro": "romanian", "tam": "tamil", "ta": "tamil",
    "tur": "turkish", "tr": "turkish",
}

#: The whitespace characters that page text collapses to one space (no newline: lines are kept).
_WS_CHARS = " \t\r\f\v\u00a0\u200b"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'“‘«]?[A-Z0-9À-ÖØ-Þ])")
_FILE_WORDS = re.compile(r"[^\w]+|_+")


def analyzer_language(zim_language: str | None) -> str | None:
    """Map a ZIM ``Language`` metadata value (ISO 639-3, maybe comma-separated) to a tantivy
    stemmer language (``"english"``, ``"french"``, ...), or ``None`` when unsupported."""
    if not zim_language:
        return None
    first = zim_language.split(",")[0].strip().lower()
    return _LANGUAGES.get(first)


# ---- folding (issue 27, part 5) --------------------------------------------------------------
#: Scripts whose letters lose their diacritics before tantivy sees the text: tantivy's own ASCII
#: folding maps Latin letters only (and after the stop words, whose lists are accented), so
#: without this ``λογος`` never found ``λόγος`` and ``ΛΟΓΟΣ`` (lowercased ``λογοσ``) never found
#: ``λόγος``'s final sigma.
_FOLD_SCRIPTS = ("GREEK", "CYRILLIC", "COPTIC")
#: Letters that decompose but are letters of their own alphabet, kept: Cyrillic short i (the
#: Snowball Russian stemmer's adjective endings ``-ый``, ``-ий`` need it).
_KEEP = frozenset("йЙ")
#: Combining diacritical marks (U+0300..U+036F and the extended / supplement blocks) left in NFC
#: text where no precomposed letter exists (Russian stress marks ``сло́во``, polytonic Greek with
#: unusual stacks), Arabic harakat and Hebrew points (``عَرَبِيّة``): dropped, so the word is not
#: split at the mark (tantivy's tokenizer splits words at any non-alphanumeric character).
_MARKS = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
                    "\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7\u064b-\u065f\u0670]")


def _script(ch: str) -> str:
    return unicodedata.name(ch, "").split(" ", 1)[0]


class _FoldTable(dict):
    """``str.translate`` table of :func:`fold_text` (``surface=False``) or :func:`fold_surface`
    (``surface=True``), filled lazily from :mod:`unicodedata`: a Greek or Cyrillic letter ->
    its base letter, case-folded (``ά``, ``ἄ``, ``ᾶ``, ``ᾳ`` -> ``α``; ``ς``, ``Σ`` -> ``σ``;
    ``ё`` -> ``е``); ``İ`` -> ``i``; a lone combining mark -> nothing (index) or itself (surface,
    which keeps positions). ``surface`` also folds Latin letters (tantivy folds those for the
    index, after its stop words) and keeps every mapping one character for one."""

    def __init__(self, surface: bool):
        super().__init__()
        self.surface = surface

    def __missing__(self, code: int) -> str:
        ch = out = chr(code)
        if _MARKS.fullmatch(ch):
            out = ch if self.surface else ""
        elif ch not in _KEEP and (ch == "İ" or self.surface or _script(ch) in _FOLD_SCRIPTS):
            base = _MARKS.sub("", unicodedata.normalize("NFD", ch))
            folded = base.casefold() if _script(ch) in _FOLD_SCRIPTS or ch == "İ" else base
            if len(folded) == 1 or (not self.surface and folded):
                out = folded
            elif len(base) == 1:
                out = base
        self[code] = out
        return out


_INDEX_FOLD, _SURFACE_FOLD = _FoldTable(False), _FoldTable(True)
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
_NON_ASCII_WORD = re.compile(r"\w*[^\x00-\x7f]\w*")
#: A whole piece between two runs of ASCII characters that are not word characters (or the text's
#: ends; no ``_NON_ASCII_WORD`` match crosses such a run) that holds a non-ASCII character: it
#: starts where no piece character precedes, and its possessive runs never backtrack.
_NON_ASCII_PIECE = re.compile(r"(?<![0-9A-Za-z_\x80-\U0010ffff])[0-9A-Za-z_]*+[^\x00-\x7f]"
                              r"[0-9A-Za-z_\x80-\U0010ffff]*+")


def fold_text(text: str) -> str:
    """``text`` as the search analyzer reads it, for documents and queries alike: Greek and
    Cyrillic letters without accents, breathings or iota subscripts and case-folded (final sigma
    ``ς`` and ``Σ`` become ``σ``: ``ΛΟΓΟΣ``, ``λόγος``, ``λογος`` and ``λὸγος`` are one word),
    ``ё`` -> ``е``, lone combining marks dropped. Latin accents are folded afterwards by the
    analyzer (tantivy's ASCII folding, after the accented stop-word lists). ASCII text is
    returned as is; the translation runs over the non-ASCII runs only."""
    if text.isascii():
        return text
    if _textscan is not None:
        return _fold_runs(text, _textscan.nonascii_runs(text))
    # line by line: str.isascii is a flag test, and most lines of a page are ASCII (~90 % on
    # realistic pages): the regex scans only the others (2.2x faster; no run crosses a newline)
    return "\n".join(ln if ln.isascii() else _NON_ASCII.sub(_index_fold_run, ln)
                     for ln in text.split("\n"))


def _fold_runs(text: str, runs: list[tuple[int, int]]) -> str:
    """:func:`fold_text` from the text's non-ASCII ``runs`` (maximal, in order: what ``_NON_ASCII``
    matches): each translated, the ASCII between them kept."""
    out, prev = [], 0
    for start, end in runs:
        out.append(text[prev:start])
        out.append(text[start:end].translate(_INDEX_FOLD))
        prev = end
    out.append(text[prev:])
    return "".join(out)


def _index_fold_run(m: re.Match) -> str:
    return m.group().translate(_INDEX_FOLD)


def fold_surface(text: str) -> str:
    """Lowercase ``text`` folded one character for one (positions kept) for snippet scans: every
    letter that decomposes into a base letter plus marks -> the base (Latin, Greek, Cyrillic
    except ``й``), Greek case-folded (``ς`` -> ``σ``)."""
    if text.isascii():
        return text
    return _NON_ASCII.sub(lambda m: m.group().translate(_SURFACE_FOLD), text)


def exact_words(text: str) -> str:
    """The words of ``text`` that have a non-ASCII letter, case-folded but not accent-folded (one a
    line): the ``exact`` field that ranks exact-form matches first (``λόγος`` before ``λογος``
    for the query ``λόγος``). ASCII words need no such field: their folded form is their form."""
    if text.isascii():
        return ""
    if _textscan is not None:
        return _exact_runs(text, _textscan.nonascii_runs(text))
    # the pattern only on the pieces between ASCII non-word runs that hold a non-ASCII character: the
    # same matches (none crosses such a run), without trying it at every position of every ASCII word
    # (2.6x faster on realistic pages; tests/test_zim_folding.py compares both); those pieces only in
    # the lines that are not ASCII (a newline is such a run: 3.3x faster again), found by one search
    # each (1.3x faster than splitting the line and testing every piece)
    words = [w for ln in text.split("\n") if not ln.isascii()
             for piece in _NON_ASCII_PIECE.findall(ln)
             for w in _NON_ASCII_WORD.findall(piece)]
    return " ".join(words).casefold()


#: ASCII word characters (the ASCII part of ``\w``): with the non-ASCII ones, what a piece is made of.
_ASCII_WORD_CHARS = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_ASCII_WORD_RUN = re.compile(r"[0-9A-Za-z_]*")


def _exact_runs(text: str, runs: list[tuple[int, int]]) -> str:
    """:func:`exact_words` from the text's non-ASCII ``runs`` (maximal, in order): each run grown
    over the ASCII word characters on both sides, joined with the next run where they meet, is
    a piece ``_NON_ASCII_PIECE`` finds; the pattern runs on those pieces only."""
    words: list[str] = []
    i, n = 0, len(runs)
    while i < n:
        start, end = runs[i]
        while start and text[start - 1] in _ASCII_WORD_CHARS:
            start -= 1
        while True:
            grown = _ASCII_WORD_RUN.match(text, end)  # always matches (possibly empty)
            end = grown.end() if grown else end
            if i + 1 < n and runs[i + 1][0] == end:
                i += 1
                end = runs[i][1]
            else:
                break
        words.extend(_NON_ASCII_WORD.findall(text, start, end))
        i += 1
    return " ".join(words).casefold()


def fold_document(text: str) -> tuple[str, str]:
    """(:func:`fold_text`, :func:`exact_words`) of a document's text, its non-ASCII runs found once
    (the BM25 index build's per-article step)."""
    if text.isascii():
        return text, ""
    if _textscan is None:
        return fold_text(text), exact_words(text)
    runs = _textscan.nonascii_runs(text)
    return _fold_runs(text, runs), _exact_runs(text, runs)


_textscan: ModuleType | None
try:  # the runs found in C (kit/web/zim/_textscan.c, ~15x the re module's speed at it)
    _textscan = importlib.import_module("kit.web.zim._textscan")
except ImportError:  # not built (no C compiler at install): the regular expressions above
    _textscan = None


class Analyzer:
    """The kit's analyzer of one language: :func:`fold_text`, then the tantivy analyzer
    (:attr:`tantivy`, registered on the indexes: word tokenizer -> drop tokens over 40 bytes ->
    lowercase -> stop words -> ASCII folding -> Snowball stemmer). Callers analyze documents and
    queries alike through :meth:`analyze` and feed tantivy :meth:`fold` ed text.

    :attr:`exact` analyzes the ``exact`` field (:func:`exact_words`): lowercase and stop words,
    no folding, no stemming."""

    def __init__(self, language: str | None, folding: bool = True):
        self.language = language
        self.folding = folding
        self.tantivy = _tantivy_analyzer(language, fold=True)
        self.exact = _tantivy_analyzer(language, fold=False)

    def fold(self, text: str) -> str:
        return fold_text(text) if self.folding else text

    def fold_document(self, text: str) -> tuple[str, str]:
        """(:meth:`fold` ed text, its ``exact`` field text; empty without folding): what an
        index document is fed (:func:`fold_document`)."""
        return fold_document(text) if self.folding else (text, "")

    def analyze(self, text: str) -> list[str]:
        return self.tantivy.analyze(self.fold(text))

    def exact_terms(self, text: str) -> list[str]:
        """Terms of ``text`` in the ``exact`` field (none for ASCII text or without folding)."""
        return self.exact.analyze(exact_words(text)) if self.folding else []


def _tantivy_analyzer(language: str | None, fold: bool) -> tantivy.TextAnalyzer:
    builder = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
    builder = builder.filter(tantivy.Filter.remove_long(40)).filter(tantivy.Filter.lowercase())
    if language is not None:
        try:
            # Probe: tantivy raises at build time for languages without a stop-word list.
            tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).filter(
                tantivy.Filter.stopword(language)
            ).build()
            builder = builder.filter(tantivy.Filter.stopword(language))
        except ValueError:
            pass
    if not fold:
        return builder.build()
    builder = builder.filter(tantivy.Filter.ascii_fold())
    if language is not None:
        builder = builder.filter(tantivy.Filter.stemmer(language))
    return builder.build()


def text_analyzer(language: str | None, folding: bool = True) -> Analyzer:
    """The tokenization used for both indexing and querying one archive (:class:`Analyzer`).

    :func:`fold_text` (Greek and Cyrillic accents and case, final sigma) -> simple word tokenizer
    -> drop tokens over 40 bytes -> lowercase -> stop words (when tantivy has a list for
    ``language``; its lists are accented, so they run before Latin folding) -> ASCII folding ->
    Snowball stemmer. Folding before stemming makes matching accent-insensitive: the stemmer
    sees ``beyonce`` for both ``Beyoncé`` and ``Beyonce``, ``λογοσ`` for ``λόγος``, ``ΛΟΓΟΣ`` and
    ``λογος``. Callers pass NFC text (:func:`kit.web.text_clean.normalize_text`). ``language``
    is a tantivy language name or ``None`` (no stop words, no stemming). ``folding=False`` is
    format 8's analyzer (no :func:`fold_text`, no exact field), kept for the before/after
    benchmark (``benchmarks/bench_zim_folding.py``). Benchmarks call ``.analyze(text) ->
    list[str]`` on it to tokenize baselines alike.
    """
    return Analyzer(language, folding)


def _collapse_ws(text: str) -> str:
    """``re.sub("[" + _WS_CHARS + "]+", " ", text)``: every run of :data:`_WS_CHARS` as one space.

    By ``str.replace``, which scans in C without stopping at each word gap: a regex with a
    single-space branch tries a match at every space (~4x slower on a page's text, ~0.1 ms a page).
    """
    for c in _WS_CHARS[1:]:
        if c in text:
            text = text.replace(c, " ")
    while "  " in text:  # each pass halves every run of spaces
        text = text.replace("  ", " ")
    return text


def _norm_ws(text: str) -> str:
    """Collapse runs of spaces per line and drop empty lines (keeps line structure): every run of
    :data:`_WS_CHARS` as one space, each line stripped, empty lines dropped.

    Lines are stripped before the runs are collapsed too (the same result: what a line's first
    strip removes is whitespace the last one would): a page's text has its indentation at line
    ends, and :func:`_collapse_ws` then halves far fewer long runs (0.13 -> 0.09 ms a page)."""
    text = "\n".join(filter(None, map(str.strip, text.split("\n"))))
    return "\n".join(filter(None, map(str.strip, _collapse_ws(text).split("\n"))))


def _one_line(text: str) -> str:
    return _collapse_ws(text.replace("\n", " ")).strip()


def _clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at a word boundary, with an ellipsis if cut."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def first_sentence(paragraph: str, limit: int = 300) -> str:
    """The first sentence of ``paragraph`` (at most ``limit`` characters)."""
    paragraph = _one_line(paragraph)
    m = _SENTENCE_END.search(paragraph, 40)
    return _clip(paragraph[: m.start()] if m else paragraph, limit)


def filename_words(path: str) -> str:
    """Readable words of an image entry path (``I/m/Ray_Charles_(cropped).jpg`` -> ``Ray Charles
    cropped``).

    Drops the namespace folders, thumbnail prefixes (``lossy-page1-250px-``, ``220px-``) and every
    file extension (``.svg.png.webp``).
    """
    name = unquote(posixpath.basename(path))
    name = re.sub(r"^(lossy-)?(page\d+-)?\d+px-", "", name)
    while True:
        stem, ext = posixpath.splitext(name)
        if not ext or len(ext) > 5 or not stem:
            break
        name = stem
    return " ".join(w for w in _FILE_WORDS.split(name) if w)
