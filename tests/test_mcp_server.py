"""The MCP tool server (issue 17 part 7, kit/serve/mcp_server.py) driven by the official SDK's own client:
stdio (``python -m kit.cli serve-mcp ... --transport stdio`` spawned by ``mcp.client.stdio``) and streamable
HTTP (uvicorn in a thread on a free port, ``mcp.client.streamable_http``), over the smallest shared ZIM
archive (the French test archive: 3 articles, 264 images)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from PIL import Image

from kit.harness.tools import NATIVE_TOOLS
from kit.serve.mcp_server import EPISODE_ARG, McpToolServer, http_app, mcp_input_schema

ROOT = Path(__file__).resolve().parents[1]
FRENCH = "wikipedia_fr_test_2017-07"
IMAGE_QUERY = "Orbite héliosynchrone"  # an article of the archive with several images


@pytest.fixture(scope="module")
def zim(data_dir) -> Path:
    p = data_dir / "zim" / f"{FRENCH}.zim"
    if not p.exists():
        pytest.skip(f"shared ZIM archive missing: {p}")
    return p


@pytest.fixture(scope="module")
def web(zim):
    from kit.web.zim import LocalZimWeb

    w = LocalZimWeb([zim])
    w.ensure_ready()  # builds the index into the kit cache once; the stdio server then loads it
    return w


def _texts(result) -> list[str]:
    return [c.text for c in result.content if c.type == "text"]


def _check_images(result) -> list[str]:
    """Every ImageContent follows a text block naming its registry file; returns those file names."""
    names = []
    for i, c in enumerate(result.content):
        if c.type != "image":
            continue
        assert c.mime_type in ("image/png", "image/jpeg")
        Image.open(io.BytesIO(base64.b64decode(c.data))).load()  # real image bytes
        label = result.content[i - 1]
        assert label.type == "text" and label.text.startswith("Image "), label
        name = label.text.split()[1]
        assert f"<{name.rsplit('.', 1)[0]}>" in label.text
        names.append(name)
    assert names == [im["filename"] for im in result.structured_content["images"]]
    return names


async def _session_checks(client: Client, *, pass_episode: bool) -> None:
    """The calls both transports must answer alike."""
    listed = (await client.list_tools()).tools
    assert [t.name for t in listed] == list(NATIVE_TOOLS)
    for t in listed:
        assert t.input_schema == mcp_input_schema(NATIVE_TOOLS[t.name])
        own = dict(t.input_schema, properties={k: v for k, v in t.input_schema["properties"].items() if k != EPISODE_ARG})
        assert own == NATIVE_TOOLS[t.name].parameters  # the harness's own schema, plus the episode handle only

    r = await client.call_tool("web_search", {"query": "Warrington"})
    assert not r.is_error
    assert "## Query: Warrington" in r.content[0].text and "zim://wikipedia_fr_test_2017-07/" in r.content[0].text

    r = await client.call_tool("web_search_for_image", {"query": IMAGE_QUERY, "num": 3})
    assert not r.is_error, _texts(r)
    names = _check_images(r)
    assert names and all(n.startswith("search_image_") for n in names)
    episode = r.structured_content[EPISODE_ARG]

    args = {"image": names[0], "num": 3} | ({EPISODE_ARG: episode} if pass_episode else {})
    r = await client.call_tool("web_search_based_on_image", args)
    assert not r.is_error, _texts(r)
    assert r.structured_content[EPISODE_ARG] == episode
    assert f"## Image: {names[0]}" in r.content[0].text
    assert "Orbite_h%C3%A9liosynchrone" in r.content[0].text  # the image's own article is found
    assert _check_images(r)  # thumbnails come back as images too

    r = await client.call_tool("web_search_based_on_image", args | {"image": "/etc/passwd"})
    assert r.is_error and json.loads(r.content[0].text)["error"] == "bad_image_ref"
    r = await client.call_tool("web_extract", {"goal": "x"})
    assert r.is_error and json.loads(r.content[0].text)["error"] == "missing_argument"


def test_stdio_serve_mcp_subprocess(zim, web):
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=dict(os.environ),
                                   args=["-m", "kit.cli", "serve-mcp", str(zim), "--transport", "stdio"])

    async def main():
        async with Client(stdio_client(params), read_timeout_seconds=60) as client:
            # one stdio client: a reference from one call works in the next without a handle
            await _session_checks(client, pass_episode=False)

    asyncio.run(asyncio.wait_for(main(), 60))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def http_server(web, tmp_path):
    import uvicorn

    def start(api_key=None):
        srv = McpToolServer(web, workspace_root=tmp_path / "episodes")
        port = _free_port()
        server = uvicorn.Server(uvicorn.Config(http_app(srv, api_key=api_key), host="127.0.0.1", port=port,
                                               log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        t0 = time.monotonic()
        while not server.started:
            assert time.monotonic() - t0 < 10 and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        def stop():
            server.should_exit = True
            thread.join(10)

        started.append(stop)
        return srv, f"http://127.0.0.1:{port}/mcp", stop

    started: list = []
    yield start
    for stop in started:
        stop()


def test_streamable_http_episode_handles(http_server, tmp_path):
    srv, url, stop = http_server()

    async def main():
        async with Client(streamable_http_client(url)) as client:
            await _session_checks(client, pass_episode=True)
            r = await client.call_tool("web_search", {"query": "Warrington", "num": 9})  # Table 4: num <= 5
            assert r.is_error
            obs = json.loads(r.content[0].text)
            assert obs["error"] == "bad_arguments" and "num" in obs["message"]
            r = await client.call_tool("web_search_for_image", {"query": IMAGE_QUERY, "num": 1})
            name = r.structured_content["images"][0]["filename"]
            # over HTTP a call without a handle starts a new episode: the reference is unknown there
            r = await client.call_tool("web_search_based_on_image", {"image": name})
            assert r.is_error
            obs = json.loads(r.content[0].text)
            assert obs["error"] == "bad_image_ref" and obs["registered"] == [] and "episode" in obs["hint"]
            r = await client.call_tool("web_search", {"query": "Warrington", EPISODE_ARG: "not-a-handle"})
            assert r.is_error and json.loads(r.content[0].text)["error"] == "unknown_episode"
            r = await client.call_tool("no_such_tool", {"x": 1})
            assert r.is_error and json.loads(r.content[0].text)["error"] == "unknown_tool"
        async with Client(url, mode="legacy") as client:  # a handshake-era client: its session names its episode
            assert client.protocol_version < "2026"
            r = await client.call_tool("web_search_for_image", {"query": IMAGE_QUERY, "num": 1})
            name, episode = r.structured_content["images"][0]["filename"], r.structured_content[EPISODE_ARG]
            r = await client.call_tool("web_search_based_on_image", {"image": name})
            assert not r.is_error and r.structured_content[EPISODE_ARG] == episode

    asyncio.run(asyncio.wait_for(main(), 60))
    assert len(list((tmp_path / "episodes").iterdir())) >= 2  # one workspace per episode
    stop()  # the app's lifespan ends: every episode is closed and its workspace removed
    assert list((tmp_path / "episodes").iterdir()) == []


def test_http_api_key(http_server):
    _srv, url, _stop = http_server(api_key="s3cret")
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    r = httpx.post(url, json=body, headers={"Accept": "application/json, text/event-stream"})
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"

    async def main():
        import httpx2

        async with httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret"}) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                assert len((await client.list_tools()).tools) == 5

    asyncio.run(asyncio.wait_for(main(), 30))
    # the scheme is case-insensitive (RFC 9110 11.1): past the key check, the SDK answers (here: no
    # session, 400) as it does for "Bearer"; another scheme is no key
    codes = [httpx.post(url, json=body, headers={"Accept": "application/json, text/event-stream",
                                                 "Authorization": f"{scheme} s3cret"}).status_code
             for scheme in ("Bearer", "bearer", "BEARER", "Basic")]
    assert codes[0] != 401 and codes == [codes[0]] * 3 + [401], codes
    with pytest.raises(ValueError, match="visible ASCII"):
        http_app(_srv, api_key="clé")


def test_code_images_and_episode_eviction(web, tmp_path):
    """execute_code runs in the kit's sandbox of the episode (variables persist); a saved PNG comes back as an
    image; beyond ``max_episodes`` the oldest episode is closed and its workspace removed."""
    async def main():
        srv = McpToolServer(web, workspace_root=tmp_path, max_episodes=1)
        try:
            code = ("from PIL import Image\nx = 41\nImage.new('RGB', (40, 30), (9, 90, 200)).save('plot.png')\n"
                    "print('saved')")
            r = await srv.call_tool("execute_code", {"code": code})
            assert not r.is_error, r.content[0].text
            ep = r.structured_content[EPISODE_ARG]
            assert "saved" in r.content[0].text
            assert [im["kind"] for im in r.structured_content["images"]] == ["code_image"]
            assert [c.type for c in r.content].count("image") == 1
            r = await srv.call_tool("execute_code", {"code": "print(x + 1)", EPISODE_ARG: ep})
            assert "42" in r.content[0].text
            r2 = await srv.call_tool("web_search", {"query": "Warrington"})  # a second episode evicts the first
            assert r2.structured_content[EPISODE_ARG] != ep
            assert not (tmp_path / ep).exists()
            r = await srv.call_tool("execute_code", {"code": "print(x)", EPISODE_ARG: ep})
            assert r.is_error and json.loads(r.content[0].text)["error"] == "unknown_episode"
            # an episode with a call in flight is not evicted under it by a new episode's call
            busy = (await srv.call_tool("execute_code", {"code": "y = 1"})).structured_content[EPISODE_ARG]
            slow = asyncio.create_task(srv.call_tool("execute_code", {"code": "import time\ntime.sleep(0.5)\n"
                                                                      "print(y + 1)", EPISODE_ARG: busy}))
            await asyncio.sleep(0.2)
            other = await srv.call_tool("web_search", {"query": "Warrington"})
            assert not other.is_error and (tmp_path / busy).exists()
            r = await slow
            assert not r.is_error and "2" in r.content[0].text
        finally:
            await srv.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_serve_mcp_refuses_public_bind_without_key_and_bad_archives(zim, tmp_path, capsys):
    from kit.cli import main

    assert main(["serve-mcp", str(zim), "--transport", "http", "--host", "0.0.0.0"]) == 2
    assert "API key" in capsys.readouterr().err
    (tmp_path / "cut.zim").write_bytes(b"ZIM\x04 truncated")
    assert main(["serve-mcp", str(tmp_path / "cut.zim")]) == 2
    assert "cannot open ZIM archive" in capsys.readouterr().err


def test_oversized_arguments_are_refused_by_the_harness_schema(web, tmp_path):
    """M1: a 400k-character query is a short bad_arguments error at once (it ran the search for seconds and
    answered 400k characters). The bound is the harness's own (kit.harness.tool_spec), so MCP, the harness's
    argument check and serve-web refuse alike."""
    from kit.harness.errors import ToolError
    from kit.harness.recovery import repair_call
    from kit.harness.tool_spec import MAX_IMAGE_REF_CHARS, MAX_QUERY_CHARS, MAX_URL_CHARS

    schemas = {n: mcp_input_schema(s)["properties"] for n, s in NATIVE_TOOLS.items()}
    for tool, arg, bound in (("web_search", "query", MAX_QUERY_CHARS), ("web_search_for_image", "query", MAX_QUERY_CHARS),
                             ("web_search_based_on_image", "image", MAX_IMAGE_REF_CHARS)):
        one, many = schemas[tool][arg]["anyOf"]
        assert one["maxLength"] == many["items"]["maxLength"] == bound and many["maxItems"] >= 1
    assert schemas["web_extract"]["urls"]["items"]["maxLength"] == MAX_URL_CHARS
    assert "maxLength" in schemas["web_extract"]["goal"]

    with pytest.raises(ToolError) as e:  # the harness itself (the loop calls repair_call)
        repair_call("web_search", {"query": ["ok", "ray " * 100_000]}, NATIVE_TOOLS)
    assert e.value.message == f"query.1: 400000 characters is over the {MAX_QUERY_CHARS}-character limit"

    async def main():
        srv = McpToolServer(web, workspace_root=tmp_path)
        try:
            t0 = time.monotonic()
            r = await srv.call_tool("web_search", {"query": "ray " * 100_000})
            took = time.monotonic() - t0
            ok = await srv.call_tool("web_search", {"query": "ray " * (MAX_QUERY_CHARS // 4)})
            urls = await srv.call_tool("web_extract", {"urls": ["zim://x/A/y"] * 1000})
        finally:
            await srv.close()
        return r, took, ok, urls

    r, took, ok, urls = asyncio.run(main())
    obs = json.loads(r.content[0].text)
    assert r.is_error and obs["error"] == "bad_arguments" and "over the 2048-character limit" in obs["message"]
    assert sum(len(c.text) for c in r.content if c.type == "text") < 5000 and took < 1.5
    assert not ok.is_error  # at the bound: served
    assert urls.is_error and "1000 items is over the" in json.loads(urls.content[0].text)["message"]


@pytest.mark.parametrize("argv", [["--max-episodes", "0"], ["--port", "99999"], ["--port", "x"]])
def test_serve_mcp_bad_numbers_are_argparse_errors(argv, capsys):
    from kit.cli import build_parser

    with pytest.raises(SystemExit) as e:  # at parse time: before any archive is opened or index loaded
        build_parser().parse_args(["serve-mcp", "a.zim", *argv])
    assert e.value.code == 2 and "usage:" in capsys.readouterr().err


def test_serve_mcp_refuses_a_key_no_client_can_send(capsys):
    from kit.cli import main

    assert main(["serve-mcp", "a.zim", "--transport", "http", "--api-key", "clé"]) == 2  # a.zim never opened
    err = capsys.readouterr().err
    assert "--api-key may hold only visible ASCII" in err and "Traceback" not in err
    assert main(["serve-mcp", "no_such_archive.zim"]) == 2
    assert "does not exist" in capsys.readouterr().err
