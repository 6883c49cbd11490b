"""The link graph and image placements of a set of ZIM archives (the offline expander's "web").

Built once from :class:`kit.web.zim.LocalZimWeb` pages fetched with links kept: for every article,
its title, first sentence (definition), a coarse category read from that sentence, its raster
images in page order (captions), and every sentence that links to another article (the bridge
evidence of WeAgent §4.2). Cached as JSON under ``cache_dir()/data_graph/<key>.json``, keyed by the
archives' sha256 so a changed archive rebuilds it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kit.paths import cache_dir, file_sha256
from kit.types import BackendError

GRAPH_FORMAT = 3  # 2: percent-encoded URLs, boilerplate-free text; 3: titles/headings decoded once
_LINK = re.compile(r"\[([^\]\n]*)\]\((zim://[^)\s]+)\)")
_IMG = re.compile(r"!\[([^\]\n]*)\]\((zim://[^)\s]+)\)")
_ANY_LINK = re.compile(r"\[([^\]\n]*)\]\((?:[^)\s]+)\)")
_SENT = re.compile(r"(?<=[.!?])\s+(?=[\"'“(]?[A-Z0-9])")
_CATEGORY = re.compile(r"\b(?:is|was|are|were)\s+(?:an?|the)\s+((?:[\w'’-]+\s){0,4}?[\w'’-]+?)"
                       r"(?=\s+(?:who|which|that|from|in|of|by|for|and|with|on|released|located|born|based|best|"
                       r"known|founded)\b|[,.;(])")


@dataclass
class Link:
    """A sentence on ``source`` that links to ``target`` with anchor text ``anchor``."""

    target: str
    anchor: str
    sentence: str  # plain text, all link syntax removed


@dataclass
class PageImage:
    url: str
    caption: str
    position: int  # 1-based, page order


@dataclass
class Article:
    url: str
    title: str
    archive: str
    definition: str = ""
    category: str = ""
    images: list[PageImage] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)


def plain(md: str) -> str:
    """Markdown inline text without image and link syntax, emphasis markers, or extra spaces."""
    s = _IMG.sub("", md)
    s = _ANY_LINK.sub(lambda m: m.group(1), s)
    s = s.replace("**", "").replace("*", "")
    return " ".join(s.split())


def category_of(definition: str) -> str:
    """Coarse category from a definition sentence: the noun phrase after "is a/an/the" ("" if none)."""
    m = _CATEGORY.search(definition)
    return m.group(1).strip() if m else ""


def parse_article(url: str, title: str, archive: str, markdown: str, image_urls: list[str],
                  captions: dict[str, str]) -> Article:
    """Extract definition, category, images and link sentences from a fetched page's Markdown."""
    art = Article(url=url, title=title, archive=archive)
    art.images = [PageImage(url=u, caption=captions.get(u, ""), position=i + 1) for i, u in enumerate(image_urls)]
    for block in markdown.split("\n"):
        b = block.strip()
        if not b or b[0] in "#|!>" or b.startswith(("- ", "* ", "```")):
            continue  # headings, tables (infoboxes), figures, lists: no prose sentences
        for sent in _SENT.split(b):
            text = plain(sent)
            if not art.definition and len(text) > 30:
                art.definition = text[:400]
                art.category = category_of(text)
            for m in _LINK.finditer(sent):
                if m.group(0).startswith("!") or sent[max(0, m.start() - 1):m.start()] == "!":
                    continue
                target = m.group(2).split("#", 1)[0]
                anchor = plain(m.group(1))
                if target != url and anchor:
                    art.links.append(Link(target=target, anchor=anchor, sentence=text))
    return art


class LinkGraph:
    """Articles by URL, with backlinks (who links to whom, with which sentence)."""

    def __init__(self, articles: dict[str, Article]):
        self.articles = articles
        self.backlinks: dict[str, list[tuple[str, Link]]] = {}
        for a in articles.values():
            for ln in a.links:
                if ln.target in articles:
                    self.backlinks.setdefault(ln.target, []).append((a.url, ln))
        self.by_title: dict[str, list[str]] = {}
        for a in articles.values():
            self.by_title.setdefault(norm_title(a.title), []).append(a.url)

    def __len__(self) -> int:
        return len(self.articles)

    def same_entity(self, a: str, b: str) -> bool:
        """Two URLs name the same entity (the same article title in two archive editions)."""
        return norm_title(self.articles[a].title) == norm_title(self.articles[b].title)

    def to_json(self) -> dict:
        return {"format": GRAPH_FORMAT, "articles": [asdict(a) for a in self.articles.values()]}

    @classmethod
    def from_json(cls, d: dict) -> LinkGraph:
        if d.get("format") != GRAPH_FORMAT:
            raise ValueError(f"link graph format {d.get('format')} != {GRAPH_FORMAT}")
        arts = {}
        for a in d["articles"]:
            art = Article(**{k: v for k, v in a.items() if k not in ("images", "links")})
            art.images = [PageImage(**i) for i in a["images"]]
            art.links = [Link(**ln) for ln in a["links"]]
            arts[art.url] = art
        return cls(arts)

    @classmethod
    def build(cls, links_web, *, cache: bool = True, index_dir: str | Path | None = None) -> LinkGraph:
        """Build (or load from cache) the graph of every article of ``links_web`` (a
        :class:`~kit.web.zim.LocalZimWeb` created with ``keep_links=True``).

        Raises:
            ValueError: ``links_web`` does not keep links (the graph would be empty).
        """
        if not getattr(links_web, "keep_links", False):
            raise ValueError("LinkGraph.build needs a LocalZimWeb created with keep_links=True")
        key = hashlib.sha256("|".join(sorted(file_sha256(a.file) for a in links_web.archives)).encode()).hexdigest()[:16]
        path = Path(index_dir or cache_dir() / "data_graph") / f"{key}-v{GRAPH_FORMAT}.json"
        if cache and path.exists():
            try:
                return cls.from_json(json.loads(path.read_text(encoding="utf-8")))
            except (ValueError, KeyError, TypeError):
                pass  # stale or corrupt cache: rebuild
        arts: dict[str, Article] = {}
        for stem, _lang, epath, title, _text in links_web.corpus(text=False):
            url = f"zim://{stem}/{epath}"
            try:
                page = links_web.fetch_sync(url)
            except BackendError:
                continue
            caps = {im.image_url: im.caption for im in page.images}
            arts[page.url] = parse_article(page.url, page.title or title, stem, page.markdown,
                                           [im.image_url for im in page.images], caps)
        g = cls(arts)
        if cache:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(g.to_json(), ensure_ascii=False), encoding="utf-8")
            tmp.replace(path)
        return g


def norm_title(t: str) -> str:
    return " ".join(re.sub(r"[^\w]+", " ", t.casefold()).split())
