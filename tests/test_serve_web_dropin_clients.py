"""serve-web with real clients (issue 28 part 5), against a uvicorn server on a loopback port.

* LangChain's ``GoogleSerperAPIWrapper`` (langchain-community, published on PyPI), sync and async, unchanged but
  for its host: it has no base-URL setting (``https://google.serper.dev`` is written into its two request
  calls), so the test wraps only the call that sends the request and swaps that prefix for the server's.
  It posts its parameters in the query string with ``Content-Type: application/json`` and no body.
* Request shapes of peers' code, written as they write them: ``requests`` with a JSON string body (Serper's
  own snippet), ``requests.get`` with ``apiKey`` in the query string (Serper's GET form), ``httpx`` JSON posts
  (MMSearch-R1 / OpenSearch-VL style search and lens), ``aiohttp`` posts, and Jina reader calls (``/r/<url>``
  with Bearer key, the root form with a percent-encoded URL, ``POST /`` with a JSON body, JSON and SSE
  answers).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import warnings
from urllib.parse import quote

import httpx
import pytest
import requests

from kit.serve.web_cli import build_app

MAXI = "wikipedia_en_ray_charles_maxi_2023-09"
KEY = "clients-key"
WIKI = "https://en.wikipedia.org/wiki/Ray_Charles"
SERPER = "https://google.serper.dev"


@pytest.fixture(scope="module")
def live(data_dir, tmp_path_factory):
    """The service on a real loopback port (uvicorn in a thread, port 0), with a key."""
    import uvicorn

    cache = tmp_path_factory.mktemp("clients") / "cache.sqlite"
    app, _ = build_app([str(data_dir / "zim" / f"{MAXI}.zim")], api_key=KEY, cache_path=str(cache))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started
    yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    server.should_exit = True
    thread.join(5)


def _google_serper():
    with warnings.catch_warnings():  # langchain-community announces its own sunset on import
        warnings.simplefilter("ignore")
        return pytest.importorskip("langchain_community.utilities.google_serper")


# ============================================================================ LangChain GoogleSerperAPIWrapper
def test_langchain_google_serper_wrapper_sync(live, monkeypatch):
    mod = _google_serper()
    sent = []
    real_post = requests.post

    def post(url, **kw):  # the only change: the host it was written for -> this service
        sent.append((url, kw))
        return real_post(url.replace(SERPER, live), **kw)

    monkeypatch.setattr(mod.requests, "post", post)
    search = mod.GoogleSerperAPIWrapper(serper_api_key=KEY, k=3)
    results = search.results("Ray Charles piano")
    text = search.run("Ray Charles piano")
    images = mod.GoogleSerperAPIWrapper(serper_api_key=KEY, k=2, type="images").results("Ray Charles")
    url, kw = sent[0]
    assert url == f"{SERPER}/search" and kw["params"] == {"q": "Ray Charles piano", "gl": "us", "hl": "en", "num": 3}
    assert "data" not in kw and "json" not in kw  # no body: the parameters are in the query string
    assert [o["position"] for o in results["organic"]] == [1, 2, 3]
    assert results["organic"][0]["link"].startswith(f"{live}/zim/{MAXI}/")
    assert results["searchParameters"] == {"q": "Ray Charles piano", "gl": "us", "hl": "en", "type": "search",
                                           "num": 3, "engine": "mmsearch-kit-local"}
    assert results["organic"][0]["snippet"] in text  # run() joined the snippets
    assert len(images["images"]) == 2 and images["images"][0]["imageUrl"].startswith(f"{live}/zim/")
    with pytest.raises(requests.HTTPError, match="404"):  # type="news": Serper's endpoint, not served here
        mod.GoogleSerperAPIWrapper(serper_api_key=KEY, type="news").results("Ray Charles")
    with pytest.raises(requests.HTTPError, match="403"):
        mod.GoogleSerperAPIWrapper(serper_api_key="wrong").results("Ray Charles")


async def test_langchain_google_serper_wrapper_async(live):
    import aiohttp

    mod = _google_serper()

    with warnings.catch_warnings():  # aiohttp discourages subclassing; the wrapper's field wants a ClientSession
        warnings.simplefilter("ignore", DeprecationWarning)

        class Session(aiohttp.ClientSession):  # the only change: the host it was written for -> this service
            def post(self, url, **kw):
                return super().post(str(url).replace(SERPER, live), **kw)

    async with Session() as session:
        search = mod.GoogleSerperAPIWrapper(serper_api_key=KEY, k=2, aiosession=session)
        results = await search.aresults("Genius Loves Company")
        text = await search.arun("Genius Loves Company")
    assert len(results["organic"]) == 2 and results["searchParameters"]["num"] == 2 and text


# ============================================================================ peers' request shapes
def test_serper_snippet_requests_json_string_body(live):
    """Serper's own Python snippet: ``requests.request("POST", url, headers=..., data=json.dumps(payload))``."""
    payload = json.dumps({"q": "Ray Charles", "gl": "us", "num": 5})
    r = requests.request("POST", f"{live}/search", headers={"X-API-KEY": KEY, "Content-Type": "application/json"},
                         data=payload, timeout=30)
    assert r.status_code == 200 and len(r.json()["organic"]) == 5


