"""The realistic generator of gen_zim_archive.py (issue 32): pages of the weight and structure of current English
Wikipedia pages, recombined from real fragments of the shared archives (the mix: gen_zim_archive.py's docstring)."""

from __future__ import annotations

import io
import random
import re
import sys
import time
from dataclasses import dataclass
from html import escape
from pathlib import Path

import lxml.html
from libzim.writer import Compression, Creator, Hint
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gen_zim_common import (  # noqa: E402
    _MIN_PARAGRAPH,
    _RASTER,
    _RECOMBINE,
    _SENTENCE_END,
    _Item,
    content_items,
    load_sources,
    near_duplicate,
)

from kit.paths import zim_paths  # noqa: E402

_CLASS = 'contains(concat(" ", normalize-space(@class), " "), " {} ")'
_X_INFOBOX = lxml.etree.XPath(f'//table[{_CLASS.format("infobox")}]'
                              f'[not(ancestor::table[{_CLASS.format("infobox")}])]')
_X_NAVBOX = lxml.etree.XPath('//div[@role="navigation"][contains(@class, "navbox")]'
                             '[not(ancestor::div[@role="navigation"])]')
_X_REFLI = lxml.etree.XPath('//ol[contains(@class, "references")]/li')
_X_WIKITABLE = lxml.etree.XPath(f'//table[{_CLASS.format("wikitable")}]')
_X_HATNOTE = lxml.etree.XPath(f'//div[{_CLASS.format("hatnote")}]')
_X_STYLE = lxml.etree.XPath("//style[@data-mw-deduplicate]")
_X_CAPTION = lxml.etree.XPath('//div[contains(@class, "thumbcaption") or contains(@class, '
                              '"infobox-caption")] | //figcaption')
