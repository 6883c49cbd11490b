"""RL query filtering and label audit (WeAgent §4.5 "RL query filtering").

§4.5: "For every candidate query, we sample an 8-rollout group from WeAgent-MMSearch-SFT and discard queries for
which all sampled answers are correct or all are incorrect. [...] We additionally use Kimi K2.6 [17] to audit the
reference labels and remove ambiguous or non-verifiable targets. This step filters, for example, some open-source
records whose nominal label is a refusal placeholder such as 'I cannot find the final answer.'"

For every candidate query an ``group_size``-rollout group (8 in the paper, sampled from the SFT model) runs
through the harness, concurrently, via :func:`kit.harness.runner.run_batch` (resumable); each rollout is judged
against the reference answer, and queries whose rollouts are all correct or all wrong are dropped: they give no
within-group reward contrast for group-relative optimization.

Who judges and who audits comes from the profile's recipe (:func:`resolve_filter_setup`):

* ``data.rl_filter_judge``: ``"llm"`` under the paper recipe (the kit's answer judge,
  :func:`kit.eval.judge_factory.make_answer_judge`, on ``judge_endpoint``; §4.5 names no judge for the rollouts,
  the served model is ``eval.judge_model``, Kimi K2.6 of §7.1; a preflight: the tiny stand-in, named so);
  ``"rule"`` under smoke (the substring rule, labelled ``"rule judge (smoke)"``).
* ``data.rl_label_audit``: ``"llm"`` under the paper recipe (§4.5: Kimi K2.6 audits the reference label of
  every candidate; :class:`LLMLabelAuditor`, the deterministic flags of :func:`audit_label` recorded beside
  its verdict); ``"rule"`` under smoke (:func:`audit_label` decides, labelled ``"rule label audit (smoke)"``).

The audit runs before the rollouts: the kept set is the same in either order (a query is kept when its label
passes and its group is mixed) and an audited-out query costs no rollouts. Every query's decision (kept /
dropped, the stage and the reason, the audit's and the judge's verdicts) is written to ``rl_decisions.jsonl``.
"""

from __future__ import annotations

