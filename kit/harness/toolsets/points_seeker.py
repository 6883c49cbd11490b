"""POINTS-Seeker's environment: its three tools and its 10-turn / 32k protocol (POINTS-Seeker §4.1
"Tools", §5 Limitations, App. A.4, App. C.2).

* ``web_search(query)``: titles, snippets and URLs of the top-10 pages (§4.1 (i)).
* ``image_search(goal[, image])``: a search by the question's image; the top-5 result pages are fetched
  and each is summarized for ``goal`` by the harness's summarizer (§4.1 (ii): "Serper API to obtain the
  top-5 webpage URLs, parse them with Crawl4AI, and summarize goal-relevant content using
  Qwen3-235B-A22B"). At most once per sample (App. C.2): a further call gets a structured
  ``tool_limit`` observation.
* ``visit(url, goal)``: one page's content, summarized for ``goal`` (§4.1 (iii)).

What the paper leaves open and the kit decided (each also listed in docs/tools.md "POINTS-Seeker"):

* **image_search searches by the query image**, not by a text query. App. C.2 says it "can be invoked at
  most once per sample" and that on FVQA the model "relies more heavily on image search to identify rare
  entities": a once-per-sample limit only makes sense for a search whose input is fixed by the sample, and
  identifying the entity shown is what a search by the image does (§3.2.2's questions name the entity
  only as "the person/object in the image"). It runs the backend's ``reverse_image_search`` (local web:
  perceptual hashes over the ZIM images; live: Serper's lens endpoint) on the first question image; the
  optional ``image`` argument picks another *question* image for multi-image tasks.
* The schemas (the paper's schema figure, App. B.4, is not in the text): ``goal`` is required for
  ``image_search`` and ``visit`` (the paper's summaries are goal-relevant / goal-focused);
  ``web_search`` takes one query string.
* Crawl4AI is the backend's own fetcher (:meth:`kit.types.SearchBackend.fetch`, the one the native
  ``web_extract`` uses); the summarizer is ``Harness(summarizer=...)``: pass
  :class:`~kit.harness.summarize.LLMSummarizer` with a Qwen3-235B-A22B endpoint for a paper run
  (default: the offline :class:`~kit.harness.summarize.ExtractiveSummarizer`).
* The three tools are exempt from Table 5's result persistence: POINTS-Seeker has no code tool that could
  read a persisted file; the summary caps bound their results instead.
* A search that failed (backend, summarizer) does not use up image_search's one call (the model got
  nothing); one that returned, even with no matching page, does.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from pydantic import StringConstraints
from pydantic.json_schema import SkipJsonSchema

from kit.harness.config import HarnessConfig
from kit.harness.errors import ToolError
from kit.harness.events import EventType
from kit.harness.tool_spec import Observation, ToolContext, ToolSpec, tool
from kit.harness.tools import _backend
from kit.recipes import paper_default as _P
from kit.types import SearchHit

# POINTS-Seeker's values: kit/recipes/points_seeker.yaml, sections harness and tools (each cited there)
WEB_SEARCH_TOP_K = int(_P("tools.web_search_top_k", "points_seeker"))
IMAGE_SEARCH_TOP_K = int(_P("tools.image_search_top_k", "points_seeker"))
IMAGE_SEARCH_MAX_CALLS = int(_P("tools.image_search_max_calls", "points_seeker"))
MAX_TURNS = int(_P("harness.max_turns", "points_seeker"))
MAX_CONTEXT_TOKENS = int(_P("harness.max_context_tokens", "points_seeker"))
VISIT_SUMMARY_CHARS = int(_P("tools.visit_summary_chars", "points_seeker"))
IMAGE_PAGE_SUMMARY_CHARS = int(_P("tools.image_page_summary_chars", "points_seeker"))

USED_NOTE = "points_seeker_image_search"  # TOOL_NOTE name recording one executed image search


def _used(ctx: ToolContext) -> list[int]:
    """Turns at which this episode's image_search ran (its TOOL_NOTE events)."""
    return [e.turn for e in ctx.events if e.type == EventType.TOOL_NOTE and e.detail.get("name") == USED_NOTE]


def _hit_lines(i: int, h: SearchHit) -> str:
    return f"{i}. {h.title}\n   URL: {h.url}" + (f"\n   Snippet: {h.snippet}" if h.snippet else "")


Text = Annotated[str, StringConstraints(min_length=1, pattern=r"\S")]  # a non-blank string


