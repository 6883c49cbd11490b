"""Experiment tracking for the SFT and RL trainers and the evaluation notebook (issue 18, part 3).

One :class:`Tracker` with four back ends, chosen by ``report_to``:

* ``"none"`` (default): nothing is written (``metrics.jsonl`` stays the record);
* ``"tensorboard"``: event files in ``log_dir`` (``torch.utils.tensorboard.SummaryWriter``; the
  ``tensorboard`` package is a dependency of the kit), ``tensorboard --logdir RUN/tracking``;
* ``"trackio"``: a local trackio project, one SQLite file ``log_dir/<project>.db`` (trackio's storage
  is pointed at ``log_dir`` for each tracker, whatever ``TRACKIO_DIR`` says; no dashboard is launched,
  nothing leaves the machine unless ``TRACKIO_SPACE_ID`` / ``TRACKIO_SERVER_URL`` ask for it);
  ``TRACKIO_DIR=RUN/tracking trackio show``; optional, ``pip install trackio``;
* ``"wandb"``: a Weights & Biases run in ``log_dir/wandb``; ``WANDB_MODE`` is read for each tracker
  (``offline``: the ``.wandb`` transaction log only, no login, no network; ``wandb sync`` uploads it
  later); every row carries ``step`` and is plotted against it (``define_metric``), so a step logged
  twice or out of order (a resumed run) is kept, not dropped; ``pip install wandb`` (``make setup``
  installs it: the test reads the offline run back).

The optional packages are imported only when chosen; a missing one raises
:class:`TrackingUnavailable` naming the pip command. A back end that cannot start (no W&B login, a bad
mode, an unwritable folder) raises :class:`TrackingError` when the tracker is made, i.e. before the
first training step; a write that fails later warns (:class:`TrackingWarning`), is counted in
``Tracker.failed_logs`` and training goes on (``metrics.jsonl`` stays the record).

What is logged is exactly a ``metrics.jsonl`` row, flattened by :func:`flatten_metrics`: every number
(bools as 0/1; NaN kept; ``null`` as NaN) becomes a scalar named by
its key path (``exclusions/overlong``, ``groups/train_groups``, ``recovery/forced_final_answer/triggered``)
under the row's own ``step``; every string (``stage``, ``kind``, ``skipped``) becomes text at that step.
A top-level key whose first word repeats (``rollout_rollout_s``, the trainer's ``rollout_`` prefix on the
rollout summary's ``rollout_s``) is tagged once (``rollout_s``), unless that tag is taken in the row;
``metrics.jsonl`` keeps its keys. Beside the ``stage`` text, the tracker logs a ``stage_index`` scalar
(0, 1, 2.. in schedule order) so stage changes show on the curves. TensorBoard event files go in
``log_dir/<run name>``, so ``tensorboard --logdir RUN/tracking`` lists the run by name (not ``.``).
"""

from __future__ import annotations

import json
import math
import numbers
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

BACKENDS = ("none", "tensorboard", "trackio", "wandb")
_PIP = {"tensorboard": "pip install tensorboard",
        "trackio": "pip install trackio (or pip install -e '.[tracking]')",
        "wandb": "pip install wandb (or pip install -e '.[tracking]')"}
_HINT = {"wandb": "set WANDB_MODE=offline to log without a login or network (wandb sync uploads it later), "
                  "or run `wandb login`",
         "trackio": "check that log_dir is writable; unset TRACKIO_SPACE_ID / TRACKIO_SERVER_URL for a local run",
         "tensorboard": "check that log_dir is writable"}


class TrackingUnavailable(ImportError):
    """The chosen tracking back end is not installed; the message names the pip command."""


class TrackingError(RuntimeError):
    """The chosen back end is installed but cannot start (raised by :class:`Tracker` before training)."""


class TrackingWarning(UserWarning):
    """A log write failed after the tracker started; training goes on, ``metrics.jsonl`` keeps the row."""


