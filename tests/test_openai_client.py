"""OpenAIChatPolicy against httpx.MockTransport: request format, parsing, retries, errors."""

from __future__ import annotations

import base64
import io
import json

import httpx
import pytest
from PIL import Image

from kit.policy.openai_client import (
    OpenAIChatPolicy,
    convert_messages,
    parse_chat_response,
    parse_retry_after,
)
from kit.types import ContentPart, Message, Policy, PolicyError, SamplingParams, ToolCall

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "web_search",
            "description": "Search the web",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }
]


class FixedCounter:
    def count_text(self, text: str) -> int:
        return len(text.split())

    def count_image(self, width: int, height: int) -> int:
        return (width // 28) * (height // 28)


def _png(color=(200, 10, 10), size=(40, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def _jpeg() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (0, 0, 255)).save(buf, format="JPEG")
    return buf.getvalue()


def _ok_body(**message) -> dict:
    msg = {"role": "assistant", "content": "hello"}
    msg.update(message)
    return {
        "id": "chatcmpl-1",
        "model": "tiny",
        "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
    }


def _policy(handler, **kw) -> OpenAIChatPolicy:
    delays: list[float] = []

    async def sleep(s: float) -> None:
        delays.append(s)

    kw.setdefault("backoff_initial_s", 0.01)
    p = OpenAIChatPolicy(
        "http://test/v1",
        "tiny",
        api_key="k",
        token_counter=FixedCounter(),
        transport=httpx.MockTransport(handler),
        sleep=sleep,
        **kw,
    )
    p.delays = delays  # type: ignore[attr-defined]
    return p


def _episode(workspace) -> list[Message]:
    (workspace / "user_image_1.png").write_bytes(_png())
    (workspace / "search_image_1.jpg").write_bytes(_jpeg())
    (workspace / "search_image_2.png").write_bytes(_png((0, 200, 0)))
    return [
        Message(role="system", content=[ContentPart(type="text", text="You are a search agent.")]),
        Message(
            role="user",
            content=[
                ContentPart(type="image", image="user_image_1.png"),
                ContentPart(type="text", text="Where is this?"),
            ],
        ),
        Message(
            role="assistant",
            content=[ContentPart(type="text", text="Let me search.")],
            tool_calls=[
                ToolCall(id="c1", name="web_search", arguments='{"query": "red square"}'),
                ToolCall(id="c2", name="web_search_for_image", arguments='{"query": "x"'),
            ],
            turn=1,
        ),
        Message(
            role="tool",
            tool_call_id="c1",
            name="web_search",
            content=[ContentPart(type="text", text="1. Red Square ...")],
            turn=1,
        ),
        Message(
            role="tool",
            tool_call_id="c2",
            name="web_search_for_image",
            content=[
                ContentPart(type="text", text="<search_image_1> <search_image_2>"),
                ContentPart(type="image", image="search_image_1.jpg"),
                ContentPart(type="image", image="search_image_2.png"),
            ],
            turn=1,
        ),
        Message(role="assistant", content=[ContentPart(type="text", text="Answer: Moscow")], turn=2),
    ]


# ------------------------------------------------------------------------------- request format
async def test_request_format_images_tools_and_tool_images(tmp_path):
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=_ok_body())

    async with _policy(handler, extra_body={"top_k": 20}) as policy:
        assert isinstance(policy, Policy)
        turn = await policy.generate(
            _episode(tmp_path), TOOLS, SamplingParams(temperature=0.3, max_tokens=77, seed=5), tmp_path
        )
    assert turn.text == "hello"
    req = seen[0]
    assert req.method == "POST" and str(req.url) == "http://test/v1/chat/completions"
    assert req.headers["authorization"] == "Bearer k"
    body = json.loads(req.content)
    assert body["model"] == "tiny" and body["max_tokens"] == 77 and body["seed"] == 5
    assert body["temperature"] == 0.3 and body["top_k"] == 20
    assert body["tools"] == TOOLS and body["tool_choice"] == "auto"

    msgs = body["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "tool", "user", "assistant"]
    assert msgs[0]["content"] == "You are a search agent."
    # user image -> PNG data URL holding exactly the file bytes
    url = msgs[1]["content"][0]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == (tmp_path / "user_image_1.png").read_bytes()
    assert msgs[1]["content"][1] == {"type": "text", "text": "Where is this?"}
    # assistant tool calls keep the raw (even malformed) argument strings
    calls = msgs[2]["tool_calls"]
    assert calls[0] == {
        "id": "c1",
        "type": "function",
        "function": {"name": "web_search", "arguments": '{"query": "red square"}'},
    }
    assert calls[1]["function"]["arguments"] == '{"query": "x"'
    assert msgs[2]["content"] == "Let me search."
    # tool messages are text only; their images follow in one user message after the tool run
    assert msgs[3] == {"role": "tool", "tool_call_id": "c1", "content": "1. Red Square ..."}
    assert msgs[4] == {"role": "tool", "tool_call_id": "c2", "content": "<search_image_1> <search_image_2>"}
    follow = msgs[5]["content"]
    assert follow[0]["type"] == "text" and "c2" in follow[0]["text"] and "c1" not in follow[0]["text"]
    assert follow[1]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert follow[2]["image_url"]["url"].startswith("data:image/png;base64,")
    assert msgs[6] == {"role": "assistant", "content": "Answer: Moscow"}


async def test_no_tools_means_no_tools_field(tmp_path):
    bodies = []

    def handler(request):
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=_ok_body())

    async with _policy(handler) as policy:
        await policy.generate([Message(role="user", content=[ContentPart(type="text", text="hi")])], [], SamplingParams())
    assert "tools" not in bodies[0] and "tool_choice" not in bodies[0] and "seed" not in bodies[0]


@pytest.mark.parametrize("name", ["/etc/passwd", "../secret.png", "a/../../b.png", "C:\\x.png", ""])
def test_unsafe_image_names_rejected(tmp_path, name):
    msgs = [Message(role="user", content=[ContentPart(type="image", image=name)])]
    with pytest.raises(PolicyError):
        convert_messages(msgs, tmp_path)


def test_image_errors(tmp_path):
    msg = [Message(role="user", content=[ContentPart(type="image", image="nope.png")])]
    with pytest.raises(PolicyError, match="not found"):
        convert_messages(msg, tmp_path)
    with pytest.raises(PolicyError, match="no workspace"):
        convert_messages(msg, None)
    (tmp_path / "fake.png").write_text("not an image")
    with pytest.raises(PolicyError, match="not a readable image"):
        convert_messages([Message(role="user", content=[ContentPart(type="image", image="fake.png")])], tmp_path)
    (tmp_path / "ok.png").write_bytes(_png())
    with pytest.raises(PolicyError, match="only in user messages"):
        convert_messages([Message(role="assistant", content=[ContentPart(type="image", image="ok.png")])], tmp_path)
    with pytest.raises(PolicyError, match="tool_call_id"):
        convert_messages([Message(role="tool", content=[ContentPart(type="text", text="x")])], tmp_path)


def test_symlink_escape_rejected(tmp_path):
    outside = tmp_path / "outside.png"
    outside.write_bytes(_png())
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "link.png").symlink_to(outside)
    with pytest.raises(PolicyError, match="outside the workspace"):
        convert_messages([Message(role="user", content=[ContentPart(type="image", image="link.png")])], ws)


