"""Evaluation metrics: per-item results, WeAgent equation (2), mean ± std over runs, Table-1 layout,
tool-use analysis (POINTS-Seeker Fig. 7).

WeAgent §5.2, equation (2), for N responses with final-answer correctness :math:`A_i`, image
citation :math:`I_i` (the final response cites at least one valid tool-retrieved image) and target
correspondence :math:`M_i = J(\\hat C_i, C_i)` (:math:`M_i = 0` when nothing valid is cited)::

    Accuracy  = Σ A_i / N
    Cite      = Σ I_i / N
    Match     = Σ M_i / Σ I_i           (0 when Σ I_i = 0)
    Match+Acc = Σ A_i M_i / Σ M_i       (0 when Σ M_i = 0)

:math:`A_i` is the judge's score (0/1 for binary judges; token F1 for MMSearch's rule scorer).
Repeated runs (WeAgent §7.1: three by default) give mean ± sample standard deviation (ddof = 1;
0 for a single run). The eight-benchmark "Avg." of Table 1 is the mean over benchmarks computed per
run, then mean ± std over runs; it is left empty when a configuration lacks one of the columns.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, Field

# Table 1 column order (WeAgent §7.2): MMSearch-style tasks, then multimodal knowledge QA.
PAPER_BENCHMARKS = ("mmbrowsecomp", "mmsearch", "mmsearch_plus", "vistarget", "simplevqa", "vdr_bench", "livevqa",
                    "fvqa")


class ItemResult(BaseModel):
    """One judged episode: the per-item prediction line written to ``predictions/*.jsonl``.

    For sensitive tasks (encrypted benchmarks) ``response`` and ``answers`` are None and only
    hashes are kept (``question_sha256``, ``response_sha256``).
    """

    benchmark: str
    config: str
    repeat: int
    task_id: str
    episode_id: str
    status: str  # episode status (answered, max_turns_synthesis, context_limit, wall_clock, error)
    score: float = 0.0  # A_i
    correct: bool | None = None
    judge: str = ""
    judge_error: str | None = None
    cited: bool = False  # I_i
    cited_images: list[str] = Field(default_factory=list)
    has_target: bool = False  # the task carries a held-out target image (VisTarget-style)
    match: bool | None = None  # M_i; None without a target image or when the image judge failed
    image_judge: str | None = None
    image_judge_error: str | None = None
    target_distance: int | None = None
    turns: int = 0
    tool_calls: int = 0
    tool_counts: dict[str, int] = Field(default_factory=dict)
    error: str | None = None  # episode error reason
    sensitive: bool = False
    question_sha256: str = ""
    response_sha256: str | None = None
    response: str | None = None
    answers: list[str] | None = None
    labels: list[str] = Field(default_factory=list)


def safe_rate(num: float, den: float) -> float:
    """``num / den``, defined as 0 when the conditioning set is empty (WeAgent §5.2)."""
    return num / den if den else 0.0


def eq2_rates(items: Sequence[ItemResult]) -> dict[str, float]:
    """Accuracy, Image Cite, Target Match and Match+Acc of WeAgent equation (2), in [0, 1].

    ``M_i`` counts only when ``I_i`` (a match without a valid citation is impossible by definition);
    an undecided image verdict (``match is None`` on a target task) counts as no match.
    Returns also the counts ``n``, ``n_cited``, ``n_match``.
    """
    n = len(items)
    a = [float(it.score) for it in items]
    i_ = [1.0 if it.cited else 0.0 for it in items]
    m = [1.0 if (it.cited and it.match) else 0.0 for it in items]
    sum_i, sum_m = sum(i_), sum(m)
    return {"accuracy": safe_rate(sum(a), n), "image_cite": safe_rate(sum_i, n),
            "target_match": safe_rate(sum_m, sum_i), "match_acc": safe_rate(sum(x * y for x, y in zip(a, m)), sum_m),
            "n": n, "n_cited": int(sum_i), "n_match": int(sum_m)}


def mean_std(values: Iterable[float]) -> tuple[float, float, int]:
    """``(mean, sample std (ddof=1; 0 for one value), count)``; ``(nan, nan, 0)`` for no values."""
    v = [float(x) for x in values if x is not None and not math.isnan(float(x))]
    if not v:
        return math.nan, math.nan, 0
    return statistics.fmean(v), (statistics.stdev(v) if len(v) > 1 else 0.0), len(v)


def run_scores(items: Iterable[ItemResult]) -> dict[tuple[str, str, int], dict[str, Any]]:
    """Per (config, benchmark, repeat): tasks, accuracy (mean score), judge and episode errors."""
    groups: dict[tuple[str, str, int], list[ItemResult]] = defaultdict(list)
    for it in items:
        groups[(it.config, it.benchmark, it.repeat)].append(it)
    out = {}
    for key, its in groups.items():
        out[key] = {"tasks": len(its), "accuracy": safe_rate(sum(i.score for i in its), len(its)),
                    "judge_errors": sum(1 for i in its if i.judge_error and i.correct is None),
                    "episode_errors": sum(1 for i in its if i.status == "error")}
    return out


def table1(items: Iterable[ItemResult], benchmarks: Sequence[str] | None = None,
           configs: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Table-1 layout: one row per configuration, per benchmark ``mean``/``std``/``runs`` of the
    accuracy in percent, and ``Avg.`` (per-run mean over ``benchmarks``, then mean ± std over runs;
    NaN when a configuration misses a benchmark in some run).

    Returns rows ``{"config", "<bench>": {"mean", "std", "runs"}, ..., "avg": {...}}``.
    """
    items = list(items)
    scores = run_scores(items)
    benchmarks = list(benchmarks or sorted({b for _, b, _ in scores}))
    configs = list(configs or list(dict.fromkeys(c for c, _, _ in scores)))
    rows = []
    for c in configs:
        row: dict[str, Any] = {"config": c}
        per_run: dict[int, dict[str, float]] = defaultdict(dict)
        for (cc, b, r), s in scores.items():
            if cc == c:
                per_run[r][b] = 100.0 * s["accuracy"]
        for b in benchmarks:
            mu, sd, k = mean_std(per_run[r][b] for r in per_run if b in per_run[r])
            row[b] = {"mean": mu, "std": sd, "runs": k}
        avgs = [statistics.fmean(v[b] for b in benchmarks) for v in per_run.values() if all(b in v for b in benchmarks)]
        complete = len(avgs) == len(per_run) and avgs
        mu, sd, k = mean_std(avgs) if complete else (math.nan, math.nan, 0)
        row["avg"] = {"mean": mu, "std": sd, "runs": k}
        rows.append(row)
    return rows


def vistarget_table(items: Iterable[ItemResult], benchmark: str | None = None) -> list[dict[str, Any]]:
    """Figure-6 data: per configuration, each equation-(2) rate in percent as mean ± std over runs
    (rates are computed per run, then aggregated). Only tasks with a target image count; restrict
    to one ``benchmark`` when given."""
    groups: dict[tuple[str, int], list[ItemResult]] = defaultdict(list)
    for it in items:
        if not it.has_target:
            continue
        if benchmark and it.benchmark != benchmark:
            continue
        groups[(it.config, it.repeat)].append(it)
    by_config: dict[str, list[dict[str, float]]] = defaultdict(list)
    for (c, _), its in groups.items():
        by_config[c].append(eq2_rates(its))
    rows = []
    for c, runs in by_config.items():
        row: dict[str, Any] = {"config": c, "n": runs[0]["n"]}
        for key in ("accuracy", "image_cite", "target_match", "match_acc"):
            mu, sd, k = mean_std(100.0 * r[key] for r in runs)
            row[key] = {"mean": mu, "std": sd, "runs": k}
        rows.append(row)
    return rows


def tool_use(items: Iterable[ItemResult]) -> list[dict[str, Any]]:
    """POINTS-Seeker Fig. 7 data per (config, benchmark): mean interaction turns and tool calls per
    task, and each tool's share of all tool observations (percent)."""
    groups: dict[tuple[str, str], list[ItemResult]] = defaultdict(list)
    for it in items:
        groups[(it.config, it.benchmark)].append(it)
    rows = []
    for (c, b), its in groups.items():
        mix: Counter = Counter()
        for it in its:
            mix.update(it.tool_counts)
        total = sum(mix.values())
        rows.append({"config": c, "benchmark": b, "tasks": len(its),
                     "mean_turns": statistics.fmean(it.turns for it in its),
                     "mean_tool_calls": statistics.fmean(it.tool_calls for it in its),
                     "tool_share": {t: 100.0 * n / total for t, n in sorted(mix.items())} if total else {}})
    return rows