#: Share of redirect entries among the archive's HTML entries (articles + redirects): mwoffliner's
#: 2023 English Wikipedia has ~30 %.
REDIRECT_SHARE = 0.30
#: Shared images (besides each page's own pictures), drawn per slot with Zipf weights 1 / rank^s:
#: (count, s, name pattern, shown px). Flags and icons are shown as icons (``flagicon``, ``noviewer``,
#: 16-23 px: decorative for the kit), logos and maps at content size (indexed).
_FLAGS, _ICONS = 200, 40
_ZIPF_S = 1.1
#: One "hub" picture (a location map, at content size) on this share of the articles, at most
#: :data:`HUB_MAX` pages: 10^5 at 10^6 articles (issue 32: image search with an image on 10^5 pages).
HUB_SHARE, HUB_MAX = 0.10, 100_000
#: Page-length factor: lognormal (mu, sigma), clipped: paragraphs, references and tables scale
#: with it, so sizes are heavy-tailed like Wikipedia's (a few pages of 150-250 KB).
_LEN_MU, _LEN_SIGMA, _LEN_MAX = -0.1, 0.85, 8.0
_PARAS, _REFS = 11, 16  # paragraphs and references of a page of length factor 1
_HEAD = "\n".join((
    '<!DOCTYPE html>',
    '<html class="client-js"><head>',
    '  <meta charset="UTF-8">',
    '  <title>{title}</title>',
    '  <meta name="viewport" content="width=device-width, initial-scale=1.0">',
    '  <link rel="canonical" href="https://en.wikipedia.org/wiki/{path}">',
    '  <link href="-/mw/ext.cite.ux-enhancements.css" rel="stylesheet" type="text/css">',
    '<link href="-/mw/ext.cite.styles.css" rel="stylesheet" type="text/css">',
    '<link href="-/mw/skins.minerva.base.reset|skins.minerva.content.styles|ext.cite.style|site.styles|mo'
    'bile.app.pagestyles.android|mediawiki.page.gallery.styles|mediawiki.skinning.content.parsoid.css" re'
    'l="stylesheet" type="text/css">',
    '  <link href="-/style.css" rel="stylesheet" type="text/css"><link href="-/content.parsoid.css" rel="'
    'stylesheet" type="text/css"><link href="-/inserted_style.css" rel="stylesheet" type="text/css">',
    '  <script data-article-id="{path}" id="script-js" src="-/script.js"></script><script src="-/masonry.'
    'min.js"></script><script src="-/article_list_home.js"></script><script src="-/images_loaded.min.js">'
    '</script><script src="-/node_module/details-element-polyfill/dist/details-element-polyfill.js"></scr'
    'ipt>',
    '</head>',
    '',
    '<body class="mediawiki mw-hide-empty-elt ns-0 ns-subject stable skin-minerva action-view animations"'
    '>',
    '  <div id="mw-mf-viewport" class="feature-header-v2">',
    '    <div id="mw-mf-page-center">',
    '      <div id="content" class="mw-body">',
    '        <a id="top"></a>',
    '        <div id="bodyContent" class="content mw-parser-output">',
    '',
    '          <div id="mw-content-text" style="direction: ltr;"><h1 class="section-heading" tabindex="0"'
    ' aria-haspopup="true" data-section-id="0">',
    '  <span class="mw-headline" id="title_0">{title}</span>',
    '</h1>',
    '<div id="mf-section-0" class="mf-section-0" aria-pressed="true" aria-expanded="true">',
    '',
))
_TAIL = "\n".join((
    '<!--htdig_noindex--><div><div style="clear:both; background-image:linear-gradient(180deg, #E8E8E8, w'
    'hite); border-top: dashed 2px #AAAAAA; padding: 0.5em 0.5em 0.5em 0.5em; margin-top: 1em; direction:'
    ' ltr;">',
    '    This article is issued from <a class="external text" title="Last edited on 2023-08-18" href="htt'
    'ps://en.wikipedia.org/wiki/?title={path}&amp;oldid={oldid}">Wikipedia</a>. The text is licensed unde'
    'r <a class="external text" href="https://creativecommons.org/licenses/by-sa/4.0/">Creative Commons -'
    ' Attribution - Sharealike</a>. Additional terms may apply for the media files.',
    '</div>',
    '</div><!--/htdig_noindex--></div>',
    '        </div>',
    '      </div>',
    '    </div>',
    '  </div>',
    '  <script src="-/mw/jsConfigVars.js"></script>',
    '  <script src="-/mw/startup.js"></script>',
    '<script src="-/mw/jquery,mediawiki.js"></script>',
    '<script src="-/mw/mediawiki.base.js"></script>',
    '<script src="-/mw/mediawiki.util.js"></script>',
    '<script src="-/mw/site.js"></script>',
    '<script src="-/mw/mediawiki.page.ready.js"></script>',
    '<script src="-/mw/jquery.cookie.js"></script>',
    '<script src="-/mw/mediawiki.cookie.js"></script>',
    '<script src="-/mw/mediawiki.storage.js"></script>',
    '<script src="-/mw/ext.gadget.VisibilityToggles.js"></script>',
    '<script src="-/mw/ext.gadget.defaultVisibilityToggles.js"></script>',
    '<script src="-/mw/ext.cite.ux-enhancements.js"></script>',
    '',
    '',
    '',
    '</body></html>',
))
_SECTION = ('<details data-level="{level}" open="">\n    <summary class="section-heading">'
            '<h{level} id="{anchor}">{heading}</h{level}></summary>\n    \n{body}\n</details>')
_REF = ('<span class="mw-ref reference" id="cite_ref-{k}"><a href="#cite_note-{k}" '
        'style="counter-reset: mw-Ref {k};"><span class="mw-reflink-text">[{k}]</span></a></span>')
_IMG = ('<img alt="{alt}" src="{src}" decoding="async" data-file-width="{fw}" data-file-height="{fh}" '
        'data-file-type="bitmap" height="{h}" width="{w}" class="mw-file-element" loading="lazy">')


@dataclass
class RealSources:
    """Fragments of the source archives' real HTML that realistic pages are recombined from."""

    titles: list[str]
    paragraphs: list[str]          # real <p> with their inline markup (links, reference marks)
    sentences: list[str]           # plain sentences of those paragraphs
    headings: list[str]
    styles: dict[str, tuple[str, str]]  # role (infobox, navbox, ...) -> (TemplateStyles key, <style>)
    infoboxes: list[str]           # real infobox tables, images removed, "<!--ROWS-->" after <tbody>
    navboxes: list[str]            # real navboxes, images removed, "<!--ICON-->" at the end
    references: list[str]          # real reference-list items (<li>...</li>, ids renumbered later)
    tables: list[str]              # real wikitables, images removed
    hatnotes: list[str]
    captions: list[str]
    images: list[Image.Image]
    image_names: list[str]         # file stems of the source images (``Ray_Charles_classic_piano``)


