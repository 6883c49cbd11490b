"""An MCP tool server for the five WeAgent-Harness tools (issue 17 part 7; WeAgent Table 4).

``python -m kit.cli serve-mcp ZIM... --transport stdio|http`` exposes web_search, web_search_for_image,
web_search_based_on_image, web_extract and execute_code over the Model Context Protocol with the official
``mcp`` SDK, backed by the local ZIM web (:class:`kit.web.zim.LocalZimWeb`) and the kit's code sandbox.

One source: each tool's MCP ``inputSchema`` is its harness :class:`~kit.harness.tool_spec.ToolSpec`'s
``parameters`` plus one optional ``episode`` string; a call is repaired and validated by the harness's own
:func:`~kit.harness.recovery.repair_call` and run by :func:`~kit.harness.tool_spec.execute`, and its result is
the harness's :class:`~kit.harness.tool_spec.Observation`: the text, then for every image shown to the model
a text block naming its registry file and reference (``Image search_image_1.png (reference <search_image_1>)``;
``.jpg`` for JPEG bytes) followed by the image as MCP ``ImageContent`` (base64 PNG or JPEG, as the registry
stored it). An argument the schema does not name is refused (``unknown_argument``: MCP clients build calls from
the schema, so the harness's silent ``ignored_field`` repair does not apply). A failed call (bad or unknown
arguments, unknown reference, backend failure) is an MCP tool error (``isError``) whose text is the harness's
structured error observation (:meth:`~kit.harness.errors.ToolError.observation_json`), never a protocol error
or a crash.

Episodes (state across calls). Image references live in an episode's
:class:`~kit.harness.registry.EvidenceRegistry` (and execute_code's variables in its sandbox). MCP 2026-07-28
has no sessions (SEP-2567: cross-call state travels in a server-minted handle passed back as a tool
argument), so every result carries its episode handle (``structuredContent.episode`` and a last text block);
pass it back as ``"episode"`` to use the same registry. Without a handle: over stdio the server's one client
shares one default episode; over HTTP a handshake-era client's ``Mcp-Session-Id`` names its episode, and a
call with neither starts a new episode. Episodes are kept in memory (LRU, ``max_episodes``) and each has a
temporary workspace that is removed when it is evicted or the server closes. docs/tools.md "MCP server".
"""

from __future__ import annotations

import asyncio
import base64
import copy
import secrets
import shutil
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_core import to_jsonable_python

from kit.harness.config import HarnessConfig
from kit.harness.errors import ToolError
from kit.harness.registry import _KEEP_FORMATS, KINDS, EvidenceRegistry
from kit.harness.tool_spec import ToolContext, ToolSpec, execute
from kit.harness.tools import NATIVE_TOOLS
from kit.types import SearchBackend

EPISODE_ARG = "episode"  # the one argument the MCP schemas add to the harness's (SEP-2567 state handle)
_EPISODE_SCHEMA = {"type": "string", "minLength": 1, "maxLength": 64,
                   "description": "episode handle returned by an earlier call of this server (optional): image "
                                  "references and execute_code variables of that episode stay usable"}


@dataclass
class _Episode:
    handle: str
    workspace: Path
    ctx: ToolContext
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    used: float = field(default_factory=time.monotonic)


MAX_NAMED_UNKNOWN = 10  # unknown argument names quoted in one error (each cut at 64 characters)


