"""Notebook 03's figures (POINTS-Seeker §4.3 Table 6 grid and the per-turn prompt curve), built from the
frames the notebook computes; write them with :func:`kit.figures.save_figure`.

Token counts are printed as integers with thousands separators (``tickformat ",d"``), axis labels are
words, not column names.
"""

from __future__ import annotations

import pandas as pd


def tau_k_sweep_figure(table6: pd.DataFrame, *, mode: str = "kit", title: str = ""):
    """Share of prompt tokens saved over whole episodes vs τ, one line per k, one panel per processor.

    ``table6``: one row per (processor, tau, k) with ``total_saving_%`` (percent). τ is a numeric
    sweep, so points of one k are joined; k is drawn as a separate series (a category).
    Raises ``KeyError`` naming a missing column.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    missing = {"processor", "tau", "k", "total_saving_%"} - set(table6.columns)
    if missing:
        raise KeyError(f"tau_k_sweep_figure: table6 lacks columns {sorted(missing)}")
    procs = list(dict.fromkeys(table6["processor"]))
    fig = make_subplots(rows=1, cols=len(procs), shared_yaxes=True, subplot_titles=[f"processor: {p}" for p in procs])
    ks = sorted(table6["k"].unique())
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
    for col, p in enumerate(procs, start=1):
        sub = table6[table6["processor"] == p]
        for i, k_ in enumerate(ks):
            d = sub[sub["k"] == k_].sort_values("tau")
            fig.add_trace(go.Scatter(x=d["tau"].tolist(), y=d["total_saving_%"].tolist(), mode="lines+markers",
                                     name=f"k = {k_} kept turns", legendgroup=str(k_), showlegend=col == 1,
                                     marker={"color": palette[i % len(palette)]}, line={"color": palette[i % len(palette)]},
                                     hovertemplate="τ = %{x:,d} tokens: %{y:.1f}% saved<extra>k = " + f"{k_}</extra>"),
                          row=1, col=col)
        fig.update_xaxes(title_text="τ: context threshold (tokens)", tickformat=",d", tickvals=sorted(sub["tau"].unique()),
                         row=1, col=col)
    fig.update_yaxes(title_text="prompt tokens saved, all turns (%)", row=1, col=1)
    fig.update_layout(title=title or f"V-Fold ({mode} mode): prompt tokens saved over whole episodes vs τ (Table 6 grid)",
                      template="plotly_white", legend_title="k")
    return fig


def tokens_per_turn_figure(per_turn: pd.DataFrame, *, tau: int | None = None, title: str = ""):
    """Prompt tokens per turn, one line per context strategy, with τ as a dotted line.

    ``per_turn``: one row per (strategy, turn) with ``strategy_tokens`` (prompt tokens under the
    strategy). Turns are ordered, so a strategy's points are joined. Raises ``KeyError`` naming a
    missing column and ``ValueError`` on an empty frame.
    """
    import plotly.graph_objects as go

    missing = {"strategy", "turn", "strategy_tokens"} - set(per_turn.columns)
    if missing:
        raise KeyError(f"tokens_per_turn_figure: per_turn lacks columns {sorted(missing)}")
    if per_turn.empty:
        raise ValueError("tokens_per_turn_figure: no turns to plot")
    fig = go.Figure()
    for s in dict.fromkeys(per_turn["strategy"]):
        d = per_turn[per_turn["strategy"] == s].sort_values("turn")
        fig.add_trace(go.Scatter(x=d["turn"].tolist(), y=[int(v) for v in d["strategy_tokens"]], mode="lines+markers",
                                 name=str(s), hovertemplate="turn %{x}: %{y:,d} tokens<extra>" + str(s) + "</extra>"))
    if tau is not None:
        fig.add_hline(y=tau, line_dash="dot", annotation_text=f"τ = {tau:,}")
    fig.update_layout(title=title or "Prompt tokens per turn", template="plotly_white", legend_title="context strategy",
                      xaxis={"title": "turn (policy call)", "dtick": 1}, yaxis={"title": "prompt tokens", "tickformat": ",d"})
    return fig
