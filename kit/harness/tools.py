"""The five native tools of WeAgent-Harness (WeAgent Table 4, Appendix B).

Each tool is a typed function made a :class:`ToolSpec` with :func:`~kit.harness.tool_spec.tool`, like any
added tool: its signature (Table 4's limits as pydantic constraints, read from ``tool_args`` of
kit/recipes/weagent_mmsearch.yaml) is its JSON schema, its docstring's first paragraph the description the
model reads and its ``Args:`` the parameter descriptions; the spec adds its aliases for argument repair.
Tools return an :class:`Observation` (text plus registered image file names to re-feed) or raise
:class:`ToolError`; the loop never sees anything else. ``web_search`` etc. (module attributes) are the
specs' executors ``(args, ctx) -> Observation``, for callers that run one tool directly.
"""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlparse

from pydantic import Field, StringConstraints
from pydantic.fields import FieldInfo
from pydantic.json_schema import SkipJsonSchema

from kit.harness.errors import ImageError, ToolError
from kit.harness.events import EventType
from kit.harness.registry import RASTER_SUFFIXES
from kit.harness.tool_spec import (  # noqa: F401 (re-exported)
    MAX_GOAL_CHARS,
    MAX_IMAGE_REF_CHARS,
    MAX_QUERY_CHARS,
    MAX_URL_CHARS,
    Executor,
    Observation,
    ToolContext,
    ToolSpec,
    execute,
    tool,
)
from kit.recipes import paper_default
from kit.types import BackendError, ImageHit


