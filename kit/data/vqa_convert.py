"""QA -> VQA conversion (POINTS-Seeker §3.2.2 "VQA data construction").

Three steps, then pairing: (i) **entity extraction and selection** — find a visually representable
entity named in the question (not the answer); (ii) **query de-biasing** — a context-aware search
query that resolves ambiguity ("Mike Baird" -> "Mike Baird New South Wales politician"); (iii)
**VQA reformulation** — the question refers to the entity only as "the person in the image" / "the
object in the image"; finally the question is paired with an image retrieved by image search through
the web backend (the local web's image search offline, any :class:`kit.types.SearchBackend` live).

Two converters share the checks and the pairing:

* :class:`OfflineVQAConverter` — deterministic: capitalized spans of the question looked up as page
  titles through web search, the descriptor read from the entity page's first sentence ("... was an
  American singer-songwriter ..."), person/object from that descriptor.
* :class:`LLMVQAConverter` — an OpenAI-compatible model (the paper used Claude) through any
  :class:`kit.types.Policy` proposes entity, type, de-biased query and rewritten question as JSON.

Every candidate either becomes a :class:`VQAItem` or a rejection with a reason (``no_entity``,
``entity_not_found``, ``entity_still_named``, ``answer_in_question``, ``no_image``, ...);
:func:`convert_qa` writes ``vqa.jsonl`` / ``vqa_rejected.jsonl`` / ``vqa_failed.jsonl`` and resumes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from kit.data.linkgraph import norm_title
from kit.data.records import Failure, Rejection, StageFiles
from kit.harness.neutralize import neutralize_control_tokens
from kit.types import BackendError, ContentPart, Message, PolicyError, SamplingParams, SearchBackend

EntityType = Literal["person", "object"]
PHRASE = {"person": "the person in the image", "object": "the object in the image"}
#: Descriptor words that make an entity a person (occupations, roles).
PERSON_WORDS = frozenset("""singer songwriter singer-songwriter musician composer pianist saxophonist guitarist
trumpeter drummer bassist vocalist rapper producer conductor actor actress comedian director filmmaker writer author
poet novelist journalist painter artist sculptor photographer architect politician president senator governor
minister mayor king queen prince princess emperor pope bishop priest player footballer cricketer athlete boxer
coach manager businessman businesswoman entrepreneur engineer scientist physicist chemist biologist
mathematician philosopher historian economist inventor explorer soldier general admiral activist lawyer judge
dancer model presenter broadcaster evangelist preacher bandleader arranger lyricist dj""".split())
_QWORDS = {"which", "what", "who", "whom", "whose", "where", "when", "why", "how", "in", "on", "at", "the", "a", "an",
           "name", "did", "does", "is", "was", "were", "are", "of", "for", "by", "from", "to", "and", "or", "after",
           "before", "during", "according", "this", "that", "these", "those", "it", "its", "his", "her", "their"}
_SPAN = re.compile(r"[\"“]([^\"”]{3,80})[\"”]|((?:[A-Z][\w'’.\-]*|\d{4})(?:\s+(?:of|the|de|du|la|le|von|van|and|&|"
                   r"[A-Z][\w'’.\-]*|\d+))*)")
_DESCRIPTOR = re.compile(r"\b(?:is|was|are|were)\s+(?:an?|the)\s+([^.;:()\[\]]{3,90})", re.I)


class VQAItem(BaseModel):
    """A converted VQA instance: the reformulated question, the answer, the paired image and the
    provenance of every step (entity page, de-biased query, image URL and page)."""

    id: str
    qa_id: str
    question: str
    answer: str
    answers: list[str]
    original_question: str
    entity: str
    entity_type: EntityType
    entity_url: str = ""
    search_query: str
    image: str
    image_url: str
    image_page_url: str = ""
    image_sha256: str
    converter: str
    labels: list[str] = Field(default_factory=list)

    def to_task(self):
        """A harness :class:`~kit.harness.episode.Task` with the image as the user's input image."""
        from kit.harness.episode import Task

        return Task(id=self.id, question=self.question, input_images=[self.image], answers=list(self.answers),
                    source="vqa_convert", metadata={"entity": self.entity, "entity_type": self.entity_type,
                                                    "qa_id": self.qa_id, "search_query": self.search_query})


