"""Context strategies for long histories: V-Fold and the baselines of POINTS-Seeker Table 4.

Every strategy is a :class:`kit.harness.context.ContextBuilder`: the harness calls
``build(messages, registry)`` each turn with the episode's raw messages (the record keeps them raw)
and sends what it returns to the policy. All strategies share the trigger of §3.3: the history
``H_t = (q, a_1, o_1, …, a_{t-1}, o_{t-1})`` — every message after the system prompt — is counted
with the policy's own token counter (exact chat-template counts with
:class:`kit.policy.tokens.QwenTokenCounter`, images through its smart resize), and the strategy acts
only when ``Len(H_t) > τ``. ``k`` is the number of most recent observations (or interactions) kept
as text.

* :class:`FullContext` — no compression (Table 4 "No Compression").
* :class:`DiscardContext` — keep the question and the last ``k`` interactions (Table 4 "Discard
  History"); a note says how many were dropped.
* :class:`SummaryContext` — replace all but the last ``k`` interactions by an LLM summary (Table 4
  "Summarization"; any OpenAI-compatible endpoint through :class:`PolicySummarizer`), updated
  incrementally as interactions go stale; an extractive summary is the fallback when the endpoint
  fails.
* :class:`RenderAllContext` — render every observation as page images, from the first turn on
  (Table 4 "Image Rendering").
* :class:`VFoldContext` — V-Fold (§3.3): keep every action as text, keep the last ``k``
  observations as text, render each older observation individually into page images (Table 8) and
  substitute them. Images an observation already carried (registered evidence: thumbnails, page
  images, code plots) keep their references and are re-fed as before; they are never turned into
  text. Rendered pages are registered in the episode's evidence registry as kind ``rendered_obs``
  (``<rendered_obs_3>``) — persistent, with provenance (tool, turn) — and each observation is
  rendered once per episode, whatever the number of turns. Its ``mode`` (:mod:`kit.vfold.modes`):
  ``"paper"`` — Table 8 layout, every stale observation folded (a lossy fold is an event
  ``folded_lossy``); ``"kit"`` — flowed layout, an observation whose pages are not smaller or would
  lose characters stays text. Every log entry carries the mode and its options (``"vfold"``).

:func:`make_context_builder` maps ``HarnessConfig.context_strategy`` / ``context_tau`` /
``context_keep`` (and ``vfold_mode`` / ``vfold_layout`` / ``vfold_only_if_smaller`` /
``vfold_require_lossless`` for ``vfold`` and ``render_all``) to a builder (the harness calls it);
:func:`points_seeker_config` is the POINTS-Seeker profile (V-Fold on in paper mode, τ = 8k, k = 2),
while WeAgent's paper profile (``HarnessConfig()``) keeps ``"full"``.

Strategies keep per-episode state (render cache, decisions, summaries) keyed by the episode's
registry, so one builder serves concurrent episodes. ``log(registry)`` returns the per-turn
decisions for accounting and notebooks.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable
from typing import Any

from kit.harness.config import HarnessConfig
from kit.harness.context import (
    ContextBuilder,
    context_strategy_registry,
    make_context_builder,  # noqa: F401  (its old home: re-exported)
    register_context_strategy,
)
from kit.harness.registry import EvidenceRegistry
from kit.types import ContentPart, Message, SamplingParams, TokenCounter
from kit.vfold.base import (  # noqa: F401  (defined here before; re-exported)
    _IMAGE_FRAME,
    DEFAULT_KEEP,
    DEFAULT_TAU,
    RENDERED_KIND,
    STRATEGIES,
    FoldedObservation,
    FoldingContext,
    FullContext,
    HistoryMeter,
    _EpisodeState,
    _is_rendered,
    _obs_key,
)
from kit.vfold.modes import VFoldOptions, options_from_config, vfold_options


# ------------------------------------------------------------------------------------------ interactions
def _segments(messages: list[Message]) -> tuple[int, list[tuple[int, int]]]:
    """Split into a head (system + question, before the first assistant turn) and interactions
    ``[start, end)`` each opened by an assistant message (its observations and harness notes follow)."""
    starts = [i for i, m in enumerate(messages) if m.role == "assistant"]
    if not starts:
        return len(messages), []
    bounds = starts + [len(messages)]
    return starts[0], [(bounds[j], bounds[j + 1]) for j in range(len(starts))]


class DiscardContext(FoldingContext):
    """Discard History (Table 4): over τ, keep only the head (system prompt, question) and the last
    ``k`` interactions; a harness note tells the model how many were dropped."""

    name = "discard"

    def _apply(self, messages, registry, st, entry):
        head, segs = _segments(messages)
        drop = max(0, len(segs) - self.keep)
        entry["dropped_interactions"] = drop
        if drop == 0:
            return messages
        kept_from = segs[drop][0] if drop < len(segs) else len(messages)
        note = Message(role="user", intervention=True, turn=messages[kept_from - 1].turn,
                       content=[ContentPart(type="text", text=f"[{drop} earlier interaction(s) were removed from "
                                                               "this context to save space.]")])
        key = ("discard-note", drop)
        note = st.messages.setdefault(key, note)
        return messages[:head] + [note] + messages[kept_from:]


# ------------------------------------------------------------------------------------------ summary
HISTORY_SUMMARY_PROMPT = (
    "You compress the history of a research agent so that it can continue its investigation.\n"
    "Question being investigated: {question}\n\n"
    "{previous}"
    "New history to add (the agent's actions and the tool results it received):\n{history}\n\n"
    "Write an updated summary of at most {max_chars} characters that keeps every fact, number, date, name, "
    "URL and image reference (such as <search_image_3>) that may bear on the question, which searches were "
    "already done, and what remains open. Do not answer the question."
)


def _interaction_text(messages: list[Message]) -> str:
    out = []
    for m in messages:
        if m.role == "assistant":
            calls = "; ".join(f"{c.name}({c.arguments})" for c in m.tool_calls)
            out.append(f"[assistant, turn {m.turn}] {m.text().strip()}" + (f"\n[calls] {calls}" if calls else ""))
        elif m.role == "tool":
            refs = m.image_refs()
            out.append(f"[{m.name or 'tool'} result] {m.text().strip()}" + (f"\n[images] {', '.join(refs)}" if refs else ""))
        else:
            out.append(f"[{m.role}] {m.text().strip()}")
    return "\n\n".join(out)


_THINK = re.compile(r"<think>.*?</think>", re.S)


class PolicySummarizer:
    """History summaries from a chat policy (e.g. :class:`kit.policy.openai_client.OpenAIChatPolicy`
    on any OpenAI-compatible endpoint) — Table 4's Summarization baseline used Qwen3-235B-A22B.

    ``build`` is synchronous, so the policy runs on a private event loop in a daemon thread and the
    calling turn waits for it (the harness's own event loop is blocked for that time; use a
    dedicated policy object, since its HTTP client belongs to that private loop). Call
    :meth:`close` when done.

    Args:
        policy: any :class:`kit.types.Policy`.
        max_tokens: generation budget of one summary.
        max_chars: target length of the summary in characters.
        max_input_chars: the new history is clipped (from the front) to this many characters.
        timeout_s: wall-clock limit of one summary call.

    Raises (from ``__call__``): whatever the policy raises (:class:`kit.types.PolicyError`),
    ``TimeoutError``, or ``ValueError`` for an empty summary.
    """

    def __init__(self, policy, *, max_tokens: int = 1024, max_chars: int = 4000, max_input_chars: int = 60_000,
                 timeout_s: float = 300.0):
        self.policy = policy
        self.max_tokens = max_tokens
        self.max_chars = max_chars
        self.max_input_chars = max_input_chars
        self.timeout_s = timeout_s
        self.name = f"llm:{getattr(policy, 'name', 'policy')}"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                t = threading.Thread(target=loop.run_forever, name="vfold-summarizer", daemon=True)
                t.start()
                self._loop, self._thread = loop, t
            return self._loop

    def __call__(self, question: str, previous: str | None, history: str) -> str:
        from kit.harness.neutralize import neutralize_control_tokens as neutral

        # question, history and summaries are data for the summarizer's chat, and its summary is data in ours
        hist = neutral(history[-self.max_input_chars:])[0]
        prev = f"Summary so far:\n{neutral(previous)[0]}\n\n" if previous else ""
        prompt = HISTORY_SUMMARY_PROMPT.format(question=neutral(question)[0], previous=prev, history=hist,
                                               max_chars=self.max_chars)
        msg = Message(role="user", content=[ContentPart(type="text", text=prompt)])
        coro = self.policy.generate([msg], [], SamplingParams(temperature=0.0, max_tokens=self.max_tokens))
        fut = asyncio.run_coroutine_threadsafe(coro, self._ensure_loop())
        try:
            turn = fut.result(timeout=self.timeout_s)
        except TimeoutError:
            fut.cancel()
            raise
        text = _THINK.sub("", turn.text or "").strip()
        if not text:
            raise ValueError("the summarizer returned an empty summary")
        return neutral(text[: self.max_chars])[0]

    def close(self) -> None:
        """Close the policy's client (if it has ``aclose``) and stop the private loop (idempotent)."""
        with self._lock:
            loop, t = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None:
            return
        if hasattr(self.policy, "aclose"):
            try:
                asyncio.run_coroutine_threadsafe(self.policy.aclose(), loop).result(timeout=10)
            except Exception:
                pass
        loop.call_soon_threadsafe(loop.stop)
        if t is not None:
            t.join(timeout=10)
        loop.close()