def check_report_to(report_to: str | None) -> str:
    """``report_to`` normalised (``None`` -> ``"none"``). Raises ValueError for an unknown back end."""
    name = "none" if report_to in (None, "") else str(report_to).lower()
    if name not in BACKENDS:
        raise ValueError(f"report_to must be one of {BACKENDS}, got {report_to!r}")
    return name


# WANDB_MODE values under which wandb.init needs no login (wandb's own names; "dryrun" is its old "offline")
WANDB_NO_LOGIN_MODES = ("offline", "disabled", "dryrun")
WANDB_HOST = "api.wandb.ai"


def _wandb_key_available() -> bool:
    """True when W&B would find an API key without asking: ``WANDB_API_KEY`` or a netrc entry for the
    W&B host (``WANDB_BASE_URL``'s host, default ``api.wandb.ai``; the netrc file is ``NETRC`` or ``~/.netrc``)."""
    import netrc
    from urllib.parse import urlparse

    if os.environ.get("WANDB_API_KEY", "").strip():
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL") or f"https://{WANDB_HOST}").hostname or WANDB_HOST
    try:
        auth = netrc.netrc(os.environ.get("NETRC") or None).authenticators(host)
    except (OSError, netrc.NetrcParseError):  # no netrc file, or an unreadable one: no key from it
        return False
    return bool(auth and auth[2])


def report_to_problem(report_to: str | None) -> str | None:
    """One line saying why ``report_to`` cannot start in this environment, or ``None`` when it can;
    checked without importing the back end (``importlib.util.find_spec``) and without network, so
    :func:`kit.cli_params.check_combinations` can refuse a run before any notebook kernel starts, and
    :class:`Tracker` refuses with the same words before the first step.

    * an unknown back end (:func:`check_report_to`'s message);
    * ``tensorboard`` / ``trackio`` / ``wandb`` whose package is not importable (names the pip command);
    * ``wandb`` online (``WANDB_MODE`` not one of :data:`WANDB_NO_LOGIN_MODES`) with no API key
      (:func:`_wandb_key_available`): wandb.init would prompt for a login inside the kernel or fail.
    """
    import importlib.util

    try:
        name = check_report_to(report_to)
    except ValueError as e:
        return str(e)
    if name == "none":
        return None
    module = "torch.utils.tensorboard" if name == "tensorboard" else name
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module set to None in sys.modules
        found = False
    if not found:
        return f"report_to={name!r} needs {name}, which is not installed: {_PIP[name]}"
    if name == "wandb":
        mode = (os.environ.get("WANDB_MODE") or "online").strip().lower()
        if mode not in WANDB_NO_LOGIN_MODES and not _wandb_key_available():
            return (f"report_to='wandb' runs online (WANDB_MODE={mode!r}) but no W&B API key is available "
                    f"(WANDB_API_KEY, or a netrc entry for {WANDB_HOST}): {_HINT['wandb']}")
    return None


def _key_of(row: Mapping[str, Any]) -> str | None:
    """The name of a list element such as ``{"mechanism": "overlong_retry", ...}``: its first text value."""
    return next((v for v in row.values() if isinstance(v, str)), None)


def _undouble(key: str, row: Mapping[str, Any]) -> str:
    """``rollout_rollout_s`` -> ``rollout_s`` (a prefix added to a key that already starts with it); the
    key itself when its first two ``_`` words differ or the shorter tag is another key of ``row``."""
    words = key.split("_")
    short = "_".join(words[1:])
    if len(words) > 2 and words[0] and words[0] == words[1] and short not in row:
        return short
    return key


