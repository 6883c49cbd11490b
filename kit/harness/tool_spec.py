"""What a tool is: its spec (schema, aliases, executor, per-tool policy) and the :func:`tool` decorator.

A tool is an async (or plain) function ``fn(ctx, **arguments) -> Observation | str`` whose typed
signature *is* its argument schema: :func:`tool` derives the JSON schema from the signature with
pydantic and validates every call against the same model before the function runs, so the schema the
model sees and the arguments the function takes cannot drift apart. The five native tools
(:mod:`kit.harness.tools`) are written as ``executor(args, ctx)`` with hand-written Table 4 schemas; a
test checks their executors read only declared arguments. Per-tool policy — exemption from Table 5's
result persistence, a hard result cap, the number of images re-fed to the model — lives on the spec, and
the loop applies it to every tool alike. Adding a tool: docs/tools.md.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kit.harness.episode import Event
from kit.harness.errors import ToolError
from kit.harness.events import EventType

if TYPE_CHECKING:
    from kit.harness.config import HarnessConfig
    from kit.harness.registry import EvidenceRegistry
    from kit.types import SearchBackend


@dataclass
class Observation:
    """A tool's result: ``text`` for the model, ``images`` (registered filenames) re-fed with it, and
    ``data`` (structured details kept in the episode record, not shown to the model)."""

    text: str
    images: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class ToolContext:
    """What an executor may use: the episode's registry (register images with ``registry.register_bytes``),
    backend, summarizer, code sandbox, config (budgets) and the current turn; :meth:`event` records an
    event on the episode."""

    registry: EvidenceRegistry
    backend: SearchBackend
    config: HarnessConfig
    turn: int = 0
    summarizer: Any = None  # kit.harness.summarize.Summarizer
    sandbox_factory: Callable[[], Any] | None = None  # -> kit.harness.code_exec.CodeSandbox
    sandbox: Any = None
    events: list[Event] = field(default_factory=list)

    def event(self, type_: EventType, **detail) -> None:
        self.events.append(Event(type=type_, turn=self.turn, detail=detail))


Executor = Callable[[dict[str, Any], ToolContext], Awaitable[Observation]]


@dataclass
class ToolSpec:
    """Definition of one tool.

    Args:
        name / description / parameters: the OpenAI function schema (``parameters``: a JSON schema object
            with ``properties``), rendered into Table 6's TOOL_LIST.
        executor: ``async (arguments, ctx) -> Observation``; arguments are validated against ``parameters``
            (defaults filled) before it runs; it raises :class:`ToolError` for a failure the model should see.
        aliases / param_aliases: names a model may write instead (argument repair, Table 5).
        persist_exempt: skip Table 5's result persistence (``web_extract``: its summaries are capped per URL).
        max_result_chars: hard cap (characters) on the observation text, applied before persistence; the
            cut is recorded (``result_capped``). ``None``: no cap.
        refeed_limit: at most this many of the returned images are shown to the model (the rest stay
            registered; ``images_not_shown``). An ``int``, or the name of a :class:`HarnessConfig` field.
        timeout_s: per-call timeout; ``None``: ``HarnessConfig.tool_timeout_s``.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    executor: Executor
    aliases: tuple[str, ...] = ()
    param_aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    persist_exempt: bool = False
    max_result_chars: int | None = None
    refeed_limit: int | str = 5
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ValueError(f"tool name {self.name!r}: use letters, digits and underscores")
        if self.parameters.get("type") != "object" or not isinstance(self.parameters.get("properties"), dict):
            raise ValueError(f"tool {self.name!r}: parameters must be a JSON schema object with 'properties'")
        if self.max_result_chars is not None and self.max_result_chars < 1:
            raise ValueError(f"tool {self.name!r}: max_result_chars must be >= 1 or None")

    def schema(self) -> dict[str, Any]:
        """OpenAI-style function schema, as rendered into TOOL_LIST and sent for function calling."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}

    def refeed_cap(self, config: HarnessConfig) -> int:
        """The number of images this tool may show the model per call under ``config``."""
        return int(getattr(config, self.refeed_limit)) if isinstance(self.refeed_limit, str) else self.refeed_limit


async def execute(spec: ToolSpec, args: dict[str, Any], ctx: ToolContext, timeout_s: float) -> Observation:
    """Run ``spec``'s executor with a timeout (``spec.timeout_s`` wins); every failure becomes :class:`ToolError`."""
    timeout_s = spec.timeout_s or timeout_s
    try:
        return await asyncio.wait_for(spec.executor(args, ctx), timeout=timeout_s)
    except ToolError:
        raise
    except TimeoutError as e:
        raise ToolError("timeout", f"{spec.name} did not finish within {timeout_s:.0f} s") from e
    except Exception as e:  # the loop must survive any executor bug; the message keeps the cause
        raise ToolError("tool_failure", f"{spec.name} failed: {type(e).__name__}: {e}") from e