class ExtractiveHistorySummarizer:
    """Offline summary: BM25-ranked blocks of the history against the question
    (:class:`kit.harness.summarize.ExtractiveSummarizer`); the fallback of :class:`SummaryContext`."""

    name = "extractive_bm25"

    def __init__(self, max_chars: int = 4000):
        from kit.harness.summarize import ExtractiveSummarizer

        self.max_chars = max_chars
        self._x = ExtractiveSummarizer()

    def __call__(self, question: str, previous: str | None, history: str) -> str:
        text = ((previous or "") + "\n\n" + history).strip()
        return self._x.summarize_sync(text, goal=question, max_chars=self.max_chars)


class SummaryContext(FoldingContext):
    """Summarization (Table 4): over τ, all but the last ``k`` interactions are replaced by one
    summary message after the question. The summary is extended incrementally (previous summary +
    newly stale interactions), so each interaction is summarized once.

    Args:
        summarizer: ``callable(question, previous_summary | None, new_history) -> str``, e.g.
            :class:`PolicySummarizer`. On any exception the :class:`ExtractiveHistorySummarizer`
            result is used and an event ``summary_fallback`` is logged.
    """

    name = "summary"

    def __init__(self, counter: TokenCounter, summarizer: Callable[[str, str | None, str], str], **kw: Any):
        super().__init__(counter, **kw)
        self.summarizer = summarizer
        self.fallback = ExtractiveHistorySummarizer()

    def _apply(self, messages, registry, st, entry):
        head, segs = _segments(messages)
        stale = max(0, len(segs) - self.keep)
        entry["summarized_interactions"] = stale
        if stale == 0:
            return messages
        if stale > st.summarized:
            question = next((m.text() for m in messages[:head] if m.role == "user"), "")
            new = _interaction_text(messages[segs[st.summarized][0]:segs[stale - 1][1]])
            try:
                st.summary = self.summarizer(question, st.summary, new)
                method = getattr(self.summarizer, "name", "custom")
            except Exception as e:  # endpoint down, timeout, empty answer: fall back, and say so
                st.events.append({"type": "summary_fallback", "error": f"{type(e).__name__}: {e}"[:300],
                                  "interactions": stale})
                st.summary = self.fallback(question, st.summary, new)
                method = self.fallback.name
            st.summarized = stale
            entry["summary_method"] = method
        kept_from = segs[stale][0] if stale < len(segs) else len(messages)
        key = ("summary", st.summarized, _obs_key(st.summary or ""))
        msg = st.messages.get(key)
        if msg is None:
            text = f"[Summary of {st.summarized} earlier interaction(s), which were removed from this context]\n{st.summary}"
            msg = st.messages[key] = Message(role="user", intervention=True, turn=messages[kept_from - 1].turn,
                                             content=[ContentPart(type="text", text=text)])
        return messages[:head] + [msg] + messages[kept_from:]