# ------------------------------------------------------------------------------- response parsing
def _resp(body, status=200) -> httpx.Response:
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.Response(status, content=content, headers={"content-type": "application/json"})


def test_parse_tool_calls_usage_and_finish_reason():
    body = _ok_body(
        content=None,
        tool_calls=[
            {"id": "call_a", "type": "function", "function": {"name": "web_search", "arguments": '{"query": "q"}'}},
            {"type": "function", "function": {"name": "web_extract", "arguments": {"urls": ["u"]}}},
            {"id": "call_c", "type": "function", "function": {"name": "junk", "arguments": '{"a": [1,'}},
        ],
    )
    body["choices"][0]["finish_reason"] = "tool_calls"
    turn = parse_chat_response(_resp(body))
    assert turn.text == "" and turn.finish_reason == "tool_calls"
    assert [c.name for c in turn.tool_calls] == ["web_search", "web_extract", "junk"]
    assert turn.tool_calls[0].id == "call_a" and turn.tool_calls[0].arguments == '{"query": "q"}'
    assert json.loads(turn.tool_calls[1].arguments) == {"urls": ["u"]}
    assert turn.tool_calls[1].id.startswith("call_") and len(turn.tool_calls[1].id) > 5
    assert turn.tool_calls[2].arguments == '{"a": [1,'  # malformed arguments are kept verbatim
    assert turn.usage.prompt_tokens == 11 and turn.usage.completion_tokens == 3
    assert turn.raw == {"id": "chatcmpl-1", "model": "tiny"}


def test_reasoning_content_prepended_once():
    turn = parse_chat_response(_resp(_ok_body(content="Answer: 4", reasoning_content="2+2=4")))
    assert turn.text == "<think>2+2=4</think>Answer: 4"
    assert turn.raw["reasoning_content"] == "2+2=4"
    turn = parse_chat_response(_resp(_ok_body(content="<think>a</think>b", reasoning_content="a")))
    assert turn.text == "<think>a</think>b"


