"""Generate a ZIM archive of N articles from the real article HTML and images of the shared archives.

Not a test: a data generator for ``benchmarks/bench_zim_scale.py`` (issue 17, part 1). Run from the
project root:

    .venv/bin/python benchmarks/gen_zim_archive.py OUT.zim [--articles 20000] [--seed 0]
        [--images-per-article 0.3]

Source material: every article of the English shared archives (``<data>/zim/wikipedia_en_*.zim``,
real Wikipedia HTML: ~320 articles) and their raster images. Each generated article:

- a unique title: a source title plus a qualifier word from another source title and the article
  number (``Ray Charles (Georgia 1234)``);
- 4-12 paragraphs under 1-3 real section headings: 30 % real ``<p>`` elements (links and
  reference marks stripped, inline markup kept) of random source articles, 70 % runs of 2-5
  consecutive real sentences starting anywhere in the source text (so paragraphs are rarely exact
  copies), so the word statistics are those of Wikipedia text, recombined;
- with probability ``--images-per-article`` (repeated for values > 1) a figure with a near-duplicate
  of a real image: a 1-4 % crop on each side, resized to 180-320 px wide and recompressed (JPEG
  quality 70-92 or WebP), stored as its own entry, with a caption from the source article's text.

Deterministic by ``--seed``: the same articles, titles and image pixels (the archive's UUID and
timestamps come from libzim). Written with python-libzim's ``libzim.writer.Creator`` (zstd, no
Xapian index: the kit builds its own). Prints a ``GEN {json}`` line (articles, images, bytes, s).
"""

from __future__ import annotations

import argparse
import io
import json
import random
import re
import sys
import time
from html import escape
from pathlib import Path

import lxml.html
from libzim.reader import Archive
from libzim.writer import Creator, Hint, Item, StringProvider
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kit.paths import zim_paths  # noqa: E402

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


def load_sources(paths: list[Path]) -> tuple[list[str], list[str], list[str], list[Image.Image]]:
    """(titles, paragraph HTML snippets, section headings, decoded images) of the source archives.

    Raises:
        SystemExit: no English shared archive, or no paragraph/image could be read from them.
    """
    titles: list[str] = []
    paragraphs: list[str] = []
    headings: list[str] = []
    images: list[Image.Image] = []
    for p in paths:
        arch = Archive(str(p))
        for eid in range(arch.all_entry_count):
            entry = arch._get_entry_by_id(eid)
            if entry.is_redirect:
                continue
            item = entry.get_item()
            mime = item.mimetype.split(";")[0].strip()
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


def generate(out: Path, n_articles: int, seed: int, images_per_article: float,
             sources: list[Path] | None = None) -> dict:
    """Write ``out`` (replaced if present) with ``n_articles`` articles; returns the GEN figures."""
    t0 = time.perf_counter()
    sources = sources or [p for p in zim_paths() if p.name.startswith("wikipedia_en_")]
    if not sources:
        raise SystemExit("no English shared ZIM archives found (set MMSEARCH_KIT_DATA)")
    titles, paragraphs, headings, images = load_sources(sources)
    sentences = [sent for para in paragraphs
                 for sent in _SENTENCE_END.split(lxml.html.fromstring(para).text_content().strip())]
    rng = random.Random(seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    n_images = 0
    with Creator(str(out)).config_indexing(False, "eng").config_nbworkers(1) as creator:
        for key, value in (("Title", f"Generated Wikipedia ({n_articles} articles)"),
                           ("Language", "eng"), ("Name", "kit_generated_en"),
                           ("Creator", "Wikipedia"), ("Publisher", "mmsearch-kit gen_zim_archive"),
                           ("Date", "2023-09-01"),
                           ("Description", f"{n_articles} recombined real articles, seed {seed}")):
            creator.add_metadata(key, value)
        for n in range(n_articles):
            title = f"{rng.choice(titles)} ({rng.choice(titles).split()[0]} {n})"
            path = title.replace(" ", "_").replace("/", "_")
            body = [f"<h1>{escape(title)}</h1>"]
            sections = rng.randint(1, 3)
            paras = rng.sample(paragraphs, rng.randint(4, 12))
            per = max(1, len(paras) // sections)
            want = images_per_article
            while want > 0 and rng.random() < min(want, 1.0):
                want -= 1
                data, mime, ext = near_duplicate(rng.choice(images), rng)
                img_path = f"I/gen_{n}_{n_images}.{ext}"
                creator.add_item(_Item(img_path, "", mime, data, False))
                caption = lxml.html.fromstring(rng.choice(paragraphs)).text_content()[:90]
                body.append(f'<figure class="mw-default-size"><img src="{img_path}" '
                            f'alt="{escape(caption[:40])}"><figcaption>{escape(caption)}</figcaption></figure>')
                n_images += 1
            for i, para in enumerate(paras):
                if i and i % per == 0:
                    body.append(f"<h2>{rng.choice(headings)}</h2>")
                if rng.random() < _RECOMBINE:  # a run of 2-5 real sentences, across paragraphs
                    at = rng.randrange(len(sentences))
                    para = f"<p>{escape(' '.join(sentences[at:at + rng.randint(2, 5)]))}</p>"
                body.append(para)
            html = (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{escape(title)}</title>"
                    f"</head><body><div id=\"mw-content-text\">{''.join(body)}</div></body></html>")
            creator.add_item(_Item(path, title, "text/html", html, True))
    figs = {"articles": n_articles, "images": n_images, "bytes": out.stat().st_size,
            "seconds": round(time.perf_counter() - t0, 1), "seed": seed,
            "source_paragraphs": len(paragraphs), "source_images": len(images)}
    return figs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--articles", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--images-per-article", type=float, default=0.3)
    args = ap.parse_args()
    if args.articles < 1:
        ap.error("--articles must be at least 1")
    print("GEN " + json.dumps(generate(args.out, args.articles, args.seed, args.images_per_article)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
