"""Shared pieces of the ZIM archive generators (gen_zim_archive.py): the writer item, the shared archives' real
paragraphs and images, and near-duplicate pictures."""

from __future__ import annotations

import io
import random
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lxml.html
from libzim.reader import Archive
from libzim.writer import Hint, Item, StringProvider
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

_RASTER = ("image/jpeg", "image/png", "image/webp")
_MIN_PARAGRAPH = 80  # characters of text: shorter <p> are mostly empty layout paragraphs
#: Share of paragraphs rebuilt from a run of sentences (the rest are real <p> with their markup): with
#: ~1,800 source paragraphs, whole-paragraph reuse alone would give every paragraph ~90 copies at 20k
#: articles, i.e. exact BM25 ties that no real archive has.
_RECOMBINE = 0.7
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"“])")


class _Item(Item):
    """One entry for the Creator (path, title, mimetype, bytes; front article or not)."""

    def __init__(self, path: str, title: str, mime: str, content: bytes | str, front: bool):
        super().__init__()
        self._path, self._title, self._mime = path, title, mime
        self._content, self._front = content, front

    def get_path(self) -> str:
        return self._path

    def get_title(self) -> str:
        return self._title

    def get_mimetype(self) -> str:
        return self._mime

    def get_contentprovider(self) -> StringProvider:
        return StringProvider(self._content)

    def get_hints(self) -> dict:
        return {Hint.FRONT_ARTICLE: self._front, Hint.COMPRESS: self._mime.startswith("text/")}


def content_items(paths: list[Path]) -> Iterator[tuple[Any, Any, str]]:
    """Every non-redirect entry of the archives ``paths``, in entry-id order: ``(entry, item, mime)`` with the
    mimetype's parameters dropped (both generators' source readers walk the archives this way)."""
    for p in paths:
        arch = Archive(str(p))
        for eid in range(arch.all_entry_count):
            entry = arch._get_entry_by_id(eid)
            if entry.is_redirect:
                continue
            item = entry.get_item()
            yield entry, item, item.mimetype.split(";")[0].strip()


def load_sources(paths: list[Path]) -> tuple[list[str], list[str], list[str], list[Image.Image]]:
    """(titles, paragraph HTML snippets, section headings, decoded images) of the source archives.

    Raises:
        SystemExit: no English shared archive, or no paragraph/image could be read from them.
    """
    titles: list[str] = []
    paragraphs: list[str] = []
    headings: list[str] = []
    images: list[Image.Image] = []
    for entry, item, mime in content_items(paths):
        if mime == "text/html" and entry.title and "/" not in entry.path.removeprefix("A/"):
            try:
                root = lxml.html.fromstring(bytes(item.content))
            except (ValueError, lxml.etree.ParserError):
                continue
            found = 0
            for el in root.iter("p"):
                for sup in el.xpath(".//sup"):
                    sup.drop_tree()
                lxml.etree.strip_tags(el, "a", "span")
                if len(el.text_content().strip()) >= _MIN_PARAGRAPH:
                    el.attrib.clear()
                    paragraphs.append(lxml.html.tostring(el, encoding="unicode").strip())
                    found += 1
            if found:
                titles.append(entry.title)
                headings.extend(h.text_content().strip() for h in root.iter("h2")
                                if 3 <= len(h.text_content().strip()) <= 60)
        elif mime in _RASTER:
            try:
                img = Image.open(io.BytesIO(bytes(item.content)))
                img.load()
            except (OSError, ValueError):
                continue
            if min(img.size) >= 100:
                images.append(img.convert("RGBA").convert("RGB"))  # palette + transparency
    if not paragraphs or not images:
        raise SystemExit(f"no article paragraphs or images in {[str(p) for p in paths]}")
    headings = sorted(set(headings) - {"References", "External links", "See also", "Notes"})
    return titles, paragraphs, headings or ["History"], images


def near_duplicate(img: Image.Image, rng: random.Random) -> tuple[bytes, str, str]:
    """(bytes, mimetype, extension) of a small crop of ``img``, resized and recompressed."""
    w, h = img.size
    box = tuple(int(f * s) for f, s in ((rng.uniform(.01, .04), w), (rng.uniform(.01, .04), h),
                                        (rng.uniform(.96, .99), w), (rng.uniform(.96, .99), h)))
    out = img.crop(box)
    width = rng.randint(180, 320)
    out = out.resize((width, max(1, round(out.size[1] * width / out.size[0]))))
    buf = io.BytesIO()
    if rng.random() < 0.7:
        out.save(buf, "JPEG", quality=rng.randint(70, 92))
        return buf.getvalue(), "image/jpeg", "jpg"
    out.save(buf, "WEBP", quality=rng.randint(70, 92))
    return buf.getvalue(), "image/webp", "webp"
