"""Static run viewer (issue 18 part 1, docs/viewer.md): ``python -m kit.cli view RUN_DIR [OTHER_RUN_DIR]``.

:func:`build_site` writes an index with filters, one page per episode and comparison pages, all opening
from disk with no network; :func:`load_run` reads a run folder; :mod:`kit.view.inspect_export` writes an
inspect_ai eval log so ``inspect view`` opens a kit run.
"""

from kit.view.compare import Pair, compare_configurations, compare_runs
from kit.view.load import Item, Run, Skipped, ViewError, load_run
from kit.view.site import build_site

__all__ = ["Item", "Pair", "Run", "Skipped", "ViewError", "build_site", "compare_configurations", "compare_runs",
           "load_run"]