def flatten_metrics(m: Mapping[str, Any], prefix: str = "") -> tuple[dict[str, float], dict[str, str]]:
    """Split a metrics row into ``(scalars, texts)`` keyed by ``/``-joined key paths.

    Nested dicts recurse; a list of dicts is keyed by each element's first text value (``recovery`` rows
    by ``mechanism``; by index when an element has none or names repeat); a list of numbers by index.
    ``None`` (``null``, e.g. a retention rate with no trigger) becomes NaN; the key ``step`` is left out
    (it is the step); a top-level key with a doubled first word is tagged once (:func:`_undouble`); an
    int too large for a float (``10**400``) becomes its decimal text. Anything else
    (a list of texts) is written as JSON text, never dropped.
    """
    scalars: dict[str, float] = {}
    texts: dict[str, str] = {}
    for k, v in m.items():
        key = f"{prefix}{k}" if prefix else _undouble(str(k), m)
        if not prefix and k == "step":
            continue
        if isinstance(v, bool):
            scalars[key] = float(v)
        elif isinstance(v, numbers.Real):  # numpy numbers too (pandas rows)
            try:
                scalars[key] = float(v)
            except OverflowError:  # an int past float's range (10**400): kept exactly, as text
                texts[key] = str(v)
        elif v is None:
            scalars[key] = math.nan
        elif isinstance(v, str):
            texts[key] = v
        elif isinstance(v, Mapping):
            s, t = flatten_metrics(v, key + "/")
            scalars.update(s)
            texts.update(t)
        elif isinstance(v, Sequence) and v and all(isinstance(x, Mapping) for x in v):
            names = [_key_of(x) for x in v]
            unique = None not in names and len(set(names)) == len(names)
            for i, x in enumerate(v):
                sub = {a: b for a, b in x.items() if not (unique and b == names[i])}
                s, t = flatten_metrics(sub, f"{key}/{names[i] if unique else i}/")
                scalars.update(s)
                texts.update(t)
        elif isinstance(v, Sequence) and all(isinstance(x, numbers.Real) and not isinstance(x, bool) for x in v):
            s, t = flatten_metrics({str(i): x for i, x in enumerate(v)}, key + "/")  # same overflow rule
            scalars.update(s)
            texts.update(t)
        else:
            texts[key] = json.dumps(v, default=str)
    return scalars, texts


