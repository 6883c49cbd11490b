"""Answer and image judges (WeAgent §5.2, §7.1).

Normalization follows the common SQuAD/MMSearch practice: lower case, strip punctuation and the
articles a/an/the, collapse whitespace. ``exact``: the normalized prediction equals a normalized
reference; ``contains``: a normalized reference occurs in the normalized prediction as whole words.

:class:`RuleJudge` (offline: exact, containment, token F1, multiple-choice letter),
:class:`LLMJudge` (any OpenAI-compatible endpoint, fixed versioned prompt, cached verdicts) and the
Target Match judges :class:`PerceptualImageJudge` (offline default) and :class:`VLMImageJudge`.
Every verdict names the judge that produced it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shutil
import sqlite3
import string
import tempfile
import threading
import time
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans({c: " " for c in string.punctuation + "“”‘’«»、，。！？：；（）"})


def normalize_answer(s: str) -> str:
    """Lower-cased, punctuation- and article-free, whitespace-collapsed form of ``s``."""
    s = unicodedata.normalize("NFKC", s or "").lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def rule_match(prediction: str | None, references: list[str]) -> dict[str, bool]:
    """``{"exact": bool, "contains": bool}`` of ``prediction`` against any of ``references``.
    A missing prediction matches nothing."""
    if not prediction or not references:
        return {"exact": False, "contains": False}
    p = normalize_answer(prediction)
    refs = [normalize_answer(r) for r in references if r and normalize_answer(r)]
    exact = any(p == r for r in refs)
    contains = exact or any(re.search(r"(?:^| )" + re.escape(r) + r"(?: |$)", p) for r in refs)
    return {"exact": exact, "contains": bool(contains)}


# ================================================================================================
# Judges with provenance (WeAgent §7.1: "Results are scored by Kimi K2.6"; §5.2 Target Match).
#
# Every judge returns a verdict that names itself (``judge``), so each scored item records which
# judge produced it. Three kinds:
#   * RuleJudge: offline normalization + exact / containment / token-F1 / multiple-choice letter;
#   * LLMJudge: any OpenAI-compatible chat endpoint with a fixed, versioned prompt and a verdict
#     cache keyed by prompt version + model + question hash + answer hash;
#   * image judges for Target Match: an offline perceptual-hash judge (default) and a VLM judge.
# ================================================================================================


RULE_VERSION = "rule-v1"
_IMG_TAG = re.compile(r"<IMG:[^>]*>")
_THINK = re.compile(r"<think>.*?</think>", re.S)
_CHOICE_PATTERNS = [
    re.compile(r"^\s*\(?([A-Z])\s*(?:[\.\):]|$)"),  # "B", "B.", "(B)", "B) text"
    re.compile(r"\b(?i:answer|option|choice)\s*(?i:is|:)?\s*\(?([A-Z])\b"),  # "the answer is B" (letter upper case)
]


@dataclass(slots=True)
class Verdict:
    """A judge's decision on one answer.

    Attributes:
        score: in [0, 1]; 0/1 for binary judges, token F1 for ``RuleJudge("f1")``. This is
            :math:`A_i` of WeAgent equation (2).
        correct: the binary decision (``score >= threshold`` for F1); ``None`` when the judge could
            not decide (endpoint failure, unparseable reply): the item is then counted as a judge
            error and scored 0.
        judge: which judge produced it, e.g. ``"rule:exact@rule-v1"``, ``"llm:kimi-k2.6@llm-judge-v1"``.
        error: why no decision was made.
        cached: the verdict came from the cache.
    """

    score: float
    correct: bool | None
    judge: str
    error: str | None = None
    cached: bool = False
    details: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class AnswerJudge(Protocol):
    """What :func:`kit.eval.runner.run_evaluation` (``judge=``) calls: ``judge_task(task, prediction)`` returns a
    :class:`Verdict` (plain or awaitable). ``name`` labels the run; put it in every verdict's ``judge``."""

    name: str

    def judge_task(self, task, prediction: str | None) -> Any: ...


