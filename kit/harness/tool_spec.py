"""What a tool is: its spec (schema, aliases, executor, per-tool policy) and the :func:`tool` decorator.

A tool is an async (or plain) function ``fn(ctx, **arguments) -> Observation | str`` whose typed
signature *is* its argument schema: :func:`tool` derives the JSON schema from the signature with
pydantic and validates every call against the same model before the function runs, so the schema the
model sees and the arguments the function takes cannot drift apart. A parameter's description is its
``Field(description=...)`` or, failing that, its entry in the docstring's Google-style ``Args:`` section.
The native tools (:mod:`kit.harness.tools`, :mod:`kit.harness.toolsets`) are written the same way.
Per-tool policy — exemption from Table 5's result persistence, a hard result cap, the number of images
re-fed to the model — lives on the spec, and the loop applies it to every tool alike. Adding a tool: docs/tools.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import math
import re
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
    """A tool's result: ``text`` for the model and ``images`` (filenames registered in this episode's
    registry) re-fed with it. ``data``: structured details for the caller of :func:`execute` (benchmarks,
    tests); the episode record does not store it (record what matters with ``ctx.event``)."""

    text: str
    images: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


# Pixels per vision-token side when a policy does not say (e.g. an API endpoint whose processor is
# unknown). Kit choice: Qwen2/2.5-VL's 28 px (14-px patch x 2 merge); Qwen3-VL is 32 px (16 x 2).
DEFAULT_VISION_TOKEN_PIXELS = 28

# Bounds on the size of one tool argument, in characters: the native tools' JSON schemas
# (kit.harness.tools) carry them as maxLength, so the harness's argument check, the MCP server's
# inputSchema and serve-web's request models (kit.serve) refuse the same oversized input.
# Kit choices: Serper and Google cap a query at 2,048 characters; 8,192 is the common URL ceiling
# of HTTP servers; a registered image's file name is short (search_image_12.jpg).
MAX_QUERY_CHARS = 2048
MAX_URL_CHARS = 8192
MAX_IMAGE_REF_CHARS = 256
MAX_GOAL_CHARS = 4096


def policy_vision_token_pixels(policy: Any) -> int:
    """Side in pixels of one vision token of ``policy`` (``patch_size * merge_size`` of its processor).

    Read from ``policy.vision_token_pixels`` if set, else from ``policy.token_counter.factor`` (a
    :class:`kit.policy.tokens.QwenTokenCounter`), else :data:`DEFAULT_VISION_TOKEN_PIXELS` (28).
    The harness sizes image caps given in vision tokens with it (Table 4's 512-token thumbnails).

    Raises:
        ValueError: the policy declares a non-positive or non-integer size.
    """
    px = getattr(policy, "vision_token_pixels", None)
    if px is None:
        px = getattr(getattr(policy, "token_counter", None), "factor", None)
    if px is None:
        return DEFAULT_VISION_TOKEN_PIXELS
    if isinstance(px, bool) or not isinstance(px, int) or px <= 0:
        raise ValueError(f"policy {getattr(policy, 'name', type(policy).__name__)!r} has vision_token_pixels={px!r}; "
                         "expected a positive int (patch_size * merge_size, e.g. 28 or 32)")
    return px


@dataclass
class ToolContext:
    """What an executor may use: the episode's registry (register images with ``registry.register_bytes``),
    backend, summarizer, code sandbox, config (budgets) and the current turn; :meth:`event` records an
    event on the episode. ``vision_token_pixels``: the policy's pixels per vision-token side
    (:func:`policy_vision_token_pixels`), for caps given in vision tokens."""

    registry: EvidenceRegistry
    backend: SearchBackend
    config: HarnessConfig
    turn: int = 0
    summarizer: Any = None  # kit.harness.summarize.Summarizer
    sandbox_factory: Callable[[], Any] | None = None  # -> kit.harness.code_exec.CodeSandbox
    sandbox: Any = None
    events: list[Event] = field(default_factory=list)
    vision_token_pixels: int = DEFAULT_VISION_TOKEN_PIXELS

    def event(self, type_: EventType, **detail) -> None:
        """Record an event on the episode. An added tool records its own findings as
        ``EventType.TOOL_NOTE`` with a ``name`` in ``detail`` (the set of event types is closed).

        Raises:
            ValueError: ``type_`` is not an :class:`EventType`."""
        if type_ not in EventType.__members__.values():
            raise ValueError(f"unknown event type {type_!r}: use an EventType, e.g. "
                             f"ctx.event(EventType.TOOL_NOTE, name={str(type_)[:40]!r}, ...)")
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
        bad = _spec_problems(self)
        if bad:
            raise ValueError(f"tool {self.name!r}: " + "; ".join(bad))

    def schema(self) -> dict[str, Any]:
        """OpenAI-style function schema, as rendered into TOOL_LIST and sent for function calling."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}

    def refeed_cap(self, config: HarnessConfig) -> int:
        """The number of images this tool may show the model per call under ``config``."""
        return int(getattr(config, self.refeed_limit)) if isinstance(self.refeed_limit, str) else self.refeed_limit


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")  # OpenAI function names: ^[a-zA-Z0-9_-]{1,64}$


def _int_config_fields() -> set[str]:
    from kit.harness.config import HarnessConfig

    return {n for n, f in HarnessConfig.model_fields.items() if f.annotation is int}


def _spec_problems(spec: ToolSpec) -> list[str]:
    """What is wrong with a spec's definition (empty: nothing); checked where the tool is defined."""
    bad = []
    if not isinstance(spec.name, str) or not _NAME.match(spec.name):
        bad.append("the name must match ^[A-Za-z_][A-Za-z0-9_-]{0,63}$ (OpenAI function names)")
    if not isinstance(spec.description, str) or not spec.description.strip():
        bad.append("a non-empty description is needed")
    if not isinstance(spec.parameters, dict) or spec.parameters.get("type") != "object" \
            or not isinstance(spec.parameters.get("properties"), dict):
        bad.append("parameters must be a JSON schema object with 'properties'")
    if not callable(spec.executor):
        bad.append("the executor must be callable")
    if isinstance(spec.aliases, str) or not all(isinstance(a, str) and a for a in spec.aliases):
        bad.append("aliases must be a tuple of names (not one string)")
    if not isinstance(spec.param_aliases, dict) or any(isinstance(v, str) or not all(isinstance(a, str) for a in v)
                                                        for v in spec.param_aliases.values()):
        bad.append("param_aliases must map a parameter to a tuple of names")
    if not isinstance(spec.persist_exempt, bool):
        bad.append("persist_exempt must be True or False")
    m = spec.max_result_chars
    if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
        bad.append("max_result_chars must be an int >= 1 or None")
    r = spec.refeed_limit
    if isinstance(r, str):
        if r not in _int_config_fields():
            bad.append(f"refeed_limit {r!r} names no integer HarnessConfig field")
    elif isinstance(r, bool) or not isinstance(r, int) or r < 0:
        bad.append("refeed_limit must be an int >= 0 or the name of an integer HarnessConfig field")
    t = spec.timeout_s
    if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0):
        bad.append("timeout_s must be a finite number of seconds > 0, or None (HarnessConfig.tool_timeout_s)")
    return bad