class _Page:
    """Per-page state: the images shown and the TemplateStyles already inlined (a second use of a
    style is a ``<link rel="mw-deduplicated-inline-style">``, as MediaWiki writes it)."""

    def __init__(self, styles: dict[str, tuple[str, str]], rng: random.Random):
        self.styles, self.rng = styles, rng
        self.shown: set[str] = set()
        self.used: set[str] = set()

    def style(self, role: str) -> str:
        if role not in self.styles:
            return ""
        key, css = self.styles[role]
        if role in self.used:
            return f'<link rel="mw-deduplicated-inline-style" href="mw-data:{key}">'
        self.used.add(role)
        return css

    def img(self, path: str, w: int, h: int, alt: str = "") -> str:
        self.shown.add(path)
        return _IMG.format(alt=escape(alt), src=path, fw=w * 4, fh=h * 4, w=w, h=h)

    def thumb(self, path: str, w: int, h: int, caption: str) -> str:
        side = self.rng.choice(("tright", "tleft"))
        return (f'<div class="thumb {side}"><div class="thumbinner" style="width:{w + 2}px">'
                f'{self.img(path, w, h, caption[:60])}<div class="thumbcaption" style="text-align: '
                f'left">{escape(caption)}</div></div></div>')


def _drop_images(el: lxml.html.HtmlElement) -> None:
    for img in list(el.iter("img")):
        img.drop_tree()


def load_real_sources(paths: list[Path]) -> RealSources:
    """Every reusable fragment of the source archives' articles (see :class:`RealSources`).

    Raises:
        SystemExit: no paragraph or image could be read from ``paths``.
    """
    titles, paragraphs, headings, images = load_sources(paths)
    for im in images:  # near-duplicates are 180-320 px wide: resizing from 3,000 px costs ~4 ms
        im.thumbnail((480, 480))
    src = RealSources(titles, [], [], headings, {}, [], [], [], [], [], [], images, [])
    role_of = {".infobox": "infobox", ".navbox{": "navbox", ".reflist": "reflist",
               "cite.citation": "citation", ".hlist": "hlist", ".hatnote": "hatnote",
               ".thumb": "thumb", ".plainlist": "plainlist"}
    for entry, item, mime in content_items(paths):
        if mime in _RASTER:
            src.image_names.append(re.sub(r"\W+", "_", Path(entry.path).name.split(".")[0])[:60])
            continue
        if mime != "text/html" or not entry.title:
            continue
        try:
            root = lxml.html.fromstring(bytes(item.content))
        except (ValueError, lxml.etree.ParserError):
            continue
        for st in _X_STYLE(root):
            css = st.text or ""
            for needle, role in role_of.items():
                if needle in css and role not in src.styles:
                    st.tail = None
                    src.styles[role] = (st.get("data-mw-deduplicate"),
                                        lxml.html.tostring(st, encoding="unicode"))
        for el in _X_CAPTION(root):
            if 20 <= len(text := " ".join(el.text_content().split())) <= 200:
                src.captions.append(text)
        for xp, out in ((_X_INFOBOX, src.infoboxes), (_X_NAVBOX, src.navboxes),
                        (_X_WIKITABLE, src.tables), (_X_HATNOTE, src.hatnotes)):
            for el in xp(root):
                _drop_images(el)
                el.tail = None
                html = lxml.html.tostring(el, encoding="unicode")
                if 100 <= len(html) <= 40_000:
                    out.append(html)
        for el in _X_REFLI(root):
            el.tail = None
            html = lxml.html.tostring(el, encoding="unicode")
            if len(html) <= 3_000:
                src.references.append(re.sub(r' id="cite_note-[^"]*"', "", html, count=1))
        for el in root.iter("p"):
            if len(el.text_content().strip()) >= _MIN_PARAGRAPH:
                el.tail = None
                src.paragraphs.append(lxml.html.tostring(el, encoding="unicode").strip())
    src.infoboxes = [re.sub(r"(<tbody>)", r"\1<!--ROWS-->", b, count=1) if "<tbody>" in b
                     else re.sub(r"^(<table[^>]*>)", r"\1<!--ROWS-->", b) for b in src.infoboxes]
    src.navboxes = [re.sub(r"</div>$", "<!--ICON--></div>", b) for b in src.navboxes]
    src.sentences = [s for para in paragraphs
                     for s in _SENTENCE_END.split(lxml.html.fromstring(para).text_content().strip())
                     if len(s) >= 20]
    src.captions = src.captions or [s[:120] for s in src.sentences[:200]]
    src.hatnotes = src.hatnotes or ['<div class="hatnote">See also</div>']
    if not (src.infoboxes and src.navboxes and src.references):
        raise SystemExit("the English shared archives hold no infobox, navbox or reference list")
    return src