class Tracker:
    """Logs metrics rows to the chosen back end (see module docstring).

    Args:
        report_to: ``"none"`` | ``"tensorboard"`` | ``"trackio"`` | ``"wandb"``.
        log_dir: where the back end writes (the run's output folder, e.g. ``RUN/tracking``); required
            unless ``report_to="none"``.
        project: trackio / W&B project name.
        run_name: run name (default: the log folder's parent name); TensorBoard writes into
            ``log_dir/<run_name>`` so its run list shows this name.
        stages: stage names in schedule order (``stage_index`` = position of the row's ``stage``); a stage
            not listed (or no list) is numbered in order of first appearance after the listed ones.
        config: run settings (W&B / trackio config; TensorBoard text ``config``).

    Raises:
        ValueError: an unknown back end, or no ``log_dir``.
        TrackingUnavailable: the back end's package is not installed (the message names the pip command).
        TrackingError: the back end cannot start (e.g. ``wandb.init`` without a login and not
            ``WANDB_MODE=offline``); raised here, so a trainer fails before its first step.
    """

    def __init__(self, report_to: str | None = "none", log_dir: str | Path | None = None, *,
                 project: str = "mmsearch-kit", run_name: str | None = None, config: Mapping[str, Any] | None = None,
                 stages: Sequence[str] = ()):
        self.backend = check_report_to(report_to)
        self.stage_order: dict[str, int] = {}
        for st in stages:
            self.stage_order.setdefault(str(st), len(self.stage_order))
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self._w: Any = None
        self.project = project
        self.failed_logs = 0  # writes that raised after the start (warned once per error type)
        self._warned: set[str] = set()
        if self.backend == "none":
            return
        if self.log_dir is None:
            raise ValueError(f"report_to={self.backend!r} needs a log_dir (inside the run's output folder)")
        name = run_name or self.log_dir.resolve().parent.name
        self.run_name = name
        cfg = json.loads(json.dumps(dict(config or {}), default=str))
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self._w = self._start(name, cfg)
        except (TrackingUnavailable, TrackingError):
            raise
        except Exception as e:  # any start failure: one clear error before the first step, not mid-training
            raise TrackingError(f"report_to={self.backend!r} could not start in {self.log_dir}: "
                                f"{type(e).__name__}: {e} ({_HINT[self.backend]})") from e

    def _start(self, name: str, cfg: dict[str, Any]) -> Any:
        """The back end's writer / run (raises what the back end raises)."""
        assert self.log_dir is not None
        if self.backend == "tensorboard":
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:
                raise TrackingUnavailable(f"report_to='tensorboard' needs TensorBoard: {_PIP['tensorboard']}") from e
            # a named subfolder: TensorBoard names a run by its folder under --logdir ("." at the root)
            w = SummaryWriter(log_dir=str(self.log_dir / tensorboard_run_dir(name)))
            if cfg:
                w.add_text("config", "```\n" + json.dumps(cfg, indent=1) + "\n```", 0)
            return w
        if self.backend == "trackio":
            trackio = trackio_at(self.log_dir)
            # embed=False: no local dashboard server inside a (papermill) notebook kernel
            return trackio.init(project=self.project, name=name, config=cfg, embed=False)
        try:
            import wandb
        except ImportError as e:
            raise TrackingUnavailable(f"report_to='wandb' needs wandb: {_PIP['wandb']}") from e
        problem = report_to_problem("wandb")  # online with no key: wandb.init would prompt in a kernel
        if problem:
            raise TrackingError(f"report_to='wandb' could not start in {self.log_dir}: {problem}")
        # mode read per tracker: wandb's settings singleton would keep the first run's environment
        mode: Any = os.environ.get("WANDB_MODE") or None  # wandb validates it (a bad one: TrackingError)
        run = wandb.init(project=self.project, name=name, dir=str(self.log_dir), config=cfg, mode=mode,
                         reinit="create_new")
        # x axis = the row's own step, so a repeated or earlier step (a resume) is kept: wandb drops
        # a history row whose step= is below the last one
        run.define_metric("step")
        run.define_metric("*", step_metric="step")
        return run

    @property
    def active(self) -> bool:
        return self._w is not None

    def log(self, metrics: Mapping[str, Any], step: int) -> dict[str, float]:
        """Log one metrics row at ``step`` (the row's own ``step`` in the trainers). Returns the scalars
        written (empty for ``"none"``, or when the write failed: warned and counted in ``failed_logs``).

        Raises:
            ValueError: ``step`` is not a non-negative int (``1.5``, ``"3"``, ``-1``, ``True``), for every back end.
        """
        if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
            raise ValueError(f"Tracker.log needs a non-negative int step, got {step!r} ({type(step).__name__})")
        step = int(step)
        if self._w is None:
            return {}
        scalars: dict[str, float] = {}
        try:  # flattening too: a row the back end cannot take warns, it never stops training
            scalars, texts = flatten_metrics(metrics)
            if isinstance(texts.get("stage"), str) and "stage_index" not in scalars:
                scalars["stage_index"] = float(self.stage_order.setdefault(texts["stage"], len(self.stage_order)))
            if self.backend == "tensorboard":
                for k, v in scalars.items():
                    self._w.add_scalar(k, v, step)
                for k, t in texts.items():
                    self._w.add_text(k, t, step)
            elif self.backend == "wandb":  # one history row per call, its step as a value (define_metric)
                self._w.log({**scalars, **texts, "step": step})
            else:  # trackio: one row per call at step (text as text)
                self._w.log({**scalars, **texts}, step=step)
        except Exception as e:
            self._failed("log", step, e)
        return scalars

    def _failed(self, what: str, step: int, e: Exception) -> None:
        self.failed_logs += 1
        if type(e).__name__ not in self._warned:
            self._warned.add(type(e).__name__)
            warnings.warn(f"report_to={self.backend!r}: {what} at step {step} failed ({type(e).__name__}: {e}); "
                          "training goes on, metrics.jsonl keeps the row", TrackingWarning, stacklevel=3)

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]], *, step: int = 0,
                  index: Sequence[str] = ()) -> None:
        """Log a results table: as a table (W&B / trackio) or markdown text (TensorBoard), plus every
        numeric cell as a scalar ``name/<index values>/<column>`` (``index``: the columns naming a row,
        e.g. ``("benchmark", "config")``)."""
        if self._w is None:
            return
        rows = [dict(r) for r in rows]
        cols = list(dict.fromkeys(c for r in rows for c in r))
        scalars: dict[str, float] = {}
        for i, r in enumerate(rows):
            head = "/".join(str(r.get(c)) for c in index) if index else str(i)
            s, _ = flatten_metrics({c: v for c, v in r.items() if c not in index and not isinstance(v, str)},
                                   f"{name}/{head}/")
            scalars.update(s)
        if self.backend == "tensorboard":
            md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            md += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
            self._w.add_text(name, "\n".join(md), step)
            for k, v in scalars.items():
                self._w.add_scalar(k, v, step)
            return
        data = [[r.get(c) for c in cols] for r in rows]
        try:
            if self.backend == "wandb":
                import wandb

                self._w.log({name: wandb.Table(columns=list[Any](cols), data=data), **scalars, "step": step})
            else:
                import pandas as pd
                import trackio

                self._w.log({name: trackio.Table(dataframe=pd.DataFrame(data, columns=cols)), **scalars}, step=step)
        except Exception as e:
            self._failed(f"table {name!r}", step, e)

    def flush(self) -> None:
        if self.backend == "tensorboard" and self._w is not None:
            self._w.flush()

    def close(self) -> None:
        """Flush and close (idempotent)."""
        if self._w is None:
            return
        w, self._w = self._w, None
        try:
            w.close() if self.backend == "tensorboard" else w.finish()
        except Exception as e:  # after training: warn, the run's results stand
            self._failed("close", -1, e)

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def tensorboard_run_dir(run_name: str) -> str:
    """The TensorBoard run folder for ``run_name`` (one path part: separators and a leading dot replaced)."""
    part = run_name.replace(os.sep, "_").replace("/", "_").strip() or "run"
    return "_" + part[1:] if part.startswith(".") else part


