"""Goal-conditioned page summaries for ``web_extract`` (WeAgent Table 4: "summarized by a LLM to at
most 5,000 characters").

:class:`LLMSummarizer` uses a configured OpenAI-compatible endpoint; :class:`ExtractiveSummarizer` is
the offline default: it ranks the page's blocks against the goal with BM25 (tantivy, the engine of the
local web's search too: one BM25 engine in the runtime path) and keeps the best blocks in page order
until the character budget is used.

:func:`make_summarizer` chooses between them for every path (evaluation, data, RL, verl): the LLM under
the paper profile (a missing endpoint stops the run, :class:`SummarizerConfigError`), the extractive
ranking under smoke, and the extractive ranking labelled ``(fallback)`` when a paper run chooses it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

_BLOCK_SPLIT = re.compile(r"\n\s*\n")


class Summarizer(Protocol):
    async def summarize(self, markdown: str, *, goal: str | None, max_chars: int, title: str = "") -> tuple[str, str]:
        """Return ``(summary, method)``; ``summary`` has at most ``max_chars`` characters."""
        ...


def _clip(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    marker = " […]"
    return text[: max_chars - len(marker)].rstrip() + marker


def _english_analyzer():
    import tantivy  # here, not at module top: only web_extract with a goal needs it

    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).filter(tantivy.Filter.remove_long(40))
            .filter(tantivy.Filter.lowercase()).filter(tantivy.Filter.stopword("english"))
            .filter(tantivy.Filter.ascii_fold()).filter(tantivy.Filter.stemmer("english")).build())


def bm25_block_scores(blocks: list[str], goal: str) -> list[float]:
    """BM25 score (tantivy defaults, k1 = 1.2, b = 0.75) of each block for the goal's terms: English
    stop words dropped, accents folded, Snowball-stemmed; ``0.0`` for a block sharing no term. One
    in-memory index per call (pages have tens to a few thousand blocks).

    Returns:
        ``len(blocks)`` floats, in block order.
    """
    import tantivy

    analyzer = _english_analyzer()
    terms = list(dict.fromkeys(analyzer.analyze(goal)))
    scores = [0.0] * len(blocks)
    if not terms or not blocks:
        return scores
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("body", stored=False, tokenizer_name="kit_en", index_option="freq")
    sb.add_unsigned_field("i", stored=False, fast=True)
    schema = sb.build()
    index = tantivy.Index(schema)  # in RAM
    index.register_tokenizer("kit_en", analyzer)
    writer = index.writer(heap_size=15_000_000, num_threads=1)
    for i, b in enumerate(blocks):
        doc = tantivy.Document(body=b)
        doc.add_unsigned("i", i)
        writer.add_document(doc)
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()
    query = tantivy.Query.boolean_query([(tantivy.Occur.Should, tantivy.Query.term_query(schema, "body", t))
                                         for t in terms])
    hits = searcher.search(query, limit=len(blocks), count=False).hits
    if hits:
        for (score, _), block in zip(hits, searcher.fast_field_values("i", [a for _, a in hits]), strict=True):
            if block is not None:  # every document has the fast field "i"
                scores[int(block)] = float(score)
    return scores


class ExtractiveSummarizer:
    """Offline goal-conditioned extract: BM25 over page blocks (paragraphs, list runs, table rows).

    Without a goal, the page's leading blocks are kept. Output length <= ``max_chars`` characters.
    ``fallback=True`` (chosen in place of the paper profile's LLM): the method recorded on every
    web_extract page (``summary_method``) ends in ``" (fallback)"``.
    """

    def __init__(self, *, fallback: bool = False):
        self.fallback = fallback

    @property
    def name(self) -> str:
        """``extractive_bm25`` (+ ``" (fallback)"``)."""
        return "extractive_bm25" + self._suffix

    @property
    def _suffix(self) -> str:
        return " (fallback)" if self.fallback else ""

    async def summarize(self, markdown: str, *, goal: str | None, max_chars: int, title: str = "") -> tuple[str, str]:
        method = "extractive_bm25" if goal else "leading"
        return self.summarize_sync(markdown, goal=goal, max_chars=max_chars), method + self._suffix

    def summarize_sync(self, markdown: str, *, goal: str | None, max_chars: int) -> str:
        blocks = [b.strip() for b in _BLOCK_SPLIT.split(markdown or "") if b.strip()]
        if not blocks:
            return "(the page has no text)"
        if sum(len(b) + 2 for b in blocks) <= max_chars:
            return "\n\n".join(blocks)
        order = list(range(len(blocks)))
        if goal and goal.strip():
            scores = bm25_block_scores(blocks, goal)
            if any(scores):
                # best blocks first; ties keep page order; block 0 (the lead) gets a small prior
                order = sorted(order, key=lambda i: (-(scores[i] + (0.5 if i == 0 else 0.0)), i))
        chosen: list[int] = []
        used = 0
        for i in order:
            cost = len(blocks[i]) + 2
            if used + cost > max_chars:
                if not chosen:
                    chosen.append(i)
                    break
                continue
            chosen.append(i)
            used += cost
        return _clip("\n\n".join(blocks[i] for i in sorted(chosen)), max_chars)


SUMMARY_PROMPT = (
    "You extract evidence from a web page for a research agent. Goal: {goal}\n\n"
    "Write a Markdown summary of at most {max_chars} characters that keeps every fact, number, date, name "
    "and image reference on the page that bears on the goal, quoting exact wording where it matters. "
    "If the page has nothing relevant, say so in one line.\n\nPage title: {title}\n\nPage:\n{page}"
)


class LLMSummarizer:
    """Summaries from a chat model (any :class:`kit.types.Policy`, e.g. ``OpenAIChatPolicy``).

    Falls back to :class:`ExtractiveSummarizer` when the endpoint fails, and says so in ``method``.
    The page given to the model is clipped to ``max_input_chars`` characters.
    """

    def __init__(self, policy, *, max_input_chars: int = 60_000, max_tokens: int = 2048, label: str | None = None):
        self.policy = policy
        self.label = label  # what ran, when the policy's own name would hide it (a preflight's stand-in)
        self.max_input_chars = max_input_chars
        self.max_tokens = max_tokens
        self.fallback = ExtractiveSummarizer()

    @property
    def name(self) -> str:
        """``llm:<policy name>`` (the method recorded on each summary); a preflight's stand-in policy
        is named by ``label`` like the judge's: ``llm:tiny stand-in (…, random weights) for <model>``."""
        if self.label:
            return f"llm:{self.label}"
        return f"llm:{getattr(self.policy, 'name', 'endpoint')}"

    async def summarize(self, markdown: str, *, goal: str | None, max_chars: int, title: str = "") -> tuple[str, str]:
        from kit.types import ContentPart, Message, PolicyError, SamplingParams

        prompt = SUMMARY_PROMPT.format(goal=goal or "summarize the page's main facts", max_chars=max_chars,
                                       title=title, page=markdown[: self.max_input_chars])
        try:
            turn = await self.policy.generate([Message(role="user", content=[ContentPart(type="text", text=prompt)])], [],
                                              SamplingParams(temperature=0.0, max_tokens=self.max_tokens))
        except PolicyError as e:
            text, _ = await self.fallback.summarize(markdown, goal=goal, max_chars=max_chars)
            return text, f"extractive_fallback ({e})"
        return _clip(turn.text.strip(), max_chars), self.name


# ------------------------------------------------------------------------------------------ factory
SUMMARIZERS = ("llm", "extractive")


class SummarizerConfigError(ValueError):
    """The web_extract summarizer a run needs cannot be built from its parameters (names the parameter)."""


def make_summarizer(endpoint: str = "", model: str = "", profile: Any = "smoke", *, kind: str | None = None,
                    api_key: str | None = None, policy=None, **llm_kwargs: Any) -> Summarizer:
    """The web_extract summarizer of a run (WeAgent Table 4: pages "summarized by a LLM to at most
    5,000 characters"); every path (notebooks 01/02/05/06, :mod:`kit.data.pipeline`, :mod:`kit.rl`,
    the verl agent loop) builds it here.

    Args:
        endpoint, model, api_key: the summarizer's OpenAI-compatible endpoint and served name (``model``
            empty: the recipe's ``eval.summarizer_model``).
        profile: ``"smoke"`` | ``"paper"`` | a :class:`kit.profiles.Profile`.
        kind: ``"llm"`` | ``"extractive"`` | None: ``llm`` when an endpoint or ``policy`` is given, else
            the profile's (smoke extractive, paper llm).
        policy: an in-process :class:`kit.types.Policy` used instead of ``endpoint``.
        llm_kwargs: :class:`LLMSummarizer` options (``max_input_chars``, ``max_tokens``).

    Returns:
        :class:`LLMSummarizer` or :class:`ExtractiveSummarizer` (``fallback=True`` when the profile's
        summarizer is the LLM).

    Raises:
        SummarizerConfigError: ``llm`` without ``summarizer_endpoint`` (or ``policy``), or an endpoint
            without ``summarizer_model`` where the recipe names none (``eval.summarizer_model``).
        ValueError: an unknown ``kind`` or profile.
    """
    from kit.profiles import get_profile

    prof = get_profile(profile)
    endpoint = (endpoint or "").strip()
    profile_kind = str(prof.value("eval.summarizer", "extractive"))  # the recipe's (smoke extractive, paper llm)
    if kind is None:
        kind = "llm" if (endpoint or policy is not None) else profile_kind
    if kind not in SUMMARIZERS:
        raise ValueError(f"summarizer={kind!r}: must be one of {SUMMARIZERS}")
    if kind == "extractive":
        return ExtractiveSummarizer(fallback=profile_kind != "extractive")
    if policy is None and not endpoint and prof.preflight:
        from kit.profiles import stand_in_name, stand_in_policy

        policy = stand_in_policy("summarizer", max_new_tokens=32)
        llm_kwargs.setdefault("max_input_chars", int(prof.value("eval.summarizer_max_input_chars")))
        llm_kwargs.setdefault("label", stand_in_name(model or str(prof.value("eval.summarizer_model", None)
                                                                  or "the run's summarizer")))
    if policy is None:
        if not endpoint:
            raise SummarizerConfigError(
                f"the {prof.name} profile summarizes web_extract pages with an LLM (WeAgent Table 4: \"summarized by a "
                "LLM to at most 5,000 characters\"): set summarizer_endpoint and summarizer_model, or choose "
                "summarizer='extractive' for the offline BM25 extract, labelled '(fallback)' on every page")
        model = model or str(prof.value("eval.summarizer_model", None) or "")  # "": the recipe's served name
        if not model:
            raise SummarizerConfigError(f"summarizer_endpoint={endpoint} is set but summarizer_model is empty "
                                        f"(the {prof.name} recipe names none)")
        from kit.policy.openai_client import OpenAIChatPolicy
        from kit.policy.scripted import CharTokenCounter

        policy = OpenAIChatPolicy(endpoint, model, api_key=api_key, token_counter=CharTokenCounter(), max_retries=2)
    return LLMSummarizer(policy, **llm_kwargs)


def summarizer_from_config(cfg: Mapping[str, Any]) -> Summarizer:
    """:func:`make_summarizer` from a config mapping (the ``kit`` section of ``configs/verl/*.yaml``):
    ``summarizer`` (kind or null), ``summarizer_endpoint``, ``summarizer_model``,
    ``summarizer_api_key_env`` (default ``OPENAI_API_KEY``), and the profile: ``profile`` if set, else
    ``smoke`` when ``harness`` is ``smoke``, else ``paper``."""
    import os

    profile = cfg.get("profile") or ("smoke" if cfg.get("harness", "paper") == "smoke" else "paper")
    key_env = cfg.get("summarizer_api_key_env") or "OPENAI_API_KEY"
    return make_summarizer(cfg.get("summarizer_endpoint") or "", cfg.get("summarizer_model") or "", profile,
                           kind=cfg.get("summarizer"), api_key=os.environ.get(key_env))


def summarizer_labels(summarizer) -> list[str]:
    """Run labels for a summarizer standing in for the profile's LLM: ``["summarizer: extractive (fallback)"]``."""
    if isinstance(summarizer, ExtractiveSummarizer) and summarizer.fallback:
        return ["summarizer: extractive (fallback)"]
    return []
