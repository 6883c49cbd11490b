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
correct option's text (then the task's other answers, e.g. LiveVQA's ``Ground_Truth_List``, the correct
letter removed); images, id and source are kept (source gets ``_open``) and ``metadata["livevqa_open"]`` records
the original question, options and letter; the choice-judge keys are removed so the judge scores the text.

Answer entries must be text: an integer (a year) counts as its decimal text; null, booleans, floats, objects
and lists reject the item (``answer_not_text``), never become "None" or "{...}". An item is wrong data, and
rejected, when two options share a letter or another answer names a wrong option (its text or its letter).
For a :class:`LoadResult` from ``load_livevqa`` the release JSON is read again for what the loader
normalises away (duplicate option letters, non-text ``Ground_Truth_List`` entries), see
:func:`release_item_problems`.

Nothing is dropped silently: an item is ``converted``, ``already_open`` (unchanged), ``kept_mc`` (left out
by ``fraction``) or rejected with one of :data:`REASONS`. An optional ``rewriter(stem, options, answer)``
(e.g. an LLM) may rephrase a stem the rule cannot ("Which of the following ..."); its output passes the
same checks. :func:`open_livevqa_split` (:func:`write_open_split`) writes ``rl_prompts.jsonl`` (one Task per line, the form
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
from kit.eval.loaders.common import BenchmarkError, LoadResult, _aslist, json_line, row_id
from kit.harness.episode import Task

__all__ = ["REASONS", "RULE", "OpenOutcome", "OpenSplit", "open_ended", "open_livevqa_split", "release_item_problems",
           "strip_options", "write_open_split"]

RULE = "strip_options_v1"
STAGE = "livevqa_open"
#: Rejection reasons (stable keys).
REASONS = {
    "options_missing": "multiple choice without a usable option list",
    "duplicate_option_letters": "two options carry the same letter",
    "answer_not_text": "an answer entry is not text (null, a boolean, a float, an object or a list)",
    "answer_letter_not_in_options": "the correct letter is missing or names no option",
    "empty_answer_option": "the correct option's text is empty",
    "answer_mismatch": "the task's reference answer is not the correct option's text",
    "ambiguous_options": "another option has the same text as the correct one",
    "answer_names_other_option": "another reference answer is a wrong option's text or letter",
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
_LABEL = re.compile(r"\s*\(?([A-Z])[\.\):]")  # the loader's option label (kit.eval.loaders.livevqa)


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


def _text(value: Any) -> str | None:
    """An answer or option entry as text: a string stripped, an integer (a year) as its decimal text;
    None for anything else (null, a boolean, a float, an object, a list): never ``str()`` of those."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _kind(value: Any) -> str:
    kind = {type(None): "null", bool: "a boolean", float: "a float", dict: "an object", list: "a list"}
    return f"{kind.get(type(value), type(value).__name__)} ({json.dumps(value, default=repr)[:40]})"


def _mc_parts(task: Task) -> tuple[dict[str, str], str, list[str]] | None:
    """``(options, letter, repeated letters)`` when ``task`` is multiple choice (letter may be ""), else
    None. An option value that is not text counts as empty."""
    md = task.metadata or {}
    repeated: list[str] = []
    options: dict[str, str] = {}
    if md.get("rule_mode") == "choice" or "choices" in md or "correct_choice" in md:
        raw = md.get("choices")
        for k, v in raw.items() if isinstance(raw, dict) else ():
            key = str(k).strip().upper()
            if key in options:
                repeated.append(key)
            options[key] = _text(v) or ""
        return options, str(md.get("correct_choice") or "").strip().upper(), repeated
    for line in task.question.splitlines():
        m = _OPTION_LINE.match(line)
        if m and m.group(2):
            if m.group(1) in options:
                repeated.append(m.group(1))
            options[m.group(1)] = m.group(2)
    if len(options) + len(repeated) < 2 or "A" not in options:  # one stray "A. ..." line is no option list
        return None
    m = _LETTER.match(_text(task.answers[0]) or "") if task.answers else None
    return options, (m.group(1) if m else ""), repeated


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
    ``rewriter`` is only asked for stems the rule cannot open, and its exceptions become rejections.
    An answer entry that is not text (possible only on a task built without validation) rejects any
    task, open ones included (``answer_not_text``)."""
    for i, a in enumerate(task.answers):
        if _text(a) is None:
            return _reject("answer_not_text", f"answers[{i}] is {_kind(a)}")
    parts = _mc_parts(task)
    if parts is None:
        return OpenOutcome("already_open", task)
    options, letter, repeated = parts
    if not options:
        return _reject("options_missing", "no options in metadata['choices'] or the question")
    if repeated:
        return _reject("duplicate_option_letters", f"letters {sorted(set(repeated))} repeated, options {sorted(options)}")
    if letter not in options:
        return _reject("answer_letter_not_in_options", f"letter {letter!r}, options {sorted(options)}")
    answer = options[letter]
    if not answer:
        return _reject("empty_answer_option", f"option {letter} is empty")
    ref = (_text(task.answers[0]) or "") if task.answers else ""
    if ref and not _LETTER.match(ref) and _norm(ref) != _norm(answer):
        return _reject("answer_mismatch", f"answers[0]={ref[:80]!r}, option {letter}={answer[:80]!r}")
    if any(k != letter and _norm(v) == _norm(answer) for k, v in options.items()):
        return _reject("ambiguous_options", f"option {letter} text repeated")
    wrong = {_norm(v): k for k, v in options.items() if k != letter and v}
    for a in task.answers:  # an alternative answer naming a wrong option (its text or its bare letter)
        s = _text(a) or ""
        m = _LETTER.match(s)
        k = None if _norm(s) == _norm(answer) else wrong.get(_norm(s)) or (
            m.group(1) if m and m.group(1) in options and m.group(1) != letter else None)
        if k:
            return _reject("answer_names_other_option", f"answer {s[:80]!r} names option {k}, the correct one is {letter}")
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
        s = _text(a) or ""
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


def _qa_problem(qa: dict[str, Any], level: Any) -> tuple[str, str] | None:
    options = qa.get("options")
    if level == 1 and isinstance(options, list):
        letters = [m.group(1) for o in options if isinstance(o, str) and (m := _LABEL.match(o))]
        repeated = sorted({x for x in letters if letters.count(x) > 1})
        if repeated:
            return "duplicate_option_letters", f"level1_qa.options letters {letters}: {repeated} repeated"
    for i, a in enumerate(_aslist(qa.get("Ground_Truth_List"))):
        if _text(a) is None:
            return "answer_not_text", f"level{level}_qa.Ground_Truth_List[{i}] is {_kind(a)}"
    return None


def release_item_problems(split: LoadResult) -> dict[str, tuple[str, str]]:
    """``{task id: (reason, detail)}`` for tasks of a ``load_livevqa`` split whose release row holds what
    the loader normalises away: level-1 options sharing a letter (``duplicate_option_letters``; the
    loader keeps the last) and ``Ground_Truth_List`` entries that are not text (``answer_not_text``; the
    loader drops nulls and writes objects, lists, booleans and floats with ``str``; integers are fine).

    Reads the JSON files of ``split.info["files"]`` again; ids as the loader gives them
    (``livevqa_<id>_l<level>``), the first row of an id counting, as in the loader. Empty for another
    benchmark's split. Never raises: an unreadable file or row is a loader problem, reported there.
    """
    if split.benchmark != "livevqa":
        return {}
    out: dict[str, tuple[str, str]] = {}
    seen: set[str] = set()
    for info in split.info.get("files") or []:
        try:
            data = json_line(Path(info["path"]).read_bytes())
        except (OSError, ValueError, KeyError, TypeError):
            continue
        for row in data if isinstance(data, list) else []:
            try:
                rid = row_id(row, "id")
            except (BenchmarkError, AttributeError, TypeError):
                continue
            for level in split.info.get("levels") or (1, 2):
                tid, qa = f"livevqa_{rid}_l{level}", row.get(f"level{level}_qa")
                problem = _qa_problem(qa, level) if tid not in seen and isinstance(qa, dict) else None
                seen.add(tid)
                if problem:
                    out[tid] = problem
    return out


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
    with reason ``load_failed``; its release rows are checked by :func:`release_item_problems` (such a
    task is rejected with that reason). With ``out_dir``: :func:`write_open_split` writes the files there.

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
    raw = release_item_problems(split) if isinstance(split, LoadResult) else {}
    outcomes = [_reject(*raw[t.id]) if t.id in raw else open_ended(t, rewriter=rewriter) for t in tasks]
    convertible = [t.id for t, o in zip(tasks, outcomes) if o.status == "converted"]
    chosen = set(sorted(convertible, key=lambda i: _rank(seed, i))[:round(float(fraction) * len(convertible))])
    res = OpenSplit()
    reasons: dict[str, int] = {}
    counts = {"converted": 0, "already_open": 0, "kept_mc": 0}
    for t, o in zip(tasks, outcomes):
        if o.status == "rejected":
            reason = o.reason or "rejected"
            reasons[reason] = reasons.get(reason, 0) + 1
            res.rejections.append(Rejection(id=t.id, stage=STAGE, reason=reason, detail=o.detail,
                                            item=t.model_dump(mode="json")))
        elif o.status == "converted" and t.id in chosen and o.task is not None:
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
        write_open_split(res, out_dir)
    return res


def write_open_split(res: OpenSplit, out_dir: str | Path) -> Path:
    """Write ``rl_prompts.jsonl`` (one Task per line; ``rl_prompts=out_dir`` for notebook 05),
    ``livevqa_open_rejected.jsonl`` and ``livevqa_open_summary.json`` into ``out_dir`` (created).
    Returns ``out_dir`` as a Path.

    Raises:
        OSError: the folder or a file cannot be written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "rl_prompts.jsonl", "w", encoding="utf-8") as f:
        for t in res.tasks:
            f.write(t.model_dump_json() + "\n")
    with open(out / "livevqa_open_rejected.jsonl", "w", encoding="utf-8") as f:
        for r in res.rejections:
            f.write(r.model_dump_json() + "\n")
    (out / "livevqa_open_summary.json").write_text(json.dumps(res.summary, indent=2) + "\n", encoding="utf-8")
    return out
