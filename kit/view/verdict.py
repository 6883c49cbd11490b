"""One verdict per item, the one the run's summary counts (issue 29 part 2, docs/viewer.md).

The index, the episode pages and the comparisons all read an item's correctness from here, computed from
the same fields as the run's own summary:

* an evaluation item (a ``predictions/*.jsonl`` line, :class:`kit.eval.metrics.ItemResult`): the judge's
  ``correct`` and its score ``A_i`` (``score``). ``kit.eval.runner.summary_rows`` writes
  ``accuracy_pct = 100 * mean(score)`` per benchmark × configuration into ``summary.csv``; a judge error
  (``correct`` None) scores 0 there and reads "judge error" here;
* any other episode with reference answers (notebook 01's ``summary.csv``: ``answer_match(contains)`` and
  ``answer_match(exact)``): :func:`kit.eval.judges.rule_match` of its ``final_response`` against
  ``task.answers``: ``contains`` is the answer match, ``exact`` is kept beside it;
* an episode without reference answers: no verdict (the comparison falls back to the episode status).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kit.eval.judges import rule_match

if TYPE_CHECKING:  # types only: what an item holds (kit.view.load.Item satisfies VerdictItem)
    from kit.eval.metrics import ItemResult
    from kit.harness.episode import EpisodeRecord

JUDGED = "judge"  # ItemResult.correct / score of the evaluation's predictions
RULE = "rule"  # kit.eval.judges.rule_match(final_response, task.answers), as notebook 01's summary
NONE = "none"
RULE_NAME = "rule_match (normalized containment; kit.eval.judges, as the run summary)"


class VerdictItem(Protocol):
    """What a verdict reads from an item (:class:`kit.view.load.Item` is one; its ``verdict`` property calls
    :func:`verdict_of`, so this module names the fields it reads instead of importing that class)."""

    run: str
    benchmark: str
    configuration: str
    record: EpisodeRecord | None
    prediction: ItemResult | None


@dataclass(frozen=True)
class Verdict:
    """``source``: :data:`JUDGED`, :data:`RULE` or :data:`NONE`. ``correct``: the judged correctness or
    the rule answer match (``contains``); None when undecided (a judge error) or without a verdict.
    ``exact``: the rule's exact match (rule verdicts only). ``score``: A_i of a judged item (0 for a judge
    error, as the summary scores it). ``judge``: which judge decided."""

    source: str
    correct: bool | None = None
    exact: bool | None = None
    score: float | None = None
    judge: str = ""

    @property
    def label(self) -> str:
        """What the pages print: correct / wrong / judge error, answer match / no answer match, or ``—``."""
        if self.source == JUDGED:
            return "judge error" if self.correct is None else ("correct" if self.correct else "wrong")
        if self.source == RULE:
            return "answer match" if self.correct else "no answer match"
        return "unjudged"

    @property
    def key(self) -> tuple[object, ...]:
        """What two verdicts are compared by (same source required)."""
        return (self.source, self.correct, self.exact, self.score)


def verdict_of(it: VerdictItem) -> Verdict:
    """The verdict of one item (see the module docstring)."""
    p = it.prediction
    if p is not None:
        return Verdict(JUDGED, p.correct, None, float(p.score), p.judge)
    rec = it.record
    if rec is not None and rec.task.answers:
        m = rule_match(rec.final_response, list(rec.task.answers))
        return Verdict(RULE, m["contains"], m["exact"], None, RULE_NAME)
    return Verdict(NONE)


@dataclass
class VerdictRow:
    """One row of the index's verdict table: the figures the run's summary shows for this group."""

    run: str
    benchmark: str
    configuration: str
    source: str
    items: int
    correct: int  # judged correct, or rule answer match (contains)
    exact: int | None  # rule exact matches (None for judged rows)
    judge_errors: int
    accuracy_pct: float | None  # 100 * mean(score) as kit.eval.runner.summary_rows (judged rows only)


def verdict_rows(items: Sequence[VerdictItem]) -> list[VerdictRow]:
    """Per run × benchmark × configuration (judged items) or run × configuration (rule verdicts; notebook
    01's summary is per policy over all its tasks): counts as the run's ``summary.csv`` has them."""
    groups: dict[tuple[str, str, str, str], list[tuple[VerdictItem, Verdict]]] = defaultdict(list)
    for it in items:
        v = verdict_of(it)
        if v.source == NONE:
            continue
        bench = it.benchmark if v.source == JUDGED else ""
        groups[(it.run, bench, it.configuration, v.source)].append((it, v))
    rows = []
    for (run, bench, config, source), ivs in groups.items():
        vs = [v for _, v in ivs]
        if source == RULE:
            bench = ", ".join(sorted({it.benchmark for it, _ in ivs if it.benchmark}))
        rows.append(VerdictRow(
            run=run, benchmark=bench, configuration=config, source=source, items=len(vs),
            correct=sum(1 for v in vs if v.correct), exact=sum(1 for v in vs if v.exact) if source == RULE else None,
            judge_errors=sum(1 for v in vs if source == JUDGED and v.correct is None),
            accuracy_pct=round(100 * sum(v.score or 0.0 for v in vs) / len(vs), 2) if source == JUDGED else None))
    return rows


__all__ = ["JUDGED", "NONE", "RULE", "RULE_NAME", "Verdict", "VerdictItem", "VerdictRow", "verdict_of", "verdict_rows"]
