"""Learning curves of the tiny-model CPU runs (issue 33): RL reward vs step beside its learning-rate-0 control,
and SFT before / after (held-out loss, format compliance).

``benchmarks/bench_learning.py`` draws ``results/learning/reward_curves.png`` with :func:`plot_reward_curves`;
notebooks 04 and 05 show their own smoke run beside the committed benchmark (:func:`load_learning_results`) with
:func:`plot_sft_before_after` and :func:`plot_rl_vs_control`. Every figure is labelled as a tiny-model result:
the curves show the training paths move in the right direction, not model quality.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: the committed benchmark's results (``benchmarks/bench_learning.py``)
LEARNING_JSON = Path(__file__).resolve().parents[1] / "results" / "learning" / "learning.json"
TINY = "tiny-model CPU results"
#: the reward panels of the benchmark: (title, methods), each method's lr-0 control dashed
PANELS = (("fa_gspo", ("fa_gspo", "fa_gspo_lr0", "gspo")), ("grpo", ("grpo", "grpo_lr0")))
SFT_METRICS = ("loss", "format_compliance")


def _plt():
    import matplotlib.pyplot as plt  # the backend is the caller's (a notebook's inline one; Agg without a display)

    return plt


def load_learning_results(path: str | Path | None = None) -> dict[str, Any] | None:
    """The benchmark's ``learning.json`` (default: the committed ``results/learning/learning.json``); None when
    it is not there (a checkout without results)."""
    p = Path(path) if path is not None else LEARNING_JSON
    return json.loads(p.read_text()) if p.exists() else None


def _curve(ax, runs: list[dict], label: str, *, dashed: bool = False, key: str = "reward_mean") -> None:
    """Mean over the runs (seeds) per step, the seed range as a band."""
    steps = [s["step"] for s in runs[0]["steps"]]
    ys = [[r["steps"][i][key] for r in runs] for i in range(len(steps))]
    (line,) = ax.plot(steps, [statistics.fmean(y) for y in ys], "--" if dashed else "-", marker="o", ms=3, label=label)
    if len(runs) > 1:
        ax.fill_between(steps, [min(y) for y in ys], [max(y) for y in ys], color=line.get_color(), alpha=0.15)


def _panel(ax, results: Sequence[dict], title: str, methods: Sequence[str]) -> None:
    for m in methods:
        runs = [r for r in results if r["method"] == m]
        if runs:
            _curve(ax, runs, m.replace("_lr0", " (lr 0 control)"), dashed=m.endswith("lr0"))
    ax.set_title(f"{title}: train reward ({TINY})", fontsize=9)
    ax.set_xlabel("RL step")
    ax.set_ylabel("reward mean")
    ax.legend(fontsize=8)


def plot_reward_curves(results: Sequence[dict], path: str | Path | None = None, *,
                       panels: Sequence[tuple[str, Sequence[str]]] = PANELS):
    """Train reward vs step per RL method (mean line, seed range band) with its lr-0 control dashed, one panel
    per entry of ``panels``. ``results``: the benchmark's runs (``learning.json["runs"]``: ``method`` and
    ``steps`` rows with ``step`` and ``reward_mean``). Returns the figure (saved to ``path`` when given)."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    for ax, (title, methods) in zip(axes[0], panels):
        _panel(ax, results, title, methods)
    fig.suptitle(f"bench_learning: {TINY} (mean over seeds, band = seed range)", fontsize=10)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def notebook_rl_runs(history: Sequence[dict], method: str = "notebook") -> list[dict]:
    """An RL trainer's history (``RLTrainer.history``) as one benchmark-style run of its RL steps: steps whose
    rollouts have a reward (OPD steps and steps without trajectories are left out)."""
    rows = [{"step": m["step"], "reward_mean": m["rollout_reward_mean"], "stage": m.get("stage")} for m in history
            if m.get("kind", "rl") == "rl" and m.get("rollout_reward_mean") is not None
            and m["rollout_reward_mean"] == m["rollout_reward_mean"]]
    return [{"method": method, "steps": rows}] if rows else []


