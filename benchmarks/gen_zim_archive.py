"""Generate a ZIM archive of N articles from the real article HTML and images of the shared archives.

Not a test: a data generator for ``benchmarks/bench_zim_scale.py`` (issue 17, part 1; issue 32,
part 1). Run from the project root:

    .venv/bin/python benchmarks/gen_zim_archive.py OUT.zim [--articles 20000] [--seed 0]
        [--images-per-article 0.3] [--hub-pages N] [--no-compress] [--simple]

Source material: every article of the English shared archives (``<data>/zim/wikipedia_en_*.zim``,
real Wikipedia HTML: ~320 articles) and their raster images, read with python-libzim; written with
python-libzim's ``libzim.writer.Creator`` (no Xapian index: the kit builds its own). Deterministic
by ``--seed`` (the archive's UUID and timestamps come from libzim). Prints a ``MIX`` line (the
measured mix below) and a ``GEN {json}`` line (articles, redirects, images, bytes, seconds,
seconds per 10,000 articles, ``mix``).

**Realistic mode (the default; issue 32).** Pages carry the weight and structure of current
English Wikipedia pages as mwoffliner 2023 writes them (the ``wikipedia_en_ray_charles_maxi_2023-09``
layout: Minerva skin head, ``<details>`` sections, licence footer), recombined from real fragments:

- a real infobox (of 360, images removed; 70 % of pages) with a shared logo/map picture and 0-3
  ``flagicon`` flags; a hatnote on 25 %; the TemplateStyles each component uses, as real
  ``<style data-mw-deduplicate>`` blocks, later uses as ``<link rel="mw-deduplicated-inline-style">``;
- paragraphs (30 % real ``<p>`` with their links and reference marks, 70 % runs of 2-5 real
  sentences with ``mw-ref`` marks) under real section headings, sometimes a real wikitable;
- a reference list of real ``<li>`` citations (of 2,614), 0-3 real navboxes (of 314) with a
  ``noviewer`` icon;
- ``--images-per-article`` (0.3) own pictures (near-duplicates of the real images, shown on that
  page only), shared pictures drawn with Zipf weights (s = 1.1): 200 flags (23x15 px) and 40 icons
  (16 px), decorative for the kit, and max(20, N / 400) logos/maps at content size; one "hub"
  picture (a location map, content size) on 10 % of the pages, at most 10^5 (``--hub-pages``);
- a page-length factor, lognormal (mu -0.1, sigma 0.85, at most 8), scales paragraphs, references
  and tables; redirects (a geometric number a page) make ~30 % of the HTML entries.

The mix, 20,000 articles, seed 0 (what ``MIX`` prints; 300 articles are checked by
``tests/test_gen_zim_realistic.py``):

- HTML per article: mean 46.9 KB, p50 41.4 KB, p90 76.5 KB, p99 137.9 KB, max 196 KB (the shared
  maxi 2023 archive: mean 46.7 KB, p50 38.4 KB, max 278 KB); prose ~7.4k characters (p50 5.1k);
- redirects: 29.8 % of HTML entries (8,510);
- images: 6,330 shown, 3.04 image references a page; pages per image: mean 9.6, p50 1, p90 1,
  p99 156, max 6,829 (a flag); hub on 2,000 pages; 11 images on >= 1,000 pages. At 200,000
  articles: HTML mean 46.8 KB, p50 41.5 KB, p99 139.1 KB, max 213 KB; redirects 29.9 % (85,458);
  60,969 images, pages per image mean 10.0, p50 1, p99 31, max 68,181; hub on 20,000 pages; 82
  images on >= 1,000 pages. At 10^6 articles the hub is on 10^5 pages.

Generation time: libzim compresses clusters with zstd at a fixed high level, ~14 s CPU a 1,000
of these pages (~3.3 MB/s), by far the largest cost: 10,000 articles took 406 s wall with
compression (2 compression threads; a 99 MB archive) and 14-27 s per 10,000 with ``--no-compress``
(uncompressed clusters: 20k in 54 s, 1.0 GB; 200k in 433 s, 21.7 s per 10k, 10.3 GB); 2026-12-04,
2 cores shared with other jobs, load ~7-13. Pages are streamed: nothing is held per article but
its size and its images' use counts.

**Simple mode (``--simple``; issue 17).** ~4.5 KiB pages: a unique title (a source title plus a
qualifier word from another source title and the article number, ``Ray Charles (Georgia 1234)``);
4-12 paragraphs under 1-3 real section headings: 30 % real ``<p>`` elements (links and reference
marks stripped, inline markup kept) of random source articles, 70 % runs of 2-5 consecutive real
sentences; with probability ``--images-per-article`` (repeated for values > 1) a figure with a
near-duplicate of a real image: a 1-4 % crop on each side, resized to 180-320 px wide and
recompressed (JPEG quality 70-92 or WebP), stored as its own entry, with a caption from the source
article's text. No redirects, infoboxes, navboxes or reference lists, about one page per image.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from html import escape
from pathlib import Path

import lxml.html
from libzim.writer import Creator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gen_zim_common import _RECOMBINE, _SENTENCE_END, _Item, load_sources, near_duplicate  # noqa: E402
from gen_zim_realistic import HUB_MAX, HUB_SHARE, generate_realistic  # noqa: E402

from kit.paths import zim_paths  # noqa: E402


def generate_simple(out: Path, n_articles: int, seed: int, images_per_article: float,
                    sources: list[Path] | None = None) -> dict:
    """The simple mode (``--simple``, issue 17): ~4.5 KiB pages of paragraphs and one figure per
    ~3 articles, no redirects, infoboxes, navboxes or reference lists. Writes ``out`` (replaced if
    present) with ``n_articles`` articles; returns the GEN figures."""
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
            "source_paragraphs": len(paragraphs), "source_images": len(images), "mode": "simple"}
    return figs


# ---------------------------------------------------------------------------------------------
# Realistic mode (issue 32, part 1): real page weight and structure
# ---------------------------------------------------------------------------------------------

def generate(out: Path, n_articles: int, seed: int, images_per_article: float = 0.3,
             sources: list[Path] | None = None, *, mode: str = "realistic",
             hub_pages: int | None = None, progress: bool = True, compress: bool = True) -> dict:
    """Write ``out`` in ``mode`` ``"realistic"`` (default) or ``"simple"``; returns the GEN figures.
    ``compress=False`` (realistic mode) stores the clusters uncompressed (see the module docstring)."""
    if mode == "simple":
        return generate_simple(out, n_articles, seed, images_per_article, sources)
    if mode != "realistic":
        raise ValueError(f"unknown generator mode {mode!r} (realistic or simple)")
    return generate_realistic(out, n_articles, seed, images_per_article, sources, hub_pages, progress,
                              compress)


def describe_mix(g: dict) -> str:
    """One line stating a realistic archive's measured mix (sizes, redirects, image sharing)."""
    if g.get("mode") != "realistic":
        return f"simple mode: {g['articles']:,} articles, {g['images']:,} images, no redirects"
    m = g["mix"]
    h, c, o = m["html_bytes"], m["prose_chars"], m["pages_per_image"]
    return (f"MIX {g['articles']:,} articles: HTML mean {h['mean'] / 1e3:.1f} KB, p50 "
            f"{h['p50'] / 1e3:.1f} KB, p99 {h['p99'] / 1e3:.1f} KB, max {h['max'] / 1e3:.0f} KB; prose "
            f"~{c['mean'] / 1e3:.1f}k characters; redirects {m['redirect_share']:.0%} of HTML entries "
            f"({g['redirects']:,}); {m['images_shown']:,} images shown, pages per image mean "
            f"{o['mean']:.1f}, p50 {o['p50']}, p90 {o['p90']}, p99 {o['p99']}, max {o['max']:,} "
            f"(hub {m['hub_pages']:,}); {m['images_on_1000_pages_or_more']} images on >= 1,000 pages; "
            f"{m['image_refs_per_page']} image references a page")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--articles", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--images-per-article", type=float, default=0.3,
                    help="each page's own pictures (near-duplicates shown on that page only)")
    ap.add_argument("--simple", action="store_true",
                    help="the simple generator of issue 17 (~4.5 KiB pages, no redirects/infoboxes)")
    ap.add_argument("--hub-pages", type=int, default=None,
                    help=f"pages showing the hub picture (default {HUB_SHARE:.0%}% of the articles, "
                         f"at most {HUB_MAX:,})")
    ap.add_argument("--no-compress", action="store_true",
                    help="store clusters uncompressed (libzim's zstd level costs ~14 s CPU a 1,000 pages)")
    args = ap.parse_args()
    if args.articles < 1:
        ap.error("--articles must be at least 1")
    g = generate(args.out, args.articles, args.seed, args.images_per_article,
                 mode="simple" if args.simple else "realistic", hub_pages=args.hub_pages,
                 compress=not args.no_compress)
    print(describe_mix(g))
    print("GEN " + json.dumps(g))
    return 0


if __name__ == "__main__":
    sys.exit(main())
