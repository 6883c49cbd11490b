"""Shared data contracts of the kit (docs/contracts.md "Core contracts").

Everything that crosses a module boundary is one of these pydantic models, so that episode records,
cache entries and backend results serialize to JSON the same way everywhere (bytes as base64).
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

_JSON_BYTES = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")


# --------------------------------------------------------------------------------------------------
# Search backend results (docs/contracts.md "Search backend")
# --------------------------------------------------------------------------------------------------
class SearchHit(BaseModel):
    """One web search result (Table 4, web_search: titles, URLs, snippets, publication times)."""

    title: str
    url: str
    snippet: str = ""
    date: str | None = None  # publication time as the source reports it (ISO date when known)


class ImageHit(BaseModel):
    """One image found by text-to-image search, reverse search or on a fetched page.

    ``content`` holds the raw image bytes when the backend could localize the image (the harness
    validates, registers and stores them); ``None`` when only the URL is known.
    """

    model_config = _JSON_BYTES

    title: str = ""
    image_url: str
    page_url: str = ""
    domain: str = ""
    caption: str = ""
    content: bytes | None = None
    mime: str | None = None


class KnowledgeGraph(BaseModel):
    """Optional knowledge-graph match of a reverse image search (Table 4)."""

    title: str
    description: str = ""
    url: str = ""


class ReverseImageResult(BaseModel):
    """Reverse image search result: related pages, optional knowledge-graph match, thumbnails."""

    model_config = _JSON_BYTES

    pages: list[SearchHit] = Field(default_factory=list)
    knowledge_graph: KnowledgeGraph | None = None
    thumbnails: list[ImageHit] = Field(default_factory=list)


class Page(BaseModel):
    """A fetched page turned into Markdown, with the images placed on it (in page order)."""

    model_config = _JSON_BYTES

    url: str
    title: str = ""
    markdown: str
    images: list[ImageHit] = Field(default_factory=list)
    content_type: str = "text/html"


class BackendError(Exception):
    """A search backend could not serve a request (unreachable, HTTP error, unknown URL, ...).

    The harness turns it into a structured error observation; ``retryable`` tells the caller whether
    a retry may succeed (timeouts, 429/5xx) or not (404, unknown archive path).
    """

    def __init__(self, message: str, *, retryable: bool = False):
        super().__init__(message)
        self.retryable = retryable


class RequestRejected(BackendError):
    """The request itself cannot be served, whatever the backend's state (a corrupt or too-small query
    image): deterministic, so :class:`kit.web.cache.CachedBackend` keeps the refusal like a result and an
    offline replay reproduces the same error observation."""


@runtime_checkable
class SearchBackend(Protocol):
    """Web search, image search, reverse image search and fetch (docs/contracts.md "Search backend").

    ``name`` identifies the backend in cache keys and provenance. All methods raise
    :class:`BackendError` on failure; they never return partial garbage silently.
    """

    name: str

    async def search(self, query: str, num: int) -> list[SearchHit]: ...

    async def image_search(self, query: str, num: int) -> list[ImageHit]: ...

    async def reverse_image_search(self, image: bytes, num: int) -> ReverseImageResult: ...

    async def fetch(self, url: str) -> Page: ...


# --------------------------------------------------------------------------------------------------
# Messages and policy turns (docs/contracts.md "Policy", "Episode record")
# --------------------------------------------------------------------------------------------------
class ContentPart(BaseModel):
    """A text part, or an image part that names a registered relative file in the workspace."""

    type: Literal["text", "image"]
    text: str | None = None
    image: str | None = None  # registered relative filename, e.g. "search_image_3.jpg"


class ToolCall(BaseModel):
    """A tool call as the model wrote it: ``arguments`` is the raw JSON text (may be malformed)."""

    id: str
    name: str
    arguments: str


class Message(BaseModel):
    """One chat message of an episode.

    ``intervention`` is True for every message the harness inserted on its own (corrective
    observations, loop guard, synthesis request); such messages get loss mask 0 in training.
    """

    role: Literal["system", "user", "assistant", "tool"]
    content: list[ContentPart]
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None  # tool name for role="tool"
    intervention: bool = False
    turn: int = 0

    def text(self) -> str:
        """Concatenated text of the text parts."""
        return "".join(p.text or "" for p in self.content if p.type == "text")

    def image_refs(self) -> list[str]:
        """Registered filenames of the image parts, in order."""
        return [p.image for p in self.content if p.type == "image" and p.image]


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class SamplingParams(BaseModel):
    temperature: float = 0.6
    top_p: float = 0.95
    max_tokens: int = 4096
    seed: int | None = None


class AssistantTurn(BaseModel):
    """What a policy returns for one generation.

    ``text`` is the raw assistant text; ``tool_calls`` are structured calls when the serving stack
    parsed them (function calling). Policies that emit ``<tool_call>`` JSON in text leave the list
    empty and the harness parses the text. ``finish_reason`` is "stop", "length" or "tool_calls".
    """

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: str = "stop"
    usage: Usage = Field(default_factory=Usage)
    raw: dict[str, Any] | None = None  # backend-specific extras (logprobs, model id)


class PolicyError(Exception):
    """The policy could not produce a turn (endpoint unreachable, server error, bad response).

    ``context_overflow`` is True when the model rejected the prompt as longer than its context
    window; the harness then ends the episode in the ``context_limit`` state.
    """

    def __init__(self, message: str, *, retryable: bool = False, context_overflow: bool = False):
        super().__init__(message)
        self.retryable = retryable
        self.context_overflow = context_overflow


@runtime_checkable
class TokenCounter(Protocol):
    """Counts model tokens the way the policy's tokenizer and image processor do.

    ``count_text`` returns the number of tokens of ``text`` with the policy's tokenizer;
    ``count_image`` the number of vision tokens the processor gives an image of ``width`` x
    ``height`` pixels (Qwen2-VL: one per 28x28 pixels after smart resize).
    """

    def count_text(self, text: str) -> int: ...

    def count_image(self, width: int, height: int) -> int: ...


@runtime_checkable
class Policy(Protocol):
    """``async generate(messages, tools, sampling, workspace) -> AssistantTurn`` (docs/contracts.md).

    ``messages`` are model-facing messages whose image parts name files relative to ``workspace``.
    ``tools`` are OpenAI-style function schemas (empty list: tool use disabled).
    Raises :class:`PolicyError` when no turn can be produced.
    """

    name: str

    @property
    def token_counter(self) -> TokenCounter:  # read-only in the protocol: a policy may hold a richer counter
        ...

    async def generate(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        sampling: SamplingParams,
        workspace: str | None = None,
    ) -> AssistantTurn: ...