class QAItem(BaseModel):
    """An input QA pair (text-only multi-hop QA, or a synthesized chain's hop)."""

    id: str
    question: str
    answer: str
    answers: list[str] = Field(default_factory=list)


class ConvertError(ValueError):
    """A QA pair cannot be converted; ``reason`` is the rejection key; ``retryable`` for model errors."""

    def __init__(self, reason: str, detail: str = "", *, retryable: bool = False):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail, self.retryable = reason, detail, retryable


class Plan(BaseModel):
    """Output of steps (i)-(iii) before image pairing."""

    entity: str
    entity_type: EntityType
    entity_url: str = ""
    search_query: str
    question: str


class Converter(Protocol):
    name: str

    async def plan(self, qa: QAItem, web: SearchBackend) -> Plan: ...


def candidate_spans(question: str) -> list[str]:
    """Entity candidates of a question: quoted spans and runs of capitalized words (connectors such
    as "of the" allowed inside), possessive "'s" removed, each with and without leading question
    words or articles ("The Genius of Ray Charles" and "Genius of Ray Charles"), longest first."""
    out: list[str] = []
    for m in _SPAN.finditer(question):
        span = re.sub(r"['’]s$", "", (m.group(1) or m.group(2) or "").strip(" '’.,;:"))
        words = span.split()
        while words and words[-1].lower() in _QWORDS:
            words.pop()
        variants = [" ".join(words)]
        while words and words[0].lower() in _QWORDS:
            words.pop(0)
            variants.append(" ".join(words))
        for v in variants:
            if len(v) >= 3 and not v.isdigit() and v.split()[0].lower() not in _QWORDS - {"the", "a", "an"} \
                    and v not in out:
                out.append(v)
    return sorted(out, key=lambda s: (-len(s.split()), -len(s)))


