"""Screenshots of a results run for the README (issue 18 parts 1-2): the viewer's index, one episode page, one figure.

    python scripts/screenshots.py [--run results/smoke] [--out docs/img] [--episode SUBSTRING] [--figure NB/STEM]

Writes ``viewer_index.png``, ``viewer_episode.png`` and ``figure.png`` into ``--out`` with headless Chromium
(Debian package ``chromium``; kit.figures.screenshot_html), each a palette PNG of at most
:data:`MAX_BYTES` bytes (downscaled until it fits). The viewer is the run's own site (``RUN/view``, built by
``kit.cli sequence``) or, when the run has none, a site built into a temporary folder the same way
(kit.view.run_view). The figure (default ``03_vfold_rendering/tau_k_sweep``) is, in order: the run's committed
PNG of it, a screenshot of its HTML when that renders (not blank), or the figure drawn again from the run's
data (``tau_k_sweep.csv``, kit.vfold.figures) with kit.figures.

Exit status 0 when all three were written; 2 with the reason on stderr (no Chromium, no run, no such episode,
a blank figure that cannot be drawn again).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
from pathlib import Path

from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kit.figures import BLANK_STD, chromium_path, pixel_std, save_figure, screenshot_html  # noqa: E402
from kit.paths import PROJECT_ROOT  # noqa: E402
from kit.view.run_view import RUN_VIEW_IMAGE_MAX_SIDE, VIEW_DIR  # noqa: E402
from kit.view.site import build_site  # noqa: E402

MAX_BYTES = 300_000  # kit: README images stay small (the repository carries them)
SIZE = (1280, 820)  # CSS pixels of the browser window


class ScreenshotError(Exception):
    """A screenshot cannot be made (the reason is the message)."""


def small_png(src: Path | Image.Image, dest: Path, max_bytes: int = MAX_BYTES) -> Path:
    """Write ``src`` as an adaptive-palette PNG of at most ``max_bytes`` bytes, shrinking it by 0.8 until
    it fits; returns ``dest``. Raises :class:`ScreenshotError` when even a 200-px-wide copy is too large."""
    im = (Image.open(src) if isinstance(src, Path) else src).convert("RGB")
    while True:
        buf = io.BytesIO()
        im.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(buf, "PNG", optimize=True)
        if buf.tell() <= max_bytes:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(buf.getvalue())
            return dest
        if im.width < 250:
            raise ScreenshotError(f"{dest.name}: no copy under {max_bytes} bytes")
        im = im.resize((int(im.width * 0.8), int(im.height * 0.8)), Image.Resampling.LANCZOS)


def _shot(html: Path, dest: Path, size: tuple[int, int] = SIZE) -> Path:
    with tempfile.TemporaryDirectory() as d:
        raw = screenshot_html(html, Path(d) / "shot.png", size=size)
        return small_png(raw, dest)


def pick_episode(site: Path, substring: str | None) -> Path:
    """The episode page to show: the first (sorted) whose path contains ``substring``; without one, the page
    of the run's first demonstrator episode (real tool calls and images), else the first page."""
    pages = sorted((site / "episodes").rglob("*.html"))
    if not pages:
        raise ScreenshotError(f"{site} has no episode pages")
    if substring:
        hits = [p for p in pages if substring in p.as_posix()]
        if not hits:
            raise ScreenshotError(f"no episode page of {site} contains {substring!r}")
        return hits[0]
    return next((p for p in pages if "demonstrator" in p.name), pages[0])


def figure_png(run: Path, figure: str, dest: Path) -> tuple[Path, str]:
    """``dest`` from the run's figure ``figure`` (``NB/STEM``); returns (path, how it was made)."""
    stem = run / figure
    png, html = stem.with_suffix(".png"), stem.with_suffix(".html")
    if png.is_file() and pixel_std(png) >= BLANK_STD:
        return small_png(png, dest), f"the committed {png.relative_to(run)}"
    if html.is_file():
        with tempfile.TemporaryDirectory() as d:
            raw = screenshot_html(html, Path(d) / "fig.png", size=(1100, 560))
            if pixel_std(raw) >= BLANK_STD:
                return small_png(raw, dest), f"a screenshot of {html.relative_to(run)}"
    csv = stem.with_suffix(".csv")
    if stem.name == "tau_k_sweep" and csv.is_file():  # blank or missing: draw it again from the run's own table
        import pandas as pd

        from kit.vfold.figures import tau_k_sweep_figure

        manifest = stem.parent / "manifest.json"
        smoke = manifest.is_file() and json.loads(manifest.read_text()).get("config", {}).get("profile") == "smoke"
        with tempfile.TemporaryDirectory() as d:
            files = save_figure(tau_k_sweep_figure(pd.read_csv(csv)), Path(d) / "fig", smoke=smoke)
            return small_png(files.png, dest), f"redrawn from {csv.relative_to(run)} ({files.static_renderer})"
    raise ScreenshotError(f"figure {figure!r} of {run}: no PNG, its HTML renders blank or is missing, and it cannot "
                          "be drawn again from the run's data")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default=str(PROJECT_ROOT / "results" / "smoke"), help="results run folder")
    ap.add_argument("--out", default=str(PROJECT_ROOT / "docs" / "img"), help="folder of the PNGs")
    ap.add_argument("--episode", default=None, help="show the episode page whose path contains this")
    ap.add_argument("--figure", default="03_vfold_rendering/tau_k_sweep", help="NOTEBOOK_FOLDER/FIGURE_STEM")
    args = ap.parse_args(argv)
    run, out = Path(args.run), Path(args.out)
    if chromium_path() is None:
        print("screenshots: no chromium binary (apt-get install chromium; make setup does it as root)", file=sys.stderr)
        return 2
    if not run.is_dir():
        print(f"screenshots: no run folder {run}", file=sys.stderr)
        return 2
    try:
        with tempfile.TemporaryDirectory() as tmp:
            site = run / VIEW_DIR
            if not (site / "index.html").is_file():  # the run has no site of its own yet: build one aside
                index = build_site([run], Path(tmp) / "view", title=f"Run viewer: {run.name}",  # never into the run
                                   image_max_side=RUN_VIEW_IMAGE_MAX_SIDE)
                site = index.parent
            written = [_shot(site / "index.html", out / "viewer_index.png"),
                       _shot(pick_episode(site, args.episode), out / "viewer_episode.png")]
        fig, how = figure_png(run, args.figure, out / "figure.png")
    except (ScreenshotError, FileNotFoundError, RuntimeError, ValueError) as e:
        print(f"screenshots: {e}", file=sys.stderr)
        return 2
    for p in [*written, fig]:
        print(f"screenshots: {p} ({p.stat().st_size // 1000} kB)")
    print(f"screenshots: the figure is {how}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
