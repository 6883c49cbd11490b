"""Shared fixtures. Tests needing the real data skip with a reason when it is absent."""

from __future__ import annotations

import io
from pathlib import Path

import libzim.writer
import pytest
from PIL import Image

from kit.paths import shared_data_dir
from kit.types import BackendError, ImageHit, KnowledgeGraph, Page, ReverseImageResult, SearchHit


def png_bytes(color=(200, 30, 30), size=(64, 48)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


class ZimItem(libzim.writer.Item):
    """One entry for python-libzim's ``Creator`` in the tests that write archives (HTML entries are front articles)."""

    def __init__(self, path: str, title: str, mime: str, data: str | bytes):
        super().__init__()
        self.path, self.title, self.mime, self.data = path, title, mime, data

    def get_path(self):
        return self.path

    def get_title(self):
        return self.title

    def get_mimetype(self):
        return self.mime

    def get_contentprovider(self):
        return libzim.writer.StringProvider(self.data)

    def get_hints(self):
        return {libzim.writer.Hint.FRONT_ARTICLE: self.mime == "text/html"}


class MemoryBackend:
    """A format-true in-memory search backend for harness unit tests: fixed pages and images.

    It stands in for the real backends only where a test isolates the loop from search; the real
    local web (kit.web.zim) has its own tests on the ZIM archives.
    """

    name = "memory"

    def __init__(self):
        self.calls: list[tuple] = []
        self.pages = {
            "https://example.org/eiffel": Page(url="https://example.org/eiffel", title="Eiffel Tower",
                                               markdown="The Eiffel Tower is in Paris.\n\nIt was completed in 1889.",
                                               images=[ImageHit(image_url="https://example.org/e.png", content=png_bytes((10, 10, 200)),
                                                                caption="The tower at night")]),
        }

    async def search(self, query, num):
        self.calls.append(("search", query, num))
        if "fail" in query:
            raise BackendError("upstream 503", retryable=True)
        return [SearchHit(title=f"Result {i} for {query}", url=f"https://example.org/{i}", snippet="snippet", date=f"2024-01-0{i + 1}")
                for i in range(num)]

    async def image_search(self, query, num):
        self.calls.append(("image_search", query, num))
        hits = [ImageHit(title=f"img {i}", image_url=f"https://img.example.org/{i}.png", page_url=f"https://example.org/p{i}",
                         domain="example.org", content=png_bytes((i * 40 % 255, 100, 50))) for i in range(num)]
        if "corrupt" in query:
            hits[0].content = b"\x89PNG\r\n\x1a\n garbage"
        return hits

    async def reverse_image_search(self, image, num):
        self.calls.append(("reverse_image_search", len(image), num))
        return ReverseImageResult(pages=[SearchHit(title="Eiffel Tower", url="https://example.org/eiffel")],
                                  knowledge_graph=KnowledgeGraph(title="Eiffel Tower", description="tower in Paris"),
                                  thumbnails=[ImageHit(image_url="https://img.example.org/big.png", content=png_bytes(size=(2000, 1500)))])

    async def fetch(self, url):
        self.calls.append(("fetch", url))
        if url not in self.pages:
            raise BackendError(f"not found: {url}")
        return self.pages[url]


@pytest.fixture
def memory_backend():
    return MemoryBackend()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    d = shared_data_dir()
    if d is None:
        pytest.skip("real data not found: set MMSEARCH_KIT_DATA or place ../shared/data beside the checkout")
    return d


#: The shared archives whose search results the recorded-result tests compare (English maxi and 2015, the 100-article
#: mini, the French test archive).
SHARED_ZIM_STEMS = frozenset({"wikipedia_en_ray_charles_maxi_2023-09", "wikipedia_en_ray_charles_2015-06",
                              "wikipedia_en_100_mini_2022-10", "wikipedia_fr_test_2017-07"})


@pytest.fixture(scope="module")
def shared_zim_web(data_dir):
    """The local web over :data:`SHARED_ZIM_STEMS` (index in the default cache), ready; skips without them."""
    from kit.paths import zim_paths
    from kit.web.zim import LocalZimWeb

    found = [p for p in zim_paths(data_dir) if p.stem in SHARED_ZIM_STEMS]
    if len(found) != len(SHARED_ZIM_STEMS):
        pytest.skip("shared ZIM archives missing")
    w = LocalZimWeb(sorted(found))
    w.ensure_ready()
    return w


@pytest.fixture
def recipe_dir(tmp_path, monkeypatch):
    """A copy of the shipped recipes as ``kit.recipes.RECIPE_DIR`` (config defaults read them), so a test can write a
    bad or probing recipe beside them; the recipe caches are cleared before and after."""
    from kit import recipes

    for f in recipes.RECIPE_DIR.glob("*.yaml"):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    monkeypatch.setattr(recipes, "RECIPE_DIR", tmp_path)
    recipes._clear_caches()
    yield tmp_path
    recipes._clear_caches()
