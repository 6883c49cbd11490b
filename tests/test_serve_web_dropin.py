"""serve-web as a drop-in for Serper and Jina Reader (issue 28 parts 1 and 2): requests as their clients send
them (JSON, form, query string; GET and POST; the reader's four forms and its headers), answers in their
shapes, and every bad request a 4xx in the route family's error shape, never a 5xx or a file outside the
archives."""

from __future__ import annotations

import json
from urllib.parse import quote

import httpx
import pytest

from kit.serve.web_cli import build_app
from kit.serve.web_service import create_app
from kit.types import SearchHit

MAXI = "wikipedia_en_ray_charles_maxi_2023-09"
KEY = "dropin-key"
BASE = "http://testserver"
WIKI = "https://en.wikipedia.org/wiki/Ray_Charles"


@pytest.fixture(scope="module")
def served(data_dir, tmp_path_factory):
    cache = tmp_path_factory.mktemp("dropin") / "cache.sqlite"
    return build_app([str(data_dir / "zim" / f"{MAXI}.zim")], api_key=KEY, cache_path=str(cache))


def _client(app, **headers) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE,
                             headers={"X-API-KEY": KEY, **headers})


def _links(answer: dict, key: str = "organic") -> list[str]:
    return [o["imageUrl" if key == "images" else "link"] for o in answer[key]]  # an image's page may repeat


def _is_serper_error(r: httpx.Response, status: int) -> bool:
    body = r.json()
    return r.status_code == status and set(body) == {"message", "statusCode"} and body["statusCode"] == status


def _is_jina_error(r: httpx.Response, status: int) -> bool:
    body = r.json()
    return (r.status_code == status and body["data"] is None and body["code"] == status
            and body["status"] // 100 == status and body["readableMessage"].startswith(body["name"] + ": ")
            and body["message"] and body["statusCode"] == status)


# ============================================================================ Serper: parameters
@pytest.mark.parametrize("endpoint,key", [("search", "organic"), ("images", "images")])
async def test_serper_params_from_json_form_and_query_string_on_get_and_post(served, endpoint, key):
    params = {"q": "Ray Charles piano", "num": "4", "gl": "us", "hl": "en"}
    async with _client(served[0]) as c:
        answers = {
            "POST json": await c.post(f"/{endpoint}", json={**params, "num": 4}),
            "POST form": await c.post(f"/{endpoint}", data=params),
            # LangChain's GoogleSerperAPIWrapper: params in the query string, a JSON content type, no body
            "POST query": await c.post(f"/{endpoint}", params=params, headers={"Content-Type": "application/json"}),
            "GET query": await c.get(f"/{endpoint}", params=params),
            "GET apiKey": await c.get(f"/{endpoint}", params={**params, "apiKey": KEY}, headers={"X-API-KEY": ""}),
        }
    assert {k: r.status_code for k, r in answers.items()} == dict.fromkeys(answers, 200)
    first = answers["POST json"].json()
    assert len(first[key]) == 4
    for r in answers.values():
        body = r.json()
        assert [(i["title"], i["link"]) for i in body[key]] == [(i["title"], i["link"]) for i in first[key]]
        assert body["searchParameters"] == {"q": "Ray Charles piano", "gl": "us", "hl": "en", "type": endpoint,
                                            "num": 4, "engine": "mmsearch-kit-local"}


async def test_lens_takes_its_url_from_json_form_or_query_string(served):
    async with _client(served[0]) as c:
        img = (await c.post("/images", json={"q": "Ray Charles", "num": 1})).json()["images"][0]["imageUrl"]
        answers = [await c.post("/lens", json={"url": img, "num": 3}),
                   await c.post("/lens", data={"url": img, "num": "3"}),
                   await c.post("/lens", params={"url": img, "num": 3}, headers={"Content-Type": "application/json"}),
                   await c.get("/lens", params={"url": img, "num": 3})]
    assert [r.status_code for r in answers] == [200] * 4
    assert len({json.dumps(r.json()["organic"]) for r in answers}) == 1 and answers[0].json()["organic"]
    assert answers[0].json()["searchParameters"] == {"url": img, "type": "lens", "num": 3,
                                                    "engine": "mmsearch-kit-local"}


async def test_search_parameters_echo_only_what_was_given(served):
    async with _client(served[0]) as c:
        bare = (await c.post("/search", json={"q": "Ray Charles"})).json()["searchParameters"]
        full = (await c.post("/search", json={"q": "Ray Charles", "gl": "de", "hl": "de", "num": 2, "page": 2,
                                              "location": "Berlin, Germany", "autocorrect": False})).json()
    assert bare == {"q": "Ray Charles", "type": "search", "engine": "mmsearch-kit-local"}
    assert list(full["searchParameters"].items()) == [
        ("q", "Ray Charles"), ("gl", "de"), ("hl", "de"), ("location", "Berlin, Germany"), ("type", "search"),
        ("num", 2), ("page", 2), ("autocorrect", False), ("engine", "mmsearch-kit-local")]


@pytest.mark.parametrize("endpoint,key", [("search", "organic"), ("images", "images")])
async def test_page_paginates_deterministically_without_repeats(served, endpoint, key):
    async with _client(served[0]) as c:
        pages = [(await c.post(f"/{endpoint}", json={"q": "Ray Charles", "num": 3, "page": p})).json()
                 for p in (1, 2, 3)]
        whole = (await c.post(f"/{endpoint}", json={"q": "Ray Charles", "num": 9})).json()
        again = (await c.post(f"/{endpoint}", json={"q": "Ray Charles", "num": 3, "page": 2})).json()
    links = [_links(p, key) for p in pages]
    assert all(len(x) == 3 for x in links) and len({u for x in links for u in x}) == 9  # never a repeat
    assert sum(links, []) == _links(whole, key) and _links(again, key) == links[1]
    assert [[i["position"] for i in p[key]] for p in pages] == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]


async def test_a_page_past_the_ranked_depth_is_empty_not_a_repeat(served):
    async with _client(served[0]) as c:
        r = await c.post("/search", json={"q": "Ray Charles", "num": 100, "page": 11})
    assert r.status_code == 200 and r.json()["organic"] == []


async def test_date_is_never_the_archive_snapshot_date(served):
    """A 1958 album page was not published on the day the archive was made (2023-09-04)."""
    app, web = served
    assert web.archives[0].date == "2023-09-04"
    async with _client(app) as c:
        organic = (await c.post("/search", json={"q": "Ray Charles 1958 album", "num": 10})).json()["organic"]
    assert organic and all("date" not in o for o in organic)

    class Dated:  # a backend whose pages state their own dates (as a live one may): those are kept
        name = "dated"

        async def search(self, q, n):
            return [SearchHit(title="a", url=f"zim://{MAXI}/A/a", snippet="s", date="1958-07-05"),
                    SearchHit(title="b", url=f"zim://{MAXI}/A/b", snippet="s", date="2023-09-04")]

    async with _client(create_app(web, Dated(), api_key=KEY)) as c:
        organic = (await c.post("/search", json={"q": "x", "num": 2})).json()["organic"]
    assert organic[0]["date"] == "1958-07-05" and "date" not in organic[1]


async def test_batch_of_queries_answers_one_result_each(served):
    async with _client(served[0]) as c:
        r = await c.post("/search", json=[{"q": "Ray Charles", "num": 2}, {"q": "Genius Loves Company", "num": 1}])
        one = (await c.post("/search", json={"q": "Genius Loves Company", "num": 1})).json()
    assert r.status_code == 200 and [len(a["organic"]) for a in r.json()] == [2, 1]
    assert r.json()[1]["organic"] == one["organic"]


@pytest.mark.parametrize("endpoint", ["news", "scholar", "places", "videos", "shopping", "autocomplete", "maps"])
async def test_unserved_serper_endpoints_are_a_serper_shaped_404_naming_the_served_ones(served, endpoint):
    async with _client(served[0]) as c:
        for r in (await c.post(f"/{endpoint}", json={"q": "Ray Charles"}),
                  await c.get(f"/{endpoint}", params={"q": "Ray Charles"})):
            assert _is_serper_error(r, 404)
            assert f"Serper's /{endpoint} is not served" in r.json()["message"]
            assert "/search, /images and /lens" in r.json()["message"]


@pytest.mark.parametrize("method,path,kw,status,match", [
    ("POST", "/search", {"json": {"q": "x", "colour": "red"}}, 400, "unknown parameter 'colour'"),
    ("GET", "/search", {"params": {"q": "x", "foo": "1"}}, 400, "unknown parameter 'foo'"),
    ("POST", "/images", {"data": {"q": "x", "bar": "1"}}, 400, "unknown parameter 'bar'"),
    ("POST", "/lens", {"json": {"url": "x", "q": "y"}}, 400, "unknown parameter 'q'"),
    ("POST", "/search", {"json": {"q": "x", "type": "news"}}, 400, "does not match the endpoint"),
    ("GET", "/search", {"params": {"q": "x", "num": "ten"}}, 400, "num: Input should be a valid integer"),
    ("GET", "/search", {"params": {"q": "x", "page": "0"}}, 400, "page: Input should be greater"),
    ("POST", "/search", {"json": {"q": "x", "page": 101}}, 400, "page: Input should be less"),
    ("POST", "/search", {"json": {"q": "x", "page": True}}, 400, "not a boolean"),
    ("GET", "/search", {"params": {"q": "ray " * 600}}, 400, "q: String should have at most 2048"),
    ("GET", "/search", {}, 400, "q: Field required"),
    ("GET", "/search?q=a&q=b", {}, 400, "parameter 'q' given twice"),
    ("POST", "/search", {"content": b"q=%ff%fe", "headers": {"content-type": "application/x-www-form-urlencoded"}},
     400, "form body is not UTF-8"),
    ("POST", "/search", {"content": b"<q>x</q>", "headers": {"content-type": "application/xml"}}, 415,
     "unsupported content type"),
    ("POST", "/search", {"json": []}, 400, "empty batch"),
    ("POST", "/search", {"json": [{"q": "x"}] * 101}, 400, "over the limit of 100"),
    ("POST", "/search", {"json": "q"}, 400, "must be an object"),
    ("POST", "/search", {"content": b"{\"q\": \"x\"," * 3}, 400, "malformed JSON"),
    ("POST", "/lens", {"json": [{"url": "x"}]}, 400, "one image at a time"),
    ("POST", "/search", {"content": "&".join(f"k{i}=v" for i in range(200)).encode(),
                         "headers": {"content-type": "application/x-www-form-urlencoded"}}, 400, "form body"),
])
async def test_bad_serper_requests_are_serper_shaped_4xx(served, method, path, kw, status, match):
    async with _client(served[0]) as c:
        r = await c.request(method, path, **kw)
    assert _is_serper_error(r, status), r.text
    assert match in r.json()["message"]


# ============================================================================ Jina reader
async def test_reader_request_forms_read_the_same_page(served):
    async with _client(served[0]) as c:
        answers = {
            "GET /r/<url>": await c.get(f"/r/{WIKI}"),
            "GET /<url>": await c.get(f"/{WIKI}"),
            "GET /<encoded url>": await c.get(f"/{quote(WIKI, safe='')}"),
            "POST / json": await c.post("/", json={"url": WIKI}),
            "POST /r json": await c.post("/r", json={"url": WIKI}),
            "POST / form": await c.post("/", data={"url": WIKI}),
            "POST /r/ json": await c.post("/r/", json={"url": WIKI}),
        }
    assert {k: r.status_code for k, r in answers.items()} == dict.fromkeys(answers, 200)
    texts = {r.text for r in answers.values()}
    assert len(texts) == 1
    text = texts.pop()
    assert text.startswith(f"Title: Ray Charles\n\nURL Source: {BASE}/zim/{MAXI}/A/Ray_Charles\n\nMarkdown Content:\n")
    assert all(r.headers["content-type"].startswith("text/plain") for r in answers.values())