def _check_observation(spec: ToolSpec, obs: Any, ctx: ToolContext) -> Observation:
    """The executor's result, checked: an :class:`Observation` with ``str`` text and images registered in this
    episode (a tool cannot make the model see a file by naming it).

    Raises:
        ToolError: ``bad_observation``."""
    if not isinstance(obs, Observation):
        raise ToolError("bad_observation", f"{spec.name} returned {type(obs).__name__}, not an Observation")
    if not isinstance(obs.text, str):
        raise ToolError("bad_observation", f"{spec.name} returned text of type {type(obs.text).__name__}, not str")
    if isinstance(obs.images, str) or not all(isinstance(i, str) for i in obs.images):
        raise ToolError("bad_observation", f"{spec.name} returned images that are not a list of file names")
    known = {e.filename for e in ctx.registry.images}
    unknown = [i for i in obs.images if i not in known]
    if unknown:
        raise ToolError("bad_observation", f"{spec.name} returned images not registered in this episode: "
                        f"{[u[:80] for u in unknown[:5]]} (register them with ctx.registry.register_bytes)")
    return obs


async def execute(spec: ToolSpec, args: dict[str, Any], ctx: ToolContext, timeout_s: float) -> Observation:
    """Run ``spec``'s executor with a timeout (``spec.timeout_s`` wins) and check its result; every failure
    becomes :class:`ToolError` (``timeout``, ``tool_failure``, ``bad_observation``, or the tool's own code)."""
    timeout_s = spec.timeout_s or timeout_s
    try:
        obs = await asyncio.wait_for(spec.executor(args, ctx), timeout=timeout_s)
    except ToolError:
        raise
    except TimeoutError as e:
        raise ToolError("timeout", f"{spec.name} did not finish within {timeout_s:g} s") from e
    except asyncio.CancelledError as e:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # the episode itself is being cancelled
        raise ToolError("tool_failure", f"{spec.name} was cancelled from inside (CancelledError)") from e
    except Exception as e:  # the loop must survive any executor bug; the message keeps the cause
        raise ToolError("tool_failure", f"{spec.name} failed: {type(e).__name__}: {e}") from e
    return _check_observation(spec, obs, ctx)


