"""Paper-style reports: Table 1 (rows = configurations, columns = benchmarks, Avg.) as CSV,
Markdown and HTML; Figure 6 (VisTarget stage-wise rates) and a tool-use figure like POINTS-Seeker
Fig. 7 as plotly figures; :func:`write_figure` writes them as offline HTML + PNG + SVG (kit.figures).

Cells read ``mean ± std`` over runs (WeAgent Table 1), a bare mean for a single run, and ``–`` for
an unavailable result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from kit.eval.benchmarks import BENCHMARKS, display_name

EQ2_LABELS = {"accuracy": "Accuracy", "image_cite": "Image Cite", "target_match": "Target Match",
              "match_acc": "Match+Acc"}


def fmt_cell(cell: dict[str, Any] | None, digits: int = 2) -> str:
    """``"12.34 ± 1.23"`` for several runs, ``"12.34"`` for one, ``"–"`` when unavailable."""
    if not cell or cell.get("mean") is None or math.isnan(cell["mean"]):
        return "–"
    if cell.get("runs", 0) > 1:
        return f"{cell['mean']:.{digits}f} ± {cell['std']:.{digits}f}"
    return f"{cell['mean']:.{digits}f}"


def table1_frames(rows: list[dict[str, Any]], benchmarks: Sequence[str],
                  config_labels: dict[str, str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(display, numeric)`` frames of :func:`kit.eval.metrics.table1` rows.

    ``display``: one row per configuration, one string column per benchmark (display names, Table 1
    order as given) and ``Avg.``. ``numeric``: the same with ``<name> mean``, ``<name> std`` and
    ``<name> runs`` columns (for CSV).
    """
    labels = config_labels or {}
    disp, num = [], []
    avg_name = f"Avg. ({len(benchmarks)})" if len(benchmarks) != 8 else "Avg."
    for r in rows:
        name = labels.get(r["config"], r["config"])
        d = {"Configuration": name}
        n = {"Configuration": name, "config": r["config"]}
        for b in list(benchmarks) + ["avg"]:
            col = avg_name if b == "avg" else display_name(b)
            d[col] = fmt_cell(r.get(b))
            cell = r.get(b) or {}
            n[f"{col} mean"], n[f"{col} std"], n[f"{col} runs"] = cell.get("mean"), cell.get("std"), cell.get("runs")
        disp.append(d)
        num.append(n)
    return pd.DataFrame(disp).set_index("Configuration"), pd.DataFrame(num).set_index("Configuration")