def make_web_search(top_k: int = WEB_SEARCH_TOP_K):
    """The web_search function (for :func:`~kit.harness.tool_spec.tool`): one query, the top ``top_k``
    hits (title, URL, snippet)."""

    async def web_search(ctx: ToolContext, query: Text) -> Observation:
        """Web search.

        Args:
            query: search query
        """
        hits = (await _backend(ctx.backend.search(query, top_k), f"search {query!r}"))[:top_k]
        lines = [f"## Query: {query}"] + ([_hit_lines(i, h) for i, h in enumerate(hits, 1)] or ["No results."])
        return Observation("\n".join(lines), data={"query": query, "results": [h.model_dump() for h in hits]})

    return web_search


async def _read_page(ctx: ToolContext, url: str, goal: str, max_chars: int) -> dict[str, Any]:
    """Fetch ``url`` and summarize it for ``goal``: ``{"url", "title", "summary", "summary_method",
    "page_chars"}``, or ``{"url", "error"}`` when the fetch failed."""
    try:
        page = await _backend(ctx.backend.fetch(url), f"fetching {url}")
    except ToolError as e:
        return {"url": url, "error": e.message}
    summary, how = await ctx.summarizer.summarize(page.markdown, goal=goal, max_chars=max_chars, title=page.title)
    return {"url": page.url, "title": page.title or url, "summary": summary, "summary_method": how,
            "page_chars": len(page.markdown)}


def make_image_search(top_k: int = IMAGE_SEARCH_TOP_K, max_calls: int = IMAGE_SEARCH_MAX_CALLS,
                      summary_chars: int = IMAGE_PAGE_SUMMARY_CHARS):
    """The image_search function (for :func:`~kit.harness.tool_spec.tool`): a search by a question image,
    its top ``top_k`` pages fetched and summarized for ``goal`` (at most ``summary_chars`` characters each),
    at most ``max_calls`` per episode.

    Raises (as observations): ``tool_limit`` (already used ``max_calls`` times), ``no_query_image``
    (the task has no image), ``bad_image_ref`` (``image`` is not a question image), ``backend_error``.
    """

    async def image_search(ctx: ToolContext, goal: Text, image: Text | SkipJsonSchema[None] = None) -> Observation:
        """Image search with the question's image.

        Args:
            goal: what you need to find on the pages (the summary keeps what bears on it)
            image: which question image to search with (default: the first, user_image_1)
        """
        used = _used(ctx)
        if len(used) >= max_calls:
            raise ToolError("tool_limit", f"image_search can be used at most {max_calls} time(s) per question and "
                            f"was already used (turn {used[-1]}); its result is above. Use web_search or visit, or "
                            "answer.", limit=max_calls, used_at_turns=used)
        question_images = [e for e in ctx.registry.images if e.kind == "user_image"]
        if not question_images:
            raise ToolError("no_query_image", "image_search searches by the question's image, and this question has none; "
                            "use web_search instead")
        entry = question_images[0]
        if image:
            entry = ctx.registry.resolve(image)  # ImageError (bad_image_ref) for an unknown name
            if entry.kind != "user_image":
                raise ToolError("bad_image_ref", f"image_search searches by a question image; {entry.filename} is not one",
                                question_images=[e.filename for e in question_images])
        data = ctx.registry.read(entry.filename)  # sha256-checked
        res = await _backend(ctx.backend.reverse_image_search(data, top_k), f"image search of {entry.filename}")
        pages = await asyncio.gather(*(_read_page(ctx, h.url, goal, summary_chars) for h in res.pages[:top_k]))
        # recorded once the model gets a result: a search that failed does not use up the call
        ctx.event(EventType.TOOL_NOTE, name=USED_NOTE, image=entry.filename, pages=len(pages))
        blocks = [f"## Image search: {entry.filename}\nGoal: {goal}"]
        if not pages:
            blocks.append("No matching pages were found for this image.")
        for i, (hit, p) in enumerate(zip(res.pages[:top_k], pages, strict=True), 1):
            if "error" in p:
                blocks.append(f"{_hit_lines(i, hit)}\n   Error: {p['error']}")
            else:
                blocks.append(f"{i}. {p['title']}\n   URL: {p['url']}\n   Summary:\n{p['summary']}")
        return Observation("\n\n".join(blocks), data={"image": entry.filename, "pages": pages})

    return image_search


