"""Experiment tracking for the SFT and RL trainers and the evaluation notebook (issue 18, part 3).

One :class:`Tracker` with four back ends, chosen by ``report_to``:

* ``"none"`` (default): nothing is written (``metrics.jsonl`` stays the record);
* ``"tensorboard"``: event files in ``log_dir`` (``torch.utils.tensorboard.SummaryWriter``; the
  ``tensorboard`` package is a dependency of the kit), ``tensorboard --logdir RUN/tracking``;
* ``"trackio"``: a local trackio project (``TRACKIO_DIR`` defaults to ``log_dir``); optional,
  ``pip install trackio``;
* ``"wandb"``: a Weights & Biases run with ``dir=log_dir`` (``WANDB_MODE=offline`` works without a
  login); optional, ``pip install wandb``.

The optional packages are imported only when chosen; a missing one raises
:class:`TrackingUnavailable` naming the pip command.

What is logged is exactly a ``metrics.jsonl`` row, flattened by :func:`flatten_metrics`: every number
(bools as 0/1; NaN kept; ``null`` as NaN) becomes a scalar named by
its key path (``exclusions/overlong``, ``groups/train_groups``, ``recovery/forced_final_answer/triggered``)
under the row's own ``step``; every string (``stage``, ``kind``, ``skipped``) becomes text at that step.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

BACKENDS = ("none", "tensorboard", "trackio", "wandb")
_PIP = {"tensorboard": "pip install tensorboard",
        "trackio": "pip install trackio (or pip install -e '.[tracking]')",
        "wandb": "pip install wandb (or pip install -e '.[tracking]')"}


class TrackingUnavailable(ImportError):
    """The chosen tracking back end is not installed; the message names the pip command."""


def check_report_to(report_to: str | None) -> str:
    """``report_to`` normalised (``None`` -> ``"none"``). Raises ValueError for an unknown back end."""
    name = "none" if report_to in (None, "") else str(report_to).lower()
    if name not in BACKENDS:
        raise ValueError(f"report_to must be one of {BACKENDS}, got {report_to!r}")
    return name


def _key_of(row: Mapping[str, Any]) -> str | None:
    """The name of a list element such as ``{"mechanism": "overlong_retry", ...}``: its first text value."""
    return next((v for v in row.values() if isinstance(v, str)), None)


def flatten_metrics(m: Mapping[str, Any], prefix: str = "") -> tuple[dict[str, float], dict[str, str]]:
    """Split a metrics row into ``(scalars, texts)`` keyed by ``/``-joined key paths.

    Nested dicts recurse; a list of dicts is keyed by each element's first text value (``recovery`` rows
    by ``mechanism``; by index when an element has none or names repeat); a list of numbers by index.
    ``None`` (``null``, e.g. a retention rate with no trigger) becomes NaN; the key ``step`` is left out
    (it is the step). Anything else (a list of texts) is written as JSON text, never dropped.
    """
    scalars: dict[str, float] = {}
    texts: dict[str, str] = {}
    for k, v in m.items():
        key = f"{prefix}{k}"
        if not prefix and k == "step":
            continue
        if isinstance(v, bool):
            scalars[key] = float(v)
        elif isinstance(v, numbers.Real):  # numpy numbers too (pandas rows)
            scalars[key] = float(v)
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
            scalars.update({f"{key}/{i}": float(x) for i, x in enumerate(v)})
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
        run_name: run name (default: the log folder's parent name).
        config: run settings (W&B / trackio config; TensorBoard text ``config``).

    Raises:
        ValueError: an unknown back end, or no ``log_dir``.
        TrackingUnavailable: the back end's package is not installed (the message names the pip command).
    """

    def __init__(self, report_to: str | None = "none", log_dir: str | Path | None = None, *,
                 project: str = "mmsearch-kit", run_name: str | None = None, config: Mapping[str, Any] | None = None):
        self.backend = check_report_to(report_to)
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self._w: Any = None
        if self.backend == "none":
            return
        if self.log_dir is None:
            raise ValueError(f"report_to={self.backend!r} needs a log_dir (inside the run's output folder)")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        name = run_name or self.log_dir.resolve().parent.name
        cfg = json.loads(json.dumps(dict(config or {}), default=str))
        if self.backend == "tensorboard":
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:
                raise TrackingUnavailable(f"report_to='tensorboard' needs TensorBoard: {_PIP['tensorboard']}") from e
            self._w = SummaryWriter(log_dir=str(self.log_dir))
            if cfg:
                self._w.add_text("config", "```\n" + json.dumps(cfg, indent=1) + "\n```", 0)
        elif self.backend == "trackio":
            os.environ.setdefault("TRACKIO_DIR", str(self.log_dir))  # read when trackio is first imported
            try:
                import trackio
            except ImportError as e:
                raise TrackingUnavailable(f"report_to='trackio' needs trackio: {_PIP['trackio']}") from e
            trackio.init(project=project, name=name, config=cfg)
            self._w = trackio  # its module-level log/finish act on the run init started
        else:
            try:
                import wandb
            except ImportError as e:
                raise TrackingUnavailable(f"report_to='wandb' needs wandb: {_PIP['wandb']}") from e
            self._w = wandb.init(project=project, name=name, dir=str(self.log_dir), config=cfg)

    @property
    def active(self) -> bool:
        return self._w is not None

    def log(self, metrics: Mapping[str, Any], step: int) -> dict[str, float]:
        """Log one metrics row at ``step`` (the row's own ``step`` in the trainers). Returns the scalars
        written (empty for ``"none"``)."""
        if self._w is None:
            return {}
        scalars, texts = flatten_metrics(metrics)
        if self.backend == "tensorboard":
            for k, v in scalars.items():
                self._w.add_scalar(k, v, step)
            for k, t in texts.items():
                self._w.add_text(k, t, step)
        else:  # trackio and W&B take one dict per step; text goes in as text
            self._w.log({**scalars, **texts}, step=step)
        return scalars

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
        if self.backend == "wandb":
            import wandb

            self._w.log({name: wandb.Table(columns=cols, data=data), **scalars}, step=step)
        else:
            import pandas as pd
            import trackio

            self._w.log({name: trackio.Table(dataframe=pd.DataFrame(data, columns=cols)), **scalars}, step=step)

    def flush(self) -> None:
        if self.backend == "tensorboard" and self._w is not None:
            self._w.flush()

    def close(self) -> None:
        """Flush and close (idempotent)."""
        if self._w is None:
            return
        if self.backend == "tensorboard":
            self._w.close()
        else:
            self._w.finish()
        self._w = None

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