@runtime_checkable
class ImageJudge(Protocol):
    """Target Match (WeAgent §5.2; ``run_evaluation(image_judge=)``): ``await judge(cited, target)`` compares the
    image file the answer cited with the task's held-out target image and returns a :class:`Verdict`."""

    name: str

    async def judge(self, cited: Path, target: Any) -> Verdict: ...


def strip_response(text: str | None) -> str:
    """The answer text of a final response: ``<think>`` blocks and ``<IMG: ...>`` citations removed,
    whitespace collapsed ("" for None)."""
    if not text:
        return ""
    return " ".join(_IMG_TAG.sub(" ", _THINK.sub(" ", text)).split())


@lru_cache(maxsize=65536)
def _norm_cached(s: str) -> str:
    return normalize_answer(s)


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD-style token F1 of normalized ``prediction`` vs ``reference`` (MMSearch's end-to-end
    scorer, taken as the max over the reference and its alternatives by :class:`RuleJudge`)."""
    p, r = _norm_cached(prediction).split(), _norm_cached(reference).split()
    if not p or not r:
        return float(p == r)
    common = sum((Counter(p) & Counter(r)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(r)
    return 2 * precision * recall / (precision + recall)


def extract_choice(prediction: str, letters: Iterable[str]) -> str | None:
    """The option letter a multiple-choice answer picks ("B", "(B)", "B. text", "the answer is B"),
    or None when none of ``letters`` is named unambiguously."""
    allowed = set(letters)
    for pat in _CHOICE_PATTERNS:
        found = {m.upper() for m in pat.findall(prediction) if m.upper() in allowed}
        if len(found) == 1:
            return found.pop()
    return None


class RuleJudge:
    """Offline answer judge.

    Modes: ``exact`` (normalized equality with the reference or an alternative; MMSearch-R1's FVQA
    and InfoSeek reward), ``contains`` (a normalized reference occurs in the answer as whole words),
    ``f1`` (max token F1 over references; MMSearch end-to-end), ``choice`` (multiple choice: the
    picked letter equals ``correct_choice``; an answer that names no letter is matched by option
    text with ``contains``). A task may carry its benchmark's mode in ``metadata["rule_mode"]``,
    which overrides the judge's default.

    Args:
        mode: default mode.
        f1_threshold: ``correct`` is ``score >= f1_threshold`` in ``f1`` mode.
        fallback: the run chose this judge in place of its profile's LLM judge (paper profile,
            :func:`kit.eval.judge_factory.make_answer_judge`): every verdict's name ends in
            ``" (fallback)"``.

    Raises:
        ValueError: unknown mode.
    """

    MODES = ("exact", "contains", "f1", "choice")
    prompt_version = RULE_VERSION

    def __init__(self, mode: str = "contains", f1_threshold: float = 0.5, *, fallback: bool = False):
        if mode not in self.MODES:
            raise ValueError(f"unknown rule mode {mode!r}; choose from {self.MODES}")
        self.mode = mode
        self.f1_threshold = f1_threshold
        self.fallback = fallback  # stands in for the profile's LLM judge: " (fallback)" on every verdict

    @property
    def name(self) -> str:
        """Judge name with its default mode, e.g. ``rule:contains@rule-v1``."""
        return self._name(self.mode)

    def _name(self, mode: str) -> str:
        return f"rule:{mode}@{RULE_VERSION}" + (" (fallback)" if self.fallback else "")

    def score(self, prediction: str | None, references: list[str], *, mode: str | None = None,
              choices: dict[str, str] | None = None, correct_choice: str | None = None) -> Verdict:
        """Judge one answer (``prediction`` is stripped of citations first). A missing answer scores 0."""
        mode = mode or self.mode
        if mode not in self.MODES:
            raise ValueError(f"unknown rule mode {mode!r}; choose from {self.MODES}")
        pred = strip_response(prediction)
        if not pred:
            return Verdict(0.0, False, self._name(mode), details={"empty": True})
        if mode == "choice":
            if not choices or not correct_choice:
                raise ValueError("choice mode needs choices and correct_choice")
            picked = extract_choice(pred, choices)
            if picked is not None:
                ok = picked == correct_choice
                return Verdict(float(ok), ok, self._name(mode), details={"picked": picked})
            mode_used = "contains"
        else:
            mode_used = mode
        if mode_used == "f1":
            s = max((token_f1(pred, r) for r in references if r), default=0.0)
            return Verdict(s, s >= self.f1_threshold, self._name(mode))
        p = _norm_cached(pred)
        refs = [n for n in (_norm_cached(r) for r in references if r) if n]
        ok = any(p == r for r in refs)
        if not ok and mode_used == "contains":
            padded = f" {p} "
            ok = any(f" {r} " in padded for r in refs)
        return Verdict(float(ok), ok, self._name(mode))

    def judge_task(self, task, prediction: str | None) -> Verdict:
        """Judge ``prediction`` for a :class:`~kit.harness.episode.Task` with its benchmark's mode."""
        md = task.metadata or {}
        mode = md.get("rule_mode") or self.mode
        return self.score(prediction, task.answers, mode=mode, choices=md.get("choices"),
                          correct_choice=md.get("correct_choice"))