import asyncio
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

    def __init__(self, policy, *, sampling: SamplingParams | None = None, attempts: int = 2, model: str | None = None):
        self.policy = policy
        self.sampling = sampling or SamplingParams(temperature=0.0, max_tokens=256)
        self.attempts = attempts
        self.model = model  # the label of the auditing model (None: the policy's name)
        self.last_reason: dict[str, str] = {}

    @property
    def name(self) -> str:
        """``llm label audit (<model>)``: the model given at construction, else the policy's served name."""
        from kit.policy.factory import policy_name

        return f"llm label audit ({self.model or policy_name(self.policy)})"

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
    ``metadata["rl_group"]`` set), dropped ``(task, reason)`` pairs, counts by reason and one decision
    per query (``decisions``, in input order; also ``rl_decisions.jsonl``)."""

    kept: list[Task] = field(default_factory=list)
    dropped: list[tuple[Task, str]] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)
    decisions: list[dict[str, Any]] = field(default_factory=list)


def default_judge(task: Task, rec: EpisodeRecord) -> bool:
    """Rule judge (``contains``, or the task's ``rule_mode``) on the final response; a rollout that
    ended without an answer is wrong (the smoke profile's filter judge, ``"rule judge (smoke)"``)."""
    from kit.eval.judges import RuleJudge

    if rec.final_response is None:
        return False
    return bool(RuleJudge("contains").judge_task(task, rec.final_response).correct)


# ------------------------------------------------------------------------------ who judges, who audits
RL_FILTER_JUDGES = ("rule", "llm")  # data.rl_filter_judge
LABEL_AUDITS = ("rule", "llm")  # data.rl_label_audit


@dataclass
class FilterSetup:
    """The filter's judge and label audit as resolved from the profile (:func:`resolve_filter_setup`).

    Attributes:
        profile: the :class:`kit.profiles.Profile` whose recipe chose them; ``profile_from`` says how it was
            found (``"argument"``, the run's ``run_identity.json``, or the smoke default).
        judge_kind: ``"rule"`` | ``"llm"`` | ``"custom"`` (a caller's callable); ``judge``: the
            :class:`~kit.eval.judges.RuleJudge` / :class:`~kit.eval.judges.LLMJudge` / callable;
            ``judge_label``: what every report of the filter names (``"rule judge (smoke)"``,
            ``"llm:kimi-k2.6@llm-judge-v1"``, ``"llm:tiny stand-in (...) for kimi-k2.6@llm-judge-v1"``).
        audit_kind: ``"rule"`` | ``"llm"``; ``auditor``: the model audit (None: rule only); ``audit_label``.
    """

    profile: Any
    profile_from: str
    judge_kind: str
    judge: Any
    judge_label: str
    audit_kind: str
    auditor: LLMLabelAuditor | None
    audit_label: str
    judge_via: str = ""

    def describe(self) -> dict[str, Any]:
        """The fields every report of the filter carries (counts, summary, decisions)."""
        prof = self.profile.name + (" (preflight)" if self.profile.preflight else "")
        return {"profile": prof, "profile_from": self.profile_from, "judge": self.judge_label,
                "judge_kind": self.judge_kind, **({"judge_via": self.judge_via} if self.judge_via else {}),
                "label_audit": self.audit_label, "label_audit_kind": self.audit_kind}


def _profile_of_run(profile) -> tuple[Any, str]:
    """``(Profile, "argument")`` for ``profile`` (a name or a :class:`kit.profiles.Profile`). There is no default:
    who judges the filter's rollouts is the profile's recipe, and a guessed profile (smoke's substring rule)
    would decide a paper run's data without a word.

    Raises:
        ValueError: ``profile`` is None or unknown.
    """
    from kit.profiles import get_profile

    if profile is None:
        raise ValueError("the RL query filter needs profile= (a profile name or kit.profiles.Profile): its judge and "
                         "label audit are the profile's recipe (data.rl_filter_judge, data.rl_label_audit)")
    return get_profile(profile), "argument"


def _served_name(policy) -> str:
    from kit.policy.factory import policy_name

    return policy_name(policy)


def _resolve_audit(P, j, akind: str, recipe_audit: str, audit_model: str, auditor: LLMLabelAuditor | None,
                   tag: str) -> tuple[str, LLMLabelAuditor | None, str]:
    """``(kind, auditor, label)`` of the RL filter's label audit ``akind`` (see :func:`resolve_filter_setup`)."""
    from kit.eval.judge_factory import JudgeConfigError
    from kit.eval.judges import LLMJudge
    from kit.profiles import stand_in_name, stand_in_policy

    if akind not in LABEL_AUDITS:
        raise ValueError(f"label_audit={akind!r}: must be one of {LABEL_AUDITS}")
    aud = auditor
    if akind == "llm" and aud is None:
        if isinstance(j, LLMJudge):
            aud = LLMLabelAuditor(j.policy, model=j.model)
        elif P.preflight:
            aud = LLMLabelAuditor(stand_in_policy("expert"), model=stand_in_name(audit_model))
        else:
            raise JudgeConfigError(
                f"the {P.name} profile audits the RL queries' reference labels with a model (recipe "
                f"data.rl_label_audit; WeAgent §4.5: \"We additionally use Kimi K2.6 to audit the reference labels\"): "
                "pass auditor= or judge_endpoint (the LLM judge's model audits too), or choose label_audit='rule', "
                "labelled 'rule label audit (fallback)'")
    if aud is not None and aud.model is None and getattr(aud.policy, "stand_in_for", None):
        aud.model = stand_in_name(audit_model)  # a preflight's stand-in is named as one, not as the paper's model
    if akind == "llm":
        alabel = aud.name
    else:
        alabel = "rule label audit" + (tag or (" (fallback)" if recipe_audit != "rule" else ""))
        if aud is not None:  # a caller's model audit after the rule pass (notebook 02 with a named expert)
            alabel += f" + {aud.name}"
    return akind, aud, alabel


def resolve_filter_setup(profile, *, judge=None, label_audit: str | None = None,
                         auditor: LLMLabelAuditor | None = None, judge_endpoint: str = "", judge_model: str = "",
                         judge_api_key: str | None = None, judge_policy=None,
                         cache_path: str | Path | None = None) -> FilterSetup:
    """The RL filter's judge and label audit, from the profile's recipe (``data.rl_filter_judge``,
    ``data.rl_label_audit``) unless the caller names them.

    The LLM judge (:func:`kit.eval.judge_factory.make_answer_judge`) runs on, in order: ``judge_policy``;
    ``judge_endpoint`` (served ``judge_model``, default the recipe's ``eval.judge_model``); in a preflight
    without either, the tiny stand-in (named so); else the label auditor's endpoint (notebook 02 passes the
    expert, Kimi K2.6 in the paper, as ``auditor``; recorded as ``judge_via``). The LLM audit runs
    ``auditor``, else on the LLM judge's model (§4.5's auditor and §7.1's judge are both Kimi K2.6), else in a
    preflight on the tiny stand-in expert.

    Args:
        profile: a profile name or :class:`kit.profiles.Profile` (required: ValueError when None).
        judge: ``"rule"`` | ``"llm"`` | a judge object | a callable ``(task, record) -> bool`` | None (the recipe's).
        label_audit: ``"rule"`` | ``"llm"`` | None (the recipe's).

    Raises:
        kit.eval.judge_factory.JudgeConfigError: the LLM judge or the LLM audit has no model to run on (the
            message names ``judge_endpoint`` and the rule alternative).
        ValueError: an unknown judge or audit name, or an unknown profile.
    """
    from kit.eval.judge_factory import JudgeConfigError, make_answer_judge
    from kit.eval.judges import LLMJudge, RuleJudge

    P, found = _profile_of_run(profile)
    recipe_judge = str(P.value("data.rl_filter_judge", None) or P.value("eval.judge", "rule"))
    recipe_audit = str(P.value("data.rl_label_audit", None) or "rule")
    audit_model = str(P.value("data.rl_label_audit_model", None) or P.value("eval.judge_model", "kimi-k2.6"))
    tag = " (smoke)" if P.smoke else ""
    via = ""
    if judge is not None and not isinstance(judge, str):
        if isinstance(judge, RuleJudge):
            kind, j, label = "rule", judge, f"rule judge{tag or (' (fallback)' if recipe_judge != 'rule' else '')}"
        elif isinstance(judge, LLMJudge):
            kind, j, label = "llm", judge, judge.name
        else:
            kind, j = "custom", judge
            label = f"custom judge ({getattr(judge, '__name__', type(judge).__name__)})"
    else:
        kind = judge or recipe_judge
        if kind not in RL_FILTER_JUDGES:
            raise ValueError(f"judge={kind!r}: the RL filter's judge must be one of {RL_FILTER_JUDGES}")
        if kind == "rule":
            fallback = recipe_judge != "rule"
            j = RuleJudge("contains", fallback=fallback)
            label = "rule judge" + (tag or (" (fallback)" if fallback else ""))
        else:
            policy, model = judge_policy, judge_model
            if policy is None and not (judge_endpoint or "").strip() and not P.preflight:
                if auditor is None:
                    raise JudgeConfigError(
                        f"the {P.name} profile judges the RL filter's rollouts with the LLM judge (recipe "
                        "data.rl_filter_judge; WeAgent §4.5 keeps queries whose 8 rollouts are neither all correct "
                        "nor all incorrect): set judge_endpoint (served model: judge_model, default "
                        f"{P.value('eval.judge_model', 'kimi-k2.6')!r}) or pass auditor=, or choose judge='rule' "
                        "for the substring rule, labelled 'rule judge (fallback)'")
                policy, model = auditor.policy, judge_model or _served_name(auditor.policy)
                via = f"the label auditor's endpoint ({_served_name(auditor.policy)}): no judge_endpoint given"
            j = make_answer_judge("llm", profile=P, endpoint=judge_endpoint, model=model, api_key=judge_api_key,
                                  cache_path=cache_path, policy=policy)
            label = j.name
    akind, aud, alabel = _resolve_audit(P, j, label_audit or recipe_audit, recipe_audit, audit_model, auditor, tag)
    return FilterSetup(P, found, kind, j, label, akind, aud, alabel, via)


async def _verdict(setup: FilterSetup, task: Task, rec: EpisodeRecord) -> dict[str, Any]:
    """One rollout's verdict ``{"episode", "correct" (None: the judge could not decide), "judge", "error"}``."""
    import inspect

    if setup.judge_kind == "custom":
        got = setup.judge(task, rec)
        ok = await got if inspect.isawaitable(got) else got
        return {"episode": rec.id, "correct": None if ok is None else bool(ok), "judge": setup.judge_label, "error": None}
    if rec.final_response is None:  # no answer: wrong, whoever judges (no call)
        return {"episode": rec.id, "correct": False, "judge": setup.judge_label, "error": None}
    v = setup.judge.judge_task(task, rec.final_response)
    if inspect.isawaitable(v):
        v = await v
    name = setup.judge_label if setup.judge_kind == "rule" else v.judge
    return {"episode": rec.id, "correct": v.correct, "judge": name, "error": v.error}


async def _audit(setup: FilterSetup, task: Task) -> dict[str, Any]:
    """The label audit of one query: ``{"by", "flags", "rule_flags", "reason"}`` (``flags`` empty: kept).

    ``rule``: :func:`audit_label` decides (then the caller's auditor, if any, on what it keeps). ``llm``: the
    model decides for every label (§4.5); the rule flags are recorded beside it; an empty label is dropped
    without a call (``no_answer``: nothing to audit)."""
    rule = audit_label(task)
    out = {"by": setup.audit_label, "flags": rule, "rule_flags": rule, "reason": None}
    if setup.auditor is None or ("no_answer" in rule) or (setup.audit_kind == "rule" and rule):
        return out
    out["flags"] = await setup.auditor.audit(task)
    out["reason"] = setup.auditor.last_reason.get(task.id)
    return out


async def _audit_all(setup: FilterSetup, tasks: Sequence[Task], concurrency: int, res: FilterResult
                     ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]], list[Task]]:
    """Audit every label concurrently: ``(audits, decisions of the audited-out, tasks kept)``; drops go to ``res``."""
    sem = asyncio.Semaphore(max(1, concurrency))

    async def audit_one(t: Task) -> dict[str, Any]:
        async with sem:
            return await _audit(setup, t)

    audits = dict(zip([t.id for t in tasks], await asyncio.gather(*(audit_one(t) for t in tasks)), strict=True))
    decisions: dict[str, dict[str, Any]] = {}
    audited: list[Task] = []
    for t in tasks:
        a = audits[t.id]
        if a["flags"]:
            res.dropped.append((t, a["flags"][0]))
            decisions[t.id] = {"id": t.id, "decision": "dropped", "stage": "label_audit", "reason": a["flags"][0],
                               "label_audit": a, "group": None}
        else:
            audited.append(t)
    return audits, decisions, audited


