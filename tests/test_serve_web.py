"""serve-web (issue 17 part 6): the local web as a Serper/Jina-compatible HTTP service.

The kit's own live backend (:class:`kit.web.live.SerperBackend`) runs the same contract checks against
the recorded/constructed Serper answers (replayed as in tests/test_live_backend.py) and against this
service; peers' plain-httpx usage runs against a real uvicorn server on a loopback port; every kind of
bad request answers a 4xx JSON error.
"""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time

import httpx
import pytest

from kit.serve.web_cli import build_app, check_bind, is_loopback
from kit.serve.web_service import RateLimiter, ServiceLimits, create_app, local_url, service_url
from kit.types import SearchHit
from kit.web.fetch import HttpFetcher
from kit.web.live import SerperBackend
from tests.test_live_backend import _image_web, _load, _retry, _serper

MAXI = "wikipedia_en_ray_charles_maxi_2023-09"
KEY = "test-key"
BASE = "http://testserver"


@pytest.fixture(scope="module")
def served(data_dir, tmp_path_factory):
    """(app, web) over the maxi archive with a read-write tool cache in front and a key required."""
    cache = tmp_path_factory.mktemp("serve_web") / "cache.sqlite"
    return build_app([str(data_dir / "zim" / f"{MAXI}.zim")], api_key=KEY, cache_path=str(cache))


def _client(app, **kw) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE,
                             headers={"X-API-KEY": KEY}, **kw)


class _Recorder(httpx.AsyncBaseTransport):
    """Wraps a transport and keeps every (request, response JSON) pair it carried."""

    def __init__(self, inner: httpx.AsyncBaseTransport):
        self.inner, self.seen = inner, []

    async def handle_async_request(self, request):
        resp = await self.inner.handle_async_request(request)
        body = await resp.aread()
        self.seen.append((request, body))
        return httpx.Response(resp.status_code, headers=resp.headers, content=body, request=request)


def _backend(source: str, served, api: dict | None = None, **kw) -> tuple[SerperBackend, list]:
    """SerperBackend over the recorded answers (``api``: endpoint -> Serper JSON) or over the service;
    returns it with the list of (request, raw answer) pairs the API client saw."""
    if source == "recorded":
        backend, seen = _serper(api or {}, _image_web(), **kw)
        return backend, _Lazy(seen, api or {})
    app, _ = served
    rec = _Recorder(httpx.ASGITransport(app=app))
    fetcher = HttpFetcher(transport=httpx.ASGITransport(app=app), allow_private_hosts=["testserver"], retry=_retry())
    backend = SerperBackend(api_key=KEY, base_url=BASE, transport=rec, fetcher=fetcher, retry=_retry(),
                            reader_base_url=f"{BASE}/r", reader_api_key=KEY, **kw)
    return backend, _Lazy(rec.seen, None)


class _Lazy(list):
    """(request, answer JSON) pairs, read when the test asks (the backend appends while it runs)."""

    def __init__(self, seen, fixtures):
        super().__init__()
        self._seen, self._fixtures = seen, fixtures

    def pairs(self):
        if self._fixtures is not None:
            return [(r, self._fixtures[r.url.path.strip("/")]) for r in self._seen]
        return [(r, json.loads(body)) for r, body in self._seen]


SOURCES = ["recorded", "local service"]


# ============================================================================ contract: live backend on both
@pytest.mark.parametrize("source", SOURCES)
async def test_search_contract(source, served):
    fixture = _load("search_jodrell_bank.json")
    query = fixture["searchParameters"]["q"] if source == "recorded" else "Ray Charles piano"
    backend, seen = _backend(source, served, {"search": fixture})
    hits = await backend.search(query, 5)
    await backend.aclose()
    (request, answer), = seen.pairs()
    assert request.url.path == "/search" and request.headers["x-api-key"] == KEY
    assert json.loads(request.content) == {"q": query, "num": 5, "gl": "us", "hl": "en"}
    assert answer["searchParameters"]["q"] == query and answer["searchParameters"]["num"] == 5
    organic = answer["organic"]
    assert [o["position"] for o in organic] == list(range(1, len(organic) + 1))
    assert 0 < len(hits) <= 5 and all(isinstance(h, SearchHit) for h in hits)
    assert [(h.title, h.url, h.snippet) for h in hits] == [(o["title"], o["link"], o["snippet"]) for o in organic][:5]
    assert all(h.url.startswith("https://" if source == "recorded" else f"{BASE}/zim/{MAXI}/A/") for h in hits)