def descriptor(markdown: str, title: str) -> str:
    """The short description of an entity from its page's opening ("X was an American singer-songwriter,
    musician and composer" -> "American singer-songwriter"): at most 6 words, cut at the first comma
    or relative clause; sentences with quotes are skipped; "" when the opening has no "is/was a ..."."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markdown)  # keep link text only
    text = re.sub(r"[*_#>`]", "", text)
    body = text.split(title, 1)[-1] if title and title in text else text
    for m in _DESCRIPTOR.finditer(body[:2000]):
        d = re.split(r",| who | which | known | best | that | whose | born | from the ", m.group(1))[0]
        if not re.search(r"[\"“”]", d):
            words = d.split()[:6]
            while words and words[-1].lower() in _QWORDS:  # no dangling "and" / "of" after the cut
                words.pop()
            return " ".join(words)
    return ""


def entity_type_of(desc: str, markdown: str = "") -> EntityType:
    """``person`` when the descriptor names an occupation/role or the page opens with a life span
    ("(September 23, 1930 – June 10, 2004)" / "(born ...)"), else ``object``."""
    words = {w.strip(".,").lower() for w in re.split(r"[\s/]+", desc)}
    if words & PERSON_WORDS or any(w.split("-")[-1] in PERSON_WORDS for w in words):
        return "person"
    head = markdown[:1500]
    if re.search(r"\((?:born\b|[^()]*\b\d{3,4}\s*[–-]\s*[^()]*\d{3,4}\))", head):
        return "person"
    return "object"


def reformulate(question: str, entity: str, etype: EntityType) -> str:
    """Replace every mention of ``entity`` (possessives included) by the image phrase; the first
    letter is capitalised when the question starts with it."""
    phrase = PHRASE[etype]
    pat = re.compile(rf"(?<!\w){re.escape(entity)}(?:['’]s\b|['’](?=\s))?", re.I)

    def sub(m: re.Match) -> str:
        tail = m.group(0)[len(entity):]
        return phrase + ("'s" if tail else "")

    out = pat.sub(sub, question)
    return out[:1].upper() + out[1:] if out.lower().startswith(phrase) else out


def check_reformulated(qa: QAItem, plan: Plan) -> None:
    """Raises :class:`ConvertError` when the rewritten question still names the entity (any of its
    words of 4+ letters that is capitalized in the original), states the answer, or lost the image phrase."""
    q = plan.question
    if PHRASE[plan.entity_type] not in q.lower():
        raise ConvertError("no_image_reference", q[:160])
    named = [w for w in re.findall(r"[A-Z][\w'’\-]{3,}", plan.entity) if w.lower() not in _QWORDS]
    if any(re.search(rf"(?<!\w){re.escape(w)}(?!\w)", q) for w in named):
        raise ConvertError("entity_still_named", q[:160])
    for a in [qa.answer] + list(qa.answers):
        if a and len(a) >= 3 and norm_title(a) in norm_title(q):
            raise ConvertError("answer_in_question", a)


class OfflineVQAConverter:
    """Deterministic steps (i)-(iii) over a web backend (see module docstring).

    An entity is selected when a search for it returns a page of that exact title (normalized), the
    page is not the answer's page, and the page's opening gives a descriptor (the de-biasing context).
    """

    name = "offline-vqa"

    def __init__(self, *, hits: int = 5):
        self.hits = hits

    async def plan(self, qa: QAItem, web: SearchBackend) -> Plan:
        spans = candidate_spans(qa.question)
        answers = {norm_title(a) for a in [qa.answer, *qa.answers] if a}
        spans = [s for s in spans if norm_title(s) not in answers and not any(a and a in norm_title(s) for a in answers)]
        if not spans:
            raise ConvertError("no_entity", qa.question[:160])
        last: ConvertError | None = None
        for span in spans:
            try:
                hits = await web.search(span, self.hits)
            except BackendError as e:
                raise ConvertError("search_failed", str(e), retryable=True) from e
            hit = next((h for h in hits if norm_title(h.title) == norm_title(span)), None)
            if hit is None:
                continue
            try:
                page = await web.fetch(hit.url)
            except BackendError:
                continue
            desc = descriptor(page.markdown, page.title or hit.title)
            if not desc:
                continue
            etype = entity_type_of(desc, page.markdown)
            plan = Plan(entity=span, entity_type=etype, entity_url=hit.url, search_query=f"{span} {desc}",
                        question=reformulate(qa.question, span, etype))
            try:
                check_reformulated(qa, plan)
            except ConvertError as e:  # another entity of the question may still work
                last = e
                continue
            return plan
        if last is not None:
            raise last
        raise ConvertError("entity_not_found", f"no page titled as any of {spans[:4]}")


QA2VQA_PROMPT = (
    "Convert a text question into a visual question. Question: {question}\nAnswer: {answer}\n"
    "1. Pick ONE visually representable entity named in the question (a person, landmark, artwork, product, "
    "animal...), never the answer. 2. Write a de-biased image search query for it: the name plus short context "
    "that removes ambiguity (e.g. \"Mike Baird New South Wales politician\"). 3. Rewrite the question so it "
    "refers to that entity only as \"the person in the image\" or \"the object in the image\", keeping the rest "
    "and the answer unchanged. Reply with only a JSON object: "
    '{{"entity": ..., "entity_type": "person" or "object", "search_query": ..., "question": ...}}.'
)


class LLMVQAConverter:
    """Steps (i)-(iii) by a model on an OpenAI-compatible endpoint (any :class:`kit.types.Policy`).

    Raises (from :meth:`plan`): :class:`ConvertError` ``model_error`` / ``unparsable`` (retryable),
    ``bad_plan`` (missing fields or an unknown entity type)."""

    def __init__(self, policy, *, sampling: SamplingParams | None = None):
        self.policy = policy
        self.sampling = sampling or SamplingParams(temperature=0.2, max_tokens=512)
        self.name = f"llm-vqa:{getattr(policy, 'name', 'policy')}"

    async def plan(self, qa: QAItem, web: SearchBackend) -> Plan:
        from kit.data.expert import ExpertError, _json_from

        prompt = QA2VQA_PROMPT.format(question=qa.question, answer=qa.answer)  # QA fields are data
        msgs = [Message(role="user", content=[ContentPart(type="text", text=neutralize_control_tokens(prompt)[0])])]
        try:
            turn = await self.policy.generate(msgs, [], self.sampling, None)
        except PolicyError as e:
            raise ConvertError("model_error", str(e), retryable=True) from e
        try:
            obj = _json_from(turn.text or "")
        except ExpertError as e:
            raise ConvertError("unparsable", str(e), retryable=True) from e
        etype = str(obj.get("entity_type", "")).strip().lower()
        fields = {k: str(obj.get(k) or "").strip() for k in ("entity", "search_query", "question")}
        if etype not in PHRASE or not all(fields.values()):
            raise ConvertError("bad_plan", f"entity_type={etype!r}, empty={[k for k, v in fields.items() if not v]}")
        return Plan(entity=fields["entity"], entity_type=etype, search_query=fields["search_query"],
                    question=fields["question"])


async def pair_image(plan: Plan, web: SearchBackend, image_dir: Path, *, hits: int = 8) -> tuple[Path, str, str, str]:
    """Image search with the de-biased query; the first localized hit whose page is the entity's page
    or whose title names the entity. Returns ``(path, image_url, page_url, sha256)``.

    Raises:
        ConvertError: ``image_search_failed`` (retryable) or ``no_image``.
    """
    from kit.data.seeds import save_target

    try:
        found = await web.image_search(plan.search_query, hits)
    except BackendError as e:
        raise ConvertError("image_search_failed", str(e), retryable=True) from e
    ent = norm_title(plan.entity)
    for h in found:
        if not h.content:
            continue
        if (plan.entity_url and h.page_url == plan.entity_url) or ent in norm_title(h.title) or \
                ent in norm_title(h.caption):
            try:
                path, sha, _, _ = save_target(h.content, h.mime, image_dir)
            except (OSError, ValueError):
                continue
            return path, h.image_url, h.page_url, sha
    raise ConvertError("no_image", f"no image of {plan.entity!r} among {len(found)} hits for {plan.search_query!r}")


async def convert_qa(items: Sequence[QAItem], converter: Converter, web: SearchBackend, out_dir: str | Path, *,
                     attempts: int = 3) -> StageFiles:
    """Convert QA pairs to VQA items; writes ``vqa*.jsonl`` under ``out_dir`` (images in
    ``out_dir/vqa_images``), skipping ids already decided. Retryable errors (model, search) are
    retried ``attempts`` times, then recorded as failed; others are rejections with their reason."""
    from kit.data.expert import ExpertError, with_retries

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)  # written even when nothing is converted (a zero-count stage)
    files = StageFiles(out, "vqa", VQAItem)
    done = files.done_ids()
    for qa in items:
        vid = "vqa_" + hashlib.sha256(f"{converter.name}|{qa.id}".encode()).hexdigest()[:12]
        if vid in done:
            continue
        tries = 0

        async def attempt():
            nonlocal tries
            tries += 1
            try:
                plan = await converter.plan(qa, web)  # noqa: B023 (attempt() is awaited within this iteration)
                check_reformulated(qa, plan)  # noqa: B023
                return plan, await pair_image(plan, web, out / "vqa_images")
            except ConvertError as e:
                if e.retryable:
                    raise ExpertError(str(e), retryable=True, reason=e.reason) from e
                raise

        try:
            plan, (path, url, page, sha) = await with_retries(attempt, attempts, wait_s=0.05)
        except ConvertError as e:
            files.rejected.append(Rejection(id=vid, stage="vqa", reason=e.reason, detail=e.detail[:300],
                                            item=qa.model_dump()))
            continue
        except ExpertError as e:
            files.failed.append(Failure(id=vid, stage="vqa", error=str(e), attempts=tries))
            continue
        files.accepted.append(VQAItem(
            id=vid, qa_id=qa.id, question=plan.question, answer=qa.answer, answers=[qa.answer, *qa.answers],
            original_question=qa.question, entity=plan.entity, entity_type=plan.entity_type,
            entity_url=plan.entity_url, search_query=plan.search_query, image=str(path), image_url=url,
            image_page_url=page, image_sha256=sha, converter=converter.name))
    return files


def qa_from_chains(chains: Sequence[Any], limit: int | None = None) -> list[QAItem]:
    """QA pairs from synthesized chains (:class:`kit.data.records.Chain`): each hop's question about
    its subject entity, answered by the next entity; real sentences of the knowledge source."""
    out, seen = [], set()
    for c in chains:
        for i, h in enumerate(c.hops):
            if h.question in seen:  # the same bridge reached from several chains
                continue
            seen.add(h.question)
            out.append(QAItem(id=f"{c.id}_hop{i}", question=h.question, answer=h.answer))
            if limit is not None and len(out) >= limit:
                return out
    return out
