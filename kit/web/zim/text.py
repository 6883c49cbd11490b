"""Text analysis of the local web: the tantivy analyzer (one per language, used for indexing and
querying alike) and the plain-text helpers (whitespace, clipping, first sentence, file-name words)
that HTML extraction, snippets and the backend share."""

from __future__ import annotations

import posixpath
import re
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

_WS = re.compile(r"[ \t\r\f\v\u00a0\u200b]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'“‘«]?[A-Z0-9À-ÖØ-Þ])")
_FILE_WORDS = re.compile(r"[^\w]+|_+")


def analyzer_language(zim_language: str | None) -> str | None:
    """Map a ZIM ``Language`` metadata value (ISO 639-3, maybe comma-separated) to a tantivy
    stemmer language (``"english"``, ``"french"``, ...), or ``None`` when unsupported."""
    if not zim_language:
        return None
    first = zim_language.split(",")[0].strip().lower()
    return _LANGUAGES.get(first)


def text_analyzer(language: str | None) -> tantivy.TextAnalyzer:
    """The tokenization used for both indexing and querying one archive.

    Simple word tokenizer -> drop tokens over 40 bytes -> lowercase -> stop words (when tantivy
    has a list for ``language``; its lists are accented, so they run before folding) -> ASCII
    folding -> Snowball stemmer. Folding before stemming makes matching accent-insensitive: the
    stemmer sees ``beyonce`` for both ``Beyoncé`` and ``Beyonce`` (stemming first gave ``beyonce``
    vs ``beyonc``). Callers pass NFC text (:func:`kit.web.text_clean.normalize_text`): the tokenizer
    splits a decomposed ``e`` + U+0301 into two words. ``language`` is a tantivy language name or
    ``None`` (no stop words, no stemming). Benchmarks call ``.analyze(text) -> list[str]`` on it to
    tokenize baselines alike.
    """
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
        return builder.filter(tantivy.Filter.ascii_fold()).filter(
            tantivy.Filter.stemmer(language)).build()
    return builder.filter(tantivy.Filter.ascii_fold()).build()


def _norm_ws(text: str) -> str:
    """Collapse runs of spaces per line and drop empty lines (keeps line structure)."""
    lines = (_WS.sub(" ", ln).strip() for ln in text.split("\n"))
    return "\n".join(ln for ln in lines if ln)


def _one_line(text: str) -> str:
    return _WS.sub(" ", text.replace("\n", " ")).strip()


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