def plot_rl_vs_control(history: Sequence[dict], committed: dict | None, path: str | Path | None = None, *,
                       label: str = "this notebook's run", method: str = "fa_gspo"):
    """Notebook 05: its own run's train reward per RL step (left) beside the committed benchmark's ``method`` and
    its lr-0 control over 3 seeds (right; ``committed``: :func:`load_learning_results`, None: left only). A
    control at lr 0 is not run inside the notebook (it would double its RL time): the committed one stands for it.
    Returns the figure."""
    plt = _plt()
    own = notebook_rl_runs(history, label)
    n = 2 if committed else 1
    fig, axes = plt.subplots(1, n, figsize=(5.5 * n, 4.0), squeeze=False)
    ax = axes[0][0]
    if own:
        _curve(ax, own, label)
        for r in own[0]["steps"]:  # a stage change (Long-MDR) changes the budgets, so the reward's scale with it
            ax.annotate(str(r.get("stage") or ""), (r["step"], r["reward_mean"]), fontsize=7,
                        textcoords="offset points", xytext=(0, 5), ha="center")
        ax.legend(fontsize=8)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"this run: train reward per RL step ({TINY})", fontsize=9)
    ax.set_xlabel("step")
    ax.set_ylabel("reward mean")
    if committed:
        _panel(axes[0][1], committed["runs"], f"results/learning {method}", (method, f"{method}_lr0"))
    fig.suptitle(f"RL reward vs step, {TINY}: not model quality", fontsize=10)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def sft_table(before: dict | None, after: dict | None, committed: dict | None = None) -> list[dict[str, Any]]:
    """Rows ``metric, before, after`` of a notebook's SFT run, with the committed benchmark's before / SFT after /
    lr 0 after (means over seeds) beside them when ``committed`` is given."""
    sft = (committed or {}).get("summary", {}).get("sft", {})
    rows = []
    for k in (*SFT_METRICS, "tool_call_validity"):
        row: dict[str, Any] = {"metric": k, "before": (before or {}).get(k), "after": (after or {}).get(k)}
        if sft.get("sft") and sft.get("sft_lr0"):
            row.update({"bench before": sft["before"][k], "bench SFT after": sft["sft"][k]["mean"],
                        "bench lr 0 after": sft["sft_lr0"][k]["mean"]})
        rows.append(row)
    return rows


def plot_sft_before_after(before: dict | None, after: dict | None, committed: dict | None = None,
                          path: str | Path | None = None, *, label: str = "this notebook"):
    """Notebook 04: held-out loss and format compliance before -> after its SFT run, beside the committed
    benchmark's SFT and its lr-0 control (:func:`sft_table`). Returns the figure."""
    plt = _plt()
    rows = {r["metric"]: r for r in sft_table(before, after, committed)}
    fig, axes = plt.subplots(1, len(SFT_METRICS), figsize=(5.0 * len(SFT_METRICS), 3.8), squeeze=False)
    for ax, k in zip(axes[0], SFT_METRICS):
        r = rows[k]
        groups = [(label, [("before", r["before"]), ("after", r["after"])])]
        if "bench before" in r:
            groups.append(("results/learning (3 seeds)", [("before", r["bench before"]), ("SFT after", r["bench SFT after"]),
                                                          ("lr 0 after", r["bench lr 0 after"])]))
        x, ticks, labels = 0.0, [], []
        for g, bars in groups:
            for name, v in bars:
                ax.bar(x, v or 0.0, color={"before": "#999999", "lr 0 after": "#cccccc"}.get(name, "#1f77b4"))
                ticks.append(x)
                labels.append(f"{name}\n{g}" if name == "before" else name)
                x += 1.0
            x += 0.6
        ax.set_xticks(ticks, labels, fontsize=7)
        ax.set_title(f"held-out {k.replace('_', ' ')} ({TINY})", fontsize=9)
    fig.suptitle(f"SFT before / after, {TINY}: not model quality", fontsize=10)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig
