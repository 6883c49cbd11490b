"""Experts of the synthesis pipeline (WeAgent §4: "Kimi K2.6 on WeAgent-Harness as the expert").

* :class:`OfflineExpander` — deterministic, no model: walks the ZIM link graph
  (:class:`kit.data.linkgraph.LinkGraph`) backwards (an article that links to the current node is
  its predecessor; the linking sentence with the link masked is the bridge question) and writes
  template queries. Outputs are labelled ``synthetic-offline``.
* :class:`LLMExpert` — any OpenAI-compatible endpoint through :class:`kit.policy.openai_client.
  OpenAIChatPolicy` (or any :class:`kit.types.Policy`). One hop = one harness episode that receives
  only the current node (WeAgent §4.2); semantic review and query synthesis are tool-free calls.

Both implement ``expand_hop``, ``review`` and ``synthesize_query``. Failures raise
:class:`ExpertError`; :func:`with_retries` retries the retryable ones (the kit's retry policy,
:mod:`kit.web.retry`) and the callers record the item as failed when retries run out.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from kit.data import OFFLINE_LABEL
from kit.data.linkgraph import LinkGraph, norm_title
from kit.data.records import Chain, Hop, Seed, SynthTask
from kit.harness.neutralize import neutralize_control_tokens
from kit.types import ContentPart, Message, PolicyError, SamplingParams
from kit.web.retry import RetryConfig, async_retrying

R = TypeVar("R")
BLANK = "___"


class ExpertError(Exception):
    """The expert could not produce an item. ``retryable``: a retry may succeed (endpoint error,
    unparsable output); otherwise the item is a dead end (e.g. no predecessor exists)."""

    def __init__(self, message: str, *, retryable: bool = False, reason: str = "expert_error"):
        super().__init__(message)
        self.retryable = retryable
        self.reason = reason


# The expert's defaults (kit.web.retry's table): 3 attempts, 0.5 s doubling to 10× that; retryable
# ExpertError / PolicyError only (``retryable=False`` is a dead end, never retried); no per-attempt limit.
DEFAULT_RETRY = RetryConfig(max_retries=2, backoff_initial_s=0.5, backoff_max_s=5.0, retry_on=(ExpertError, PolicyError),
                            attempt_timeout_s=None)


async def with_retries(fn: Callable[[], Awaitable[R]], attempts: int | None = 3, *, wait_s: float | None = 0.5,
                       retry: RetryConfig | None = None) -> R:
    """Call ``fn`` up to ``attempts`` times while it raises a retryable :class:`ExpertError` or
    :class:`~kit.types.PolicyError`, with exponential backoff starting at ``wait_s`` seconds (capped at
    ``10 · wait_s``). ``retry`` (default :data:`DEFAULT_RETRY`) is the whole policy; ``attempts`` and
    ``wait_s``, unless None, override its attempt count and back-off. The last exception propagates."""
    policy = retry or DEFAULT_RETRY
    policy = policy.with_(max_retries=None if attempts is None else max(1, attempts) - 1,
                          backoff_initial_s=wait_s, backoff_max_s=None if wait_s is None else 10 * max(wait_s, 0.01))
    async for attempt in async_retrying(policy, reraise=True):
        with attempt:
            return await fn()
    raise AssertionError("unreachable")  # pragma: no cover


class Expert(Protocol):
    name: str
    labels: list[str]

    async def expand_hop(self, node_url: str, node_title: str, *, avoid: set[str], key: str) -> Hop: ...

    async def review(self, task: SynthTask) -> dict[str, Any]: ...

    async def synthesize_query(self, chain: Chain, seed: Seed, modality: str) -> str: ...


def mask_sentence(sentence: str, anchor: str) -> str | None:
    """``sentence`` with the first whole-word occurrence of ``anchor`` replaced by ``___``."""
    m = re.search(rf"(?<!\w){re.escape(anchor)}(?!\w)", sentence)
    if not m:
        return None
    return sentence[: m.start()] + BLANK + sentence[m.end():]


def hop_question(subject: str, masked: str) -> str:
    return f'On the page about "{subject}", one sentence reads: "{masked}" Which page does the blank ({BLANK}) name?'


def compose_query(chain: Chain, seed: Seed, modality: str) -> str:
    """Template query from a validated chain: anchor, one step per bridge, then the pixel question
    about the target image (named by its position on the final page, never by its caption)."""
    if modality == "input_image":
        lines = ["Identify the subject of the attached image and open its encyclopedia page."]
    else:
        lines = [f'Start from the encyclopedia page about "{chain.anchor}".']
    for i, h in enumerate(chain.hops, 1):
        masked = h.question.split('one sentence reads: "', 1)[-1].rsplit('" Which page', 1)[0]
        where = "On that page" if i > 1 or modality == "input_image" else "On it"
        lines.append(f'Step {i}: {where}, the sentence "{masked}" has a blank ({BLANK}); '
                     "it names the next page to open.")
    ordinal = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth"}.get(seed.target.position,
                                                                                  f"#{seed.target.position}")
    lines.append(f"Finally, look at the {ordinal} picture on the last page (in page order). {seed.fact.question} "
                 "Cite the picture you used.")
    return "\n".join(lines)


class OfflineExpander:
    """Deterministic expert over a :class:`LinkGraph` (see module docstring).

    ``expand_hop`` picks, among the articles linking to the node with a sentence that makes a
    well-formed bridge question, the one with the smallest sha256 of ``key`` + its URL, so
    different keys (depths, variants) explore different predecessors reproducibly.
    """

    name = "offline-expander"

    def __init__(self, graph: LinkGraph, *, min_sentence_chars: int = 30, max_sentence_chars: int = 320):
        self.graph = graph
        self.labels = [OFFLINE_LABEL]
        self.min_chars, self.max_chars = min_sentence_chars, max_sentence_chars

    async def expand_hop(self, node_url: str, node_title: str, *, avoid: set[str], key: str) -> Hop:
        """One backward hop: a predecessor of ``node_url`` and a QA pair answered by ``node_title``.

        Raises:
            ExpertError: (not retryable, reason ``no_predecessor``) no usable backlink.
        """
        g = self.graph
        avoid_t = {norm_title(g.articles[u].title) for u in avoid if u in g.articles} | {norm_title(node_title)}
        cands = []
        for src, link in g.backlinks.get(node_url, []):
            art = g.articles[src]
            if norm_title(art.title) in avoid_t or not (self.min_chars <= len(link.sentence) <= self.max_chars):
                continue
            masked = mask_sentence(link.sentence, link.anchor)
            if masked is None or masked.count(BLANK) != 1:
                continue
            nm = norm_title(masked)
            if norm_title(link.anchor) in nm or any(t and t in nm for t in avoid_t):
                continue  # the answer, or an entity further down the chain, would be in the question
            order = hashlib.sha256(f"{key}|{src}|{link.sentence}".encode()).hexdigest()
            cands.append((order, src, link, masked))
        if not cands:
            raise ExpertError(f"no article links to {node_title!r} with a usable sentence", reason="no_predecessor")
        _, src, link, masked = min(cands)
        subj = g.articles[src].title
        return Hop(subject=subj, subject_url=src, answer=node_title, answer_url=node_url,
                   question=hop_question(subj, masked), evidence=link.sentence,
                   provenance={"method": "zim_backlink", "anchor": link.anchor, "expert": self.name})

    async def review(self, task: SynthTask) -> dict[str, Any]:
        """Offline semantic review: the deterministic checks of :mod:`kit.data.validate` are the
        review (no model); returns ``{"consistent": True, "image_dependent": True, "reason": ...}``."""
        return {"consistent": True, "image_dependent": True, "reason": "offline: deterministic checks only"}

    async def synthesize_query(self, chain: Chain, seed: Seed, modality: str) -> str:
        return compose_query(chain, seed, modality)


# ---------------------------------------------------------------------------------------------- LLM expert
HOP_PROMPT = (
    "You are building a multi-hop search question backwards. The current entity is \"{title}\" ({url}). Use the "
    "tools to find a DIFFERENT entity whose page mentions \"{title}\" in a way that identifies it uniquely. Open that "
    "page with web_extract. Then answer with only a JSON object inside <response>: "
    '{{"predecessor": entity name, "predecessor_url": the URL you opened, "question": a question about the '
    'predecessor whose only correct answer is "{title}" (do not write "{title}" in it), "evidence": the exact '
    "sentence from the page that supports it}}."
)
REVIEW_PROMPT = (
    "Review this multi-hop visual search task. Chain (anchor first): {chain}. Final question about the target image: "
    "{fact_q} Answer: {answer}. Target image caption: {caption!r}. Reply with only a JSON object "
    '{{"consistent": true/false (each hop\'s answer is the next hop\'s subject and each question has one answer), '
    '"image_dependent": true/false (the answer can only be read from the image pixels), "reason": short}}.'
)
QUERY_PROMPT = (
    "Write one natural user-facing search question from this validated chain. The solver must follow every bridge "
    "and look at the target image to answer. Do not reveal intermediate entities or the answer. Anchor: {anchor}. "
    "Bridges: {bridges}. Final question about picture #{position} of the last page: {fact_q}. {modality_note} "
    "Reply with only the question inside <response></response>."
)


def _json_from(text: str) -> dict[str, Any]:
    import json_repair

    m = re.search(r"\{.*\}", text or "", re.S)
    try:
        obj = json_repair.loads(m.group(0)) if m else None
    except Exception:  # json_repair raises assorted errors on hopeless input
        obj = None
    if not isinstance(obj, dict):
        raise ExpertError(f"expert output is not a JSON object: {(text or '')[:200]!r}", retryable=True,
                          reason="unparsable")
    return obj


class LLMExpert:
    """Expert on an OpenAI-compatible endpoint (WeAgent §4 used Kimi K2.6).

    Args:
        policy: a :class:`kit.types.Policy` (normally :class:`~kit.policy.openai_client.OpenAIChatPolicy`).
        harness_factory: ``() -> Harness`` running that policy over the synthesis backend (wrap the
            backend in :class:`kit.web.cache.CachedBackend` so observations enter the cache pool).
        workdir: folder for hop episodes (``hops/episodes.jsonl``: the audit trail).
        sampling: sampling for the tool-free review and query calls.
    """

    def __init__(self, policy, harness_factory, workdir, *, sampling: SamplingParams | None = None):
        from pathlib import Path

        self.policy = policy
        self.harness_factory = harness_factory
        self.workdir = Path(workdir)
        self.sampling = sampling or SamplingParams(temperature=0.3, max_tokens=1024)
        self.name = f"llm:{getattr(policy, 'name', 'policy')}"
        self.labels: list[str] = []

    async def _chat(self, prompt: str) -> str:
        msgs = [Message(role="system", content=[ContentPart(type="text", text="You are a careful data annotator.")]),
                # page titles, evidence sentences and captions are web data: neutralized like observations
                Message(role="user", content=[ContentPart(type="text", text=neutralize_control_tokens(prompt)[0])])]
        turn = await self.policy.generate(msgs, [], self.sampling, None)
        return turn.text or ""

    async def expand_hop(self, node_url: str, node_title: str, *, avoid: set[str], key: str) -> Hop:
        """One harness episode that sees only the current node; the predecessor page must have been
        opened in the episode and the evidence sentence must appear in what it returned.

        Raises:
            ExpertError: episode error (retryable), unparsable or incomplete JSON (retryable),
                unverifiable provenance or a leaking question (retryable: the model may do better).
        """
        from kit.harness.episode import Task
        from kit.harness.runner import EpisodeWriter, workspace_name

        h = self.harness_factory()
        tid = "hop_" + hashlib.sha256(f"{key}|{node_url}".encode()).hexdigest()[:12]
        task = Task(id=tid, question=HOP_PROMPT.format(title=node_title, url=node_url), source="hop")
        rec = await h.run(task, self.workdir / "hops" / "workspaces" / workspace_name(tid + key[-8:]))
        await EpisodeWriter(self.workdir / "hops" / "episodes.jsonl").write(rec)
        if rec.status not in ("answered", "max_turns_synthesis") or not rec.final_response:
            raise ExpertError(f"hop episode ended {rec.status}: {rec.error}", retryable=True, reason="episode_failed")
        obj = _json_from(rec.final_response)
        miss = [k for k in ("predecessor", "predecessor_url", "question", "evidence") if not str(obj.get(k) or "").strip()]
        if miss:
            raise ExpertError(f"hop JSON lacks {miss}", retryable=True, reason="incomplete")
        url, ev = str(obj["predecessor_url"]).strip(), " ".join(str(obj["evidence"]).split())
        pages = [m.text() for m in rec.messages if m.role == "tool" and m.name == "web_extract" and f"URL: {url}" in m.text()]
        if not pages:
            raise ExpertError(f"predecessor page {url} was not opened in the episode", retryable=True,
                              reason="provenance_unverified")
        if not any(ev[:80].casefold() in " ".join(p.split()).casefold() for p in pages):
            raise ExpertError("evidence sentence not found in the opened page", retryable=True, reason="evidence_unverified")
        if norm_title(node_title) in norm_title(str(obj["question"])):
            raise ExpertError("the hop question names its answer", retryable=True, reason="answer_in_question")
        if url in avoid:
            raise ExpertError("predecessor already in the chain", retryable=True, reason="cycle")
        return Hop(subject=str(obj["predecessor"]).strip(), subject_url=url, answer=node_title, answer_url=node_url,
                   question=str(obj["question"]).strip(), evidence=ev,
                   provenance={"method": "llm_hop_episode", "episode": rec.id, "expert": self.name})

    async def review(self, task: SynthTask) -> dict[str, Any]:
        chain = [{"subject": h.subject, "question": h.question, "answer": h.answer} for h in task.chain.hops]
        obj = _json_from(await self._chat(REVIEW_PROMPT.format(chain=json.dumps(chain, ensure_ascii=False),
                                                               fact_q=task.seed.fact.question, answer=task.answer,
                                                               caption=task.seed.target.caption)))
        return {"consistent": bool(obj.get("consistent")), "image_dependent": bool(obj.get("image_dependent")),
                "reason": str(obj.get("reason", ""))}

    async def synthesize_query(self, chain: Chain, seed: Seed, modality: str) -> str:
        note = ("The user attaches a picture of the anchor; do not name it." if modality == "input_image"
                else "Name the anchor in the question.")
        bridges = json.dumps([{"from": h.subject, "question": h.question} for h in chain.hops], ensure_ascii=False)
        text = await self._chat(QUERY_PROMPT.format(anchor=chain.anchor, bridges=bridges, position=seed.target.position,
                                                    fact_q=seed.fact.question, modality_note=note))
        m = re.search(r"<response>(.*?)(?:</response>|$)", text, re.S)
        q = (m.group(1) if m else text).strip()
        if len(q) < 20:
            raise ExpertError(f"synthesized query too short: {q!r}", retryable=True, reason="bad_query")
        return q