async def _decide_groups(setup: FilterSetup, audited: list[Task], groups: dict[str, list[EpisodeRecord]],
                         audits: dict[str, dict[str, Any]], res: FilterResult,
                         decisions: dict[str, dict[str, Any]]) -> tuple[list[float], int]:
    """Judge each rollout group, keep mixed ones (into ``res``, ``decisions``); ``(kept solve rates, judge errors)``."""
    rates, n_err_total = [], 0
    for t in audited:
        g = groups.get(t.id, [])
        verdicts = await asyncio.gather(*(_verdict(setup, t, r) for r in g))
        decided = [v["correct"] for v in verdicts if v["correct"] is not None]
        n_ok, n_err = sum(decided), len(verdicts) - len(decided)
        n_err_total += n_err
        info = {"rollouts": len(g), "correct": n_ok, "judge_errors": n_err, "episodes": [r.id for r in g],
                "statuses": sorted({r.status for r in g}), "judge": setup.judge_label,
                "label_audit": setup.audit_label, "verdicts": [v["correct"] for v in verdicts]}
        if decided and 0 < n_ok < len(decided):
            why = None
        elif n_err or not g:
            why = "judge_error" if g else "no_rollouts"
        else:
            why = "all_correct" if n_ok == len(g) else "all_wrong"
        dec = {"id": t.id, "decision": "kept" if why is None else "dropped", "stage": "rollout_group", "reason": why,
               "label_audit": audits[t.id], "group": {**info, "verdict_details": verdicts}}
        if why is None:
            rate = n_ok / len(decided)
            rates.append(rate)
            dec["solve_rate"] = rate
            res.kept.append(t.model_copy(update={"metadata": {**t.metadata, "solve_rate": rate, "rl_group": info}}))
        else:
            res.dropped.append((t.model_copy(update={"metadata": {**t.metadata, "rl_group": info}}), why))
        decisions[t.id] = dec
    return rates, n_err_total