def check_argument_names(spec: ToolSpec, arguments: dict[str, Any]) -> None:
    """Refuse arguments the tool's MCP ``inputSchema`` does not name (the ``episode`` handle already taken out):
    an MCP client builds calls from the schema, so an unknown name is a mistake to report, not a value to drop
    (the harness's own loop drops it as ``ignored_field`` repair; a harness parameter alias such as ``q`` for
    ``query`` is not in the schema either, and the error names the parameter it stands for).

    Raises:
        ToolError: ``unknown_argument`` naming the unknown arguments and the accepted ones (``unknown``,
            ``accepted`` and, for aliases, ``did_you_mean`` in the detail).
    """
    props = spec.parameters["properties"]
    unknown = [str(k) for k in arguments if k not in props]
    if not unknown:
        return
    accepted = [*props, EPISODE_ARG]
    lowered = {p.lower(): p for p in props} | {a.lower(): p for p, aliases in spec.param_aliases.items() for a in aliases}
    shown = [k[:64] for k in unknown[:MAX_NAMED_UNKNOWN]]
    more = f" and {len(unknown) - len(shown)} more" if len(unknown) > len(shown) else ""
    meant = {k[:64]: lowered[k.strip().lower()] for k in unknown[:MAX_NAMED_UNKNOWN] if k.strip().lower() in lowered}
    hint = "".join(f"; for {k!r} use {p!r}" for k, p in meant.items())
    noun = "argument" if len(unknown) == 1 else "arguments"
    raise ToolError("unknown_argument", f"{spec.name} has no {noun} {', '.join(repr(k) for k in shown)}{more}{hint}; "
                    f"it accepts: {', '.join(accepted)}", tool=spec.name, unknown=shown, accepted=accepted,
                    **({"did_you_mean": meant} if meant else {}))


def mcp_input_schema(spec: ToolSpec) -> dict[str, Any]:
    """The MCP ``inputSchema`` of ``spec``: a copy of its harness ``parameters`` plus the optional
    ``episode`` handle (the only addition)."""
    schema = copy.deepcopy(spec.parameters)
    schema["properties"][EPISODE_ARG] = dict(_EPISODE_SCHEMA)
    return schema