def test_serper_get_form_with_api_key_in_query(live):
    r = requests.get(f"{live}/search", params={"q": "Ray Charles", "num": 2, "page": 2, "apiKey": KEY}, timeout=30)
    first = requests.get(f"{live}/search", params={"q": "Ray Charles", "num": 2, "apiKey": KEY}, timeout=30)
    assert r.status_code == 200 and [o["position"] for o in r.json()["organic"]] == [3, 4]
    assert not {o["link"] for o in r.json()["organic"]} & {o["link"] for o in first.json()["organic"]}
    assert "apiKey" not in r.json()["searchParameters"]
    assert requests.get(f"{live}/search", params={"q": "x", "apiKey": "wrong"}, timeout=30).status_code == 403


def test_mmsearch_style_httpx_search_image_search_lens_and_reader(live):
    """What MMSearch-R1 / OpenSearch-VL style tools do: httpx JSON posts for text and image search, the image's
    URL to /lens, then the reader on a result link with a Bearer key."""
    with httpx.Client(base_url=live, headers={"X-API-KEY": KEY}, timeout=30) as c:
        organic = c.post("/search", json={"q": "Ray Charles", "num": 3}).json()["organic"]
        image = c.post("/images", json={"q": "Ray Charles", "num": 1}).json()["images"][0]
        lens = c.post("/lens", json={"url": image["imageUrl"]}).json()
    reader = httpx.get(f"{live}/r/{organic[0]['link']}", headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert len(organic) == 3 and lens["organic"][0]["link"] == image["link"]
    assert reader.status_code == 200 and reader.text.startswith(f"Title: {organic[0]['title']}\n")


async def test_aiohttp_post_with_data_string(live):
    import aiohttp

    async with aiohttp.ClientSession(headers={"X-API-KEY": KEY, "Content-Type": "application/json"}) as s:
        async with s.post(f"{live}/images", data=json.dumps({"q": "Ray Charles", "num": 2})) as r:
            body = await r.json()
    assert r.status == 200 and len(body["images"]) == 2


def test_jina_reader_client_shapes(live):
    """Jina reader calls as clients write them: the root form (``https://r.jina.ai/<url>`` with the host
    swapped), percent-encoded (``encodeURIComponent``), ``POST /`` with a JSON body and the JSON envelope, the
    text format, and the event stream."""
    bearer = {"Authorization": f"Bearer {KEY}"}
    root = requests.get(f"{live}/{WIKI}", headers=bearer, timeout=30)
    encoded = requests.get(f"{live}/{quote(WIKI, safe='')}", headers=bearer, timeout=30)
    posted = requests.post(f"{live}/", json={"url": WIKI}, headers={**bearer, "Accept": "application/json",
                                                                    "X-Return-Format": "text"}, timeout=30)
    with httpx.stream("GET", f"{live}/r/{WIKI}", headers={**bearer, "Accept": "text/event-stream"}, timeout=30) as s:
        events = [line for line in s.iter_lines() if line]
    missing = requests.get(f"{live}/r/https://example.org/page", headers=bearer, timeout=30)
    assert root.status_code == encoded.status_code == 200 and root.text == encoded.text
    assert root.text.startswith("Title: Ray Charles\n\nURL Source: ")
    data = posted.json()["data"]
    assert posted.json()["code"] == 200 and data["title"] == "Ray Charles" and "![" not in data["content"]
    assert events[0] == "event: data" and json.loads(events[1].removeprefix("data: "))["title"] == "Ray Charles"
    assert missing.status_code == 422 and missing.json()["name"] == "AssertionFailureError"


async def test_kit_serper_backend_still_runs_unchanged(live):
    """The kit's own live backend (its Serper + Jina client) against the service, over HTTP."""
    from kit.web.fetch import HttpFetcher
    from kit.web.live import SerperBackend

    backend = SerperBackend(api_key=KEY, base_url=live, reader_base_url=f"{live}/r", reader_api_key=KEY,
                            fetcher=HttpFetcher(allow_private_hosts=["127.0.0.1"]))
    try:
        hits, images = await asyncio.gather(backend.search("Ray Charles", 3), backend.image_search("Ray Charles", 2))
        page = await backend.fetch(hits[0].url)
    finally:
        await backend.aclose()
    assert len(hits) == 3 and all(h.date is None for h in hits) and len(images) == 2
    assert page.title == hits[0].title and len(page.markdown) > 1000
