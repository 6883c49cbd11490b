"""Progress bars on the kit's long loops (rollout groups, training steps, index builds, evaluation items).

:func:`progress` is ``tqdm.auto.tqdm`` (a widget in JupyterLab when ipywidgets is installed, text
elsewhere) with a refresh interval by where it runs: a notebook kernel or a terminal refreshes often;
a headless run (papermill's log, CI, a pipe) still shows the bar, but at most every
:data:`HEADLESS_MININTERVAL_S` seconds so logs stay short. ``KIT_PROGRESS=0`` turns the bars off.
:func:`use_kit_progress` gives a ``transformers.Trainer`` (TRL's ``SFTTrainer``) the same bars.
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
