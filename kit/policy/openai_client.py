"""Policy over an OpenAI-compatible chat-completions endpoint (vLLM, SGLang, hosted APIs).

docs/contracts.md "Policy": ``async generate(messages, tools, sampling, workspace) -> AssistantTurn`` with
images sent as data URLs and tools through function calling. The paper's harness
(weagent_mmsearch §3, Table 5) drives a served Qwen-VL model this way.

Message conversion (kit :class:`~kit.types.Message` -> chat-completions JSON):

* text parts -> ``{"type": "text", "text": ...}``; a message with text only is sent as a plain string.
* image parts -> ``{"type": "image_url", "image_url": {"url": "data:<mime>;base64,..."}}``; the part
  names a file *relative* to the episode workspace (absolute names and ``..`` are refused with
  :class:`~kit.types.PolicyError`), the MIME type comes from the file's bytes.
* assistant ``tool_calls`` -> OpenAI ``tool_calls`` (``type: function``, ``arguments`` as the raw
  string the model wrote, malformed or not).
* role ``tool`` -> ``{"role": "tool", "tool_call_id": ..., "content": <text>}``. Chat APIs do not
  accept images inside tool messages, so the images a tool returned are moved into ONE user message
  placed immediately after the run of consecutive tool messages (tool messages must directly follow
  the assistant turn that called them). That user message starts with a short text line naming the
  calls the images came from (``tool_image_preamble``), then the images in order.

Response parsing: ``choices[0].message.content`` (may be ``null``), ``tool_calls`` (-> kit
:class:`~kit.types.ToolCall` keeping the raw ``arguments`` string; an ``arguments`` object is
serialized back to JSON; a missing id gets a fresh ``call_<hex>`` id), ``finish_reason`` and
``usage``. Reasoning servers (vLLM ``--reasoning-parser``) return the thinking separately as
``reasoning_content`` (or ``reasoning``); it is kept by prepending ``<think>...</think>`` to the text
when the text has no ``<think>`` of its own, so the episode record holds what the model generated.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import re
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import httpx
from PIL import Image, UnidentifiedImageError

from kit.types import (
    AssistantTurn,
    Message,
    PolicyError,
    SamplingParams,
    TokenCounter,
    ToolCall,
    Usage,
)
from kit.web.retry import (  # the kit's one retry policy (RFC 9110 Retry-After, back-off)
    RetryableHTTPStatus,
    RetryConfig,
    RetryError,
    async_retrying,
    exhausted_detail,
    parse_retry_after,
)

log = logging.getLogger(__name__)

_BODY_EXCERPT = 500  # characters of an error body quoted in PolicyError messages


# The client's defaults (kit.web.retry's table): 3 retries, 1 s doubling to 30 s, Retry-After up to
# 60 s; no per-attempt limit (``timeout_s`` bounds each request) and no time-budget stop (see RetryConfig).
DEFAULT_RETRY = RetryConfig(max_retries=3, backoff_initial_s=1.0, backoff_max_s=30.0, retry_after_cap_s=60.0,
                            retry_on=(RetryableHTTPStatus, httpx.TimeoutException, httpx.TransportError),
                            attempt_timeout_s=None, honour_time_budget=False)


# How vLLM, SGLang and OpenAI word a prompt that does not fit the model's context window.
_CONTEXT_OVERFLOW = re.compile(
    r"maximum context length|context[_ ]length|max_model_len|context window|prompt is too long|too many tokens",
    re.I,
)


class OpenAIChatPolicy:
    """:class:`~kit.types.Policy` backed by ``POST {base_url}/chat/completions``.

    Args:
        base_url: API root including the version path, e.g. ``http://127.0.0.1:8000/v1``.
        model: model name the server knows (vLLM: ``--served-model-name`` or the checkpoint path).
        api_key: bearer token; ``None`` reads ``$OPENAI_API_KEY``; no header when neither is set
            (a local vLLM server needs none).
        timeout_s: per-request timeout in seconds (connect, read, write, pool).
        max_retries: retries after the first attempt on timeouts, connection errors, HTTP 408/429
            and 5xx (default 3). Other 4xx answers are not retried.
        token_counter: counts tokens the way the served model does; ``None`` uses
            :class:`kit.policy.tokens.QwenTokenCounter` (imported on first use).
        tool_choice: sent with every request that has tools (``"auto"``, ``"required"``,
            ``"none"`` or a named-function object).
        extra_body: extra top-level request fields merged into every request (vLLM sampling
            extras such as ``top_k``, ``repetition_penalty``, ``chat_template_kwargs``).
        backoff_initial_s / backoff_max_s: exponential backoff between retries, in seconds (1, 30).
        retry_after_cap_s: longest Retry-After the client honours, in seconds (60).
        retry: the whole :class:`~kit.web.retry.RetryConfig` (default :data:`DEFAULT_RETRY`); the
            shorthands above, when given, override its fields.
        tool_image_preamble: text line of the user message that carries tool images; ``{calls}``
            is replaced by the comma-separated tool call ids.
        transport: an ``httpx.AsyncBaseTransport`` (tests use ``httpx.MockTransport``).
        sleep: coroutine used to wait between retries (tests record the delays); default ``asyncio.sleep``.
        name: policy name for provenance; default ``openai:<model>``.

    Use as ``async with OpenAIChatPolicy(...) as policy:`` or call :meth:`aclose` when done: one
    ``httpx.AsyncClient`` (connection pool) is shared by all calls.

    Raises (from :meth:`generate`): :class:`~kit.types.PolicyError` for unreadable or unsafe image
    names, HTTP errors (status code and body excerpt in the message; ``retryable`` set for
    429/5xx/timeouts once retries are exhausted), malformed JSON and responses without choices.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int | None = None,
        token_counter: TokenCounter | None = None,
        tool_choice: str | dict[str, Any] = "auto",
        extra_body: dict[str, Any] | None = None,
        *,
        backoff_initial_s: float | None = None,
        backoff_max_s: float | None = None,
        retry_after_cap_s: float | None = None,
        tool_image_preamble: str = "Images returned by tool call(s) {calls}, in order:",
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        name: str | None = None,
        retry: RetryConfig | None = None,
    ):
        if not base_url:
            raise ValueError("base_url must be a non-empty URL such as http://127.0.0.1:8000/v1")
        if not model:
            raise ValueError("model must be a non-empty model name")
        if max_retries is not None and max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY") or None
        self.timeout_s = float(timeout_s)
        self.retry = (retry or DEFAULT_RETRY).with_(
            max_retries=max_retries, backoff_initial_s=backoff_initial_s, backoff_max_s=backoff_max_s,
            retry_after_cap_s=retry_after_cap_s, sleep=sleep)
        self.tool_choice = tool_choice
        self.extra_body = dict(extra_body or {})
        self.tool_image_preamble = tool_image_preamble
        self.name = name or f"openai:{model}"
        self._transport = transport
        self._token_counter = token_counter
        self._client: httpx.AsyncClient | None = None

    @property
    def max_retries(self) -> int:
        """Retries after the first attempt (``self.retry.max_retries``)."""
        return self.retry.max_retries

    # ---------------------------------------------------------------- lifecycle
    @property
    def token_counter(self) -> TokenCounter:
        """The token counter; defaults to ``QwenTokenCounter()`` built on first access."""
        if self._token_counter is None:
            # Lazy: the Qwen tokenizer is heavy and optional for callers that pass their own.
            from kit.policy.tokens import QwenTokenCounter

            self._token_counter = QwenTokenCounter()
        return self._token_counter

    @property
    def vision_token_pixels(self) -> int:
        """Pixels per vision-token side: the ``factor`` of the ``token_counter`` passed in (e.g.
        ``counter_for("Qwen/Qwen3-VL-8B-Instruct")`` gives 32), else 28 — the served model's processor
        is unknown, so the kit assumes Qwen2/2.5-VL geometry (kit choice; no tokenizer is loaded)."""
        from kit.harness.tool_spec import DEFAULT_VISION_TOKEN_PIXELS

        factor = getattr(self._token_counter, "factor", None)
        return int(factor) if isinstance(factor, int) and factor > 0 else DEFAULT_VISION_TOKEN_PIXELS

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Content-Type": "application/json"}
            if self.api_key:
                headers["Authorization"] = f"Bearer {self.api_key}"
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                headers=headers,
                timeout=httpx.Timeout(self.timeout_s),
                transport=self._transport,
            )
        return self._client

    async def aclose(self) -> None:
        """Close the shared HTTP client (idempotent)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> OpenAIChatPolicy:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.aclose()

    # ---------------------------------------------------------------- request building
    def build_request(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        sampling: SamplingParams,
        workspace: str | os.PathLike | None = None,
    ) -> dict[str, Any]:
        """The JSON body for ``/chat/completions`` (see the module docstring for the mapping).

        Raises:
            PolicyError: an image part names an absolute path, uses ``..``, is missing, is not an
                image, or no ``workspace`` was given; a tool message lacks ``tool_call_id``; a
                system or assistant message carries an image.
        """
        body: dict[str, Any] = {
            "model": self.model,
            "messages": convert_messages(messages, workspace, self.tool_image_preamble),
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if tools:
            body["tools"] = tools
            body["tool_choice"] = self.tool_choice
        body.update(self.extra_body)
        return body

    # ---------------------------------------------------------------- generation
    async def generate(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        sampling: SamplingParams,
        workspace: str | os.PathLike | None = None,
    ) -> AssistantTurn:
        """One chat completion -> :class:`~kit.types.AssistantTurn` (text, tool calls, finish
        reason, usage; ``raw`` holds the response id, model and any reasoning text).

        Raises:
            PolicyError: see the class docstring.
        """
        body = self.build_request(messages, tools, sampling, workspace)
        response = await self._post_with_retries(body)
        return parse_chat_response(response)

    async def _post_with_retries(self, body: dict[str, Any]) -> httpx.Response:
        url = f"{self.base_url}/chat/completions"
        try:
            async for attempt in async_retrying(self.retry):
                with attempt:
                    response = await self._http().post("/chat/completions", json=body)
                    if self.retry.retries_status(response.status_code):
                        raise RetryableHTTPStatus(url, response.status_code, response.text[:_BODY_EXCERPT],
                                                  parse_retry_after(response.headers.get("retry-after")))
                    if response.status_code >= 400:
                        raise PolicyError(
                            f"POST {url} failed with HTTP {response.status_code} (not retried): "
                            f"{response.text[:_BODY_EXCERPT]!r}",
                            context_overflow=response.status_code in (400, 413)
                            and bool(_CONTEXT_OVERFLOW.search(response.text[:4000])),
                        )
                    return response
        except RetryError as err:
            last = err.last_attempt.exception()
            attempts = err.last_attempt.attempt_number
            if isinstance(last, httpx.TimeoutException):
                msg = f"timed out after {self.timeout_s:g} s ({type(last).__name__})"
            else:
                msg = exhausted_detail(last)
            raise PolicyError(
                f"POST {url} failed after {attempts} attempt(s): {msg}", retryable=True
            ) from last
        raise AssertionError("unreachable: tenacity loop ended without result")  # pragma: no cover


# ==================================================================================================
# Conversion helpers (public so that other OpenAI-style callers and tests can reuse them)
# ==================================================================================================
def _check_relative_name(name: str) -> None:
    if not name:
        raise PolicyError("image part has an empty file name")
    if PurePosixPath(name).is_absolute() or PureWindowsPath(name).is_absolute() or name.startswith(
        ("/", "\\")
    ):
        raise PolicyError(f"image name {name!r} is absolute; only workspace-relative names are allowed")
    parts = name.replace("\\", "/").split("/")
    if ".." in parts:
        raise PolicyError(f"image name {name!r} contains '..'; only workspace-relative names are allowed")


def image_data_url(name: str, workspace: str | os.PathLike | None) -> str:
    """``data:<mime>;base64,...`` for the registered image ``name`` inside ``workspace``.

    The MIME type is what Pillow recognises in the bytes (not the file suffix).

    Raises:
        PolicyError: no workspace, unsafe name, missing file, symlink escaping the workspace, or
            bytes that are not an image.
    """
    _check_relative_name(name)
    if workspace is None:
        raise PolicyError(f"message references image {name!r} but no workspace was given")
    root = Path(workspace).resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root):
        raise PolicyError(f"image {name!r} resolves outside the workspace {root}")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise PolicyError(f"image {name!r} not found in workspace {root}") from None
    except OSError as err:
        raise PolicyError(f"image {name!r} could not be read: {err}") from err
    try:
        with Image.open(io.BytesIO(data)) as img:
            mime = Image.MIME.get(img.format or "")
    except (UnidentifiedImageError, OSError) as err:
        raise PolicyError(f"file {name!r} is not a readable image: {err}") from err
    if not mime:
        raise PolicyError(f"image {name!r} has a format without a MIME type")
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _content_parts(
    msg: Message, workspace: str | os.PathLike | None, *, allow_images: bool
) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for p in msg.content:
        if p.type == "text":
            parts.append({"type": "text", "text": p.text or ""})
        else:
            if not allow_images:
                raise PolicyError(
                    f"{msg.role} message (turn {msg.turn}) carries an image; chat APIs accept "
                    "images only in user messages"
                )
            if not p.image:
                raise PolicyError(f"image part without a file name in {msg.role} message (turn {msg.turn})")
            parts.append({"type": "image_url", "image_url": {"url": image_data_url(p.image, workspace)}})
    return parts


def _as_content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    # Text-only content as one string: every OpenAI-compatible server accepts it for every role.
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def convert_messages(
    messages: list[Message],
    workspace: str | os.PathLike | None,
    tool_image_preamble: str = "Images returned by tool call(s) {calls}, in order:",
) -> list[dict[str, Any]]:
    """Kit messages -> chat-completions ``messages`` (mapping in the module docstring).

    Raises:
        PolicyError: unsafe or unreadable image, tool message without ``tool_call_id``, image in a
            system or assistant message.
    """
    out: list[dict[str, Any]] = []
    pending_images: list[dict[str, Any]] = []  # tool images waiting for the end of the tool run
    pending_calls: list[str] = []

    def flush() -> None:
        if pending_images:
            text = tool_image_preamble.format(calls=", ".join(pending_calls))
            out.append({"role": "user", "content": [{"type": "text", "text": text}, *pending_images]})
            pending_images.clear()
            pending_calls.clear()

    for msg in messages:
        if msg.role != "tool":
            flush()
        if msg.role == "tool":
            if not msg.tool_call_id:
                raise PolicyError(f"tool message (turn {msg.turn}) has no tool_call_id")
            parts = _content_parts(msg, workspace, allow_images=True)
            images = [p for p in parts if p["type"] == "image_url"]
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": msg.tool_call_id,
                    "content": "".join(p["text"] for p in parts if p["type"] == "text"),
                }
            )
            if images:
                pending_images.extend(images)
                pending_calls.append(msg.tool_call_id)
        elif msg.role == "assistant":
            text = _as_content(_content_parts(msg, workspace, allow_images=False))
            entry: dict[str, Any] = {"role": "assistant", "content": text}
            if msg.tool_calls:
                entry["content"] = text or None
                entry["tool_calls"] = [
                    {
                        "id": tc.id,
                        "type": "function",
                        "function": {"name": tc.name, "arguments": tc.arguments},
                    }
                    for tc in msg.tool_calls
                ]
            out.append(entry)
        else:  # system / user
            parts = _content_parts(msg, workspace, allow_images=msg.role == "user")
            out.append({"role": msg.role, "content": _as_content(parts)})
    flush()
    return out


def _tool_call(raw: Any, index: int) -> ToolCall:
    if not isinstance(raw, dict):
        raise PolicyError(f"tool_calls[{index}] is not an object: {str(raw)[:200]!r}")
    fn = raw.get("function") or {}
    if not isinstance(fn, dict):
        raise PolicyError(f"tool_calls[{index}].function is not an object: {str(fn)[:200]!r}")
    args = fn.get("arguments")
    if args is None:
        args = ""
    elif not isinstance(args, str):  # some servers return a parsed object
        args = json.dumps(args, ensure_ascii=False)
    call_id = raw.get("id") or f"call_{uuid.uuid4().hex[:12]}"
    return ToolCall(id=str(call_id), name=str(fn.get("name") or ""), arguments=args)


def parse_chat_response(response: httpx.Response) -> AssistantTurn:
    """Parse a ``/chat/completions`` HTTP response into an :class:`~kit.types.AssistantTurn`.

    Raises:
        PolicyError: body is not JSON, not an object, has no ``choices``, or ``choices[0]`` has no
            ``message`` object.
    """
    excerpt = response.text[:_BODY_EXCERPT]
    try:
        data = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PolicyError(
            f"malformed JSON in chat response (HTTP {response.status_code}): {err}; body {excerpt!r}"
        ) from err
    if not isinstance(data, dict):
        raise PolicyError(f"chat response is not a JSON object: {excerpt!r}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise PolicyError(f"chat response has no choices: {excerpt!r}")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise PolicyError(f"chat response choices[0] has no message object: {excerpt!r}")

    text = message.get("content") or ""
    if not isinstance(text, str):
        raise PolicyError(f"chat response message.content is not a string: {str(text)[:200]!r}")
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning and "<think>" not in text:
        text = f"<think>{reasoning}</think>{text}"

    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise PolicyError(f"chat response tool_calls is not a list: {str(raw_calls)[:200]!r}")
    tool_calls = [_tool_call(c, i) for i, c in enumerate(raw_calls)]

    usage_raw = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    usage = Usage(
        prompt_tokens=int(usage_raw.get("prompt_tokens") or 0),
        completion_tokens=int(usage_raw.get("completion_tokens") or 0),
    )
    raw: dict[str, Any] = {k: data[k] for k in ("id", "model", "system_fingerprint") if data.get(k)}
    if reasoning:
        raw["reasoning_content"] = reasoning
    if choice.get("logprobs") is not None:
        raw["logprobs"] = choice["logprobs"]
    return AssistantTurn(
        text=text,
        tool_calls=tool_calls,
        finish_reason=str(choice.get("finish_reason") or "stop"),
        usage=usage,
        raw=raw or None,
    )