@pytest.mark.parametrize("source", SOURCES)
async def test_image_search_contract(source, served):
    backend, seen = _backend(source, served, {"images": _load("images_lovell.json")})
    hits = await backend.image_search("Lovell Telescope" if source == "recorded" else "Ray Charles", 4)
    await backend.aclose()
    (_, answer), = seen.pairs()
    items = answer["images"][:4]
    assert len(hits) == 4
    assert [(h.title, h.image_url, h.page_url, h.domain) for h in hits] == \
        [(i["title"], i["imageUrl"], i["link"], i["domain"]) for i in items]
    localized = [h for h in hits if h.content is not None]
    assert localized and all(h.mime.startswith("image/") for h in localized)  # thumbnails were downloaded


@pytest.mark.parametrize("source", SOURCES)
async def test_reverse_image_search_contract(source, served):
    if source == "recorded":
        async def uploader(data: bytes) -> str:
            return "https://img.example-host.test/q/abc123.png"
        query = b"any image bytes: the recorded answer does not depend on them"
    else:
        app, web = served
        async with _client(app) as c:  # a real image of the archive, uploaded to the service
            img = (await c.post("/images", json={"q": "Ray Charles", "num": 1})).json()["images"][0]
            query = (await c.get(img["imageUrl"].removeprefix(BASE))).content

        async def uploader(data: bytes) -> str:
            async with _client(app) as c:
                return (await c.post("/upload", content=data, headers={"content-type": "image/webp"})).json()["url"]
    backend, seen = _backend(source, served, {"lens": _load("lens_lovell.json")}, image_uploader=uploader)
    result = await backend.reverse_image_search(query, 5)
    await backend.aclose()
    (request, answer), = seen.pairs()
    assert request.url.path == "/lens" and json.loads(request.content)["url"].startswith(("https://", f"{BASE}/uploads/"))
    links = list(dict.fromkeys(o["link"] for o in answer["organic"] + answer.get("visual_matches", [])))
    assert [p.url for p in result.pages] == links[:5] and result.pages
    by_link = {o["link"]: o for o in answer["organic"] + answer.get("visual_matches", [])}
    with_image = {link for link, o in by_link.items() if o.get("imageUrl") or o.get("thumbnailUrl")}
    assert [t.page_url for t in result.thumbnails] == [p.url for p in result.pages if p.url in with_image]
    assert any(t.content is not None for t in result.thumbnails)
    assert result.knowledge_graph is not None and result.knowledge_graph.title == answer["knowledgeGraph"]["title"]
    if source == "local service":  # the archive's own image finds its own page first
        assert result.pages[0].url == img["link"]


@pytest.mark.parametrize("source", SOURCES)
async def test_fetch_through_reader_contract(source, served):
    if source == "recorded":
        recorded = _load("reader_jodrell_bank.json")["pages"]
        url = "https://en.wikipedia.org/wiki/Lovell_Telescope"
        text = recorded[url]["reader_text"]
        img = "https://upload.wikimedia.org/wikipedia/commons/thumb/d/d3/Lovell_Telescope_5.jpg/330px-Lovell_Telescope_5.jpg?utm_source=en.wikipedia.org&utm_campaign=parser&utm_content=thumbnail"
        web = _image_web()
        web.pages[img] = (200, {"content-type": "image/jpeg"}, _jpeg())
        from tests.test_live_backend import _fetcher
        backend = SerperBackend(api_key="k", transport=httpx.MockTransport(lambda r: httpx.Response(200, text=text)),
                                fetcher=_fetcher(web), reader_base_url="https://r.jina.ai", retry=_retry())
    else:
        backend, _ = _backend(source, served)
        url = (await backend.search("Ray Charles", 1))[0].url
    page = await backend.fetch(url)
    await backend.aclose()
    assert page.url == url and page.title and "Markdown Content:" not in page.markdown
    assert len(page.markdown) > 1000 and any(i.content is not None and i.mime.startswith("image/") for i in page.images)


def _jpeg() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (330, 248), (10, 120, 200)).save(buf, format="JPEG")
    return buf.getvalue()


