"""Figures that render offline and in exports (issue 18 part 2).

One entry point, :func:`save_figure`, writes every plotly figure of the kit three ways:

* ``<stem>.html`` with plotly.js *shipped*: ``plotlyjs="directory"`` (default) writes
  ``plotly.min.js`` once beside the HTML files of a folder; ``True`` embeds it (one file, ~4.7 MB).
  A CDN script tag renders a blank page on an offline machine, so it is never used.
* ``<stem>.png`` and ``<stem>.svg``: static images from kaleido 1.x driving the system Chromium
  (Debian package ``chromium``; ``make setup`` installs it); where no Chrome can be started the
  same traces are drawn with matplotlib instead (:func:`matplotlib_from_plotly`), so a static
  image always exists.

:func:`display_figure` shows the figure in a notebook as one output holding both the plotly JSON
(interactive in JupyterLab) and the PNG (what nbconvert HTML and code-hosting previews show).
:func:`screenshot_html` and :func:`pixel_std` are the headless-Chromium check the tests run on every
figure (a blank page has near-zero pixel variance).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.extras import require

log = logging.getLogger(__name__)

SMOKE_WORD = "smoke"
# a rendered plot (axes, ticks, markers on white) measures ~20-60; an empty white page measures 0
BLANK_STD = 4.0


def smoke_title(title: str, smoke: bool) -> str:
    """``title`` prefixed with ``"Smoke run: "`` when ``smoke`` and the word
    is not already there; smoke numbers come from tiny random models and must not read as results."""
    if not smoke or SMOKE_WORD in title.lower():
        return title
    return f"Smoke run: {title}"


def data_caption(benchmark: str | Sequence[str] | None, split: str | None, n: int | None, *,
                 unit: str = "episodes", detail: str = "") -> str:
    """What a figure shows, for its caption (issue 29 part 7): ``"benchmark fvqa, infoseek · split test · n = 40
    episodes (detail)"``. ``benchmark``: a name or several; None reads "benchmark not given"; ``split`` None
    reads "split not given"; ``n`` None leaves the count out."""
    if benchmark is None or (not isinstance(benchmark, str) and not list(benchmark)):
        bench = "benchmark not given"
    else:
        names = [benchmark] if isinstance(benchmark, str) else list(dict.fromkeys(benchmark))
        bench = ("benchmark " if len(names) == 1 else "benchmarks ") + ", ".join(names)
    parts = [bench, f"split {split}" if split else "split not given"]
    if n is not None:
        parts.append(f"n = {n:,d} {unit}" + (f" ({detail})" if detail else ""))
    return " · ".join(parts)


def add_caption(fig: Any, caption: str) -> Any:
    """Put ``caption`` under a plotly figure's title (``layout.title.subtitle``, kept by every export and by
    :func:`matplotlib_from_plotly`) and leave the top margin room for both lines; returns ``fig``."""
    top = fig.layout.margin.t if fig.layout.margin.t is not None else 80
    fig.update_layout(title_subtitle_text=caption, margin_t=max(top, 110), title_y=0.97, title_yanchor="top")
    return fig


@dataclass
class FigureFiles:
    """Paths written by :func:`save_figure`; ``static_renderer`` is ``"kaleido"`` or ``"matplotlib"``."""

    html: Path
    png: Path
    svg: Path
    static_renderer: str

    def as_dict(self) -> dict[str, str]:
        return {"html": str(self.html), "png": str(self.png), "svg": str(self.svg),
                "static_renderer": self.static_renderer}


def chromium_path() -> str | None:
    """The Chrome/Chromium binary: ``$BROWSER_PATH`` if set, else the first of chromium,
    chromium-browser, google-chrome on ``PATH``; ``None`` when there is none."""
    env = os.environ.get("BROWSER_PATH")
    if env and Path(env).exists():
        return env
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if p := shutil.which(name):
            return p
    return None


def save_figure(fig: Any, path_stem: str | Path, *, smoke: bool = False, plotlyjs: bool | str = "directory",
                width: int = 1100, height: int = 550) -> FigureFiles:
    """Write ``fig`` (plotly) as ``<stem>.html``, ``<stem>.png`` and ``<stem>.svg``.

    ``path_stem``: path without suffix (a given ``.html`` / ``.png`` suffix is dropped). ``smoke``: the
    title is made to say "smoke" (:func:`smoke_title`). ``plotlyjs``: ``"directory"`` or ``True``;
    ``"cdn"`` / ``False`` raise ``ValueError`` (blank offline). ``width`` × ``height``: static image
    size in CSS pixels (PNG at scale 2). Static images come from kaleido + Chromium, else matplotlib
    (logged as a warning, and named in ``static_renderer``).
    """
    if plotlyjs not in ("directory", True):
        raise ValueError(f"plotlyjs={plotlyjs!r}: only 'directory' or True render offline (a CDN tag is blank offline)")
    stem = Path(path_stem)
    if stem.suffix in (".html", ".png", ".svg"):
        stem = stem.with_suffix("")
    stem.parent.mkdir(parents=True, exist_ok=True)
    title = fig.layout.title.text or ""
    if smoke:
        fig.update_layout(title_text=smoke_title(title, True))
    html, png, svg = (stem.with_name(stem.name + s) for s in (".html", ".png", ".svg"))
    fig.write_html(str(html), include_plotlyjs=plotlyjs, full_html=True)
    renderer = "kaleido"
    try:
        for p in (png, svg):
            p.unlink(missing_ok=True)  # a stale image must not pass for this figure's
        _kaleido_write(fig, [png, svg], width, height)
        missing = [p.name for p in (png, svg) if not (p.is_file() and p.stat().st_size > 0)]
        if missing:  # seen on a loaded machine: kaleido returned without writing every file
            raise RuntimeError(f"kaleido returned without writing {missing}")
    except Exception as e:  # no kaleido, no Chrome, or Chrome failed to start: draw the same data with matplotlib
        log.warning("kaleido static export failed (%s: %s); drawing %s with matplotlib", type(e).__name__, e, stem.name)
        renderer = "matplotlib"
        mfig = matplotlib_from_plotly(fig, width=width, height=height)
        mfig.savefig(png, dpi=200, bbox_inches="tight")
        mfig.savefig(svg, bbox_inches="tight")
        import matplotlib.pyplot as plt

        plt.close(mfig)
    return FigureFiles(html=html, png=png, svg=svg, static_renderer=renderer)


def _kaleido_write(fig: Any, paths: list[Path], width: int, height: int) -> None:
    require("figures", "plotly", "kaleido", feature="static figures")
    import plotly.io as pio

    if not os.environ.get("BROWSER_PATH") and (p := chromium_path()):
        os.environ["BROWSER_PATH"] = p  # choreographer reads it; Debian's binary is named chromium
    pio.write_images([fig] * len(paths), [str(p) for p in paths], width=width, height=height,
                     scale=[2 if p.suffix == ".png" else 1 for p in paths])


@contextmanager
def kaleido_session() -> Iterator[bool]:
    """Keep one kaleido/Chromium process for every static export inside the block (one start, ~3 s,
    instead of one per figure). Yields ``False`` (and exports fall back per figure) when kaleido or
    Chromium is unavailable."""
    try:
        import kaleido

        if not os.environ.get("BROWSER_PATH") and (p := chromium_path()):
            os.environ["BROWSER_PATH"] = p
        kaleido.start_sync_server(silence_warnings=True)
    except Exception as e:  # no kaleido or no Chrome: save_figure handles each figure
        log.warning("no kaleido session (%s: %s)", type(e).__name__, e)
        yield False
        return
    try:
        yield True
    finally:
        kaleido.stop_sync_server(silence_warnings=True)


def display_figure(fig: Any, files: FigureFiles | None = None) -> None:
    """Show ``fig`` in a notebook as one output with the plotly JSON (JupyterLab draws it
    interactively) and the static PNG (nbconvert HTML and GitHub previews show it). Without ``files``
    only the interactive part and a text line are shown."""
    require("figures", "plotly", "IPython", feature="notebook figures")
    import plotly.io as pio
    from IPython.display import display

    bundle: dict[str, Any] = {"application/vnd.plotly.v1+json": {**json.loads(pio.to_json(fig, validate=False)),
                                                                 "config": {"responsive": True}},
                              "text/plain": f"<figure: {fig.layout.title.text or ''}>"}
    if files is not None:
        bundle["image/png"] = base64.b64encode(files.png.read_bytes()).decode("ascii")
        bundle["text/plain"] += f" {files.html.name} / {files.png.name}"
    display(bundle, raw=True)


def matplotlib_from_plotly(fig: Any, *, width: int = 1100, height: int = 550):
    """A matplotlib figure drawing ``fig``'s scatter and bar traces, one panel per plotly x axis
    (covers ``make_subplots(rows=1, cols=n)`` and ``px`` ``facet_col``), with the title, axis titles,
    legend, error bars, ``barmode`` (group / stack) and horizontal shapes. Other trace types raise
    ``ValueError`` so nothing is silently left out of the image."""
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "svg", "pdf") and "inline" not in matplotlib.get_backend():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    lay = fig.layout
    axes_ids = list(dict.fromkeys((t.xaxis or "x") for t in fig.data)) or ["x"]
    mfig, axs = plt.subplots(1, len(axes_ids), figsize=(width / 100, height / 100), squeeze=False)
    panel = {a: axs[0][i] for i, a in enumerate(axes_ids)}
    stacked = lay.barmode in ("stack", "relative")
    cats: dict[str, list[Any]] = {}
    for t in fig.data:  # categorical x: one shared position per category and panel
        if t.type == "bar" or (t.x is not None and len(t.x) and isinstance(list(t.x)[0], str)):
            cats.setdefault(t.xaxis or "x", [])
            cats[t.xaxis or "x"] += [v for v in t.x if v not in cats[t.xaxis or "x"]]
    bars = {a: [t for t in fig.data if t.type == "bar" and (t.xaxis or "x") == a] for a in axes_ids}
    bottoms: dict[str, Any] = {}
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, t in enumerate(fig.data):
        a = t.xaxis or "x"
        ax = panel[a]
        x = list(t.x) if t.x is not None else list(range(len(t.y)))
        y = np.array([np.nan if v is None else v for v in t.y], dtype=float)
        pos = np.array([cats[a].index(v) for v in x], dtype=float) if a in cats else np.array(x, dtype=float)
        err = t.error_y.array if t.error_y is not None and t.error_y.array is not None else None
        label = t.name if t.showlegend is not False else None
        color = (t.marker.color if isinstance(t.marker.color, str) else None) or colors[i % len(colors)]
        if t.type == "bar":
            group = bars[a]
            if stacked:
                base = bottoms.setdefault(a, np.zeros(len(cats[a])))
                idx = pos.astype(int)
                ax.bar(pos, y, bottom=base[idx], label=label, color=color, yerr=err)
                base[idx] += np.nan_to_num(y)
            else:
                w = 0.8 / len(group)
                ax.bar(pos - 0.4 + w * (group.index(t) + 0.5), y, width=w, label=label, color=color, yerr=err)
        elif t.type == "scatter":
            mode = t.mode or "lines+markers"
            ax.errorbar(pos, y, yerr=err, label=label, color=color, marker="o" if "markers" in mode else None,
                        linestyle="-" if "lines" in mode else "none", capsize=3 if err is not None else 0)
        else:
            raise ValueError(f"matplotlib_from_plotly: trace type {t.type!r} is not drawn; add it or install Chromium")
    for a, ax in panel.items():
        n = "" if a == "x" else a[1:]
        xa, ya = lay[f"xaxis{n}"], lay[f"yaxis{n}"] if f"yaxis{n}" in lay else lay["yaxis"]
        if a in cats:
            ax.set_xticks(range(len(cats[a])), [str(c) for c in cats[a]], rotation=35 if len(cats[a]) > 3 else 0,
                          ha="right" if len(cats[a]) > 3 else "center", fontsize=8)
        ax.set_xlabel(xa.title.text or "")
        ax.set_ylabel(ya.title.text or "")
        if ya.range is not None:
            ax.set_ylim(*ya.range)
        ax.grid(alpha=0.3)
    for s in lay.shapes or ():
        if s.type == "line" and s.y0 == s.y1:
            for ax in panel.values():
                ax.axhline(s.y0, ls=":", color="gray")
    handles = {lab: h for ax in panel.values() for h, lab in zip(*ax.get_legend_handles_labels())}
    if handles:
        mfig.legend(handles.values(), handles.keys(), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    sub = lay.title.subtitle.text if lay.title.subtitle is not None else None
    mfig.suptitle((lay.title.text or "") + (f"\n{sub}" if sub else ""), wrap=True)
    mfig.tight_layout()
    return mfig


def screenshot_html(html: str | Path, out_png: str | Path, *, size: tuple[int, int] = (1200, 900),
                    budget_ms: int = 5000, timeout_s: float = 60.0) -> Path:
    """Open ``html`` in headless Chromium (no network needed) and save a screenshot to ``out_png``.
    Raises ``FileNotFoundError`` without a Chromium binary, ``RuntimeError`` when no screenshot came."""
    exe = chromium_path()
    if exe is None:
        raise FileNotFoundError("no chromium / google-chrome binary (Debian: apt-get install chromium)")
    out_png = Path(out_png).resolve()
    out_png.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as profile:  # a fresh profile: parallel runs do not share a lock
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={profile}",
               f"--screenshot={out_png}", f"--window-size={size[0]},{size[1]}", f"--virtual-time-budget={budget_ms}",
               Path(html).resolve().as_uri()]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if not out_png.exists():
        raise RuntimeError(f"chromium wrote no screenshot (rc={r.returncode}): {r.stderr[-500:]}")
    return out_png


def screenshot_figures(htmls: list[Path], out_png: str | Path, *, cell: tuple[int, int] = (640, 420),
                       cols: int = 2) -> list[float]:
    """Open every HTML figure of ``htmls`` at once (one Chromium launch: an ``<iframe>`` grid of
    ``cols`` columns, each ``cell`` CSS pixels) and return the pixel std of each figure's cell, in order;
    a blank figure reads < :data:`BLANK_STD`. Errors as :func:`screenshot_html`."""
    import numpy as np
    from PIL import Image

    htmls = [Path(h).resolve() for h in htmls]
    if not htmls:
        return []
    rows = -(-len(htmls) // cols)
    w, h = cell
    frames = "".join(f'<iframe src="{p.as_uri()}" style="position:absolute;left:{(i % cols) * w}px;top:{(i // cols) * h}px;'
                     f'width:{w}px;height:{h}px;border:0"></iframe>' for i, p in enumerate(htmls))
    with tempfile.TemporaryDirectory() as d:
        grid = Path(d) / "grid.html"
        grid.write_text(f"<!doctype html><html><body style='margin:0;background:#fff'>{frames}</body></html>")
        shot = screenshot_html(grid, out_png, size=(cols * w, rows * h))
    with Image.open(shot) as im:
        grey = np.asarray(im.convert("L"), dtype=float)
    return [float(grey[(i // cols) * h + 4:(i // cols + 1) * h - 4, (i % cols) * w + 4:(i % cols + 1) * w - 4].std())
            for i in range(len(htmls))]


def pixel_std(png: str | Path) -> float:
    """Standard deviation of the grey levels (0-255) of an image: ~0 for a blank page."""
    import numpy as np
    from PIL import Image

    with Image.open(png) as im:
        return float(np.asarray(im.convert("L"), dtype=float).std())