# ------------------------------------------------------------------------------------------ V-Fold
class VFoldContext(FoldingContext):
    """V-Fold (POINTS-Seeker §3.3; see the module docstring).

    Args:
        counter, tau, keep, refeed_images: see :class:`FoldingContext` (τ = 8k, k = 2 as in the paper).
        renderer: a :class:`kit.vfold.render.Renderer`; default: the shared renderer of the mode's
            ``layout``. An explicit renderer decides the layout (recorded; ``"custom"`` if neither).
        note: prefix each folded observation with a one-line text naming its page images
            (``[web_search result, rendered as page image(s): <rendered_obs_1>]``).
        mode: ``"kit"`` (flowed layout, fold only if smaller and lossless) or ``"paper"`` (Table 8
            layout, fold every stale observation); :mod:`kit.vfold.modes`.
        layout: ``"table8"`` | ``"flowed"``; None = the mode's.
        only_if_smaller: keep an observation as text when its pages would cost at least as many
            tokens as its text; None = the mode's.
        require_lossless: keep an observation as text when rendering would lose characters (no
            font covers some, or the page cap truncated it); the reason is logged as an event
            ``kept_as_text``. Off, such an observation is folded and an event ``folded_lossy`` says
            what was lost. None = the mode's.

    Raises:
        ValueError: unknown mode or layout, or ``layout`` contradicting ``renderer``.
    """

    name = "vfold"

    def __init__(self, counter: TokenCounter, *, renderer=None, note: bool = True, mode: str = "kit",
                 layout: str | None = None, only_if_smaller: bool | None = None,
                 require_lossless: bool | None = None, **kw: Any):
        super().__init__(counter, **kw)
        self.options: VFoldOptions = vfold_options(
            mode, layout=layout, only_if_smaller=only_if_smaller, require_lossless=require_lossless,
            renderer_config=renderer.config if renderer is not None else None)
        if renderer is None:
            from kit.vfold.modes import layout_config
            from kit.vfold.render import default_renderer

            renderer = default_renderer(layout_config(self.options.layout))
        self.renderer = renderer
        self.note = note
        self._record = self.options.record()

    @property
    def only_if_smaller(self) -> bool:
        return self.options.only_if_smaller

    @property
    def require_lossless(self) -> bool:
        return self.options.require_lossless

    def _apply(self, messages, registry, st, entry):
        obs = [i for i, m in enumerate(messages) if m.role == "tool"]
        stale = obs[: max(0, len(obs) - self.keep)]
        folded = lossy = larger = 0
        for i in stale:
            new = self.fold_message(messages[i], registry, st)
            if new is not messages[i]:
                fo = st.renders[_obs_key(messages[i].text())]
                folded += 1
                lossy += bool(fo.losses)
                larger += fo.larger
            messages[i] = new
        entry["stale_observations"] = len(stale)
        entry["folded_observations"] = folded
        entry["folded_lossy"] = lossy
        entry["folded_larger"] = larger
        return messages

    def build(self, messages: list[Message], registry: EvidenceRegistry) -> list[Message]:
        out = super().build(messages, registry)
        self.state(registry).log[-1]["vfold"] = self._record  # which mode produced this context
        return out

    def fold_observation(self, text: str, m: Message, registry: EvidenceRegistry, st: _EpisodeState) -> FoldedObservation:
        """Render (once per episode and text) and decide; registers the pages when folding."""
        key = _obs_key(text)
        fo = st.renders.get(key)
        if fo is not None:
            return fo
        text_tokens = self.counter.count_text(text) if text else 0
        if not text.strip():
            fo = FoldedObservation(key, len(text), text_tokens, False, "empty")
        else:
            res = self.renderer.render(text)
            st.renders_done += 1
            sizes = res.page_sizes()
            vision = sum(self.counter.count_image(w, h) + _IMAGE_FRAME for w, h in sizes)
            losses = [n for n, lost in (("missing_glyphs", res.missing_glyphs), ("truncated", res.truncated)) if lost]
            reason = "folded"
            if not res.pages:
                reason = "no_pages"
            elif self.require_lossless and losses:
                reason = losses[0]
            elif self.only_if_smaller and vision >= text_tokens:
                reason = "not_smaller"
            rep = res.report()
            fo = FoldedObservation(key, len(text), text_tokens, reason == "folded", reason, page_sizes=sizes,
                                   vision_tokens=vision, report=rep)
            detail = {k: rep[k] for k in ("chars", "rendered_chars", "missing_glyphs", "missing_sample")}
            if fo.folded:
                fo.losses, fo.larger = losses, vision >= text_tokens
                n = len(res.pages)
                for k, png in enumerate(res.png()):
                    e = registry.register_bytes(png, RENDERED_KIND, tool=m.name, turn=m.turn,
                                                title=f"observation of turn {m.turn} ({m.name}), page {k + 1}/{n}")
                    fo.refs.append(e.filename)
                if losses:  # folded anyway (require_lossless off): never silently
                    st.events.append({"type": "folded_lossy", "losses": losses, "turn": m.turn, "tool": m.name,
                                      "detail": detail, "vfold": self._record})
            elif reason in ("missing_glyphs", "truncated"):
                st.events.append({"type": "kept_as_text", "reason": reason, "turn": m.turn, "tool": m.name,
                                  "detail": detail, "vfold": self._record})
        st.renders[key] = fo
        return fo

    def fold_message(self, m: Message, registry: EvidenceRegistry, st: _EpisodeState | None = None) -> Message:
        """The folded form of tool message ``m`` (``m`` itself when it stays text)."""
        st = st or self.state(registry)
        text = m.text()
        fo = self.fold_observation(text, m, registry, st)
        if not fo.folded:
            return m
        evidence = tuple(m.image_refs())
        key = (fo.key, evidence, m.tool_call_id, m.name, m.turn, m.intervention)
        hit = st.messages.get(key)
        if hit is not None:
            return hit
        parts: list[ContentPart] = []
        if self.note:
            refs = ", ".join(f"<{r.rsplit('.', 1)[0]}>" for r in fo.refs)
            parts.append(ContentPart(type="text", text=f"[{m.name or 'tool'} result, rendered as page image(s): {refs}]"))
        parts += [ContentPart(type="image", image=r) for r in fo.refs]
        parts += [ContentPart(type="image", image=r) for r in evidence]
        new = m.model_copy(update={"content": parts})
        st.messages[key] = new
        return new


class RenderAllContext(VFoldContext):
    """Image Rendering (Table 4): every observation, including the latest, is shown as page images
    from the first turn on (τ = 0, k = 0, folded even when not smaller)."""

    name = "render_all"

    def __init__(self, counter: TokenCounter, **kw: Any):
        kw.pop("tau", None)
        kw.pop("keep", None)
        if kw.get("only_if_smaller") is None:
            kw["only_if_smaller"] = False
        super().__init__(counter, tau=0, keep=0, **kw)
        self.tau = -1  # trigger even on an empty history


# ------------------------------------------------------------------------------------------ registration
def _vfold_kwargs(config: HarnessConfig) -> dict[str, Any]:
    # HarnessConfig.vfold_mode / vfold_layout / vfold_only_if_smaller / vfold_require_lossless
    o = options_from_config(config)  # validates; None fields = the mode's values
    return {"mode": o.mode, "layout": getattr(config, "vfold_layout", None),
            "only_if_smaller": getattr(config, "vfold_only_if_smaller", None),
            "require_lossless": getattr(config, "vfold_require_lossless", None)}


def _with_common(cls):
    def factory(config: HarnessConfig, counter: TokenCounter, **opts: Any) -> ContextBuilder:
        return cls(counter, renderer=opts.get("renderer"), tau=config.context_tau, keep=config.context_keep,
                   refeed_images=config.refeed_images, **_vfold_kwargs(config))
    return factory