# ============================================================================ peers: plain httpx, real server
@pytest.fixture(scope="module")
def live_server(served):
    """The service on a real loopback port (uvicorn in a thread, port 0)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(served[0], host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started
    yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    server.should_exit = True
    thread.join(5)


def test_peer_style_plain_httpx_client(live_server):
    """What MMSearch-R1-style code does: POST base/search with the key header, GET the reader."""
    with httpx.Client(base_url=live_server, headers={"X-API-KEY": KEY, "Content-Type": "application/json"}) as c:
        r = c.post("/search", content=json.dumps({"q": "Ray Charles", "num": 3}))
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        organic = r.json()["organic"]
        assert len(organic) == 3 and organic[0]["link"].startswith(f"{live_server}/zim/{MAXI}/")
        page = c.get(f"/r/{organic[0]['link']}", headers={"Accept": "application/json"}).json()["data"]
        assert page["title"] == organic[0]["title"] and page["url"] == organic[0]["link"]
        assert f"{live_server}/zim/{MAXI}/" in page["content"] and "zim://" not in page["content"]
        assert c.post("/search", json={"q": "Ray Charles"}, headers={"X-API-KEY": "wrong"}).status_code == 403
        entry = httpx.get(organic[0]["link"])  # links open without the key (browsers, image downloaders)
        assert entry.status_code == 200 and entry.headers["content-security-policy"] == "sandbox"


# ============================================================================ cache in front
async def test_exact_match_cache_in_front(served):
    app, _ = served
    async with _client(app) as c:
        before = (await c.get("/health")).json()["cache"]
        first = (await c.post("/search", json={"q": "Georgia on My Mind  ", "num": 2})).json()
        again = (await c.post("/search", json={"q": "georgia on my mind", "num": 2})).json()  # same normalized key
        after = (await c.get("/health", headers={"X-API-KEY": ""})).json()["cache"]  # health needs no key
    assert first["organic"] == again["organic"]
    assert after["hits"] - before["hits"] == 1 and after["writes"] - before["writes"] == 1


# ============================================================================ bad input -> 4xx JSON
@pytest.mark.parametrize("method,path,kw,status,match", [
    ("POST", "/search", {"content": b"{not json"}, 400, "malformed JSON"),
    ("POST", "/search", {"json": ["q"]}, 400, "must be an object"),
    ("POST", "/search", {"json": {}}, 400, "q: Field required"),
    ("POST", "/search", {"json": {"q": "   "}}, 400, "q: String should have at least 1"),
    ("POST", "/search", {"json": {"q": "x", "num": 0}}, 400, "num: Input should be greater"),
    ("POST", "/search", {"json": {"q": "x", "num": 101}}, 400, "num: Input should be less"),
    ("POST", "/images", {"json": {"q": ["list"]}}, 400, "q: Input should be a valid string"),
    ("POST", "/lens", {"json": {}}, 400, "url: Field required"),
    ("POST", "/lens", {"json": {"url": "https://example.com/cat.jpg"}}, 400, "only images of the local archives"),
    ("POST", "/lens", {"json": {"url": f"{BASE}/zim/{MAXI}/A/Ray_Charles"}}, 400, "not an image"),
    ("POST", "/lens", {"json": {"url": f"{BASE}/uploads/0000"}}, 404, "no uploaded image"),
    ("POST", "/lens", {"content": b"GIF89a-garbage", "headers": {"content-type": "image/gif"}}, 422, "image"),
    ("POST", "/lens", {"content": b"x", "headers": {"content-type": "text/csv"}}, 415, "unsupported content type"),
    ("POST", "/lens", {"files": {"other": ("a.png", b"x")}}, 400, "field named 'image'"),
    ("POST", "/search", {"content": b"x" * 2048}, 413, "over the 1024-byte limit"),
    ("GET", "/r/https://example.com/private", {}, 422, "cannot fetch https://example.com/private"),
    ("GET", "/r/http://169.254.169.254/latest/meta-data", {}, 422, "cannot fetch"),
    ("GET", f"/zim/{MAXI}/A/No_Such_Article", {}, 404, "not found"),
    ("GET", "/r/", {}, 400, "no URL: GET /r/<url>"),
    ("GET", "/nowhere", {}, 404, "no route GET /nowhere"),
    ("PUT", "/search", {}, 405, "method PUT not allowed"),
    ("POST", "/search", {"content": b"[" * 100_000 + b"]" * 100_000}, 400, "nested too deeply"),
    ("POST", "/search", {"json": {"q": "x", "num": True}}, 400, "num: Value error, must be an integer, not a boolean"),
    ("POST", "/images", {"json": {"q": "x", "num": False}}, 400, "not a boolean"),
    ("POST", "/lens", {"json": {"url": f"{BASE}/zim/{MAXI}/I/x.png", "num": True}}, 400, "not a boolean"),
    ("POST", "/search", {"json": {"q": "ray " * 600}}, 400, "q: String should have at most 2048 characters"),
    # an unclosed IPv6 bracket made urlsplit raise: a 500 before
    ("GET", "/r/https://[::1/x", {}, 422, "malformed URL"),
    ("POST", "/lens", {"json": {"url": "https://[::1/x"}}, 400, "malformed URL"),
    # only images are hosted (they are kept in memory)
    ("POST", "/upload", {"content": b"not an image at all", "headers": {"content-type": "image/png"}}, 400,
     "not an image the local web can search by"),
])
async def test_bad_requests_answer_4xx_json(served, method, path, kw, status, match):
    app = create_app(served[1], api_key=KEY, limits=ServiceLimits(max_body_bytes=1024 if status == 413 else 1 << 20))
    async with _client(app) as c:
        r = await c.request(method, path, **kw)
    assert r.status_code == status, r.text
    body = r.json()
    assert body["statusCode"] == status and match in body["message"] and "Traceback" not in r.text


async def test_chunked_oversized_body_is_refused_without_content_length(served):
    app = create_app(served[1], limits=ServiceLimits(max_body_bytes=1024))

    async def chunks():
        for _ in range(4):
            yield b"x" * 512

    async with _client(app) as c:
        r = await c.post("/lens", content=chunks(), headers={"content-type": "image/png"})
    assert r.status_code == 413 and "over the 1024-byte limit" in r.json()["message"]


async def test_missing_or_wrong_key_is_403_and_an_internal_failure_is_a_json_500(served):
    class Broken:
        name = "broken"

        async def search(self, q, n):
            raise RuntimeError("secret internals")

    app = create_app(served[1], Broken(), api_key=KEY)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url=BASE) as c:
        assert (await c.post("/search", json={"q": "x"})).json() == {"message": "Unauthorized.", "statusCode": 403}
        r = await c.post("/search", json={"q": "x"}, headers={"X-API-KEY": KEY})
        assert (await c.post("/search", json={"q": "x"}, headers={"Authorization": f"Bearer {KEY}"})).status_code == 500
    assert r.status_code == 500 and "RuntimeError" in r.json()["message"] and "secret" not in r.text


async def test_rate_bound_per_client(served):
    app = create_app(served[1], limits=ServiceLimits(rate_per_s=0.5, burst=2))
    async with _client(app) as c:
        codes = [(await c.post("/search", json={"q": "Ray Charles", "num": 1})).status_code for _ in range(3)]
        r = await c.post("/search", json={"q": "Ray Charles"})
        other = await c.post("/search", json={"q": "Ray Charles", "num": 1}, headers={"X-API-KEY": "another client"})
    assert codes == [200, 200, 429] and r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert "rate limit" in r.json()["message"] and other.status_code == 200
    clock = [0.0]
    limiter = RateLimiter(2.0, 1, clock=lambda: clock[0])
    assert limiter.wait_s("a") == 0 and limiter.wait_s("a") == pytest.approx(0.5)
    clock[0] = 0.5
    assert limiter.wait_s("a") == 0  # refilled at 2 tokens/s


# ============================================================================ binding, URLs, CLI
def test_loopback_by_default_and_a_key_for_any_other_address(data_dir, capsys):
    from kit.cli import build_parser, main

    args = build_parser().parse_args(["serve-web", "a.zim"])
    assert args.host == "127.0.0.1" and args.api_key is None
    assert all(is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.5", "example.org"))
    check_bind("127.0.0.1", None)
    check_bind("0.0.0.0", "k")
    with pytest.raises(ValueError, match="without an API key"):
        check_bind("0.0.0.0", None)
    # the CLI refuses before loading anything or opening a port
    assert main(["serve-web", str(data_dir / "zim" / f"{MAXI}.zim"), "--host", "0.0.0.0"]) == 2
    assert "refusing to serve on '0.0.0.0' without an API key" in capsys.readouterr().err
    assert main(["serve-web", "a.zim", "--rate", "-1"]) == 2


def test_service_and_local_urls_round_trip():
    z = f"zim://{MAXI}/A/Moby%20Dick%3F.html"
    s = service_url(z, "http://lb:80")
    assert s == f"http://lb:80/zim/{MAXI}/A/Moby%20Dick%3F.html" and local_url(s) == z
    assert local_url("https://en.wikipedia.org/wiki/Ray_Charles") == "https://en.wikipedia.org/wiki/Ray_Charles"
    assert service_url("https://x.org/a", "http://lb") == "https://x.org/a"


async def test_public_url_names_the_links_and_concurrent_clients_share_one_app(served):
    app = create_app(served[1], limits=ServiceLimits(), public_url="http://search.lb.internal:9000/")
    async with _client(app) as c:
        answers = await asyncio.gather(*(c.post("/search", json={"q": q, "num": 2})
                                         for q in ["Ray Charles", "soul music", "Genius"] * 8))
    assert all(a.status_code == 200 for a in answers)
    assert all(o["link"].startswith(f"http://search.lb.internal:9000/zim/{MAXI}/") for a in answers for o in a.json()["organic"])


async def test_page_fetch_never_touches_the_network(served, monkeypatch):
    """An external URL through the reader and the lens: 4xx JSON, and no DNS look-up or connection."""
    import socket

    def no_network(*a, **k):
        raise AssertionError(f"network access attempted: {a!r}")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    async with _client(served[0]) as c:
        page = await c.get("/r/https://en.wikipedia.org/wiki/Ray_Charles")  # in the archive: served locally
        missing = await c.get("/r/https://en.wikipedia.org/wiki/Not_In_Any_Archive_Xyz")
        external = await c.get("/r/https://example.org/")
        lens = await c.post("/lens", json={"url": "https://example.org/cat.png"})
    assert page.status_code == 200 and page.text.startswith("Title: Ray Charles\n")
    assert (missing.status_code, external.status_code, lens.status_code) == (422, 422, 400)  # Jina: unreachable


# ============================================================================ hardening (attack findings)
def test_query_bound_is_the_harness_tool_schema():
    """One bound for a query, in kit.harness.tool_spec: the harness's web_search schema (which the MCP server
    copies) and serve-web's request model both read it."""
    from kit.harness.tool_spec import MAX_QUERY_CHARS, MAX_URL_CHARS
    from kit.harness.tools import NATIVE_TOOLS
    from kit.serve.web_service import LensRequest, SearchRequest

    def max_length(model, name):
        return next(m.max_length for m in model.model_fields[name].metadata if hasattr(m, "max_length"))

    assert max_length(SearchRequest, "q") == MAX_QUERY_CHARS
    assert max_length(LensRequest, "url") == MAX_URL_CHARS
    one, many = NATIVE_TOOLS["web_search"].parameters["properties"]["query"]["anyOf"]
    assert one["maxLength"] == many["items"]["maxLength"] == MAX_QUERY_CHARS