class McpToolServer:
    """The harness's tools behind MCP, transport-independent (:meth:`lowlevel` wraps it in an SDK server).

    Args:
        backend: any :class:`kit.types.SearchBackend` (the CLI gives :class:`kit.web.zim.LocalZimWeb`).
        config: harness budgets (re-feed caps, timeouts, sandbox limits); default :class:`HarnessConfig`.
        tools: the tools offered, by name (default: the five native tools of Table 4).
        workspace_root: folder for the episodes' workspaces (default: a new temporary folder, removed on
            :meth:`close`).
        summarizer: web_extract's summarizer (default: the harness's extractive BM25 summarizer).
        sandbox_factory: ``(workspace, config) -> (() -> CodeSandbox)`` as for :class:`kit.harness.Harness`.
        max_episodes: episodes kept at once; the least recently used is closed beyond it.

    Raises:
        ValueError: an unknown tool name, or ``max_episodes`` < 1.
    """

    def __init__(self, backend: SearchBackend, config: HarnessConfig | None = None, *,
                 tools: list[str] | None = None, workspace_root: str | Path | None = None, summarizer: Any = None,
                 sandbox_factory: Callable[[Path, HarnessConfig], Callable[[], Any]] | None = None,
                 max_episodes: int = 256):
        from kit.harness.loop import _default_sandbox_factory
        from kit.harness.summarize import ExtractiveSummarizer

        names = list(NATIVE_TOOLS) if tools is None else list(tools)
        unknown = [n for n in names if n not in NATIVE_TOOLS]
        if unknown:
            raise ValueError(f"unknown tools {unknown}; the MCP server offers {list(NATIVE_TOOLS)}")
        if max_episodes < 1:
            raise ValueError(f"max_episodes must be >= 1, got {max_episodes}")
        self.backend = backend
        self.config = config or HarnessConfig()
        self.specs: dict[str, ToolSpec] = {n: NATIVE_TOOLS[n] for n in NATIVE_TOOLS if n in names}
        self.summarizer = summarizer or ExtractiveSummarizer()
        self.sandbox_factory = sandbox_factory or _default_sandbox_factory
        self._own_root = workspace_root is None
        self.workspace_root = Path(workspace_root or tempfile.mkdtemp(prefix="kit-mcp-"))
        self.max_episodes = max_episodes
        self._episodes: OrderedDict[str, _Episode] = OrderedDict()
        self._defaults: dict[str, str] = {}  # default key (stdio, session id) -> episode handle

    # ------------------------------------------------------------------ tools
    def list_tools(self):
        """The offered tools as MCP ``Tool`` objects (name, description, :func:`mcp_input_schema`)."""
        import mcp.types as types

        return [types.Tool(name=s.name, description=s.description, input_schema=mcp_input_schema(s))
                for s in self.specs.values()]

    # ------------------------------------------------------------------ episodes
    def _new_episode(self) -> _Episode:
        handle = secrets.token_urlsafe(12)  # unguessable: a handle is the only key to an episode's images
        ws = self.workspace_root / handle
        registry = EvidenceRegistry(ws, max_pixels=self.config.max_image_pixels)
        ctx = ToolContext(registry=registry, backend=self.backend, config=self.config, summarizer=self.summarizer,
                          sandbox_factory=self.sandbox_factory(ws, self.config))
        ep = _Episode(handle, ws, ctx)
        self._episodes[handle] = ep
        return ep

    async def _evict(self, keep: _Episode) -> None:
        # least recently used first; an episode with a call in flight (or about to run one) is never closed
        idle = [ep for ep in self._episodes.values() if ep is not keep and not ep.lock.locked()]
        for ep in idle[: max(0, len(self._episodes) - self.max_episodes)]:
            del self._episodes[ep.handle]
            await self._close_episode(ep)

    async def _close_episode(self, ep: _Episode) -> None:
        if ep.ctx.sandbox is not None:
            try:
                await ep.ctx.sandbox.close()
            except Exception:  # a broken sandbox must not keep the workspace or other episodes alive
                pass
        shutil.rmtree(ep.workspace, ignore_errors=True)
        for k in [k for k, h in self._defaults.items() if h == ep.handle]:
            del self._defaults[k]

    def _episode(self, handle: Any, default_key: str | None) -> _Episode:
        """The episode a call runs in. Raises :class:`ToolError` ``unknown_episode`` for a handle this
        server did not mint (or has evicted)."""
        if handle is not None:
            if not isinstance(handle, str) or handle not in self._episodes:
                raise ToolError("unknown_episode", f"{str(handle)[:80]!r} is not an open episode of this server "
                                "(omit 'episode' to start a new one)", open_episodes=len(self._episodes))
            ep = self._episodes[handle]
        elif default_key is not None and self._defaults.get(default_key) in self._episodes:
            ep = self._episodes[self._defaults[default_key]]
        else:
            ep = self._new_episode()
            if default_key is not None:
                self._defaults[default_key] = ep.handle
        self._episodes.move_to_end(ep.handle)
        ep.used = time.monotonic()
        return ep

    # ------------------------------------------------------------------ calls
    async def call_tool(self, name: str, arguments: dict[str, Any] | None, *, default_key: str | None = None):
        """Run one tool call; returns an MCP ``CallToolResult`` (``is_error`` with the harness's structured
        error observation for any failure). ``default_key`` names the episode used when the arguments carry
        no ``episode`` handle (None: a new episode)."""
        import mcp.types as types

        args = dict(arguments or {})
        handle = args.pop(EPISODE_ARG, None)
        ep: _Episode | None = None
        try:
            from kit.harness.recovery import repair_call, resolve_tool_name

            ep = self._episode(handle, default_key)
            tool, _ = resolve_tool_name(name, self.specs)  # ToolError unknown_tool
            check_argument_names(self.specs[tool], args)  # an argument the schema does not name is an error
            fixed = repair_call(name, args, self.specs)  # the harness's argument repair + Table 4 schema check
            spec = self.specs[fixed.name]
            async with ep.lock:  # one call at a time per episode: the registry and sandbox are not shared-safe
                if ep.handle not in self._episodes:  # closed while this call waited for its turn
                    raise ToolError("unknown_episode", f"episode {ep.handle!r} was closed (server shutdown)")
                await self._evict(keep=ep)  # under ep's lock: no other call can close ep meanwhile
                n_events = len(ep.ctx.events)
                obs = await execute(spec, fixed.arguments, ep.ctx, self.config.tool_timeout_s)
                events = ep.ctx.events[n_events:]
                content, images = self._content(spec, obs, ep)
        except ToolError as e:
            if e.code == "bad_image_ref" and handle is None:
                e.detail.setdefault("hint", "image references belong to one episode: pass the 'episode' handle "
                                            "returned with the image")
            structured = {**to_jsonable_python(e.observation(), fallback=str), EPISODE_ARG: ep.handle if ep else None}
            return types.CallToolResult(content=[types.TextContent(type="text", text=e.observation_json())],
                                        structured_content=structured, is_error=True)
        except Exception as e:  # the server must answer every call (a bug here is still the client's observation)
            err = ToolError("tool_failure", f"{name} failed in the MCP server: {type(e).__name__}: {e}")
            return types.CallToolResult(content=[types.TextContent(type="text", text=err.observation_json())],
                                        structured_content=err.observation(), is_error=True)
        content.append(types.TextContent(type="text", text=f"[episode: {ep.handle}] pass \"episode\": "
                                         f"\"{ep.handle}\" in later calls to refer to these images"))
        structured = {EPISODE_ARG: ep.handle, "tool": spec.name, "repairs": fixed.repairs, "images": images,
                      "data": to_jsonable_python(obs.data, fallback=str),
                      "events": [{"type": str(ev.type), **to_jsonable_python(ev.detail, fallback=str)} for ev in events]}
        return types.CallToolResult(content=content, structured_content=structured, is_error=False)

    def _content(self, spec: ToolSpec, obs, ep: _Episode) -> tuple[list, list[dict[str, Any]]]:
        """MCP content of an observation: its text (with the tool's hard cap and re-feed cap applied as the
        loop applies them), then per shown image its reference text and its ``ImageContent``."""
        import mcp.types as types

        text, shown = obs.text, list(obs.images)
        if spec.max_result_chars is not None and len(text) > spec.max_result_chars:
            text = text[: spec.max_result_chars] + f"\n\n[Result cut at {spec.max_result_chars} of {len(text)} characters.]"
        cap = spec.refeed_cap(self.config)
        if len(shown) > cap:
            text += f"\n[{len(shown) - cap} more registered images not shown: {', '.join(shown[cap:])}]"
            shown = shown[:cap]
        content: list = [types.TextContent(type="text", text=text)]
        images = []
        reg = ep.ctx.registry
        for name in shown:
            entry = reg.resolve(name)
            data = reg.read(name)  # sha256-checked: what was registered is what the client sees
            where = " ".join(x for x in (entry.title or "", entry.page_url or entry.source_url or "") if x)
            content.append(types.TextContent(type="text", text=image_label(entry.filename, entry.ref, where)))
            content.append(types.ImageContent(type="image", data=base64.b64encode(data).decode("ascii"),
                                              mime_type=entry.mime))
            images.append({"filename": entry.filename, "ref": entry.ref, "mime": entry.mime, "kind": entry.kind,
                           "width": entry.width, "height": entry.height, "title": entry.title,
                           "page_url": entry.page_url, "source_url": entry.source_url})
        return content, images

    async def close(self) -> None:
        """Close every episode (sandboxes, workspaces) and the temporary workspace root if it is the server's."""
        while self._episodes:
            _, ep = self._episodes.popitem()
            await self._close_episode(ep)
        if self._own_root:
            shutil.rmtree(self.workspace_root, ignore_errors=True)

    # ------------------------------------------------------------------ SDK server
    def lowlevel(self, *, default_key: Callable[[Any], str | None] = lambda ctx: None):
        """An ``mcp.server.lowlevel.Server`` answering ``tools/list`` and ``tools/call`` with this server;
        ``default_key(request_context)`` picks the episode of a call without a handle."""
        import mcp.types as types
        from mcp.server.lowlevel import Server

        async def on_list_tools(ctx, params):
            return types.ListToolsResult(tools=self.list_tools())

        async def on_call_tool(ctx, params: types.CallToolRequestParams):
            return await self.call_tool(params.name, params.arguments, default_key=default_key(ctx))

        from kit import __version__ as version

        return Server("mmsearch-kit", version=version, instructions=_INSTRUCTIONS,
                      on_list_tools=on_list_tools, on_call_tool=on_call_tool)