def trackio_at(log_dir: Path) -> Any:
    """trackio, its local storage pointed at ``log_dir``.

    trackio reads ``TRACKIO_DIR`` once, at import, into module constants (``utils.TRACKIO_DIR``,
    ``MEDIA_DIR``, copies in ``sqlite_storage``...), so a second tracker in the same process would write
    into the first one's folder: every trackio module attribute holding that folder, or a path under it,
    is re-pointed. Raises RuntimeError when the storage still resolves elsewhere (a trackio layout this
    does not know).
    """
    target = log_dir.resolve()
    before = os.environ.get("TRACKIO_DIR")
    os.environ["TRACKIO_DIR"] = str(target)  # a first import starts there
    try:
        import trackio
        import trackio.utils
        from trackio.sqlite_storage import SQLiteStorage
    except ImportError as e:
        raise TrackingUnavailable(f"report_to='trackio' needs trackio: {_PIP['trackio']}") from e
    finally:
        if before is None:
            os.environ.pop("TRACKIO_DIR", None)
        else:
            os.environ["TRACKIO_DIR"] = before
    old = Path(trackio.utils.TRACKIO_DIR)
    if old != target:
        for mod_name, mod in list(sys.modules.items()):
            if mod is None or not (mod_name == "trackio" or mod_name.startswith("trackio.")):
                continue
            for attr, val in list(vars(mod).items()):
                if isinstance(val, Path) and val.is_relative_to(old) and attr.isupper():
                    setattr(mod, attr, target / val.relative_to(old))
    where = SQLiteStorage.get_project_db_path("p").parent
    if where != target:
        raise RuntimeError(f"trackio stores its projects in {where}, not in {target} (unknown trackio layout)")
    return trackio
