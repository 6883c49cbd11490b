"""Stable-branch seed facts read from the image by the expert model (WeAgent §4.1).

§4.1: each seed stores "a concise fact that must be read from that image", and a seed is accepted
only if "its answer depends on visible pixels rather than a title, URL, caption, or page metadata".
Under the paper profile the expert (any OpenAI-compatible VLM, :class:`kit.types.Policy`) is shown
the target image with its page context and writes ONE such fact (:data:`VISUAL_FACT_PROMPT`,
version :data:`VISUAL_FACT_PROMPT_VERSION`). :func:`check_visual_fact` then rejects an empty or long
fact and one that names the page's concept or that a title, URL, caption or definition states.

The offline / smoke profile keeps :func:`kit.data.seeds.pixel_fact` (tone and orientation computed
from pixel statistics); every seed records which one made its fact (``Seed.fact_source``:
``"expert"`` or ``"pixel_statistics"``).
"""

from __future__ import annotations

import io
import re
import tempfile
from pathlib import Path
from urllib.parse import unquote

from PIL import Image

from kit.data.expert import ExpertError, _json_from, with_retries
from kit.data.linkgraph import norm_title
from kit.data.records import PixelFact
from kit.data.seeds import SeedError
from kit.harness.neutralize import neutralize_control_tokens
from kit.types import ContentPart, Message, SamplingParams

# --- kit choices (the paper says only "a concise fact", §4.1, and "a short answer D", §4.2) -----------
#: Most words an answer may have ("concise"): longer answers are descriptions, not judgeable facts.
MAX_ANSWER_WORDS = 6
#: Most characters of an answer / of its question.
MAX_ANSWER_CHARS, MAX_QUESTION_CHARS = 60, 300
# -----------------------------------------------------------------------------------------------------

VISUAL_FACT_PROMPT_VERSION = "visual-fact-v1"
VISUAL_FACT_PROMPT = (
    "Look at the attached image. It is picture #{position} on the encyclopedia page \"{title}\" ({page_url}); "
    "its caption is {caption!r}. Write ONE concise fact that can only be read from the picture's pixels (a colour, "
    "a count, a visible object, text or pose shown in it), not from the page title, the caption, the image URL or "
    "general knowledge about \"{title}\". The question must not name \"{title}\"; the answer must be at most "
    "{max_words} words and must not be the title or appear in the caption. Reply with only a JSON object: "
    '{{"question": a question about the picture, "answer": the short answer, "answers": other accepted wordings '
    "(optional list)}}."
)
#: Rejection reasons of :func:`check_visual_fact` (kept as ``seeds_rejected.jsonl`` reasons).
INVALID_REASONS = ("expert_fact_empty", "expert_fact_too_long", "fact_names_title", "answer_exposed_by_metadata")


def _words(text: str) -> str:
    """Casefolded words of ``text``; URLs are percent-decoded and split at ``/ _ - .`` first."""
    return norm_title(unquote(text or "").replace("_", " "))


def _contains(haystack: str, needle: str) -> bool:
    n = _words(needle)
    return bool(n) and re.search(rf"(?<!\w){re.escape(n)}(?!\w)", _words(haystack)) is not None


def check_visual_fact(question: str, answers: list[str], *, title: str, fields: dict[str, str],
                      max_words: int = MAX_ANSWER_WORDS) -> None:
    """Validate an expert's visual fact (``answers[0]`` is the canonical answer).

    ``fields`` are the texts the answer must not appear in (``title``, ``caption``, ``url``,
    ``page_url``, ``definition``), matched as whole casefolded words.

    Raises:
        SeedError: ``expert_fact_empty`` (no question or answer), ``expert_fact_too_long`` (an answer
            over ``max_words`` words or :data:`MAX_ANSWER_CHARS` characters, a question over
            :data:`MAX_QUESTION_CHARS`), ``fact_names_title`` (question or answer names the concept
            ``title``), ``answer_exposed_by_metadata`` (an answer stated by a field; detail names it).
    """
    if not question.strip() or not answers or not answers[0].strip():
        raise SeedError("expert_fact_empty", f"question {question!r}, answer {answers[:1]!r}")
    if len(question) > MAX_QUESTION_CHARS:
        raise SeedError("expert_fact_too_long", f"question of {len(question)} characters")
    for a in answers:
        if len(a.split()) > max_words or len(a) > MAX_ANSWER_CHARS:
            raise SeedError("expert_fact_too_long", f"answer {a!r} over {max_words} words / {MAX_ANSWER_CHARS} chars")
    if title and (_contains(question, title) or any(_contains(a, title) for a in answers)):
        raise SeedError("fact_names_title", f"the fact names {title!r}")
    leaks = sorted({name for name, text in fields.items() for a in answers if _contains(text, a)})
    if leaks:
        raise SeedError("answer_exposed_by_metadata", ", ".join(leaks))