def make_visit(summary_chars: int = VISIT_SUMMARY_CHARS):
    """The visit function (for :func:`~kit.harness.tool_spec.tool`): one URL, its content summarized for
    ``goal`` (at most ``summary_chars``)."""

    async def visit(ctx: ToolContext, url: Text, goal: Text) -> Observation:
        """Visits a web page.

        Args:
            url: the page's URL
            goal: what you need to find on the pages (the summary keeps what bears on it)
        """
        p = await _read_page(ctx, url, goal, summary_chars)
        if "error" in p:
            raise ToolError("backend_error", p["error"])
        return Observation(f"## {p['title']}\nURL: {p['url']}\nGoal: {goal}\n\n{p['summary']}", data={"pages": [p]})

    return visit


def points_seeker_tools(*, web_top_k: int = WEB_SEARCH_TOP_K, image_top_k: int = IMAGE_SEARCH_TOP_K,
                        image_search_max_calls: int = IMAGE_SEARCH_MAX_CALLS,
                        image_page_summary_chars: int = IMAGE_PAGE_SUMMARY_CHARS,
                        visit_summary_chars: int = VISIT_SUMMARY_CHARS) -> list[ToolSpec]:
    """POINTS-Seeker's three tools (module docstring), with the paper's values as defaults.

    Raises:
        ValueError: a count or character cap below 1.
    """
    bad = {k: v for k, v in dict(web_top_k=web_top_k, image_top_k=image_top_k,
                                 image_search_max_calls=image_search_max_calls,
                                 image_page_summary_chars=image_page_summary_chars,
                                 visit_summary_chars=visit_summary_chars).items()
           if isinstance(v, bool) or not isinstance(v, int) or v < 1}
    if bad:
        raise ValueError(f"POINTS-Seeker tool limits must be integers >= 1: {bad}")
    # the descriptions carry the limits, so they are given here; the parameters' come from the Args: sections
    return [
        tool(make_web_search(web_top_k), name="web_search", refeed_limit=0, persist_exempt=True,
             description=f"Web search. Returns the titles, URLs and snippets of the top {web_top_k} web pages for "
                         "the query.",
             aliases=("search", "google_search", "text_search", "websearch"),
             param_aliases={"query": ("q", "search_query", "keywords")}),
        tool(make_image_search(image_top_k, image_search_max_calls, image_page_summary_chars), name="image_search",
             refeed_limit=0, persist_exempt=True,
             description=f"Image search with the question's image: finds web pages showing that image and returns a "
                         f"goal-focused summary of each of the top {image_top_k}. Can be used at most "
                         f"{'once' if image_search_max_calls == 1 else f'{image_search_max_calls} times'} per question.",
             aliases=("reverse_image_search", "search_image", "search_by_image", "lens_search"),
             param_aliases={"goal": ("purpose", "objective", "instruction"),
                            "image": ("image_path", "image_file", "filename", "img")}),
        tool(make_visit(visit_summary_chars), name="visit", refeed_limit=0, persist_exempt=True,
             description=f"Visits a web page (a URL returned by a search) and returns a summary of its content "
                         f"focused on the goal (at most {visit_summary_chars} characters).",
             aliases=("browse", "open_url", "visit_page", "read_url", "fetch_url", "open_page"),
             param_aliases={"url": ("link", "uri", "page_url", "website"),
                            "goal": ("purpose", "objective", "instruction")}),
    ]


def points_seeker_config(**overrides: Any) -> HarnessConfig:
    """The :class:`HarnessConfig` of a POINTS-Seeker episode (``kit/recipes/points_seeker.yaml``): its
    protocol (``<answer>`` grammar, its system prompt), :data:`MAX_TURNS` turns, :data:`MAX_CONTEXT_TOKENS`
    tokens, V-Fold, the native tools disabled and ``tool_set="points_seeker"`` (the harness adds the set's
    tools). ``overrides`` win.

    Raises:
        ValueError: an invalid override (:class:`HarnessConfig` validation).
    """
    from kit.recipes import load_recipe

    return load_recipe("points_seeker").harness(**overrides)


__all__ = ["IMAGE_SEARCH_MAX_CALLS", "IMAGE_SEARCH_TOP_K", "MAX_CONTEXT_TOKENS", "MAX_TURNS", "WEB_SEARCH_TOP_K",
           "points_seeker_config", "points_seeker_tools"]
