"""Progress bars on the kit's long loops (rollout groups, training steps, index builds, evaluation items).

:func:`progress` is ``tqdm.auto.tqdm`` (a widget in JupyterLab when ipywidgets is installed, text
elsewhere) with a refresh interval by where it runs: a notebook kernel or a terminal refreshes often;
a headless run (papermill's log, CI, a pipe) still shows the bar, but at most every
:data:`HEADLESS_MININTERVAL_S` seconds so logs stay short. ``KIT_PROGRESS=0`` turns the bars off.
"""

from __future__ import annotations

import os
import sys
from typing import Any

HEADLESS_MININTERVAL_S = 5.0  # seconds between refreshes where nobody watches a terminal


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def headless() -> bool:
    """True when neither a notebook kernel nor a terminal shows the bar (papermill logs, CI, pipes).
    A papermill run executes in a kernel too: ``python -m kit.cli run`` sets ``KIT_HEADLESS=1`` for it."""
    if os.environ.get("KIT_HEADLESS") == "1":
        return True
    if _in_notebook():
        return False
    return not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty())


def progress(iterable=None, *, total: int | None = None, desc: str | None = None, unit: str = "it",
             **kw: Any):
    """A ``tqdm.auto`` bar over ``iterable`` (or a manual one: ``total`` and ``.update(n)``).

    ``mininterval`` defaults to :data:`HEADLESS_MININTERVAL_S` in headless runs, else 0.5 s; ``leave``
    defaults to True. Extra keyword arguments go to tqdm.
    """
    from tqdm.auto import tqdm

    kw.setdefault("mininterval", HEADLESS_MININTERVAL_S if headless() else 0.5)
    kw.setdefault("leave", True)
    kw.setdefault("disable", os.environ.get("KIT_PROGRESS", "1") == "0")
    return tqdm(iterable, total=total, desc=desc, unit=unit, **kw)