@pytest.mark.parametrize(
    "body,match",
    [
        (b"{not json", "malformed JSON"),
        ({"object": "chat.completion"}, "no choices"),
        ({"choices": []}, "no choices"),
        ({"choices": [{"finish_reason": "stop"}]}, "no message"),
        ([1, 2], "not a JSON object"),
        ({"choices": [{"message": {"content": "x", "tool_calls": "bad"}}]}, "not a list"),
    ],
)
def test_bad_bodies_raise_policy_error(body, match):
    with pytest.raises(PolicyError, match=match):
        parse_chat_response(_resp(body))


# ------------------------------------------------------------------------------- retries / errors
async def test_retry_on_503_then_429_with_retry_after_then_success():
    statuses = [503, 429, 200]
    calls = []

    def handler(request):
        status = statuses[len(calls)]
        calls.append(status)
        if status == 429:
            return httpx.Response(429, headers={"retry-after": "7"}, json={"error": "slow down"})
        if status == 503:
            return httpx.Response(503, text="overloaded")
        return httpx.Response(200, json=_ok_body(content="finally"))

    policy = _policy(handler, max_retries=3)
    turn = await policy.generate([Message(role="user", content=[ContentPart(type="text", text="q")])], [], SamplingParams())
    await policy.aclose()
    assert turn.text == "finally" and calls == [503, 429, 200]
    # first wait: exponential backoff (0.01 s); second: the server's Retry-After (7 s)
    assert policy.delays == [pytest.approx(0.01), 7.0]


async def test_retries_exhausted_raise_retryable_policy_error():
    n = []

    def handler(request):
        n.append(1)
        return httpx.Response(502, text="bad gateway body")

    policy = _policy(handler, max_retries=2)
    with pytest.raises(PolicyError, match="3 attempt.*HTTP 502.*bad gateway body") as ei:
        await policy.generate([Message(role="user", content=[ContentPart(type="text", text="q")])], [], SamplingParams())
    assert ei.value.retryable and len(n) == 3


async def test_no_retry_on_400():
    n = []

    def handler(request):
        n.append(1)
        return httpx.Response(400, json={"error": {"message": "max_tokens too large"}})

    policy = _policy(handler, max_retries=5)
    with pytest.raises(PolicyError, match="HTTP 400.*max_tokens too large") as ei:
        await policy.generate([Message(role="user", content=[ContentPart(type="text", text="q")])], [], SamplingParams())
    assert not ei.value.retryable and len(n) == 1


async def test_timeout_becomes_policy_error():
    n = []

    def handler(request):
        n.append(1)
        raise httpx.ReadTimeout("read timed out", request=request)

    policy = _policy(handler, max_retries=1, timeout_s=3)
    with pytest.raises(PolicyError, match="timed out after 3 s") as ei:
        await policy.generate([Message(role="user", content=[ContentPart(type="text", text="q")])], [], SamplingParams())
    assert ei.value.retryable and len(n) == 2


async def test_connection_error_retried_then_success():
    n = []

    def handler(request):
        n.append(1)
        if len(n) == 1:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json=_ok_body())

    async with _policy(handler) as policy:
        turn = await policy.generate([Message(role="user", content=[ContentPart(type="text", text="q")])], [], SamplingParams())
    assert turn.text == "hello" and len(n) == 2


async def test_malformed_json_from_server_is_policy_error():
    policy = _policy(lambda r: httpx.Response(200, content=b"<html>proxy error</html>"))
    with pytest.raises(PolicyError, match="malformed JSON.*proxy error"):
        await policy.generate([Message(role="user", content=[ContentPart(type="text", text="q")])], [], SamplingParams())
    await policy.aclose()


def test_parse_retry_after_forms():
    assert parse_retry_after("12") == 12.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == pytest.approx(10.0)


def test_api_key_from_env_and_none(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    assert OpenAIChatPolicy("http://x/v1", "m", token_counter=FixedCounter()).api_key == "env-key"
    monkeypatch.delenv("OPENAI_API_KEY")
    assert OpenAIChatPolicy("http://x/v1", "m", token_counter=FixedCounter()).api_key is None
    with pytest.raises(ValueError):
        OpenAIChatPolicy("", "m")


def test_default_token_counter_is_built_lazily_from_qwen(monkeypatch):
    tokens = pytest.importorskip("kit.policy.tokens", reason="kit.policy.tokens not available")
    built = []

    class Probe:  # stands in for the 10-s tokenizer load; only the wiring is under test here
        def __init__(self):
            built.append(self)

    monkeypatch.setattr(tokens, "QwenTokenCounter", Probe)
    policy = OpenAIChatPolicy("http://x/v1", "m")
    assert built == []  # nothing loaded at construction
    counter = policy.token_counter
    assert isinstance(counter, Probe) and policy.token_counter is counter and len(built) == 1
    explicit = FixedCounter()
    assert OpenAIChatPolicy("http://x/v1", "m", token_counter=explicit).token_counter is explicit