_TOOL_THREADS: concurrent.futures.ThreadPoolExecutor | None = None


def _tool_threads() -> concurrent.futures.ThreadPoolExecutor:
    # Plain (sync) tool functions run here, not in asyncio's default pool: a thread cannot be stopped, so a
    # hung tool keeps its worker after its timeout; its own pool keeps that from starving the ZIM backend and
    # the sandbox, which use the default pool.
    global _TOOL_THREADS
    if _TOOL_THREADS is None:
        _TOOL_THREADS = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="kit-tool")
    return _TOOL_THREADS


def _strip_titles(schema: Any) -> Any:
    # pydantic adds a "title" to every property: noise in the prompt's TOOL_LIST
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


# The key order of a rendered schema (what the model reads: function calling sends it as written): the
# order the kit's hand-written Table 4 schemas always had, type first and description last; keys not
# listed keep pydantic's order after these.
_KEY_ORDER = ("type", "anyOf", "oneOf", "allOf", "properties", "items", "enum", "const", "minLength", "maxLength",
              "pattern", "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "minItems", "maxItems",
              "default", "description", "required")
_NAMED_SCHEMAS = ("properties", "$defs", "patternProperties")  # {name: schema}: the names keep their order
_SUB_SCHEMA = ("items", "additionalProperties", "not", "contains", "propertyNames")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


def _order_keys(schema: Any) -> Any:
    """``schema`` (a JSON schema) with each schema object's keys in :data:`_KEY_ORDER`; property names,
    ``required`` and values (``default``, ``enum``) keep their order."""
    if not isinstance(schema, dict):
        return schema
    rank = {k: i for i, k in enumerate(_KEY_ORDER)}
    out: dict[str, Any] = {}
    for k in sorted(schema, key=lambda k: rank.get(k, len(rank))):  # stable: unlisted keys keep their order
        v = schema[k]
        if k in _NAMED_SCHEMAS and isinstance(v, dict):
            v = {n: _order_keys(s) for n, s in v.items()}
        elif k in _SUB_SCHEMA:
            v = _order_keys(v)
        elif k in _SCHEMA_LISTS and isinstance(v, list):
            v = [_order_keys(s) for s in v]
        out[k] = v
    return out