def _summary_factory(config: HarnessConfig, counter: TokenCounter, **opts: Any) -> ContextBuilder:
    if opts.get("summarizer") is None:
        raise ValueError("context strategy 'summary' needs a summarizer: pass Harness(context_builder="
                         "SummaryContext(counter, PolicySummarizer(OpenAIChatPolicy(...))))")
    return SummaryContext(counter, opts["summarizer"], tau=config.context_tau, keep=config.context_keep,
                          refeed_images=config.refeed_images)


def _discard_factory(config: HarnessConfig, counter: TokenCounter, **_: Any) -> ContextBuilder:
    return DiscardContext(counter, tau=config.context_tau, keep=config.context_keep, refeed_images=config.refeed_images)


def _render_all_factory(config: HarnessConfig, counter: TokenCounter, **opts: Any) -> ContextBuilder:
    kw = _vfold_kwargs(config)
    kw["only_if_smaller"] = False  # Table 4's Image Rendering renders every observation
    return RenderAllContext(counter, renderer=opts.get("renderer"), refeed_images=config.refeed_images, **kw)


for _name, _factory in (("discard", _discard_factory), ("summary", _summary_factory),
                        ("render_all", _render_all_factory), ("vfold", _with_common(VFoldContext))):
    if _name not in context_strategy_registry():  # a researcher's own replacement (replace=True) wins
        register_context_strategy(_name, _factory)


def points_seeker_config(**overrides: Any) -> HarnessConfig:
    """POINTS-Seeker's environment (``kit/recipes/points_seeker.yaml``): its three tools and ``<answer>`` protocol,
    10 turns (§3.2.4, App. A.4), 32k context, no WeAgent recovery rule or synthesis turn, V-Fold on in its paper
    mode (τ = 8k, k = 2, §4.1; Table 8 layout). The same function as
    :func:`kit.harness.toolsets.points_seeker.points_seeker_config`; ``overrides`` win.

    Raises:
        ValueError: an invalid override (:class:`HarnessConfig` validation).
    """
    from kit.harness.toolsets.points_seeker import points_seeker_config as _env

    return _env(**overrides)
