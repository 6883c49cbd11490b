"""serve-mcp strictness (issue 28 part 4), through the official MCP SDK client over stdio and streamable HTTP:
an argument a tool's inputSchema does not name is a structured tool error naming it and the accepted ones
(never silently dropped); the server's instructions name images the way the evidence registry does; every
tool's inputSchema is valid JSON Schema (Draft 2020-12, MCP's default dialect)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from PIL import Image

from kit.harness.registry import KINDS, EvidenceRegistry
from kit.harness.tools import NATIVE_TOOLS
from kit.serve.mcp_server import EPISODE_ARG, McpToolServer, http_app, instructions

ROOT = Path(__file__).resolve().parents[1]
FRENCH = "wikipedia_fr_test_2017-07"
LABEL = re.compile(r"Image ([a-z_]+_\d+)\.(png|jpg) \(reference <([a-z_]+_\d+)>\)")


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
    w.ensure_ready()
    return w


def _obs(result) -> dict:
    assert result.is_error, [c.text for c in result.content if c.type == "text"]
    return json.loads(result.content[0].text)


def _image_bytes(fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (20, 120, 200)).save(buf, format=fmt)
    return buf.getvalue()


def check_instructions(text: str | None, tmp_path: Path) -> None:
    """The instructions show the label each image really comes with, and every image name they give is one the
    registry produces and resolves."""
    assert text
    shown = LABEL.search(text)
    assert shown, text  # the label form of McpToolServer._content, e.g. "Image search_image_1.png (reference <search_image_1>)"
    assert shown.group(1) == shown.group(3) and shown.group(1).rsplit("_", 1)[0] in KINDS
    reg = EvidenceRegistry(tmp_path / "reg")
    png = reg.register_bytes(_image_bytes("PNG"), "search_image")
    jpg = reg.register_bytes(_image_bytes("JPEG"), "search_image")
    assert (png.filename, jpg.filename) == ("search_image_1.png", "search_image_2.jpg")  # the registry's naming
    assert f"{shown.group(1)}.{shown.group(2)}" == png.filename
    for name in set(re.findall(r"\b(?:search|page|code)_image_\d+(?:\.[a-z]+)?\b", text)):
        assert reg.resolve(name) is png, name  # every example name is usable as written
    assert "search_image_1)" in text or "(search_image_1" in text  # the extension-free reference is offered
    assert "unknown_argument" in text


async def strict_checks(client: Client, tmp_path: Path) -> None:
    """What both transports must answer alike."""
    from jsonschema import Draft202012Validator

    check_instructions(client.instructions, tmp_path)
    tools = (await client.list_tools()).tools
    assert [t.name for t in tools] == list(NATIVE_TOOLS)
    for t in tools:
        Draft202012Validator.check_schema(t.input_schema)  # raises SchemaError on an invalid schema
        assert t.input_schema["type"] == "object" and EPISODE_ARG in t.input_schema["properties"]

    r = await client.call_tool("web_search", {"query": "Warrington", "bogus": 1})
    obs = _obs(r)
    assert obs["error"] == "unknown_argument" and obs["unknown"] == ["bogus"]
    assert obs["accepted"] == ["query", "num", EPISODE_ARG]
    assert "'bogus'" in obs["message"] and "query, num, episode" in obs["message"]
    assert r.structured_content["error"] == "unknown_argument"

    obs = _obs(await client.call_tool("web_search", {"q": "Warrington"}))  # a harness alias is not in the schema
    assert obs["unknown"] == ["q"] and obs["did_you_mean"] == {"q": "query"} and "use 'query'" in obs["message"]
    obs = _obs(await client.call_tool("execute_code", {"code": "print(1)", "timeout": 5, "Code": "x"}))
    assert obs["unknown"] == ["timeout", "Code"] and obs["accepted"] == ["code", EPISODE_ARG]
    obs = _obs(await client.call_tool("web_extract", {"urls": ["zim://x/A/y"], "goal": "g", "summary": True}))
    assert obs["error"] == "unknown_argument" and "'summary'" in obs["message"]

    ok = await client.call_tool("web_search", {"query": "Warrington", "num": 2})  # declared names only: served
    assert not ok.is_error and ok.structured_content["repairs"] == []
    episode = ok.structured_content[EPISODE_ARG]
    ok = await client.call_tool("web_search", {"query": "Warrington", EPISODE_ARG: episode})  # the added handle
    assert not ok.is_error and ok.structured_content[EPISODE_ARG] == episode

    r = await client.call_tool("web_search_for_image", {"query": "Orbite héliosynchrone", "num": 2})
    assert not r.is_error
    labels = [c.text for c in r.content if c.type == "text" and c.text.startswith("Image ")]
    assert labels and all(LABEL.match(t) for t in labels)  # the form the instructions show
    ref = LABEL.match(labels[0]).group(3)  # the extension-free reference, as the instructions advise
    r = await client.call_tool("web_search_based_on_image",
                               {"image": ref, "num": 2, EPISODE_ARG: r.structured_content[EPISODE_ARG]})
    assert not r.is_error, r.content[0].text


def test_stdio_unknown_arguments_instructions_and_schemas(zim, web, tmp_path):
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=dict(os.environ),
                                   args=["-m", "kit.cli", "serve-mcp", str(zim), "--transport", "stdio"])

    async def main():
        async with Client(stdio_client(params), read_timeout_seconds=60) as client:
            await strict_checks(client, tmp_path)

    asyncio.run(asyncio.wait_for(main(), 90))


def test_streamable_http_unknown_arguments_instructions_and_schemas(web, tmp_path):
    import uvicorn

    srv = McpToolServer(web, workspace_root=tmp_path / "episodes")
    server = uvicorn.Server(uvicorn.Config(http_app(srv), host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    t0 = time.monotonic()
    while not server.started:
        assert time.monotonic() - t0 < 10 and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}/mcp"
    try:
        async def main():
            async with Client(streamable_http_client(url)) as client:
                await strict_checks(client, tmp_path)
            async with Client(url, mode="legacy") as client:  # a handshake-era client gets the same answers
                obs = _obs(await client.call_tool("web_search", {"query": "x", "extra": "y"}))
                assert obs["error"] == "unknown_argument" and obs["unknown"] == ["extra"]

        asyncio.run(asyncio.wait_for(main(), 90))
    finally:
        server.should_exit = True
        thread.join(10)


def test_hostile_unknown_arguments_are_bounded_and_concurrent_calls_unaffected(web, tmp_path):
    """Thousands of long unknown names: one short error at once; unknown-argument calls interleaved with good
    ones in one episode never disturb them."""
    async def main():
        srv = McpToolServer(web, workspace_root=tmp_path)
        try:
            t0 = time.monotonic()
            r = await srv.call_tool("web_search", {"query": "x", **{f"k{i}" + "z" * 5000: i for i in range(5000)}})
            took = time.monotonic() - t0
            obs = _obs(r)
            assert obs["error"] == "unknown_argument" and len(obs["unknown"]) == 10
            assert all(len(k) <= 64 for k in obs["unknown"]) and "and 4990 more" in obs["message"]
            assert len(r.content[0].text) < 5000 and took < 1.5
            obs = _obs(await srv.call_tool("web_search", {"query": "x", "": 1, "\u0000": 2}))
            assert obs["unknown"] == ["", "\u0000"]
            first = await srv.call_tool("web_search", {"query": "Warrington"})
            ep = first.structured_content[EPISODE_ARG]
            calls = [srv.call_tool("web_search", {"query": "Warrington", EPISODE_ARG: ep} | ({"junk": i} if i % 2 else {}))
                     for i in range(12)]
            results = await asyncio.gather(*calls)
            for i, res in enumerate(results):
                if i % 2:
                    assert _obs(res)["unknown"] == ["junk"]
                else:
                    assert not res.is_error and res.structured_content[EPISODE_ARG] == ep
        finally:
            await srv.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_instructions_text_matches_the_registry(tmp_path):
    check_instructions(instructions(), tmp_path)