_ARGS_HEADER = re.compile(r"^(\s*)(Args|Arguments|Parameters):\s*$")
_ARG_ENTRY = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def docstring_args(doc: str | None) -> dict[str, str]:
    """Parameter descriptions from a Google-style docstring's ``Args:`` section (also ``Arguments:`` /
    ``Parameters:``): ``{name: description}``, continuation lines joined with one space, a ``(type)``
    after the name dropped. Parsed here rather than with a docstring library: the Google layout is one
    indented block, and the core install stays free of another dependency.

    >>> docstring_args("Do it.\\n\\nArgs:\\n    n (int): how many\\n        at most.\\n    s: text\\n")
    {'n': 'how many at most.', 's': 'text'}
    """
    lines = inspect.cleandoc(doc or "").splitlines()
    out: dict[str, str] = {}
    i = 0
    while i < len(lines):
        head = _ARGS_HEADER.match(lines[i])
        i += 1
        if not head:
            continue
        base, entry_indent, name = len(head.group(1)), None, None
        while i < len(lines):
            line = lines[i]
            indent = len(line) - len(line.lstrip())
            if line.strip() and indent <= base:
                break  # the next section
            i += 1
            if not line.strip():
                continue
            if entry_indent is None:
                entry_indent = indent
            m = _ARG_ENTRY.match(line.strip()) if indent == entry_indent else None
            if m:
                name = m.group(1).lstrip("*")
                out[name] = m.group(2).strip()
            elif name is not None:  # a continuation line
                out[name] = f"{out[name]} {line.strip()}".strip()
        break
    return out


def _allows_null(schema: dict[str, Any]) -> bool:
    t = schema.get("type")
    return t == "null" or (isinstance(t, list) and "null" in t) or any(
        isinstance(s, dict) and _allows_null(s) for s in schema.get("anyOf", []) + schema.get("oneOf", []))


def _argument_fields(label: str, params: list[inspect.Parameter]) -> dict[str, Any]:
    """``{name: (annotation, default or ...)}`` of a tool's argument parameters, each checked."""
    from pydantic import TypeAdapter

    fields: dict[str, Any] = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY) or p.annotation is inspect.Parameter.empty:
            raise TypeError(f"{label}: parameter {p.name!r} needs a type annotation and must be passable by name "
                            "(no *args, **kwargs or positional-only parameters)")
        if p.name.startswith("_") or p.name.startswith("model_"):
            raise TypeError(f"{label}: parameter {p.name!r}: names starting with '_' or 'model_' cannot be arguments")
        if p.default is not inspect.Parameter.empty:
            try:
                TypeAdapter(p.annotation).validate_python(p.default)
            except Exception as e:
                raise TypeError(f"{label}: the default {p.default!r} of {p.name!r} does not fit its type: "
                                f"{str(e).splitlines()[-1][:200]}") from None
        fields[p.name] = (p.annotation, ... if p.default is inspect.Parameter.empty else p.default)
    return fields


