"""Progress bars on the kit's long loops (rollout groups, training steps, index builds, evaluation items).

:func:`progress` is ``tqdm.auto.tqdm`` (a widget in JupyterLab when ipywidgets is installed, text
elsewhere) with a refresh interval by where it runs: a notebook kernel or a terminal refreshes often;
a headless run (papermill's log, CI, a pipe) still shows the bar, but at most every
:data:`HEADLESS_MININTERVAL_S` seconds so logs stay short. ``KIT_PROGRESS=0`` turns the bars off.
:func:`use_kit_progress` gives a ``transformers.Trainer`` (TRL's ``SFTTrainer``) the same bars.

A headless notebook run (papermill, ``KIT_HEADLESS=1`` in a kernel; issue 29 part 6) saves its outputs for
later readers, and an ipywidgets bar is saved as its first state ("0% 0/16": the widget's later state is not
in the file). There every ``tqdm.auto`` bar, the kit's and those of transformers, huggingface_hub and
datasets alike, is text instead (:func:`install_headless_text_bars`, run when this module is imported in such
a kernel): one ``text/plain`` display output per bar, updated in place (``update_display_data``), so the
saved notebook holds one line per bar, its final state ("16/16"), readable in JupyterLab, nbviewer and
GitHub's preview. Interactive kernels keep the widgets.
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


class _DisplayLine:
    """A write-only text file for a tqdm bar in a notebook kernel: each redraw (``"\\r" + line``) replaces
    the text of one ``text/plain`` display output (created at the first redraw), so the executed notebook
    keeps only the bar's latest line; writes without a ``"\\r"`` (the closing newline, cursor moves of
    nested bars) change nothing."""

    encoding = "utf-8"  # tqdm draws the bar with block characters, not "#"

    def __init__(self):
        self._handle = None
        self._text: str | None = None

    def write(self, s: str) -> int:
        if "\r" not in s:
            return len(s)
        line = s.rsplit("\r", 1)[-1].split("\n", 1)[0].split("\x1b", 1)[0].rstrip()
        if line != self._text:
            self._text = line
            from IPython.display import display

            data = {"text/plain": line}
            if self._handle is None:
                self._handle = display(data, raw=True, display_id=True)
            else:
                self._handle.update(data, raw=True)
        return len(s)

    def flush(self) -> None:
        pass

    @property
    def text(self) -> str | None:
        """The line shown now (None before the first redraw)."""
        return self._text


def _text_bar_class():
    """``tqdm.std.tqdm`` drawing into a :class:`_DisplayLine` (unless given another file than the standard
    streams), refreshing at most every :data:`HEADLESS_MININTERVAL_S` seconds unless told otherwise."""
    from tqdm.std import tqdm as std_tqdm

    class KitTextBar(std_tqdm):
        def __init__(self, *args, **kwargs):
            if kwargs.get("file") in (None, sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__):
                kwargs["file"] = _DisplayLine()
            kwargs.setdefault("mininterval", HEADLESS_MININTERVAL_S)
            kwargs.pop("position", None)  # each bar has its own output: no cursor moves between bars
            super().__init__(*args, **kwargs)

    return KitTextBar


_SAVED_BASES: tuple | None = None  # tqdm.auto.tqdm's own bases while the text bars are installed


def install_headless_text_bars() -> bool:
    """Make every ``tqdm.auto`` bar of this kernel text (:class:`_DisplayLine`) instead of a widget; returns
    whether the bars are text now. Does nothing outside a notebook kernel or where ``tqdm.auto`` is text
    already (no ipywidgets).

    ``tqdm.auto.tqdm`` is, in a kernel, a class over ``(tqdm.notebook.tqdm, tqdm.asyncio.tqdm)``; libraries
    bind it at import (huggingface_hub's and datasets' ``tqdm`` subclass it, transformers looks it up per
    bar), so its bases are swapped for ``(KitTextBar, tqdm.asyncio.tqdm)`` in place: every bar made after
    this call is text, whichever module was imported first. :func:`uninstall_headless_text_bars` undoes it.
    """
    global _SAVED_BASES
    if not _in_notebook():
        return False
    import tqdm.asyncio
    import tqdm.auto
    import tqdm.notebook

    auto = tqdm.auto.tqdm
    if _SAVED_BASES is not None:
        return True
    if tqdm.notebook.tqdm not in auto.__bases__:
        return False  # tqdm.auto is tqdm.asyncio.tqdm here (no ipywidgets): a text bar on stderr already
    _SAVED_BASES = auto.__bases__
    auto.__bases__ = (_text_bar_class(), tqdm.asyncio.tqdm)
    return True


def uninstall_headless_text_bars() -> None:
    """Give ``tqdm.auto.tqdm`` its widget bases back (undoes :func:`install_headless_text_bars`)."""
    global _SAVED_BASES
    if _SAVED_BASES is not None:
        import tqdm.auto

        tqdm.auto.tqdm.__bases__ = _SAVED_BASES
        _SAVED_BASES = None


def _install_if_headless_kernel() -> None:
    if os.environ.get("KIT_HEADLESS") == "1" and _in_notebook():
        install_headless_text_bars()


def progress(iterable=None, *, total: int | None = None, desc: str | None = None, unit: str = "it",
             **kw: Any):
    """A ``tqdm.auto`` bar over ``iterable`` (or a manual one: ``total`` and ``.update(n)``).

    ``mininterval`` defaults to :data:`HEADLESS_MININTERVAL_S` in headless runs, else 0.5 s; ``leave``
    defaults to True. Extra keyword arguments go to tqdm.
    """
    _install_if_headless_kernel()  # a papermill kernel: text saved in the notebook, not a frozen widget
    from tqdm.auto import tqdm

    kw.setdefault("mininterval", HEADLESS_MININTERVAL_S if headless() else 0.5)
    kw.setdefault("leave", True)
    kw.setdefault("disable", os.environ.get("KIT_PROGRESS", "1") == "0")
    return tqdm(iterable, total=total, desc=desc, unit=unit, **kw)


def trainer_progress_callback():
    """A ``transformers.ProgressCallback`` whose step and evaluation bars come from :func:`progress`
    (so TRL's ``SFTTrainer`` bar is a widget in JupyterLab and sparse in headless logs).

    Upstream's callback refreshes every 0.1 s (a line per step in a log) and writes each log row with
    ``tqdm.write``, which redraws the bar. Here the latest ``loss`` / ``learning_rate`` / ``grad_norm`` ride
    on the bar's postfix (shown at the next refresh); the rows themselves are printed only where someone
    watches (notebook or terminal) — headless, they are in ``trainer.state.log_history`` and the tracker.
    Built lazily: importing transformers takes seconds.
    """
    from transformers.trainer_callback import ProgressCallback
    from transformers.trainer_utils import has_length

    class KitProgressCallback(ProgressCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                self.training_bar = progress(total=state.max_steps, desc="train", unit="step")
            self.current_step = 0

        def on_prediction_step(self, args, state, control, eval_dataloader=None, **kwargs):
            if state.is_world_process_zero and has_length(eval_dataloader):
                if self.prediction_bar is None:
                    self.prediction_bar = progress(total=len(eval_dataloader), desc="eval", unit="batch",
                                                   leave=self.training_bar is None)
                self.prediction_bar.update(1)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not (state.is_world_process_zero and self.training_bar is not None and logs):
                return
            shown = {k: f"{v:.4g}" for k, v in logs.items()
                     if k in ("loss", "learning_rate", "grad_norm", "eval_loss") and isinstance(v, float)}
            if shown:
                self.training_bar.set_postfix(shown, refresh=False)  # no redraw: the next sparse refresh shows it
            if not headless():
                super().on_log(args, state, control, logs=logs, **kwargs)

    return KitProgressCallback()


def use_kit_progress(trainer) -> None:
    """Swap a ``transformers.Trainer``'s progress callback (``ProgressCallback`` or, when transformers was
    imported inside a notebook kernel, ``NotebookProgressCallback``) for :func:`trainer_progress_callback`.
    Does nothing when the trainer has no bar (``disable_tqdm=True`` uses ``PrinterCallback``)."""
    from transformers.trainer_callback import ProgressCallback

    names = {"ProgressCallback", "NotebookProgressCallback"}
    olds = [cb for cb in trainer.callback_handler.callbacks
            if isinstance(cb, ProgressCallback) or type(cb).__name__ in names]
    for cb in olds:
        trainer.remove_callback(cb)
    if olds:
        trainer.add_callback(trainer_progress_callback())


_install_if_headless_kernel()  # at import too: third-party bars made before the kit's first bar