# ---------------------------------------------------------------------------------------- cache
class VerdictCache:
    """Persistent judge verdicts (sqlite, WAL; safe for several processes).

    Key: sha256 of prompt version + model + question hash + answer hash. Stored: the decision, the
    parsed label and — unless the item is sensitive (encrypted benchmarks) — the judge's raw reply.
    ``path=None`` keeps the cache in memory.
    """

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path) if self.path else ":memory:", check_same_thread=False, timeout=30)
        self._lock = threading.Lock()
        with self._lock:
            if self.path:
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, prompt_version TEXT, "
                             "model TEXT, question_hash TEXT, answer_hash TEXT, correct INTEGER, label TEXT, "
                             "raw TEXT, created REAL)")
            self._db.commit()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def make_key(prompt_version: str, model: str, question_hash: str, answer_hash: str) -> str:
        """Cache key: sha256 over the four parts."""
        return hashlib.sha256("\x1f".join([prompt_version, model, question_hash, answer_hash]).encode()).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        """``{"correct", "label", "raw"}`` for a cached verdict, else None (counts hits and misses)."""
        with self._lock:
            row = self._db.execute("SELECT correct, label, raw FROM verdicts WHERE key=?", (key,)).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return {"correct": bool(row[0]), "label": row[1], "raw": row[2]}

    def put(self, key: str, *, prompt_version: str, model: str, question_hash: str, answer_hash: str,
            correct: bool, label: str, raw: str | None) -> None:
        """Store (or replace) one verdict."""
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO verdicts VALUES (?,?,?,?,?,?,?,?,?)",
                             (key, prompt_version, model, question_hash, answer_hash, int(correct), label, raw,
                              time.time()))
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0]

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()


