"""RL query filtering and label audit (WeAgent §4.5 "RL query filtering").

For every candidate query an ``group_size``-rollout group (8 in the paper, sampled from the SFT
model) runs through the harness, concurrently, via :func:`kit.harness.runner.run_batch` (resumable);
each rollout is judged against the reference answer, and queries whose rollouts are all correct or
all wrong are dropped: they give no within-group reward contrast for group-relative optimization.

The label audit flags targets that cannot be judged: refusal placeholders used as labels ("I cannot
find the final answer"), empty or overlong answers, answers that are questions or hedges. The
paper audits with an LLM (Kimi K2.6); :func:`audit_label` is the deterministic pass and
:class:`LLMLabelAuditor` adds a model's verdict through any :class:`kit.types.Policy` (e.g.
:class:`kit.policy.openai_client.OpenAIChatPolicy`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.harness.episode import EpisodeRecord, Task
from kit.harness.neutralize import neutralize_control_tokens
from kit.types import ContentPart, Message, PolicyError, SamplingParams

#: Label texts that are refusals, not answers (case-insensitive, matched on the whole label).
REFUSAL_PATTERNS = (
    r"i (?:can ?not|can't|could not|couldn't|am unable to|was unable to|don't|do not) (?:find|determine|answer|know|"
    r"identify|tell|provide|verify|access)\b.*",
    r"(?:the )?(?:final )?answer (?:is )?(?:not|cannot be) (?:found|determined|available|known)\.?",
    r"(?:unknown|unanswerable|not available|n/?a|none|null|no answer|not found|insufficient information|"
    r"no information|cannot be determined|unable to answer|not enough information)\.?",
    r"sorry\b.*",
)
_REFUSAL = [re.compile(rf"^\s*{p}\s*$", re.I | re.S) for p in REFUSAL_PATTERNS]
_HEDGE = re.compile(r"\b(?:maybe|perhaps|possibly|probably|likely|not sure|unclear|approximately|around|either)\b", re.I)


class RLFilterError(ValueError):
    """Bad filter input (group size < 2, duplicate task ids)."""


def audit_label(task: Task, *, max_answer_words: int = 20) -> list[str]:
    """Deterministic label audit; returns the flags (empty list: the label is judgeable).

    Flags: ``no_answer`` (no non-empty reference), ``refusal_placeholder`` (the reference is a refusal
    such as "I cannot find the final answer"), ``overlong_answer`` (more than ``max_answer_words``
    words: not short-answer judgeable), ``question_as_answer`` (ends with "?"), ``hedged_answer``
    (maybe / approximately / either ...)."""
    refs = [str(a).strip() for a in task.answers if str(a).strip()]
    if not refs:
        return ["no_answer"]
    ref = refs[0]
    flags = []
    if any(p.match(ref) for p in _REFUSAL):
        flags.append("refusal_placeholder")
    if len(ref.split()) > max_answer_words:
        flags.append("overlong_answer")
    if ref.endswith("?"):
        flags.append("question_as_answer")
    if _HEDGE.search(ref):
        flags.append("hedged_answer")
    return flags


AUDIT_PROMPT = (
    "You audit reference labels of question-answer pairs used as RL rewards. Question: {question}\n"
    "Reference answer: {answer}\nIs the reference a concrete, verifiable answer to the question (not a refusal, "
    "not ambiguous, judgeable by comparing a short answer)? Reply with only a JSON object "
    '{{"verifiable": true/false, "reason": short}}.'
)


class LLMLabelAuditor:
    """Model-based label audit (the paper used Kimi K2.6): one tool-free call per task.

    ``audit(task)`` returns ``[]`` or ``["unverifiable_target"]`` (``["audit_failed"]`` when the model
    reply is not the requested JSON after ``attempts`` tries, so the task is not silently kept)."""

    def __init__(self, policy, *, sampling: SamplingParams | None = None, attempts: int = 2):
        self.policy = policy
        self.sampling = sampling or SamplingParams(temperature=0.0, max_tokens=256)
        self.attempts = attempts
        self.last_reason: dict[str, str] = {}

    async def audit(self, task: Task) -> list[str]:
        from kit.data.expert import ExpertError, _json_from

        prompt = AUDIT_PROMPT.format(question=task.question, answer=(task.answers or [""])[0])
        msgs = [Message(role="user", content=[ContentPart(type="text", text=neutralize_control_tokens(prompt)[0])])]
        for _ in range(max(1, self.attempts)):
            try:
                turn = await self.policy.generate(msgs, [], self.sampling, None)
                obj = _json_from(turn.text or "")
            except (ExpertError, PolicyError) as e:
                self.last_reason[task.id] = str(e)
                continue
            self.last_reason[task.id] = str(obj.get("reason", ""))
            return [] if obj.get("verifiable") is True else ["unverifiable_target"]
        return ["audit_failed"]


@dataclass
class FilterResult:
    """Outcome of :func:`filter_rl_queries`: kept tasks (``metadata["solve_rate"]`` and
    ``metadata["rl_group"]`` set), dropped ``(task, reason)`` pairs and counts by reason."""

    kept: list[Task] = field(default_factory=list)
    dropped: list[tuple[Task, str]] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)


def default_judge(task: Task, rec: EpisodeRecord) -> bool:
    """Rule judge (``contains``, or the task's ``rule_mode``) on the final response; a rollout that
    ended without an answer is wrong."""
    from kit.eval.judges import RuleJudge

    if rec.final_response is None:
        return False
    return bool(RuleJudge("contains").judge_task(task, rec.final_response).correct)


async def filter_rl_queries(tasks: Sequence[Task], harness_factory: Callable[[Task, int], Any], out_dir: str | Path, *,
                            group_size: int = 8, concurrency: int = 4,
                            judge: Callable[[Task, EpisodeRecord], bool] = default_judge,
                            auditor: LLMLabelAuditor | None = None) -> FilterResult:
    """Label audit, then an ``group_size``-rollout group per surviving query; drop uniform groups.

    Args:
        harness_factory: ``(task, sample) -> Harness`` running the policy being filtered for (the
            paper: the SFT model); ``sample`` indexes the rollout in the group (vary its seed).
        out_dir: ``rollouts/episodes.jsonl`` (resumable), ``rl_kept.jsonl``, ``rl_dropped.jsonl``
            (one ``{"task", "reason", ...}`` per line) and ``rl_filter_counts.json``.
        judge: ``(task, record) -> correct``.
        auditor: optional model audit run after the deterministic one.

    Drop reasons: the label-audit flags, ``all_correct``, ``all_wrong``.

    Raises:
        RLFilterError: ``group_size`` < 2 (no contrast is possible) or duplicate task ids.
    """
    from kit.harness.runner import run_batch

    if group_size < 2:
        raise RLFilterError(f"group_size must be >= 2 to measure within-group contrast, got {group_size}")
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        raise RLFilterError("duplicate task ids")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    res = FilterResult()
    audited: list[Task] = []
    for t in tasks:
        flags = audit_label(t)
        if not flags and auditor is not None:
            flags = await auditor.audit(t)
        if flags:
            res.dropped.append((t, flags[0]))
        else:
            audited.append(t)
    recs = await run_batch(harness_factory, audited, out / "rollouts", samples=group_size, concurrency=concurrency,
                           progress=False)
    groups: dict[str, list[EpisodeRecord]] = {}
    for r in recs:
        groups.setdefault(r.task.id, []).append(r)
    rates = []
    for t in audited:
        g = groups.get(t.id, [])
        correct = [judge(t, r) for r in g]
        n_ok = sum(correct)
        info = {"rollouts": len(g), "correct": n_ok, "episodes": [r.id for r in g],
                "statuses": sorted({r.status for r in g})}
        if n_ok == len(g):
            res.dropped.append((t.model_copy(update={"metadata": {**t.metadata, "rl_group": info}}), "all_correct"))
        elif n_ok == 0:
            res.dropped.append((t.model_copy(update={"metadata": {**t.metadata, "rl_group": info}}), "all_wrong"))
        else:
            rate = n_ok / len(g)
            rates.append(rate)
            res.kept.append(t.model_copy(update={"metadata": {**t.metadata, "solve_rate": rate, "rl_group": info}}))
    reasons: dict[str, int] = {}
    for _, why in res.dropped:
        reasons[why] = reasons.get(why, 0) + 1
    res.counts = {"queries": len(tasks), "audited_out": len(tasks) - len(audited), "rolled_out": len(audited),
                  "group_size": group_size, "rollouts": len(recs), "kept": len(res.kept),
                  "dropped": dict(sorted(reasons.items())),
                  "mean_solve_rate_kept": round(sum(rates) / len(rates), 4) if rates else None}
    with open(out / "rl_kept.jsonl", "w", encoding="utf-8") as f:
        for t in res.kept:
            f.write(t.model_dump_json() + "\n")
    with open(out / "rl_dropped.jsonl", "w", encoding="utf-8") as f:
        for t, why in res.dropped:
            f.write(json.dumps({"task": t.model_dump(mode="json"), "reason": why,
                                "audit_reason": auditor.last_reason.get(t.id) if auditor else None},
                               ensure_ascii=False) + "\n")
    (out / "rl_filter_counts.json").write_text(json.dumps(res.counts, indent=2), encoding="utf-8")
    return res
