"""The viewer site of a whole sequence run (issue 18 part 1: "the committed smoke results include the rendered
view"): ``kit.cli sequence`` ends by building ``results/<run>/view/`` over every ``episodes.jsonl`` of the run.

Images are stored small (:data:`RUN_VIEW_IMAGE_MAX_SIDE`) because the site of the smoke run is committed.
The same site by hand: ``python -m kit.cli view results/<run> -o results/<run>/view --image-max-side 192``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kit.view.load import ViewError
from kit.view.site import build_site

# kit: measured on results/smoke (253 episode pages, 210 images): 1024 px -> 16.1 MB, 384 -> 13.5 MB,
# 256 -> 11.8 MB, 192 -> 7.3 MB (the pages alone are 5.4 MB); the pages show images at <= 300 px
RUN_VIEW_IMAGE_MAX_SIDE = 192
VIEW_DIR = "view"


def build_run_view(run_dir: str | Path, *, image_max_side: int = RUN_VIEW_IMAGE_MAX_SIDE,
                   echo: Callable[[str], None] = print) -> Path | None:
    """Build the viewer over every episode of ``run_dir`` into ``run_dir/view/`` and return its ``index.html``.

    A run without any ``episodes.jsonl`` (a sequence of notebooks that wrote none) has no
    view: that is said through ``echo`` and ``None`` is returned, so the sequence still finishes.

    Raises:
        ValueError: ``run_dir/view`` exists, is not empty and is not a viewer site (never deleted).
        kit.view.load.ViewError: ``run_dir`` is missing or not a folder.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ViewError(f"run folder {str(run_dir)!r} does not exist or is not a folder")
    try:
        index = build_site([run_dir], run_dir / VIEW_DIR, title=f"Run viewer: {run_dir.name}",
                           image_max_side=image_max_side)
    except ViewError as e:  # nothing to show (no episodes.jsonl): said, not fatal for the finished run
        echo(f"view: no viewer site for {run_dir} ({e})")
        return None
    echo(f"view: {index} (every episode of the run; open it in a browser, no server needed)")
    return index


__all__ = ["RUN_VIEW_IMAGE_MAX_SIDE", "VIEW_DIR", "build_run_view"]