class _Zipf:
    """Draws ranks 0..n-1 with probability proportional to 1 / (rank + 1)^s."""

    def __init__(self, n: int, s: float):
        self.ranks = range(n)
        cum, total = [], 0.0
        for r in range(n):
            total += 1.0 / (r + 1) ** s
            cum.append(total)
        self.cum = cum

    def draw(self, rng: random.Random, k: int) -> list[int]:
        return rng.choices(self.ranks, cum_weights=self.cum, k=k) if k > 0 else []


def _resized(img: Image.Image, rng: random.Random, size: tuple[int, int], fmt: str = "WEBP") -> bytes:
    w, h = img.size
    box = (int(w * rng.uniform(.0, .1)), int(h * rng.uniform(.0, .1)),
           int(w * rng.uniform(.9, 1.)), int(h * rng.uniform(.9, 1.)))
    buf = io.BytesIO()
    img.crop(box).resize(size).save(buf, fmt, quality=80, method=0)
    return buf.getvalue()


def _dist(xs: list[int] | list[float]) -> dict:
    """mean / p50 / p90 / p99 / max of ``xs``."""
    s = sorted(xs)
    if not s:
        return {}
    at = lambda q: s[min(len(s) - 1, int(q * len(s)))]  # noqa: E731
    return {"mean": round(sum(s) / len(s), 1), "p50": at(.5), "p90": at(.9), "p99": at(.99),
            "max": s[-1]}