def write_table1(rows: list[dict[str, Any]], benchmarks: Sequence[str], out_dir: str | Path, *,
                 config_labels: dict[str, str] | None = None, note: str = "", stem: str = "table1") -> dict[str, Path]:
    """Write ``<stem>.csv`` (numeric), ``<stem>.md`` and ``<stem>.html`` (benchmark groups as a
    second header level) and return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    disp, num = table1_frames(rows, benchmarks, config_labels)
    paths = {"csv": out / f"{stem}.csv", "md": out / f"{stem}.md", "html": out / f"{stem}.html"}
    num.to_csv(paths["csv"])
    head = (note + "\n\n") if note else ""
    paths["md"].write_text(head + disp.to_markdown() + "\n", encoding="utf-8")
    groups = [BENCHMARKS[b].group if b in BENCHMARKS else "" for b in benchmarks] + [""]
    html = disp.copy()
    html.columns = pd.MultiIndex.from_arrays([groups, list(disp.columns)])
    paths["html"].write_text(table1_page(html.to_html(border=0, classes="table1"), note, stem), encoding="utf-8")
    return paths


# kit: table1.html opens by itself in a browser and fits a 1,280-px and a 1,920-px window (issue 29 part 7):
# a number never breaks (a cell wraps only at " ± "), configuration names wrap anywhere, and a table wider
# than a narrow window scrolls in its own box with the configuration column fixed
TABLE1_CSS = """
body{font-family:system-ui,sans-serif;margin:1.2em auto;max-width:1880px;padding:0 1em;color:#222}
p.note{font-size:.9em;color:#444;max-width:70em;overflow-wrap:anywhere}
.scroll{overflow-x:auto;max-width:100%}
table.table1{border-collapse:collapse;font-size:.9em}
table.table1 th,table.table1 td{border:1px solid #ddd;padding:.3em .6em;text-align:right;vertical-align:top}
table.table1 td{overflow-wrap:normal;font-variant-numeric:tabular-nums}
table.table1 thead th{background:#f4f4f4;text-align:center}
table.table1 tbody th{text-align:left;overflow-wrap:anywhere;min-width:8em;max-width:18em;position:sticky;left:0;background:#fff}
table.table1 tbody tr:nth-child(even) td{background:#fafafa}
"""


def table1_page(table_html: str, note: str = "", title: str = "table1") -> str:
    """A standalone HTML page around Table 1's ``<table>``: the note above it, a small embedded stylesheet
    (:data:`TABLE1_CSS`), no external resource."""
    import html as _html

    head = f"<p class=\"note\">{_html.escape(note)}</p>\n" if note else ""
    return ("<!doctype html>\n<html><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_html.escape(title)}</title>\n<style>{TABLE1_CSS}</style></head><body>\n"
            f"{head}<div class=\"scroll\">{table_html}</div>\n</body></html>\n")


def figure6(rows: list[dict[str, Any]], config_labels: dict[str, str] | None = None, title: str = "", *,
            benchmark: str | Sequence[str] | None = None, split: str | None = None, episodes: int | None = None):
    """Figure 6: per configuration, Accuracy, Image Cite, Target Match (conditioned on citing) and
    Match+Acc (conditioned on a match) in percent; grouped bars are means over runs, whiskers ± std.
    The four metrics are categories, so they are bars, never joined by a line.

    The caption under the title says what was measured (:func:`kit.figures.data_caption`): ``benchmark``
    (the benchmark(s) whose target-image tasks the rows count; :func:`figure6_from_items` fills it),
    ``split`` and ``episodes`` (default: each configuration's episodes per run × runs, from ``rows``)."""
    import plotly.graph_objects as go

    from kit.figures import add_caption, data_caption

    labels = config_labels or {}
    fig = go.Figure()
    x = list(EQ2_LABELS.values())
    for r in rows:
        name = labels.get(r["config"], r["config"])
        fig.add_trace(go.Bar(
            x=x, y=[r[k]["mean"] for k in EQ2_LABELS], name=name,
            error_y={"type": "data", "array": [r[k]["std"] for k in EQ2_LABELS], "visible": True},
            hovertemplate="%{x}: %{y:.2f}%<extra>" + name + f" (n={r['n']:,d})</extra>"))
    per = {labels.get(r["config"], r["config"]): (r["n"], r["accuracy"].get("runs") or 1) for r in rows}
    total = episodes if episodes is not None else sum(n * k for n, k in per.values())
    detail = "; ".join(f"{c}: {n} per run × {k} run{'s' if k != 1 else ''}" for c, (n, k) in per.items())
    fig.update_layout(title=title or "Final-answer and stage-wise visual-evidence metrics (WeAgent eq. 2)",
                      barmode="group", xaxis_title="metric (WeAgent eq. 2)",
                      yaxis_title="% (Accuracy, Image Cite: of episodes; Target Match: of citing; Match+Acc: of matched)",
                      yaxis_range=[0, 105], template="plotly_white", legend_title="configuration")
    add_caption(fig, data_caption(benchmark if benchmark is not None else "tasks with a target image",
                                  split, total, unit="episodes with a target image", detail=detail))
    return fig


def figure6_from_items(items: Sequence[Any], config_labels: dict[str, str] | None = None, title: str = "", *,
                       split: str | None = None):
    """:func:`figure6` of :func:`kit.eval.metrics.vistarget_table` over ``items`` (``ItemResult``), its caption
    naming the benchmarks of the target-image tasks, ``split`` and the number of episodes counted."""
    from kit.eval.metrics import vistarget_table

    counted = [it for it in items if it.has_target]
    return figure6(vistarget_table(counted), config_labels, title, split=split, episodes=len(counted),
                   benchmark=sorted({it.benchmark for it in counted}))


def tool_use_figure(rows: list[dict[str, Any]], config_labels: dict[str, str] | None = None, title: str = "", *,
                    split: str | None = None):
    """POINTS-Seeker Fig. 7 layout: (a) mean interaction turns per benchmark, one bar per
    configuration; (b) share of each tool in all tool calls per benchmark × configuration. The caption
    names the benchmarks, ``split`` and the episodes counted (``tasks`` of the rows, per configuration)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from kit.figures import add_caption, data_caption

    labels = config_labels or {}
    fig = make_subplots(rows=1, cols=2, subplot_titles=("(a) Average number of interaction turns",
                                                        "(b) Tool types across benchmarks (%)"))
    configs = list(dict.fromkeys(r["config"] for r in rows))
    xs = [f"{display_name(r['benchmark'])} · {labels.get(r['config'], r['config'])}" for r in rows]
    for c in configs:  # (a): one colour per configuration; every bar has its own x, so nothing stacks
        fig.add_trace(go.Bar(x=[x for x, r in zip(xs, rows) if r["config"] == c],
                             y=[r["mean_turns"] for r in rows if r["config"] == c], name=labels.get(c, c),
                             legendgroup="turns", legendgrouptitle_text="turns"), row=1, col=1)
    tools = sorted({t for r in rows for t in r["tool_share"]})
    for t in tools:  # (b): tool shares stacked to 100 % per benchmark x configuration
        fig.add_trace(go.Bar(x=xs, y=[r["tool_share"].get(t, 0.0) for r in rows], name=t, legendgroup="tools",
                             legendgrouptitle_text="tools"), row=1, col=2)
    fig.update_layout(barmode="stack", title=title or "Tool usage analysis", template="plotly_white",
                      xaxis={"tickangle": -35, "title": "benchmark · configuration"},
                      xaxis2={"tickangle": -35, "title": "benchmark · configuration"},
                      yaxis={"title": "interaction turns per episode"}, yaxis2={"title": "share of tool calls (%)"})
    per_config = {labels.get(c, c): sum(r["tasks"] for r in rows if r["config"] == c) for c in configs}
    add_caption(fig, data_caption([display_name(b) for b in dict.fromkeys(r["benchmark"] for r in rows)], split,
                                  sum(per_config.values()), detail="; ".join(f"{c}: {n}" for c, n in per_config.items())))
    return fig


def write_figure(fig, path: str | Path, *, smoke: bool = False) -> Path:
    """Write a plotly figure as ``<stem>.html`` (plotly.js shipped beside it: renders offline),
    ``<stem>.png`` and ``<stem>.svg`` (:func:`kit.figures.save_figure`); returns the HTML path.
    ``smoke``: the title is made to say "smoke"."""
    from kit.figures import save_figure

    return save_figure(fig, path, smoke=smoke).html


def tool_use_frame(rows: list[dict[str, Any]], config_labels: dict[str, str] | None = None) -> pd.DataFrame:
    """Tool-use table: configuration, benchmark, tasks, mean turns, mean tool calls, tool shares (%)."""
    labels = config_labels or {}
    recs = []
    for r in rows:
        rec = {"configuration": labels.get(r["config"], r["config"]), "benchmark": display_name(r["benchmark"]),
               "tasks": r["tasks"], "mean turns": round(r["mean_turns"], 2), "mean tool calls": round(r["mean_tool_calls"], 2)}
        rec.update({f"{t} %": round(v, 1) for t, v in r["tool_share"].items()})
        recs.append(rec)
    return pd.DataFrame(recs).fillna(0.0)