async def test_reader_return_formats_and_retain_images(served):
    async with _client(served[0]) as c:
        md = (await c.get(f"/r/{WIKI}", headers={"X-Return-Format": "markdown"})).text
        text = (await c.get(f"/r/{WIKI}", headers={"X-Return-Format": "text"})).text
        html = (await c.get(f"/r/{WIKI}", headers={"X-Return-Format": "HTML"})).text
        older = (await c.get(f"/r/{WIKI}", headers={"X-Respond-With": "text"})).text
        no_img = (await c.get(f"/r/{WIKI}", headers={"X-Retain-Images": "none"})).text
        html_no_img = (await c.get(f"/r/{WIKI}", headers={"X-Return-Format": "html", "X-Retain-Images": "none"})).text
        body_opt = (await c.post("/", json={"url": WIKI, "respondWith": "text"})).text
    assert "![" in md and "Markdown Content:" in md
    assert text == older == body_opt and "Ray Charles Robinson" in text and "![" not in text and "](" not in text
    assert not text.startswith("Title:")  # text and html are the content alone, as Jina answers them
    assert html.lstrip().lower().startswith("<!doctype html") and "<img" in html and "<img" not in html_no_img
    assert "![" not in no_img and "Ray Charles Robinson" in no_img and no_img.startswith("Title: Ray Charles")


async def test_reader_json_envelope_is_jinas(served):
    async with _client(served[0], Accept="application/json") as c:
        r = await c.get(f"/{WIKI}")
        t = await c.get(f"/{WIKI}", headers={"X-Return-Format": "text"})
    body = r.json()
    assert (body["code"], body["status"]) == (200, 20000) and r.headers["content-type"] == "application/json"
    data = body["data"]
    assert list(data) == ["title", "description", "url", "content", "usage"]
    assert data["title"] == "Ray Charles" and data["url"] == f"{BASE}/zim/{MAXI}/A/Ray_Charles"
    assert data["description"] == "" and data["content"].startswith("# Ray Charles")
    assert isinstance(data["usage"]["tokens"], int) and data["usage"]["tokens"] > 1000
    tdata = t.json()["data"]
    assert tdata["text"] == tdata["content"] and "![" not in tdata["content"]


async def test_reader_event_stream(served):
    async with _client(served[0]) as c:
        plain = (await c.get(f"/r/{WIKI}", headers={"Accept": "application/json"})).json()["data"]
        async with c.stream("GET", f"/r/{WIKI}", headers={"Accept": "text/event-stream"}) as r:
            raw = (await r.aread()).decode()
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    event, data = raw.split("\n", 1)
    assert event == "event: data" and data.startswith("data: ") and raw.endswith("\n\n")
    assert json.loads(data[len("data: "):]) == plain


@pytest.mark.parametrize("headers,body,match", [
    ({"X-Return-Format": "pdf"}, None, "return format 'pdf' is not supported"),
    ({"X-Return-Format": "screenshot"}, None, "no browser"),
    ({"X-Retain-Images": "some"}, None, "X-Retain-Images 'some' is not supported"),
    ({}, {"url": WIKI, "colour": "red"}, "unknown field 'colour'"),
    ({}, {"url": ["a"]}, "url must be a string"),
    ({}, {}, "no URL"),
    ({}, {"url": "https://x.org/" + "a" * 9000}, "over the 8192-character limit"),
])
async def test_bad_reader_requests_are_jina_shaped_400(served, headers, body, match):
    async with _client(served[0], **headers) as c:
        r = await (c.post("/", json=body) if body is not None else c.get(f"/r/{WIKI}"))
    assert _is_jina_error(r, 400), r.text
    assert r.json()["name"] == "ParamValidationError" and r.json()["status"] == 40001 and match in r.json()["message"]


