"""Jina search as ``https://s.jina.ai/<query>`` is called (issue 28): ``GET /s/<query>``, ``GET /s?q=`` and
``POST /s`` answer the local web's top hits with each page read, in Jina's text blocks, JSON envelope or event
stream; bad requests are Jina-shaped 4xx; the TLS host router's ``s.jina.ai`` traffic lands here."""

from __future__ import annotations

import httpx
import pytest

from kit.serve.web_cli import build_app

KEY = "test-key-123"
MAXI = "wikipedia_en_ray_charles_maxi_2023-09"


@pytest.fixture(scope="module")
def served(data_dir, tmp_path_factory):
    cache = tmp_path_factory.mktemp("jsearch") / "cache.sqlite"
    return build_app([str(data_dir / "zim" / f"{MAXI}.zim")], api_key=KEY, cache_path=str(cache))[0]


def _client(app, **headers) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver",
                             headers={"Authorization": f"Bearer {KEY}", **headers})


async def test_the_three_request_forms_answer_the_same_pages(served):
    async with _client(served, Accept="application/json") as c:
        a = (await c.get("/s/Genius%20Loves%20Company")).json()
        b = (await c.get("/s", params={"q": "Genius Loves Company"})).json()
        p = (await c.post("/s", json={"q": "Genius Loves Company"})).json()
    assert a["code"] == 200 and a["status"] == 20000 and 1 <= len(a["data"]) <= 5
    assert [d["url"] for d in a["data"]] == [d["url"] for d in b["data"]] == [d["url"] for d in p["data"]]
    first = a["data"][0]
    assert first["url"].startswith("http://testserver/zim/") and "Ray Charles" in first["content"]
    assert first["description"] and first["usage"]["tokens"] > 0


async def test_text_blocks_event_stream_count_and_options(served):
    async with _client(served) as c:
        text = (await c.get("/s/Ray%20Charles%20piano", params={"num": 2})).text
        bare = (await c.get("/s/Ray%20Charles%20piano", params={"num": 2},
                            headers={"X-Retain-Images": "none", "X-Return-Format": "text"})).text
        sse = await c.get("/s/Ray%20Charles", headers={"Accept": "text/event-stream"}, params={"count": 1})
    assert text.startswith("[1] Title: ") and "[2] URL Source: " in text and "[3] Title" not in text
    assert "[1] Markdown Content:" in text and "](http://testserver/zim/" in text
    assert "[1] Content:" in bare and "![" not in bare
    assert sse.headers["content-type"].startswith("text/event-stream") and sse.text.count("event: data") == 1


@pytest.mark.parametrize("path,params,match", [
    ("/s", {}, "no query"), ("/s/x", {"num": 0}, "from 1 to"), ("/s/x", {"num": "many"}, "integer"),
    ("/s/x", {"gl": "us"}, "unknown field"), ("/s/" + "q" * 1001, {}, "over the 1000")])
async def test_bad_search_requests_are_jina_shaped_400(served, path, params, match):
    async with _client(served) as c:
        r = await c.get(path, params=params)
    body = r.json()
    assert r.status_code == 400 and body["name"] == "ParamValidationError" and match in body["message"], body


async def test_the_key_is_required(served):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=served), base_url="http://testserver") as c:
        r = await c.get("/s/Ray%20Charles")
    assert r.status_code == 401 and r.json()["name"] == "AuthenticationFailedError"