def _argument_schema(label: str, f: Callable, model: Any, fields: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of ``model`` with the docstring's ``Args:`` descriptions, keys in the kit's order."""
    parameters = _strip_titles(model.model_json_schema())
    parameters.setdefault("properties", {})
    if set(parameters["properties"]) != set(fields):
        raise TypeError(f"{label}: parameters {sorted(set(fields) - set(parameters['properties']))} did not make "
                        "it into the JSON schema")
    documented = docstring_args(inspect.getdoc(f))
    stray = sorted(set(documented) - set(fields) - {"ctx"})
    if stray:
        raise TypeError(f"{label}: the docstring's Args: names {stray}, which are not parameters of the tool "
                        f"(parameters: {sorted(fields)})")
    for pname, prop in parameters["properties"].items():
        if documented.get(pname) and "description" not in prop:
            prop["description"] = documented[pname]
        if prop.get("default", 0) is None and not _allows_null(prop):
            del prop["default"]  # ``X | SkipJsonSchema[None] = None``: optional, no default to show
    return _order_keys(parameters)


def tool(fn: Callable | None = None, *, name: str | None = None, description: str | None = None,
         aliases: tuple[str, ...] = (), param_aliases: dict[str, tuple[str, ...]] | None = None,
         persist_exempt: bool = False, max_result_chars: int | None = None, refeed_limit: int | str = 5,
         timeout_s: float | None = None):
    """Make a :class:`ToolSpec` from a typed function ``fn(ctx, **arguments)``.

    The parameters after ``ctx`` become the JSON schema (pydantic: ``str``, ``int``, ``list[str]``,
    ``Literal[...]``, ``Annotated[int, Field(ge=1, le=5, description=...)]``; a default makes a parameter
    optional; ``X | SkipJsonSchema[None] = None`` an optional one shown without a default); a parameter's
    description is its ``Field(description=...)``, else its entry in the docstring's ``Args:`` section
    (:func:`docstring_args`). The tool's description is ``description`` or the docstring's first
    paragraph. Schema keys are ordered as the kit's schemas always were (:func:`_order_keys`). The function may be
    async or plain (run in a thread) and returns an :class:`Observation` or a ``str``. Use as
    ``@tool`` or ``@tool(name=..., persist_exempt=True)``; register the result with
    :func:`kit.harness.tools.register_tool` or pass it to ``Harness(..., tools=[...])``.

    Raises:
        TypeError: ``fn`` has no ``ctx`` first parameter, a parameter without a type annotation, or an
            ``Args:`` entry naming no parameter (a misspelt name would lose its description).
    """
    from pydantic import ConfigDict, create_model

    def build(f: Callable) -> ToolSpec:
        label = name or getattr(f, "__name__", None)
        if not isinstance(label, str) or label == "<lambda>":
            raise TypeError(f"{f!r}: give the tool a name (name=...): it has no usable __name__")
        sig = inspect.signature(f, eval_str=True)
        params = list(sig.parameters.values())
        if not params or params[0].name != "ctx":
            raise TypeError(f"{label}: a tool function takes ctx (ToolContext) as its first parameter")
        fields = _argument_fields(label, params[1:])
        model = create_model(f"{label}_arguments", __config__=ConfigDict(extra="ignore"), **fields)
        parameters = _argument_schema(label, f, model, fields)
        doc = description or (inspect.getdoc(f) or "").split("\n\n")[0].replace("\n", " ").strip()
        if not doc:
            raise TypeError(f"{label}: give the tool a description (docstring or description=...)")
        call_method = type(f).__call__ if not inspect.isroutine(f) else None  # a callable object
        is_async = inspect.iscoroutinefunction(inspect.unwrap(f)) or inspect.iscoroutinefunction(call_method)

        async def executor(args: dict[str, Any], ctx: ToolContext) -> Observation:
            from pydantic import ValidationError

            try:
                kw = dict(model.model_validate(args))
            except ValidationError as e:  # the JSON schema check passed: a constraint only pydantic knows
                raise ToolError("bad_arguments", "; ".join(f"{'.'.join(map(str, x['loc'])) or 'arguments'}: {x['msg']}"
                                                           for x in e.errors()[:3]), tool=spec.name) from e
            if is_async:
                out = await f(ctx, **kw)
            else:
                out = await asyncio.get_running_loop().run_in_executor(_tool_threads(), functools.partial(f, ctx, **kw))
            if inspect.isawaitable(out):  # a plain wrapper around an async function
                out = await out
            if isinstance(out, Observation):
                return out
            if isinstance(out, str):
                return Observation(text=out)
            raise ToolError("bad_observation", f"{spec.name} returned {type(out).__name__}, not str or Observation")

        if isinstance(aliases, str) or (param_aliases and any(isinstance(v, str) for v in param_aliases.values())):
            raise TypeError(f"{label}: aliases are tuples of names, e.g. aliases=('convert',)")
        spec = ToolSpec(label, doc, parameters, executor, aliases=tuple(aliases),
                        param_aliases=dict(param_aliases or {}), persist_exempt=persist_exempt,
                        max_result_chars=max_result_chars, refeed_limit=refeed_limit, timeout_s=timeout_s)
        return spec

    return build(fn) if fn is not None else build


__all__ = ["MAX_GOAL_CHARS", "MAX_IMAGE_REF_CHARS", "MAX_QUERY_CHARS", "MAX_URL_CHARS", "Executor", "Observation",
           "ToolContext", "ToolSpec", "docstring_args", "execute", "tool"]