def _ext(data: bytes) -> str:
    try:
        with Image.open(io.BytesIO(data)) as im:
            return (im.format or "png").lower().replace("jpeg", "jpg")
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise SeedError("image_unreadable", str(e)) from e


class ExpertFactReader:
    """Stage-1 fact reader for the stable branch: the expert VLM writes one fact from the image.

    Args:
        policy: a :class:`kit.types.Policy` that accepts image parts (an OpenAI-compatible VLM through
            :class:`~kit.policy.openai_client.OpenAIChatPolicy`).
        sampling: sampling of the call (default temperature 0.3, 512 tokens).
        attempts: calls per image while the output is unparsable or fails :func:`check_visual_fact`.
        max_words: :data:`MAX_ANSWER_WORDS` unless given.
    """

    fact_source = "expert"

    def __init__(self, policy, *, sampling: SamplingParams | None = None, attempts: int = 3,
                 max_words: int = MAX_ANSWER_WORDS):
        self.policy = policy
        self.sampling = sampling or SamplingParams(temperature=0.3, max_tokens=512)
        self.attempts, self.max_words = attempts, max_words
        self.name = f"expert-fact:{getattr(policy, 'name', 'policy')}"

    async def read(self, data: bytes, *, title: str, position: int, fields: dict[str, str]) -> PixelFact:
        """One fact about the image ``data`` on the page ``title`` (``fields``: caption, url, page_url,
        definition; shown to the expert, except the definition, and checked for leaks).

        Raises:
            SeedError: the image is unreadable, or every attempt's fact failed :func:`check_visual_fact`
                (the last attempt's reason).
            ExpertError: unparsable output after ``attempts`` calls (reason ``unparsable``).
            kit.types.PolicyError: the endpoint failed after its retries.
        """
        ext = _ext(data)
        prompt = VISUAL_FACT_PROMPT.format(position=position, title=title, page_url=fields.get("page_url", ""),
                                           caption=fields.get("caption", ""), max_words=self.max_words)
        with tempfile.TemporaryDirectory(prefix="kit_fact_") as ws:
            name = f"target.{ext}"
            (Path(ws) / name).write_bytes(data)
            msgs = [Message(role="system", content=[ContentPart(type="text", text="You are a careful data annotator.")]),
                    # title, caption and URL are web data: neutralized like every task text
                    Message(role="user", content=[ContentPart(type="text", text=neutralize_control_tokens(prompt)[0]),
                                                  ContentPart(type="image", image=name)])]

            async def once() -> PixelFact:
                turn = await self.policy.generate(msgs, [], self.sampling, ws)
                obj = _json_from(turn.text or "")
                question = " ".join(str(obj.get("question") or "").split())
                extra = obj.get("answers") if isinstance(obj.get("answers"), list) else []
                first, *alts = (" ".join(str(a).split()) for a in [obj.get("answer") or "", *extra])
                answers = list(dict.fromkeys([first, *(a for a in alts if a)]))  # canonical first, no repeats
                try:
                    check_visual_fact(question, answers, title=title, fields=fields, max_words=self.max_words)
                except SeedError as e:  # the model may do better on another call
                    raise ExpertError(e.detail, retryable=True, reason=e.reason) from e
                return PixelFact(kind="expert_read", question=question, answer=answers[0], answers=answers,
                                 evidence={"prompt_version": VISUAL_FACT_PROMPT_VERSION, "expert": self.name,
                                           "raw": (turn.text or "")[:500]})

            try:
                return await with_retries(once, self.attempts)
            except ExpertError as e:
                if e.reason in INVALID_REASONS:
                    raise SeedError(e.reason, str(e)) from e
                raise