def _strip_titles(schema: Any) -> Any:
    # pydantic adds a "title" to every property: noise in the prompt's TOOL_LIST
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def tool(fn: Callable | None = None, *, name: str | None = None, description: str | None = None,
         aliases: tuple[str, ...] = (), param_aliases: dict[str, tuple[str, ...]] | None = None,
         persist_exempt: bool = False, max_result_chars: int | None = None, refeed_limit: int | str = 5,
         timeout_s: float | None = None):
    """Make a :class:`ToolSpec` from a typed function ``fn(ctx, **arguments)``.

    The parameters after ``ctx`` become the JSON schema (pydantic: ``str``, ``int``, ``list[str]``,
    ``Literal[...]``, ``Annotated[int, Field(ge=1, le=5, description=...)]``; a default makes a parameter
    optional); the description is ``description`` or the docstring's first paragraph. The function may be
    async or plain (run in a thread) and returns an :class:`Observation` or a ``str``. Use as
    ``@tool`` or ``@tool(name=..., persist_exempt=True)``; register the result with
    :func:`kit.harness.tools.register_tool` or pass it to ``Harness(..., tools=[...])``.

    Raises:
        TypeError: ``fn`` has no ``ctx`` first parameter, or a parameter without a type annotation.
    """
    from pydantic import ConfigDict, create_model

    def build(f: Callable) -> ToolSpec:
        sig = inspect.signature(f, eval_str=True)
        params = list(sig.parameters.values())
        if not params or params[0].name != "ctx":
            raise TypeError(f"{f.__name__}: a tool function takes ctx (ToolContext) as its first parameter")
        fields: dict[str, Any] = {}
        for p in params[1:]:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.annotation is inspect.Parameter.empty:
                raise TypeError(f"{f.__name__}: parameter {p.name!r} needs a type annotation (no *args/**kwargs)")
            fields[p.name] = (p.annotation, ... if p.default is inspect.Parameter.empty else p.default)
        model = create_model(f"{f.__name__}_arguments", __config__=ConfigDict(extra="ignore"), **fields)
        parameters = _strip_titles(model.model_json_schema())
        parameters.setdefault("properties", {})
        doc = description or (inspect.getdoc(f) or "").split("\n\n")[0].replace("\n", " ").strip()
        if not doc:
            raise TypeError(f"{f.__name__}: give the tool a description (docstring or description=...)")
        is_async = inspect.iscoroutinefunction(f)

        async def executor(args: dict[str, Any], ctx: ToolContext) -> Observation:
            from pydantic import ValidationError

            try:
                kw = dict(model.model_validate(args))
            except ValidationError as e:  # the JSON schema check passed: a constraint only pydantic knows
                raise ToolError("bad_arguments", "; ".join(f"{'.'.join(map(str, x['loc'])) or 'arguments'}: {x['msg']}"
                                                           for x in e.errors()[:3]), tool=spec.name) from e
            out = await f(ctx, **kw) if is_async else await asyncio.to_thread(f, ctx, **kw)
            if isinstance(out, Observation):
                return out
            if isinstance(out, str):
                return Observation(text=out)
            raise ToolError("tool_failure", f"{spec.name} returned {type(out).__name__}, not str or Observation")

        spec = ToolSpec(name or f.__name__, doc, parameters, executor, aliases=tuple(aliases),
                        param_aliases=dict(param_aliases or {}), persist_exempt=persist_exempt,
                        max_result_chars=max_result_chars, refeed_limit=refeed_limit, timeout_s=timeout_s)
        return spec

    return build(fn) if fn is not None else build


__all__ = ["Executor", "Observation", "ToolContext", "ToolSpec", "execute", "tool"]