def _write_filter_outputs(out: Path, res: FilterResult, decisions: dict[str, dict[str, Any]],
                          setup: FilterSetup) -> None:
    """Write ``rl_kept.jsonl``, ``rl_dropped.jsonl``, ``rl_decisions.jsonl`` and ``rl_filter_counts.json``."""
    with open(out / "rl_kept.jsonl", "w", encoding="utf-8") as f:
        for t in res.kept:
            f.write(t.model_dump_json() + "\n")
    with open(out / "rl_dropped.jsonl", "w", encoding="utf-8") as f:
        for t, why in res.dropped:
            d = decisions[t.id]
            f.write(json.dumps({"task": t.model_dump(mode="json"), "reason": why, "stage": d["stage"],
                                "audit_reason": d["label_audit"]["reason"], "label_audit": setup.audit_label,
                                "judge": setup.judge_label}, ensure_ascii=False, default=str) + "\n")
    with open(out / "rl_decisions.jsonl", "w", encoding="utf-8") as f:
        for d in res.decisions:
            f.write(json.dumps(d, ensure_ascii=False, default=str) + "\n")
    (out / "rl_filter_counts.json").write_text(json.dumps(res.counts, indent=2), encoding="utf-8")


async def filter_rl_queries(tasks: Sequence[Task], harness_factory: Callable[[Task, int], Any], out_dir: str | Path, *,
                            group_size: int = 8, concurrency: int = 4, judge=None,
                            auditor: LLMLabelAuditor | None = None, profile, label_audit: str | None = None,
                            judge_endpoint: str = "", judge_model: str = "", judge_api_key: str | None = None,
                            judge_policy=None) -> FilterResult:
    """Label audit, then an ``group_size``-rollout group per surviving query; drop uniform groups (§4.5).

    Args:
        harness_factory: ``(task, sample) -> Harness`` running the policy being filtered for (the
            paper: the SFT model); ``sample`` indexes the rollout in the group (vary its seed).
        out_dir: ``rollouts/episodes.jsonl`` (resumable), ``rl_kept.jsonl``, ``rl_dropped.jsonl``
            (one ``{"task", "reason", "stage", ...}`` per line), ``rl_decisions.jsonl`` (one line per query:
            decision, stage, reason, audit and judge verdicts), ``rl_filter_counts.json`` and, for the LLM judge,
            ``judge_cache.sqlite`` (verdicts are not asked twice on a resume).
        judge, label_audit, profile, judge_endpoint, judge_model, judge_api_key, judge_policy: who judges the
            rollouts and who audits the labels, by default the profile's recipe (:func:`resolve_filter_setup`;
            ``profile`` is required: a name or :class:`kit.profiles.Profile`).
        auditor: the model label audit (notebook 02: the expert); required by ``label_audit="llm"`` unless the
            LLM judge's model or a preflight stand-in can run it; under ``"rule"`` it runs after the rule pass.

    Drop reasons: the label-audit flags (stage ``label_audit``), ``all_correct``, ``all_wrong``, ``judge_error``
    (the judge could not decide some rollouts and the decided ones are uniform; stage ``rollout_group``). A
    mixed group among the decided rollouts is kept (``rl_group.judge_errors`` counts the undecided).

    Raises:
        RLFilterError: ``group_size`` < 2 (no contrast is possible) or duplicate task ids.
        kit.eval.judge_factory.JudgeConfigError: the profile's LLM judge or audit has no model (see
            :func:`resolve_filter_setup`).
    """
    from kit.harness.runner import run_batch
    from kit.policy.factory import announce

    if group_size < 2:
        raise RLFilterError(f"group_size must be >= 2 to measure within-group contrast, got {group_size}")
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        raise RLFilterError("duplicate task ids")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    setup = resolve_filter_setup(profile, judge=judge, label_audit=label_audit, auditor=auditor,
                                 judge_endpoint=judge_endpoint, judge_model=judge_model, judge_api_key=judge_api_key,
                                 judge_policy=judge_policy, cache_path=out / "judge_cache.sqlite")
    desc = setup.describe()
    announce(f"RL query filter: judge {setup.judge_label}; label audit {setup.audit_label}; "
             f"profile {desc['profile']} ({setup.profile_from})")
    res = FilterResult()
    audits, decisions, audited = await _audit_all(setup, tasks, concurrency, res)
    recs = await run_batch(harness_factory, audited, out / "rollouts", samples=group_size, concurrency=concurrency,
                           progress=False)
    groups: dict[str, list[EpisodeRecord]] = {}
    for r in recs:
        groups.setdefault(r.task.id, []).append(r)
    rates, n_err_total = await _decide_groups(setup, audited, groups, audits, res, decisions)
    res.decisions = [decisions[i] for i in ids]
    reasons: dict[str, int] = {}
    for _, why in res.dropped:
        reasons[why] = reasons.get(why, 0) + 1
    res.counts = {"queries": len(tasks), "audited_out": len(tasks) - len(audited), "rolled_out": len(audited),
                  "group_size": group_size, "rollouts": len(recs), "kept": len(res.kept),
                  "dropped": dict(sorted(reasons.items())),
                  "mean_solve_rate_kept": round(sum(rates) / len(rates), 4) if rates else None,
                  "judge_errors": n_err_total, **desc, "decisions_file": "rl_decisions.jsonl"}
    _write_filter_outputs(out, res, decisions, setup)
    if setup.judge_kind == "llm" and (judge is None or isinstance(judge, str)):
        setup.judge.cache.close()  # the verdict cache this call opened (judge_cache.sqlite)
    return res