def _strings(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _domain(url: str) -> str:
    try:
        return urlparse(url).netloc or url.split("/")[2]
    except Exception:
        return ""


async def _backend(call: Awaitable, what: str):
    try:
        return await call
    except BackendError as e:
        raise ToolError("backend_error", f"{what} failed: {e}", retryable=e.retryable) from e


def _register_hits(ctx: ToolContext, hits: list[ImageHit], kind: str, tool_name: str, limit: int,
                   max_vision_tokens: int | None = None) -> tuple[list[tuple[ImageHit, str | None, str | None]], list[str]]:
    """Register image hits; returns [(hit, filename or None, error or None)] and the re-feed list."""
    out: list[tuple[ImageHit, str | None, str | None]] = []
    refeed: list[str] = []
    for hit in hits:
        if hit.content is None:
            out.append((hit, None, "image could not be downloaded"))
            continue
        try:
            entry = ctx.registry.register_bytes(hit.content, kind, tool=tool_name, turn=ctx.turn, source_url=hit.image_url,
                                                page_url=hit.page_url or None, title=hit.title or None,
                                                max_vision_tokens=max_vision_tokens,
                                                vision_token_pixels=ctx.vision_token_pixels)
        except ImageError as e:
            ctx.event(EventType.IMAGE_REJECTED, tool=tool_name, url=hit.image_url, reason=e.message)
            out.append((hit, None, e.message))
            continue
        out.append((hit, entry.filename, None))
        if len(refeed) < limit:
            refeed.append(entry.filename)
    return out, refeed


# ---------------------------------------------------------------------------------------------- argument types
def _arg(key: str) -> Any:
    """A Table 4 argument range from ``tool_args`` of kit/recipes/weagent_mmsearch.yaml."""
    return paper_default(f"tool_args.{key}")


def _count(key: str) -> FieldInfo:
    """The range of a Table 4 result count ``tool_args.<key>`` (``{min, max, default}``)."""
    r = _arg(key)
    return Field(ge=r["min"], le=r["max"], description=f"number of results per query ({r['min']}-{r['max']}, "
                                                       f"default {r['default']})")


def _up_to(key: str) -> FieldInfo:
    """A list of 1 to ``tool_args.<key>`` items."""
    return Field(min_length=1, max_length=_arg(key))


def _one_or_list(key: str, what: str) -> FieldInfo:
    return Field(description=f"{what} (a string or a list of up to {_arg(key)})")


# a non-blank string of at most so many characters (the bounds of kit.harness.tool_spec)
Query = Annotated[str, StringConstraints(min_length=1, max_length=MAX_QUERY_CHARS, pattern=r"\S")]
ImageRef = Annotated[str, StringConstraints(min_length=1, max_length=MAX_IMAGE_REF_CHARS, pattern=r"\S")]
Url = Annotated[str, StringConstraints(min_length=1, max_length=MAX_URL_CHARS, pattern=r"\S")]
Code = Annotated[str, StringConstraints(min_length=1, pattern=r"\S")]


# ---------------------------------------------------------------------------------------------- web_search
async def _web_search(
    ctx: ToolContext,
    query: Annotated[Query | Annotated[list[Query], _up_to("web_search_queries")],
                     _one_or_list("web_search_queries", "search query")],
    num: Annotated[int, _count("web_search_num")] = _arg("web_search_num")["default"],
) -> Observation:
    """General web search. Returns titles, URLs, snippets and publication times; the query language
    selects the search locale automatically.

    Table 4 web_search: titles, URLs, snippets and publication times for each query.
    """
    queries = _strings(query)
    blocks, failures, data = [], 0, []
    for q in queries:
        try:
            hits = await _backend(ctx.backend.search(q, num), f"search {q!r}")
        except ToolError as e:
            failures += 1
            blocks.append(f"## Query: {q}\nError: {e.message}")
            continue
        lines = [f"## Query: {q}"]
        if not hits:
            lines.append("No results.")
        for i, h in enumerate(hits[:num], 1):
            lines.append(f"{i}. {h.title}\n   URL: {h.url}" + (f"\n   Published: {h.date}" if h.date else "")
                         + (f"\n   Snippet: {h.snippet}" if h.snippet else ""))
        blocks.append("\n".join(lines))
        data.append({"query": q, "results": [h.model_dump() for h in hits[:num]]})
    if failures == len(queries):
        raise ToolError("backend_error", "all searches failed: " + " | ".join(b.split("Error: ", 1)[-1] for b in blocks))
    return Observation("\n\n".join(blocks), data={"searches": data})


# ---------------------------------------------------------------------------------------------- image search
async def _web_search_for_image(
    ctx: ToolContext,
    query: Annotated[Query | Annotated[list[Query], _up_to("image_search_queries")],
                     _one_or_list("image_search_queries", "image search query")],
    num: Annotated[int, _count("image_search_num")] = _arg("image_search_num")["default"],
) -> Observation:
    """Text-to-image search. Localizes thumbnails, returns their titles, domains and relative file
    names, and shows you up to four of the images directly.

    Table 4 web_search_for_image: thumbnails localized and registered; up to four re-fed.
    """
    queries = _strings(query)
    blocks: list[str] = []
    refeed: list[str] = []
    n_img = failures = 0
    for q in queries:
        try:
            hits = await _backend(ctx.backend.image_search(q, num), f"image search {q!r}")
        except ToolError as e:
            failures += 1
            blocks.append(f"## Query: {q}\nError: {e.message}")
            continue
        registered, fed = _register_hits(ctx, hits[:num], "search_image", "web_search_for_image",
                                         ctx.config.image_search_refeed - len(refeed))
        refeed += fed
        lines = [f"## Query: {q}"] + (["No images found."] if not hits else [])
        for hit, fname, err in registered:
            n_img += 1
            label = f"[Image {n_img}] {fname}" if fname else f"[Image {n_img}] (not saved: {err})"
            lines.append(f"{label} — {hit.title or '(untitled)'} ({hit.domain or _domain(hit.page_url or hit.image_url)})"
                         + (f"\n   Page: {hit.page_url}" if hit.page_url else "")
                         + (f"\n   Caption: {hit.caption}" if hit.caption else ""))
        blocks.append("\n".join(lines))
    if failures == len(queries):
        raise ToolError("backend_error", "all image searches failed: " + " | ".join(b.split("Error: ", 1)[-1] for b in blocks))
    if refeed:
        blocks.append("Images shown to you now: " + ", ".join(refeed))
    return Observation("\n\n".join(blocks), images=refeed)


# ---------------------------------------------------------------------------------------------- reverse search
async def _web_search_based_on_image(
    ctx: ToolContext,
    image: Annotated[ImageRef | Annotated[list[ImageRef], _up_to("reverse_search_images")],
                     _one_or_list("reverse_search_images", "registered relative image file name")],
    num: Annotated[int, _count("reverse_search_num")] = _arg("reverse_search_num")["default"],
) -> Observation:
    """Reverse image search. Takes the relative file name of an image registered in this episode
    (or a list of up to 5) and returns related pages, an optional knowledge-graph match and
    thumbnails (up to five shown to you).

    Table 4 reverse image search: related pages, optional knowledge-graph match, thumbnails (<=5
    re-fed at <= 512 vision tokens each, counted in the policy's own tokens: ``ctx.vision_token_pixels``,
    28 px for Qwen2/2.5-VL, 32 px for Qwen3-VL). Only registered relative filenames are accepted.
    """
    names = _strings(image)
    entries = [ctx.registry.resolve(n) for n in names]  # raises ImageError (a ToolError) on bad refs
    blocks: list[str] = []
    refeed: list[str] = []
    failures = 0
    for entry in entries:
        data = ctx.registry.read(entry.filename)  # sha256-checked, never through a symlink
        try:
            res = await _backend(ctx.backend.reverse_image_search(data, num), f"reverse search of {entry.filename}")
        except ToolError as e:
            failures += 1
            blocks.append(f"## Image: {entry.filename}\nError: {e.message}")
            continue
        lines = [f"## Image: {entry.filename}"]
        if res.knowledge_graph:
            kg = res.knowledge_graph
            lines.append(f"Knowledge graph match: {kg.title}" + (f" — {kg.description}" if kg.description else "")
                         + (f" ({kg.url})" if kg.url else ""))
        if not res.pages:
            lines.append("No matching pages.")
        for i, p in enumerate(res.pages[:num], 1):
            lines.append(f"{i}. {p.title}\n   URL: {p.url}" + (f"\n   Snippet: {p.snippet}" if p.snippet else ""))
        registered, fed = _register_hits(ctx, res.thumbnails[:num], "search_image", "web_search_based_on_image",
                                         ctx.config.reverse_search_refeed - len(refeed),
                                         ctx.config.reverse_search_max_vision_tokens)
        refeed += fed
        for hit, fname, _err in registered:
            if fname:
                lines.append(f"Thumbnail {fname} — {hit.title or ''} {hit.page_url or ''}".rstrip())
        blocks.append("\n".join(lines))
    if failures == len(entries):
        raise ToolError("backend_error", " | ".join(b.split("Error: ", 1)[-1] for b in blocks))
    if refeed:
        blocks.append("Images shown to you now: " + ", ".join(refeed))
    return Observation("\n\n".join(blocks), images=refeed)


# ---------------------------------------------------------------------------------------------- web_extract
async def _web_extract(
    ctx: ToolContext,
    urls: Annotated[list[Url], Field(min_length=1, max_length=_arg("extract_urls"),
                                     description=f"up to {_arg('extract_urls')} URLs")],
    goal: Annotated[str, Field(max_length=MAX_GOAL_CHARS)] | SkipJsonSchema[None] = None,
) -> Observation:
    """Fetches HTML or PDF pages and returns a goal-conditioned Markdown summary per URL (at most
    5,000 characters each); up to five page images are saved and shown to you.

    Table 4 web_extract: goal-conditioned Markdown summary (<= 5,000 characters) per URL, and up
    to five page images re-fed.

    Args:
        goal: what to look for on the pages (optional)
    """
    blocks: list[str] = []
    refeed: list[str] = []
    data: list[dict[str, Any]] = []
    failures = 0
    for url in urls:
        try:
            page = await _backend(ctx.backend.fetch(url), f"fetching {url}")
        except ToolError as e:
            failures += 1
            blocks.append(f"## {url}\nError: {e.message}")
            continue
        summary, how = await ctx.summarizer.summarize(page.markdown, goal=goal, max_chars=ctx.config.extract_max_chars,
                                                      title=page.title)
        lines = [f"## {page.title or url}\nURL: {page.url}", summary]
        budget = ctx.config.extract_refeed - len(refeed)
        usable = [im for im in page.images if im.content is not None]
        if budget > 0 and usable:
            registered, fed = _register_hits(ctx, usable[:budget], "page_image", "web_extract", budget)
            refeed += fed
            saved = [f"{f} — {h.caption or h.title or h.image_url}" for h, f, _ in registered if f]
            if saved:
                lines.append("Page images saved: " + "; ".join(saved))
        if len(page.images) > len(usable[:max(budget, 0)]):
            lines.append(f"({len(page.images)} images on the page in total)")
        blocks.append("\n\n".join(lines))
        data.append({"url": url, "summary_method": how, "page_chars": len(page.markdown)})
    if failures == len(urls):
        raise ToolError("backend_error", " | ".join(b.split("Error: ", 1)[-1] for b in blocks))
    return Observation("\n\n".join(blocks), images=refeed, data={"pages": data})


# ---------------------------------------------------------------------------------------------- execute_code
async def _execute_code(ctx: ToolContext, code: Code) -> Observation:
    """Runs Python in a persistent sandbox for this episode (variables persist). Returns
    stdout/stderr; newly saved raster images are registered and the first five shown to you.

    Table 4 execute_code: persistent per-episode Python; stdout/stderr returned, new raster images
    registered and the first five re-fed.

    Args:
        code: Python source
    """
    if ctx.sandbox is None:
        if ctx.sandbox_factory is None:
            raise ToolError("tool_unavailable", "execute_code is not available in this harness configuration")
        ctx.sandbox = ctx.sandbox_factory()
    res = await ctx.sandbox.run(code)
    parts = []
    if res.stdout:
        parts.append("stdout:\n" + res.stdout)
    if res.stderr:
        parts.append("stderr:\n" + res.stderr)
    if not res.ok:
        parts.append(f"status: failed ({res.error})" + (" — the interpreter was restarted; earlier variables are lost"
                                                         if res.restarted else ""))
    refeed: list[str] = []
    saved: list[str] = []
    skipped = 0
    for rel in res.new_files:
        p = Path(rel)
        if p.suffix.lower() not in RASTER_SUFFIXES or rel in ctx.registry:
            continue
        if len(saved) >= ctx.config.code_max_images:
            skipped += 1
            continue
        try:
            entry = ctx.registry.register_file(ctx.registry.workspace / rel, "code_image", tool="execute_code",
                                               turn=ctx.turn, source_url=rel)
        except ImageError as e:
            parts.append(f"image {rel} not registered: {e.message}")
            ctx.event(EventType.IMAGE_REJECTED, tool="execute_code", file=rel, reason=e.message)
            continue
        saved.append(f"{rel} -> {entry.filename}")
        if len(refeed) < ctx.config.code_refeed:
            refeed.append(entry.filename)
    if saved:
        parts.append("New images registered: " + "; ".join(saved))
    if skipped:
        parts.append(f"{skipped} more new images were not registered (limit {ctx.config.code_max_images} per call)")
        ctx.event(EventType.IMAGES_NOT_REGISTERED, tool="execute_code", count=skipped)
    if not parts:
        parts.append("(no output)")
    return Observation("\n".join(parts), images=refeed,
                       data={"ok": res.ok, "error": res.error, "duration_s": round(res.duration_s, 3)})


# ---------------------------------------------------------------------------------------------- specs
#: The five native tools in Table 4 order (the registry starts with them).
NATIVE_TOOLS: dict[str, ToolSpec] = {
    s.name: s
    for s in [
        tool(_web_search, name="web_search", refeed_limit=0,
             aliases=("search", "websearch", "google_search", "bing_search", "search_web", "text_search"),
             param_aliases={"query": ("q", "queries", "search_query", "search_queries", "keywords"),
                            "num": ("n", "k", "top_k", "num_results", "count", "max_results")}),
        tool(_web_search_for_image, name="web_search_for_image", refeed_limit="image_search_refeed",
             aliases=("image_search", "search_image", "search_images", "text_to_image_search", "web_image_search",
                      "web_search_image", "web_search_for_images"),
             param_aliases={"query": ("q", "queries", "search_query", "keywords"),
                            "num": ("n", "k", "top_k", "num_results", "count", "max_results")}),
        tool(_web_search_based_on_image, name="web_search_based_on_image", refeed_limit="reverse_search_refeed",
             aliases=("reverse_image_search", "image_reverse_search", "search_by_image", "lens_search",
                      "web_search_based_image", "web_search_by_image", "reverse_search"),
             param_aliases={"image": ("images", "image_path", "image_paths", "image_file", "filename", "file", "img",
                                      "path", "image_name"),
                            "num": ("n", "k", "top_k", "num_results", "count", "max_results")}),
        tool(_web_extract, name="web_extract", persist_exempt=True, refeed_limit="extract_refeed",
             aliases=("extract", "fetch", "browse", "open_url", "visit", "read_url", "web_fetch", "fetch_url",
                      "web_browse", "visit_page"),
             param_aliases={"urls": ("url", "links", "link", "uris", "uri", "pages"),
                            "goal": ("purpose", "objective", "instruction")}),
        tool(_execute_code, name="execute_code", refeed_limit="code_refeed",
             aliases=("python", "code", "run_python", "code_interpreter", "execute_python", "run_code", "python_exec",
                      "exec_code"),
             param_aliases={"code": ("source", "python", "script", "program", "source_code", "python_code")}),
    ]
}

# each tool's executor ``(args, ctx) -> Observation`` (arguments validated, defaults filled), under its name
web_search = NATIVE_TOOLS["web_search"].executor
web_search_for_image = NATIVE_TOOLS["web_search_for_image"].executor
web_search_based_on_image = NATIVE_TOOLS["web_search_based_on_image"].executor
web_extract = NATIVE_TOOLS["web_extract"].executor
execute_code = NATIVE_TOOLS["execute_code"].executor


_REGISTRY: dict[str, ToolSpec] = dict(NATIVE_TOOLS)
TOOL_SPECS = _REGISTRY  # the old name: the live registry (natives first, then registered tools)


def register_tool(spec: ToolSpec, *, replace: bool = False) -> ToolSpec:
    """Add ``spec`` to the process-wide registry, so ``HarnessConfig(tools_enabled=[..., spec.name])``,
    ``tool_specs`` and the SFT/RL encoders find it. Returns ``spec`` (usable as a decorator on a
    :func:`~kit.harness.tool_spec.tool` result).

    Raises:
        ValueError: a tool of that name (or one of its aliases clashing with a registered name) exists
            and ``replace`` is False; a native tool cannot be replaced.
    """
    if spec.name in NATIVE_TOOLS:
        raise ValueError(f"{spec.name!r} is a native tool (Table 4); give yours another name")
    if spec.name in _REGISTRY and not replace:
        raise ValueError(f"a tool named {spec.name!r} is already registered (pass replace=True)")
    _check_clashes(spec, [t for n, t in _REGISTRY.items() if n != spec.name])
    _REGISTRY[spec.name] = spec
    return spec


def _spellings(spec: ToolSpec) -> set[str]:
    from kit.harness.recovery import _norm_name  # the normalization argument repair matches names with

    return {_norm_name(spec.name), *(_norm_name(a) for a in spec.aliases)}


def _check_clashes(spec: ToolSpec, others) -> None:
    """A tool's name and aliases must not match another tool's name or aliases after argument repair's
    normalization (case, separators): the model's ``Search`` would become ambiguous.

    Raises:
        ValueError: the clashing spellings and tools."""
    mine = _spellings(spec)
    for t in others:
        both = mine & _spellings(t)
        if both:
            raise ValueError(f"tool {spec.name!r} clashes with {t.name!r}: both answer to {sorted(both)} "
                             "(rename it or drop the alias)")


def unregister_tool(name: str) -> None:
    """Remove a registered (non-native) tool; unknown names are an error.

    Raises:
        KeyError: no registered tool of that name.
        ValueError: ``name`` is a native tool.
    """
    if name in NATIVE_TOOLS:
        raise ValueError(f"{name!r} is a native tool and cannot be removed (disable it with tools_enabled)")
    del _REGISTRY[name]


def tool_specs(enabled: list[str] | None = None, extra: list[ToolSpec] | tuple[ToolSpec, ...] = ()) -> dict[str, ToolSpec]:
    """The specs of the enabled tools: natives in Table 4 order, then registered tools, then ``extra``
    (tools given to one harness, always enabled).

    Raises:
        ValueError: an enabled name is not a registered tool; an ``extra`` tool's name is also enabled
            from the registry, or given twice (a registered tool that is not enabled may be replaced by an
            ``extra`` tool of the same name, e.g. :func:`kit.harness.toolsets.tool_set` ``("points_seeker")``).
    """
    pool = dict(_REGISTRY)
    if enabled is None:
        out = dict(pool)
    else:
        unknown = [n for n in enabled if n not in pool and n not in {t.name for t in extra}]
        if unknown:
            raise ValueError(f"unknown tools {unknown}; available: {list(pool)}")
        out = {n: pool[n] for n in pool if n in enabled}
    for t in extra:
        if out.get(t.name) is t:
            continue
        # a registered tool that is not enabled may be shadowed (POINTS-Seeker's own web_search, with
        # tools_enabled=[]); an enabled one may not: the model would see two tools of one name
        if t.name in out:
            raise ValueError(f"tool {t.name!r} given to the harness clashes with a registered or enabled tool "
                             f"(leave {t.name!r} out of tools_enabled to use this one instead)")
        _check_clashes(t, out.values())
        out[t.name] = t
    return out