async def test_bearer_scheme_is_case_insensitive(served):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=served[0]), base_url=BASE) as c:
        codes = [(await c.post("/search", json={"q": "Ray Charles", "num": 1},
                               headers={"Authorization": f"{scheme} {KEY}"})).status_code
                 for scheme in ("Bearer", "bearer", "BEARER", "Basic")]
    assert codes == [200, 200, 200, 403]


def test_a_key_no_client_can_send_is_refused_at_start(served, capsys):
    from kit.cli import main
    from kit.serve.auth import key_matches, request_key

    for bad in ("clé", "two words", "tab\tkey", ""):
        with pytest.raises(ValueError, match="api_key"):
            create_app(served[1], api_key=bad)
    # the CLI refuses before loading any archive ("a.zim" does not exist: it is never opened)
    assert main(["serve-web", "a.zim", "--api-key", "clé"]) == 2
    assert "--api-key may hold only visible ASCII" in capsys.readouterr().err
    # keys are compared as the bytes a client sent
    assert request_key([(b"Authorization", b"bEaReR  k\xc3\xa9 ")]) == "ké".encode()
    assert key_matches([(b"x-api-key", b"s3cret")], "s3cret") and not key_matches([], "s3cret")


def test_missing_or_corrupt_archive_is_exit_2_without_traceback(tmp_path, capsys):
    from kit.cli import main

    (tmp_path / "cut.zim").write_bytes(b"ZIM\x04 truncated")
    for path, says in ((tmp_path / "nope.zim", "does not exist"), (tmp_path / "cut.zim", "cannot open ZIM archive")):
        assert main(["serve-web", str(path), "--index-dir", str(tmp_path / "idx"), "--cache-mode", "off"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("serve-web: ") and says in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [["--port", "99999"], ["--port", "-1"], ["--port", "http"],
                                  ["--max-body-bytes", "0"], ["--burst", "0"]])
def test_bad_numbers_are_argparse_errors(argv, capsys):
    from kit.cli import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["serve-web", "a.zim", *argv])
    assert e.value.code == 2 and "usage:" in capsys.readouterr().err


async def test_every_archive_entry_is_sandboxed(served):
    """Not only text/html: an image (SVG can carry script), JS or XML entry gets the CSP sandbox and nosniff."""
    async with _client(served[0]) as c:
        hit = (await c.post("/images", json={"q": "Ray Charles", "num": 1})).json()["images"][0]
        image = await c.get(hit["imageUrl"].removeprefix(BASE))
        page = await c.get(f"/zim/{MAXI}/A/Ray_Charles")
    assert image.status_code == 200 and image.headers["content-type"].startswith("image/")
    for r in (image, page):
        assert r.headers["content-security-policy"] == "sandbox" and r.headers["x-content-type-options"] == "nosniff"