def image_label(filename: str, ref: str, where: str = "") -> str:
    """The text block before each image of a result: ``Image search_image_1.png (reference <search_image_1>)``
    and, when known, ``: <title> <page URL>``."""
    return f"Image {filename} (reference <{ref}>)" + (f": {where}" if where else "")


def instructions() -> str:
    """The server's MCP ``instructions``: how images are named, built from the registry's own naming
    (:class:`~kit.harness.registry.EvidenceRegistry`: ``<kind>_<n>.<png|jpg>``, reference ``<kind>_<n>``)."""
    exts = sorted({ext for ext, _mime in _KEEP_FORMATS.values()}, key=lambda e: e != "png")  # png (converted), jpg
    kinds = ", ".join(k for k in KINDS if k not in ("user_image", "rendered_obs"))  # no task input, no V-Fold here
    return ("WeAgent-Harness tools over an offline web (Kiwix ZIM archives). Every image comes back as image content "
            f"right after a text block naming it, e.g. \"{image_label(f'search_image_1.{exts[0]}', 'search_image_1')}: "
            f"<title> <page URL>\". The file name is <kind>_<n>.{' or .'.join(exts)} (the format the image was stored "
            f"in; kinds: {kinds}) and the reference is the same name without the extension. To use an image later "
            "(the \"image\" of web_search_based_on_image), pass its reference (search_image_1) or its exact file name, "
            "and the \"episode\" handle returned with it. Send only the arguments each tool's inputSchema names: "
            "any other is refused (error unknown_argument).")