def generate_realistic(out: Path, n_articles: int, seed: int, images_per_article: float,
                       sources: list[Path] | None = None, hub_pages: int | None = None,
                       progress: bool = True, compress: bool = True, workers: int = 2) -> dict:
    """Write ``out`` (replaced if present): ``n_articles`` articles of real page weight and
    structure (see the module docstring), plus redirects and images; returns the GEN figures
    with the measured mix (``mix``)."""
    t0 = time.perf_counter()
    sources = sources or [p for p in zim_paths() if p.name.startswith("wikipedia_en_")]
    if not sources:
        raise SystemExit("no English shared ZIM archives found (set MMSEARCH_KIT_DATA)")
    src = load_real_sources(sources)
    rng = random.Random(seed)
    hub = min(HUB_MAX, max(1, round(HUB_SHARE * n_articles))) if hub_pages is None else hub_pages
    n_logos = max(20, n_articles // 400)  # shared content images: logos, maps, portraits
    flags, icons, logos = _Zipf(_FLAGS, _ZIPF_S), _Zipf(_ICONS, _ZIPF_S), _Zipf(n_logos, _ZIPF_S)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    uses: dict[str, int] = {}   # image path -> pages showing it
    sizes: list[int] = []
    text_chars: list[int] = []
    n_redirects = n_unique = 0
    t_last, per_10k = time.perf_counter(), []
    creator = Creator(str(out)).config_indexing(False, "eng").config_nbworkers(workers)
    if not compress:
        creator.config_compression(Compression.none)
    with creator:
        for key, value in (("Title", f"Generated Wikipedia ({n_articles} articles)"),
                           ("Language", "eng"), ("Name", "kit_generated_en"),
                           ("Creator", "Wikipedia"), ("Publisher", "mmsearch-kit gen_zim_archive"),
                           ("Date", "2023-09-01"),
                           ("Description", f"{n_articles} recombined real articles (realistic), seed {seed}")):
            creator.add_metadata(key, value)

        def add_image(path: str, data: bytes) -> None:
            mime = "image/webp" if path.endswith(".webp") else "image/jpeg"
            creator.add_item(_Item(path, "", mime, data, False))

        # Shared images, written once: flags (23x15), icons (16x16), logos/maps (content size), hub.
        flag_paths = [f"I/Flag_of_{src.image_names[i % len(src.image_names)]}_{i}.svg.png.webp"
                      for i in range(_FLAGS)]
        icon_paths = [f"I/Symbol_{src.image_names[i % len(src.image_names)]}_{i}_class.svg.png.webp"
                      for i in range(_ICONS)]
        logo_paths = [f"I/{src.image_names[i % len(src.image_names)]}_logo_{i}.png.webp"
                      for i in range(n_logos)]
        for path in flag_paths:
            add_image(path, _resized(rng.choice(src.images), rng, (23, 15)))
        for path in icon_paths:
            add_image(path, _resized(rng.choice(src.images), rng, (16, 16)))
        logo_size = []
        for path in logo_paths:
            w = rng.randint(200, 250)
            img = rng.choice(src.images)
            h = max(60, round(img.size[1] * w / img.size[0]))
            logo_size.append((w, h))
            add_image(path, _resized(img, rng, (w, h)))
        hub_img = rng.choice(src.images)
        hub_path, hub_wh = "I/Location_map_of_the_generated_world.png.webp", (250, 250)
        hub_caption = "Location map of the generated world, with every place of this archive"
        add_image(hub_path, _resized(hub_img, rng, hub_wh))

        for n in range(n_articles):
            title = f"{rng.choice(src.titles)} ({rng.choice(src.titles).split()[0]} {n})"
            path = title.replace(" ", "_").replace("/", "_")
            page = _Page(src.styles, rng)
            style, pimg, thumb, shown = page.style, page.img, page.thumb, page.shown
            f = min(_LEN_MAX, rng.lognormvariate(_LEN_MU, _LEN_SIGMA))
            thumbs: list[str] = []
            want = images_per_article
            while want > 0 and rng.random() < min(want, 1.0):  # the page's own pictures
                want -= 1
                data, mime, ext = near_duplicate(rng.choice(src.images), rng)
                ipath = f"I/gen_{n}_{n_unique}.{ext}"
                creator.add_item(_Item(ipath, "", mime, data, False))
                n_unique += 1
                w = rng.randint(180, 250)
                thumbs.append(thumb(ipath, w, round(w * .75), rng.choice(src.captions)))
            if (n + 1) * hub // n_articles > n * hub // n_articles:
                thumbs.append(thumb(hub_path, *hub_wh, hub_caption))
            n_logo = (rng.random() < 0.5) + (rng.random() < 0.2)
            logo_ranks = logos.draw(rng, n_logo)
            for r in logo_ranks[1:]:
                thumbs.append(thumb(logo_paths[r], *logo_size[r], rng.choice(src.captions)))

            refs = 0
            lead: list[str] = []
            if rng.random() < 0.25:
                lead.append(style("hatnote") + rng.choice(src.hatnotes))
            if rng.random() < 0.7:  # infobox: an image row (a shared logo or none) and flags
                rows = []
                if logo_ranks:
                    r = logo_ranks[0]
                    rows.append(f'<tr><td colspan="2" class="infobox-image"><span class="mw-default-size">'
                                f'{pimg(logo_paths[r], *logo_size[r])}</span><div class="infobox-caption">'
                                f'{escape(rng.choice(src.captions))}</div></td></tr>')
                for r in flags.draw(rng, rng.choice((0, 0, 1, 1, 2, 3))):
                    rows.append(f'<tr><th scope="row" class="infobox-label">Country</th><td class="'
                                f'infobox-data"><span class="flagicon">{pimg(flag_paths[r], 23, 15)}'
                                f'</span>&nbsp;<a href="{escape(rng.choice(src.titles))}">'
                                f'{escape(rng.choice(src.titles))}</a></td></tr>')
                lead.append(style("infobox") + rng.choice(src.infoboxes).replace("<!--ROWS-->",
                                                                                "".join(rows), 1))
            paras = max(2, round(_PARAS * f))
            n_sections = max(1, min(12, round(paras / 3)))
            per = max(1, paras // (n_sections + 1))
            blocks: list[list[str]] = [lead]
            chars = 0
            for i in range(paras):
                if i and i % per == 0 and len(blocks) <= n_sections:
                    blocks.append([])
                if rng.random() < _RECOMBINE:  # a run of 2-5 real sentences, with reference marks
                    at = rng.randrange(len(src.sentences))
                    sents = src.sentences[at:at + rng.randint(2, 5)]
                    parts = []
                    for s in sents:
                        chars += len(s) + 1
                        parts.append(escape(s))
                        if rng.random() < 0.45:
                            refs += 1
                            parts.append(_REF.format(k=refs))
                        parts.append(" ")
                    blocks[-1].append(f"<p>{''.join(parts).rstrip()}</p>")
                else:
                    para = rng.choice(src.paragraphs)
                    chars += len(para) * 6 // 10  # markup is ~40 % of a real <p>
                    blocks[-1].append(para)
            blocks[0].append('<meta property="mw:PageProp/toc">')
            for t in thumbs:
                rng.choice(blocks).insert(0, t)
            for _ in range(sum(rng.random() < 0.35 * f for _ in range(2))):
                blocks[rng.randrange(1, len(blocks)) if len(blocks) > 1 else 0].append(
                    rng.choice(src.tables))
            body = ["\n".join(blocks[0]), "</div>"]
            for block in blocks[1:]:
                heading = rng.choice(src.headings)
                body.append(_SECTION.format(level=rng.choice((2, 2, 2, 3)), anchor=escape(
                    heading.replace(" ", "_")), heading=escape(heading), body="\n".join(block)))
            n_refs = max(refs, round(_REFS * f))
            ref_items = [rng.choice(src.references).replace("<li", f'<li id="cite_note-{k + 1}"', 1)
                         for k in range(n_refs)]
            body.append(_SECTION.format(level=2, anchor="References", heading="References", body=(
                style("reflist") + '<div class="reflist   "><div class="mw-references-wrap '
                'mw-references-columns"><ol class="mw-references references">' + "".join(ref_items)
                + "</ol></div></div>" + style("citation"))))
            navs = []
            for _ in range(rng.choice((0, 1, 1, 1, 2, 2, 3))):
                icon = icons.draw(rng, 1)[0]
                navs.append(style("navbox") + '<div class="navbox-styles"></div>' + rng.choice(
                    src.navboxes).replace("<!--ICON-->", f'<span class="noviewer">'
                                                         f'{pimg(icon_paths[icon], 16, 16)}</span>', 1))
            body.append(_SECTION.format(level=2, anchor="External_links", heading="External links",
                                        body=style("hlist") + "\n".join(navs)))
            for ipath in shown:
                uses[ipath] = uses.get(ipath, 0) + 1
            etitle, epath = escape(title), escape(path)
            html = (_HEAD.format(title=etitle, path=epath) + "\n".join(body)
                    + _TAIL.format(path=epath, oldid=1_100_000_000 + n)).encode()
            sizes.append(len(html))
            text_chars.append(chars)
            creator.add_item(_Item(path, title, "text/html", html, True))
            # Redirects: REDIRECT_SHARE of all HTML entries (a geometric number per article).
            while rng.random() < REDIRECT_SHARE:
                base = title.rsplit(" (", 1)[0]
                rtitle = f"{base} {n}" if not n_redirects % 2 else f"{base}, {n_redirects}"
                rtitle = f"{rtitle} ({n_redirects})" if rtitle == title else rtitle
                creator.add_redirection(rtitle.replace(" ", "_").replace("/", "_") + f"_r{n_redirects}",
                                        rtitle, path, {Hint.FRONT_ARTICLE: False})
                n_redirects += 1
            if progress and (n + 1) % 10_000 == 0:
                now = time.perf_counter()
                per_10k.append(now - t_last)
                t_last = now
                print(f"  generated {n + 1:,} articles: {per_10k[-1]:.1f} s for the last 10,000 "
                      f"({now - t0:.0f} s in all)", file=sys.stderr, flush=True)
        t_loop = time.perf_counter()
    t_end = time.perf_counter()  # the Creator's exit wrote the clusters left and the directory
    occ = sorted(uses.values())
    mix = {"html_bytes": _dist(sizes), "prose_chars": _dist(text_chars),
           "redirect_share": round(n_redirects / (n_redirects + n_articles), 3),
           "images_shown": len(occ),
           "pages_per_image": _dist(occ), "hub_pages": uses.get(hub_path, 0),
           "images_on_1000_pages_or_more": sum(o >= 1000 for o in occ),
           "image_refs_per_page": round(sum(occ) / n_articles, 2)}
    return {"articles": n_articles, "redirects": n_redirects,
            "images": n_unique + _FLAGS + _ICONS + n_logos + 1,
            "bytes": out.stat().st_size, "seconds": round(t_end - t0, 1),
            "seconds_finalize": round(t_end - t_loop, 1),
            "seconds_per_10k": round(10_000 * (t_end - t0) / n_articles, 1),
            "seed": seed, "mode": "realistic", "compressed": compress, "hub_caption": hub_caption, "hub_path": hub_path,
            "mix": mix, "source_paragraphs": len(src.paragraphs), "source_images": len(src.images),
            "source_infoboxes": len(src.infoboxes), "source_navboxes": len(src.navboxes),
            "source_references": len(src.references)}