def _h(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------- LLM judge
# The answer judge's prompt: text and version in one place. A new text needs a new version (cached
# verdicts are keyed by it) and its digest in PROMPT_DIGESTS (a test compares them).
JUDGE_PROMPT_VERSION = "llm-judge-v1"
JUDGE_PROMPT = """You are grading the final answer of a question-answering agent against reference answers.

Question:
{question}

Reference answer (any one of these is acceptable):
{references}

Agent's answer:
{prediction}

Decide whether the agent's answer gives the same final answer as one of the references. Ignore formatting, letter case, extra explanation and image citations. Accept equivalent names, spellings, units and number formats. An answer that hedges between different answers, contradicts the reference, or is empty is incorrect.

Reply with exactly one line: VERDICT: CORRECT or VERDICT: INCORRECT"""
LLM_JUDGE_PROMPT_VERSION, LLM_JUDGE_PROMPT = JUDGE_PROMPT_VERSION, JUDGE_PROMPT  # earlier names
_LLM_VERDICT = re.compile(r"VERDICT\s*:\s*\**\s*(CORRECT|INCORRECT)\b", re.I)


class LLMJudge:
    """Answer judge through an OpenAI-compatible endpoint (WeAgent §7.1 scored with Kimi K2.6).

    The prompt (:data:`JUDGE_PROMPT`, version :data:`JUDGE_PROMPT_VERSION`) is fixed;
    changing it means a new version, so cached verdicts of the old prompt are never reused. The
    version is part of ``Verdict.judge`` and of ``Verdict.details["prompt_version"]``.
    :func:`kit.eval.judge_factory.make_answer_judge` builds it per profile (model default
    ``"kimi-k2.6"``, WeAgent §7.1).
    Sampling is greedy (temperature 0). A failing endpoint or an unparseable reply gives a verdict
    with ``correct=None`` and the reason in ``error`` (never cached), or the ``fallback`` judge's
    verdict, marked as such, when one is given.

    Args:
        policy: any :class:`kit.types.Policy`, normally :class:`kit.policy.openai_client.OpenAIChatPolicy`.
        model: the judge model's name (part of the cache key and of ``Verdict.judge``).
        cache: verdict cache (default: in memory).
        fallback: judge used when the endpoint fails (e.g. ``RuleJudge()``), or None.
        concurrency: concurrent judge requests.
    """

    def __init__(self, policy, model: str, cache: VerdictCache | None = None, *, fallback: RuleJudge | None = None,
                 concurrency: int = 8, max_tokens: int = 16):
        if not model:
            raise ValueError("the judge model name must be non-empty")
        self.policy = policy
        self.model = model
        self.cache = cache if cache is not None else VerdictCache(None)  # an empty cache is falsy (len 0)
        self.fallback = fallback
        self.max_tokens = max_tokens
        self.prompt_version = JUDGE_PROMPT_VERSION
        self._sem = asyncio.Semaphore(max(1, concurrency))

    @classmethod
    def from_endpoint(cls, base_url: str, model: str, *, api_key: str | None = None,
                      cache_path: str | Path | None = None, **kwargs) -> LLMJudge:
        """Judge served at ``base_url`` (e.g. ``https://api.moonshot.ai/v1`` or a local vLLM)."""
        from kit.policy.openai_client import OpenAIChatPolicy
        from kit.policy.scripted import CharTokenCounter

        policy = OpenAIChatPolicy(base_url, model, api_key=api_key, token_counter=CharTokenCounter(), max_retries=2)
        return cls(policy, model, VerdictCache(cache_path), **kwargs)

    @property
    def name(self) -> str:
        """``llm:<model>@<prompt version>``, recorded on every verdict."""
        return f"llm:{self.model}@{JUDGE_PROMPT_VERSION}"

    def prompt(self, question: str, references: list[str], prediction: str) -> str:
        """The judge prompt for one answer (references one per line). Question, references and
        prediction are data: their chat-control strings are neutralized, so none of them can open a
        turn in the judge's chat and dictate the verdict."""
        from kit.harness.neutralize import neutralize_control_tokens

        refs = "\n".join(f"- {r}" for r in references) or "- (none)"
        text = JUDGE_PROMPT.format(question=question.strip(), references=refs, prediction=prediction or "(empty)")
        return neutralize_control_tokens(text)[0]

    async def judge(self, question: str, references: list[str], prediction: str | None, *,
                    sensitive: bool = False) -> Verdict:
        """Judge one answer; cached by prompt version + model + question hash + answer hash."""
        from kit.types import ContentPart, Message, PolicyError, SamplingParams

        pred = strip_response(prediction)
        qh = _h(question)
        ah = _h(pred + "\x1e" + json.dumps(references, ensure_ascii=False))
        key = VerdictCache.make_key(JUDGE_PROMPT_VERSION, self.model, qh, ah)
        hit = self.cache.get(key)
        if hit is not None:
            return Verdict(float(hit["correct"]), hit["correct"], self.name, cached=True,
                           details={"label": hit["label"], "prompt_version": JUDGE_PROMPT_VERSION})
        if not pred:  # nothing to grade: no call, deterministic
            return Verdict(0.0, False, self.name, details={"empty": True, "prompt_version": JUDGE_PROMPT_VERSION})
        msgs = [Message(role="user", content=[ContentPart(type="text", text=self.prompt(question, references, pred))])]
        try:
            async with self._sem:
                turn = await self.policy.generate(msgs, [], SamplingParams(temperature=0.0, top_p=1.0,
                                                                          max_tokens=self.max_tokens), None)
        except PolicyError as e:
            return self._failed(f"judge endpoint failed: {e}", prediction, references)
        found = _LLM_VERDICT.findall(turn.text or "")
        if not found:
            return self._failed(f"unparseable judge reply ({len(turn.text or '')} characters)", prediction, references)
        label = found[-1].upper()
        ok = label == "CORRECT"
        self.cache.put(key, prompt_version=JUDGE_PROMPT_VERSION, model=self.model, question_hash=qh, answer_hash=ah,
                       correct=ok, label=label, raw=None if sensitive else turn.text)
        return Verdict(float(ok), ok, self.name, details={"label": label, "prompt_version": JUDGE_PROMPT_VERSION})

    async def judge_task(self, task, prediction: str | None) -> Verdict:
        """Judge for a task: uses ``metadata["judge_question"]`` when the benchmark defines one
        (MM-BrowseComp: the question without its instruction prefix) and respects ``sensitive``."""
        md = task.metadata or {}
        return await self.judge(md.get("judge_question") or task.question, task.answers, prediction,
                                sensitive=bool(md.get("sensitive")))

    def _failed(self, reason: str, prediction, references) -> Verdict:
        if self.fallback is not None:
            v = self.fallback.score(prediction, references)
            return Verdict(v.score, v.correct, f"{v.judge} (fallback from {self.name})", error=reason,
                           details=v.details)
        return Verdict(0.0, None, self.name, error=reason, details={"prompt_version": JUDGE_PROMPT_VERSION})


# ---------------------------------------------------------------------------------------- image judges
@dataclass(slots=True)
class ImageVerdict:
    """Target Match decision :math:`M_i = J(\\hat C_i, C_i)` (WeAgent §5.2) for one cited image.

    ``match`` is None when the judge could not decide (then counted as no match and reported)."""

    match: bool | None
    judge: str
    distance: int | None = None
    error: str | None = None
    cached: bool = False


def _file_hash(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class PerceptualImageJudge:
    """Offline Target Match judge :math:`J(\\hat C_i, C_i)` (WeAgent §5.2): the kit's one "same
    picture" decision, :func:`kit.images.same_picture` (identical bytes, or pHash + dHash of the
    images as displayed, flattened on white, within ``max_distance``, default
    :data:`kit.images.SAME_PICTURE_DISTANCE`, with colour and brightness alike). Matches resized,
    recompressed, re-encoded, re-oriented (EXIF) and lightly cropped copies (a thumbnail of the
    target matches); two images without spatial structure (flat colours) are never matched: a
    different brightness or colour is no match, otherwise the verdict is undecidable
    (``match=None`` with the reason). Use :class:`VLMImageJudge` for heavy crops or the paper's own
    VLM judge.

    ``fallback=True``: chosen in place of the paper profile's VLM judge; the name (recorded on every
    Target Match decision) ends in ``" (fallback)"``.

    Raises (from :meth:`judge`): nothing; unreadable images give ``match=None`` with the reason.
    """

    prompt_version = None  # no prompt: the decision is kit.images.same_picture

    def __init__(self, max_distance: int | None = None, *, fallback: bool = False):
        from kit.images import SAME_PICTURE_DISTANCE

        self.max_distance = SAME_PICTURE_DISTANCE if max_distance is None else max_distance
        self.fallback = fallback  # stands in for the profile's VLM judge: " (fallback)" on its name
        self._memo: dict[str, object] = {}  # sha256 -> what same_picture reads of an image: each image read once

    @property
    def name(self) -> str:
        """``image:phash+dhash<=<max distance>`` (+ ``" (fallback)"``)."""
        return f"image:phash+dhash<={self.max_distance}" + (" (fallback)" if self.fallback else "")

    async def judge(self, cited: str | Path, target: str | Path) -> ImageVerdict:
        """Compare the cited image file with the target image file."""
        from kit.images import same_picture

        m = same_picture(cited, target, max_distance=self.max_distance, memo=self._memo)
        return ImageVerdict(m.match, self.name, m.distance, error=m.error)


IMAGE_JUDGE_PROMPT_VERSION = "image-judge-v1"
IMAGE_JUDGE_PROMPT = (
    "The first image was cited by an agent as its supporting evidence. The second image is the target image. "
    "Do both show the same picture (the same photograph or figure, possibly resized, cropped, recompressed or shown "
    "as a thumbnail)? Two different pictures of the same subject are NOT the same picture.\n\n"
    "Reply with exactly one line: VERDICT: SAME or VERDICT: DIFFERENT")
_IMG_VERDICT = re.compile(r"VERDICT\s*:\s*\**\s*(SAME|DIFFERENT)\b", re.I)

#: sha256 of each prompt text by version: a test keeps them equal, so a changed prompt needs a new version.
PROMPT_DIGESTS = {
    "llm-judge-v1": "12e39dfaa61992a56c6781bce5393a37a8e1eb075abbf24e1efe7e5b78a4f3d7",
    "image-judge-v1": "091da66dd81429f4f084e15ea548d7a6a938260ce5940367a594d1fb711ceb93",
}


class VLMImageJudge:
    """Target Match judge through a VLM on an OpenAI-compatible endpoint (WeAgent §5.2 presents
    the selected and the target image to a VLM judge). Cached by prompt version + model + both
    images' sha256; endpoint failures give ``match=None`` with the reason (never cached). The prompt
    is :data:`IMAGE_JUDGE_PROMPT` (version :data:`IMAGE_JUDGE_PROMPT_VERSION`, in the name); the model
    is configurable (:func:`kit.eval.judge_factory.make_image_judge`)."""

    prompt_version = IMAGE_JUDGE_PROMPT_VERSION

    def __init__(self, policy, model: str, cache: VerdictCache | None = None, *, max_tokens: int = 16):
        if not model:
            raise ValueError("the image judge model name must be non-empty")
        self.policy = policy
        self.model = model
        self.cache = cache if cache is not None else VerdictCache(None)  # an empty cache is falsy (len 0)
        self.max_tokens = max_tokens

    @property
    def name(self) -> str:
        """``image-vlm:<model>@<prompt version>``."""
        return f"image-vlm:{self.model}@{IMAGE_JUDGE_PROMPT_VERSION}"

    async def judge(self, cited: str | Path, target: str | Path) -> ImageVerdict:
        """Show both images (cited first) to the VLM and parse SAME / DIFFERENT."""
        from kit.types import ContentPart, Message, PolicyError, SamplingParams

        cited, target = Path(cited), Path(target)
        try:
            ch, th = _file_hash(cited), _file_hash(target)
        except OSError as e:
            return ImageVerdict(None, self.name, error=f"{type(e).__name__}: {e}")
        key = VerdictCache.make_key(IMAGE_JUDGE_PROMPT_VERSION, self.model, ch, th)
        hit = self.cache.get(key)
        if hit is not None:
            return ImageVerdict(hit["correct"], self.name, cached=True)
        with tempfile.TemporaryDirectory(prefix="imgjudge_") as ws:  # the client reads workspace-relative files
            a, b = f"cited{cited.suffix.lower()}", f"target{target.suffix.lower()}"
            shutil.copyfile(cited, Path(ws) / a)
            shutil.copyfile(target, Path(ws) / b)
            msgs = [Message(role="user", content=[ContentPart(type="image", image=a), ContentPart(type="image", image=b),
                                                  ContentPart(type="text", text=IMAGE_JUDGE_PROMPT)])]
            try:
                turn = await self.policy.generate(msgs, [], SamplingParams(temperature=0.0, top_p=1.0,
                                                                          max_tokens=self.max_tokens), ws)
            except PolicyError as e:
                return ImageVerdict(None, self.name, error=f"judge endpoint failed: {e}")
        found = _IMG_VERDICT.findall(turn.text or "")
        if not found:
            return ImageVerdict(None, self.name, error="unparseable judge reply")
        same = found[-1].upper() == "SAME"
        self.cache.put(key, prompt_version=IMAGE_JUDGE_PROMPT_VERSION, model=self.model, question_hash=ch,
                       answer_hash=th, correct=same, label=found[-1].upper(), raw=turn.text)
        return ImageVerdict(same, self.name)