async def test_reader_keys_bearer_raw_and_x_api_key(served):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=served[0]), base_url=BASE) as c:
        ok = [(await c.get(f"/r/{WIKI}", headers=h)).status_code
              for h in ({"Authorization": f"Bearer {KEY}"}, {"Authorization": KEY}, {"X-API-KEY": KEY})]
        bad = [await c.get(f"/{WIKI}", headers=h) for h in ({"Authorization": "Bearer nope"}, {"Authorization": "nope"},
                                                             {"Authorization": f"Basic {KEY}"}, {})]
        serper_raw = await c.post("/search", json={"q": "Ray Charles", "num": 1}, headers={"Authorization": KEY})
    assert ok == [200, 200, 200] and serper_raw.status_code == 200
    assert all(_is_jina_error(r, 401) and r.json()["name"] == "AuthenticationFailedError" for r in bad)


@pytest.mark.parametrize("path", ["/r/https://en.wikipedia.org/wiki/Not_In_Any_Archive_Xyz", "/https://example.org/",
                                  "/r/http://169.254.169.254/latest/meta-data", "/r/file:///etc/passwd",
                                  "/r/zim://..%2F..%2F..%2Fetc%2Fpasswd", f"/r/zim://{MAXI}/../../etc/passwd",
                                  "/r/gopher://127.0.0.1:70/x", "/r/data:text/html,<h1>evidence</h1>",
                                  "/http://127.0.0.1:8321/health"])
async def test_a_target_outside_the_archives_is_jinas_unreachable_target(served, path):
    """422 AssertionFailureError with no page text: a miss never reads as evidence, or as a local file."""
    async with _client(served[0]) as c:
        r = await c.get(path)
        posted = await c.post("/", json={"url": path.removeprefix("/r/").removeprefix("/")})
        dots = await c.post("/r", json={"url": "zim://../../../../etc/passwd"})  # httpx would resolve them in a path
    for a in (r, posted, dots):
        assert _is_jina_error(a, 422), a.text
        assert (a.json()["name"], a.json()["status"]) == ("AssertionFailureError", 42206)
        assert a.json()["message"].startswith("Failed to goto ") and "Title:" not in a.text and "root:" not in a.text


@pytest.mark.parametrize("method,path,kw,status", [
    ("GET", "/file:///etc/passwd", {}, 404),  # not a reader URL form: no route
    ("GET", "/zim/..%2F..%2F..%2Fetc%2Fpasswd", {}, 404),
    ("GET", f"/zim/{MAXI}/..%2F..%2Fetc%2Fpasswd", {}, 404),
    ("GET", "/r/%00%ff%fe", {}, 422),
    ("POST", "/", {"content": b"{\"url\": "}, 400),
    ("POST", "/", {"content": b"[" * 50_000}, 400),
    ("POST", "/r", {"content": b"url=%ff", "headers": {"content-type": "application/x-www-form-urlencoded"}}, 400),
    ("POST", "/", {"content": b"x", "headers": {"content-type": "image/png"}}, 415),
    ("PUT", "/r/https://en.wikipedia.org/wiki/Ray_Charles", {}, 405),
    ("POST", "/", {"json": {"url": "x" * 100}, "headers": {"content-length": str(10**9)}}, 413),
])
async def test_hostile_reader_input_is_4xx_never_5xx_or_a_file(served, method, path, kw, status):
    async with _client(served[0]) as c:
        r = await c.request(method, path, **kw)
    assert r.status_code == status, r.text
    assert "root:" not in r.text and "Traceback" not in r.text and r.json()["statusCode"] == status