_INSTRUCTIONS = instructions()


def _session_key(ctx: Any) -> str | None:
    # A handshake-era HTTP client's Mcp-Session-Id; 2026-07-28 requests carry none (SEP-2567)
    headers = getattr(getattr(ctx, "request", None), "headers", None)
    sid = headers.get("mcp-session-id") if headers is not None else None
    return f"session:{sid}" if sid else None


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def http_app(server: McpToolServer, *, host: str = "127.0.0.1", api_key: str | None = None):
    """The streamable-HTTP ASGI app (path ``/mcp``) of ``server``. With ``api_key`` every request needs
    ``Authorization: Bearer <key>`` (any case of ``Bearer``) or ``X-API-Key: <key>``, compared as bytes
    (:mod:`kit.serve.auth`); a missing or wrong key is HTTP 401 with a JSON error. Loopback hosts keep the
    SDK's DNS-rebinding protection. The episodes are closed when the app's lifespan ends (server shutdown).

    Raises:
        ValueError: ``api_key`` is empty or not visible ASCII (it could never match).
    """
    import json

    from kit.serve.auth import check_api_key, key_matches

    check_api_key(api_key, "api_key")

    app = server.lowlevel(default_key=_session_key).streamable_http_app(host=host)
    denied = json.dumps({"error": "unauthorized", "message": "missing or wrong API key"}).encode()

    async def wrapped(scope, receive, send):  # plain ASGI around the SDK's app
        if scope["type"] == "lifespan":  # close the episodes (sandboxes) on the app's own event loop
            async def send_closing(message):
                if message["type"] == "lifespan.shutdown.complete":
                    await server.close()
                await send(message)

            return await app(scope, receive, send_closing)
        if scope["type"] == "http" and api_key is not None:  # refuse before the MCP app sees the request
            if not key_matches(scope.get("headers", []), api_key):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": denied})
                return None
        return await app(scope, receive, send)

    return wrapped


async def serve_stdio(server: McpToolServer) -> None:
    """Serve ``server`` over stdin/stdout until the client closes them (one client: one default episode)."""
    from mcp.server.stdio import stdio_server

    low = server.lowlevel(default_key=lambda ctx: "stdio")
    try:
        async with stdio_server() as (read, write):
            await low.run(read, write, low.create_initialization_options())
    finally:
        await server.close()


__all__ = ["EPISODE_ARG", "LOOPBACK", "McpToolServer", "check_argument_names", "http_app", "instructions",
           "mcp_input_schema", "serve_stdio"]
