"""LiveVQA multiple choice -> open-ended RL prompts (POINTS-Seeker App. A.4).

POINTS-Seeker trains RL on "an adapted version of the LiveVQA dataset ... we reformulate a significant
portion of the originally multiple-choice LiveVQA samples into open-ended questions". The paper gives no
fraction; this stage converts **every convertible item by default** (``fraction=1.0``) and takes a seeded,
deterministic ``fraction`` (a sha256 ranking of ids, independent of input order) for a partial conversion,
the rest staying multiple choice.

Input is what :func:`kit.eval.loaders.load_livevqa` gives: level-1 tasks are multiple choice (the options
appended to the question, ``metadata["choices"]`` / ``["correct_choice"]``, ``rule_mode="choice"``),
level-2 tasks are open (their question carries no options). A task without choice metadata but with
labelled option lines in its question ("A. foo") is read as multiple choice too.

The rule (:data:`RULE`, deterministic and offline): drop the option lines, an "Options:" header and the
"answer with the letter" / "choose from" instructions from the question; the reference answer becomes the
correct option's text (then the task's other answers, e.g. LiveVQA's ``Ground_Truth_List``, bare letters
removed); images, id and source are kept (source gets ``_open``) and ``metadata["livevqa_open"]`` records
the original question, options and letter; the choice-judge keys are removed so the judge scores the text.

Nothing is dropped silently: an item is ``converted``, ``already_open`` (unchanged), ``kept_mc`` (left out
by ``fraction``) or rejected with one of :data:`REASONS`. An optional ``rewriter(stem, options, answer)``
(e.g. an LLM) may rephrase a stem the rule cannot ("Which of the following ..."); its output passes the
same checks. :func:`open_livevqa_split` writes ``rl_prompts.jsonl`` (one Task per line, the form
:func:`kit.rl.prompts.load_rl_prompts` reads), ``livevqa_open_rejected.jsonl`` and
``livevqa_open_summary.json``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kit.data.records import Rejection
from kit.eval.loaders.common import LoadResult
from kit.harness.episode import Task

__all__ = ["REASONS", "RULE", "OpenOutcome", "OpenSplit", "open_ended", "open_livevqa_split", "strip_options"]

RULE = "strip_options_v1"
STAGE = "livevqa_open"
#: Rejection reasons (stable keys).
REASONS = {
    "options_missing": "multiple choice without a usable option list",
    "answer_letter_not_in_options": "the correct letter is missing or names no option",
    "empty_answer_option": "the correct option's text is empty",
    "answer_mismatch": "the task's reference answer is not the correct option's text",
    "ambiguous_options": "another option has the same text as the correct one",
    "answer_refers_to_options": "the correct option only means something beside the others ('All of the above')",
    "question_needs_options": "the stem only makes sense with the options ('Which of the following ...')",
    "options_left_in_question": "option labels are still in the question after stripping",
    "empty_question": "nothing is left of the question after stripping",
    "answer_in_question": "the answer text appears in the open question (no longer a question)",
    "rewriter_declined": "the rewriter returned nothing",
    "rewriter_error": "the rewriter raised",
}
#: ``rewriter(stem, options, answer) -> open question or None``.
Rewriter = Callable[[str, dict[str, str], str], "str | None"]

_OPTION_LINE = re.compile(r"^\s*\(?([A-Z])[\.\):]\s*(.*?)\s*$")
_HEADER = re.compile(r"^\s*(?:options|choices|answer choices|candidates)\s*:?\s*$", re.I)
_INSTRUCTIONS = [re.compile(p, re.I) for p in (  # an instruction ends at ".", ":", "!" or the line end, never "?"
    r"(?:please\s+)?(?:answer|respond|reply)\s+(?:only\s+)?with\s+(?:only\s+)?(?:the|a|one)\s+(?:single\s+)?"
    r"(?:letter|option)[^.:?!\n]*(?:[.:!]|$)",
    r"(?:please\s+)?(?:choose|select|pick)\s+(?:one\s+of\s+|from\s+)?(?:the\s+)?(?:following\s+|given\s+|listed\s+)?"
    r"(?:correct\s+|best\s+|right\s+)?(?:answer|option|choice)s?\b[^.:?!\n]{0,40}(?:[.:!]|$)",
    r"(?:please\s+)?(?:choose|select|pick)\s+from\s+(?:the\s+)?(?:following|options|choices|list)[^.:?!\n]{0,40}(?:[.:!]|$)",
)]
_LEFT_LINE = re.compile(r"(?m)^\s*\(?[A-H][\.\):]\s+\S")
_LEFT_INLINE = re.compile(r"\(\s*[A-H]\s*\)\s*\S|\b(?:[Oo]ption|[Cc]hoice)s?\s+[A-H]\b")
_NEEDS_OPTIONS = re.compile(
    r"\b(?:which|what|who)\s+(?:one\s+)?of\s+(?:the\s+)?(?:following|these|those|options|choices|above|below|listed)\b"
    r"|\b(?:following|above|below|listed|given)\s+(?:options|choices|answers|statements|items|alternatives)\b"
    r"|\b(?:none|all|both|neither)\s+of\s+the\s+(?:above|following|options|choices)\b"
    r"|\bfrom\s+the\s+(?:list|options|choices)\b", re.I)
_ANSWER_REFERS = re.compile(  # letters upper case only ("a and b" is text)
    r"^\s*(?i:all|none|both|neither)\s+(?i:of)\s+(?i:the\s+)?(?i:above|these|them|options|choices|following)\b"
    r"|^\s*(?i:options?\s+)?[A-H](?:\s*(?:,|and|or)\s*[A-H])+\s*\.?\s*$"
    r"|^\s*(?i:only\s+)?(?i:option|choice)\s+[A-H]\b")
_LETTER = re.compile(r"^\s*\(?([A-Z])\)?\.?\s*$")


@dataclass
class OpenOutcome:
    """One task through :func:`open_ended`: ``task`` is the open-ended task (``converted``), the input
    unchanged (``already_open``) or None (``rejected``, with ``reason`` from :data:`REASONS`)."""

    status: Literal["converted", "already_open", "rejected"]
    task: Task | None
    reason: str | None = None
    detail: str = ""


@dataclass
class OpenSplit:
    """Result of :func:`open_livevqa_split`: the RL prompts (input order), the rejections, the counts."""

    tasks: list[Task] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


def _norm(s: str) -> str:
    return " ".join(str(s).split()).casefold()


def _mc_parts(task: Task) -> tuple[dict[str, str], str] | None:
    """``(options, letter)`` when ``task`` is multiple choice (letter may be ""), else None."""
    md = task.metadata or {}
    if md.get("rule_mode") == "choice" or "choices" in md or "correct_choice" in md:
        raw = md.get("choices")
        options = {str(k).strip().upper(): str(v).strip() for k, v in raw.items()} if isinstance(raw, dict) else {}
        letter = str(md.get("correct_choice") or "").strip().upper()
        return options, letter
    parsed = {}
    for line in task.question.splitlines():
        m = _OPTION_LINE.match(line)
        if m and m.group(2):
            parsed[m.group(1)] = m.group(2)
    if len(parsed) < 2 or "A" not in parsed:  # one stray "A. ..." line is no option list
        return None
    m = _LETTER.match(str(task.answers[0])) if task.answers else None
    return parsed, (m.group(1) if m else "")


def strip_options(question: str, options: dict[str, str]) -> str:
    """The question without its option lines (letter and text as in ``options``), an options header
    and the choose / answer-with-the-letter instructions; blank-line runs collapsed."""
    keep = []
    for line in question.splitlines():
        m = _OPTION_LINE.match(line)
        if m and _norm(options.get(m.group(1), "\0")) == _norm(m.group(2)):
            continue
        if _HEADER.match(line):
            continue
        for pat in _INSTRUCTIONS:
            line = pat.sub("", line)
        keep.append(line.rstrip())
    text = "\n".join(keep)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _stem_problem(stem: str, answer: str) -> str | None:
    if not stem:
        return "empty_question"
    if _NEEDS_OPTIONS.search(stem):
        return "question_needs_options"
    if _LEFT_LINE.search(stem) or _LEFT_INLINE.search(stem):
        return "options_left_in_question"
    a = _norm(answer)
    if len(a) >= 4 and re.search(r"[^\W\d_]", a) and re.search(rf"(?<!\w){re.escape(a)}(?!\w)", _norm(stem)):
        return "answer_in_question"
    return None


def _reject(reason: str, detail: str = "") -> OpenOutcome:
    return OpenOutcome("rejected", None, reason, detail)


def open_ended(task: Task, *, rewriter: Rewriter | None = None) -> OpenOutcome:
    """``task`` as an open-ended question (see the module docstring for the rule), unchanged when it is
    already open, or a rejection with a reason from :data:`REASONS`. Never raises for a bad item; a
    ``rewriter`` is only asked for stems the rule cannot open, and its exceptions become rejections."""
    parts = _mc_parts(task)
    if parts is None:
        return OpenOutcome("already_open", task)
    options, letter = parts
    if not options:
        return _reject("options_missing", "no options in metadata['choices'] or the question")
    if letter not in options:
        return _reject("answer_letter_not_in_options", f"letter {letter!r}, options {sorted(options)}")
    answer = options[letter]
    if not answer:
        return _reject("empty_answer_option", f"option {letter} is empty")
    ref = str(task.answers[0]).strip() if task.answers else ""
    if ref and not _LETTER.match(ref) and _norm(ref) != _norm(answer):
        return _reject("answer_mismatch", f"answers[0]={ref[:80]!r}, option {letter}={answer[:80]!r}")
    if any(k != letter and _norm(v) == _norm(answer) for k, v in options.items()):
        return _reject("ambiguous_options", f"option {letter} text repeated")
    if _ANSWER_REFERS.search(answer):
        return _reject("answer_refers_to_options", f"option {letter}={answer[:80]!r}")
    stem = strip_options(task.question, options)
    how, problem = "rule", _stem_problem(stem, answer)
    if problem in ("question_needs_options", "options_left_in_question") and rewriter is not None:
        try:
            new = rewriter(stem, dict(options), answer)
        except Exception as e:  # noqa: BLE001 - a model failure is one rejected item, not a failed stage
            return _reject("rewriter_error", f"{type(e).__name__}: {e}"[:300])
        if not new or not str(new).strip():
            return _reject("rewriter_declined", f"rule said {problem}")
        stem, how = str(new).strip(), "rewriter"
        problem = _stem_problem(stem, answer)
    if problem:
        return _reject(problem, stem[:200])
    seen, answers = {_norm(answer)}, [answer]  # the option text first, even a one-letter name ("X")
    for a in task.answers:
        s = str(a).strip()
        if s and not _LETTER.match(s) and _norm(s) not in seen:
            seen.add(_norm(s))
            answers.append(s)
    md = {k: v for k, v in (task.metadata or {}).items() if k not in ("choices", "correct_choice", "rule_mode")}
    md["livevqa_open"] = {"rule": RULE, "rewrite": how, "original_question": task.question,
                          "options": dict(options), "letter": letter, "original_source": task.source}
    md["question_format"] = "open"
    new_task = task.model_copy(update={"question": stem, "answers": answers, "metadata": md,
                                       "source": f"{task.source}_open" if task.source else "livevqa_open"})
    return OpenOutcome("converted", new_task)


def _rank(seed: int, task_id: str) -> str:
    return hashlib.sha256(f"{seed}\0{task_id}".encode()).hexdigest()


def open_livevqa_split(split: LoadResult | Sequence[Task], out_dir: str | Path | None = None, *,
                       fraction: float = 1.0, seed: int = 0, rewriter: Rewriter | None = None) -> OpenSplit:
    """Open a loaded LiveVQA split (a :class:`LoadResult` from ``load_livevqa`` or its tasks) for RL.

    Every multiple-choice task goes through :func:`open_ended`; of the convertible ones, the
    ``round(fraction * n)`` with the lowest ``sha256(seed, id)`` are converted and the others stay
    multiple choice (``kept_mc``). The prompts are open + kept multiple choice + already open, in input
    order; rejected tasks are not prompts (listed with reasons). ``input == converted + already_open +
    kept_mc + sum(rejected)``. A LoadResult's row problems are counted as ``loader_problems`` and listed
    with reason ``load_failed``. With ``out_dir``: writes ``rl_prompts.jsonl``, ``livevqa_open_rejected.jsonl``
    and ``livevqa_open_summary.json`` there (``rl_prompts=out_dir`` for notebook 05).

    Raises:
        ValueError: ``fraction`` outside [0, 1] or duplicate task ids.
    """
    if not 0.0 <= float(fraction) <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction!r}")
    tasks = list(split.tasks if isinstance(split, LoadResult) else split)
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"duplicate task ids {dup[:5]}: the seeded selection needs unique ids")
    outcomes = [open_ended(t, rewriter=rewriter) for t in tasks]
    convertible = [t.id for t, o in zip(tasks, outcomes) if o.status == "converted"]
    chosen = set(sorted(convertible, key=lambda i: _rank(seed, i))[:round(float(fraction) * len(convertible))])
    res = OpenSplit()
    reasons: dict[str, int] = {}
    counts = {"converted": 0, "already_open": 0, "kept_mc": 0}
    for t, o in zip(tasks, outcomes):
        if o.status == "rejected":
            reasons[o.reason] = reasons.get(o.reason, 0) + 1
            res.rejections.append(Rejection(id=t.id, stage=STAGE, reason=o.reason, detail=o.detail,
                                            item=t.model_dump(mode="json")))
        elif o.status == "converted" and t.id in chosen:
            counts["converted"] += 1
            res.tasks.append(o.task)
        else:
            counts["kept_mc" if o.status == "converted" else "already_open"] += 1
            res.tasks.append(t)
    problems = list(split.problems) if isinstance(split, LoadResult) else []
    for p in problems:
        res.rejections.append(Rejection(id=str(p.get("id") or p.get("row")), stage=STAGE, reason="load_failed",
                                        detail=str(p.get("reason", ""))[:300], item=dict(p)))
    res.summary = {"input": len(tasks), **counts, "rejected": dict(sorted(reasons.items())),
                   "convertible": len(convertible), "fraction": float(fraction), "seed": seed, "rule": RULE,
                   "rewriter": rewriter is not None, "loader_problems": len(problems), "prompts": len(res.tasks)}
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "rl_prompts.jsonl", "w", encoding="utf-8") as f:
            for t in res.tasks:
                f.write(t.model_dump_json() + "\n")
        with open(out / "livevqa_open_rejected.jsonl", "w", encoding="utf-8") as f:
            for r in res.rejections:
                f.write(r.model_dump_json() + "\n")
        (out / "livevqa_open_summary.json").write_text(json.dumps(res.summary, indent=2) + "\n", encoding="utf-8")
    return res
