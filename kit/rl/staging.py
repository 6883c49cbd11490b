"""Long-MDR staging: OPD warmup, progressive horizon expansion, entropy-triggered rescue, run log.

Long-MDR (arXiv 2610.05195; only its abstract is public, see ``LONG_MDR.md`` of the design notes) names
three components. The kit implements each as configuration with its own documented defaults:

* **OPD warmup**: a stage of kind ``"opd"`` runs on-policy distillation steps (:mod:`kit.rl.opd`) before
  reward RL.
* **Progressive horizon expansion**: RL stages with growing turn / call / context / wall-clock budgets
  (:func:`long_mdr_stages`: 10 → 20 → 50 → 75 turns, 32k → 64k → 128k → 128k tokens). A stage ends after
  ``steps`` steps, or earlier on a reward plateau: once at least ``min_steps`` steps have run, the mean
  reward of the last ``plateau_window`` steps exceeds the mean of the window before it by less than
  ``plateau_delta``. The last stage never ends.
* **Entropy-triggered rescue**: token entropy on model-generated tokens is tracked every step; when it
  stays below ``entropy_threshold`` for ``patience`` steps while the reward is below
  ``reward_saturation`` (not saturated), the configured action fires (``raise_temperature``,
  ``entropy_bonus``, ``widen_clip``, or ``rollback`` to the last healthy checkpoint), is logged, and a
  ``cooldown`` of steps passes before the next rescue. Thresholds are the kit's choices, not Long-MDR's.

  *"Unsaturated" is the kit's reading* (the abstract says only that entropy collapses "before
  performance has saturated"): a level test on one step, not a trend test. A step counts toward
  ``patience`` when its entropy mean is below ``entropy_threshold`` **and** its mean rollout reward (the
  batch mean of the trajectory rewards, Eq. 5 / GRPO reward, in [0, 1]) is strictly below
  ``reward_saturation`` (default 0.9); a step failing either test resets the count; a skipped step
  (reward or entropy None / NaN) neither counts nor resets. Whether the reward is still *improving* is
  not checked (the plateau test above decides stage transitions, not rescues). OPD stages never rescue.

Every stage start, transition, rescue, skipped step and training step is a line in the run log
(``run_log.jsonl``); :func:`plot_run_log` draws reward and entropy with the transitions and rescues.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from kit.harness.config import HarnessConfig
from kit.harness.events import RunEventType as R
from kit.recipes import paper_default as _P  # rescue defaults: kit/recipes/long_mdr.yaml
from kit.recipes.sections import register_section

RescueAction = Literal["raise_temperature", "entropy_bonus", "widen_clip", "rollback"]


class Stage(BaseModel):
    """One training stage. ``kind``: ``"opd"`` (distillation warmup) or ``"rl"``. Budgets override the
    base :class:`HarnessConfig` (``None`` keeps its value). ``steps``: fixed length (``None``: until a
    plateau, or forever for the last stage). Built as ``Stage("h2", max_turns=2)`` or
    ``Stage("opd", "opd", steps=1)`` (name and kind may be positional).

    Raises:
        ValueError: an unknown kind or field, ``steps``, ``plateau_window``, ``min_steps`` or a set turn /
            call / context budget below 1, ``min_steps > steps``, a set ``wall_clock_s`` not finite and > 0,
            ``plateau_delta`` not finite and >= 0.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: Literal["opd", "rl"] = "rl"
    max_turns: int | None = None
    max_calls: int | None = None
    max_context_tokens: int | None = None
    wall_clock_s: float | None = None
    steps: int | None = None
    min_steps: int = 1
    plateau_window: int | None = None
    plateau_delta: float = 0.01

    def __init__(self, name: str | None = None, kind: str | None = None, /, **data: Any):
        for k, v in (("name", name), ("kind", kind)):
            if v is not None:
                if k in data:
                    raise TypeError(f"Stage() got {k!r} both positionally and as a keyword")
                data[k] = v
        super().__init__(**data)

    @field_validator("kind", mode="before")
    @classmethod
    def _known_kind(cls, v: Any, info) -> Any:
        if v not in ("opd", "rl"):
            raise ValueError(f"stage {info.data.get('name')!r}: kind must be 'opd' or 'rl', got {v!r}")
        return v

    @model_validator(mode="after")
    def _check(self) -> Stage:
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"stage {self.name!r}: steps must be >= 1 or None")
        if self.plateau_window is not None and self.plateau_window < 1:
            raise ValueError(f"stage {self.name!r}: plateau_window must be >= 1 or None")
        bad = [k for k in ("max_turns", "max_calls", "max_context_tokens") if getattr(self, k) is not None
               and getattr(self, k) < 1]
        if bad:
            raise ValueError(f"stage {self.name!r}: budgets must be >= 1 or None: {bad}")
        if self.wall_clock_s is not None and not (math.isfinite(self.wall_clock_s) and self.wall_clock_s > 0):
            raise ValueError(f"stage {self.name!r}: wall_clock_s must be finite and > 0 or None, got {self.wall_clock_s!r}")
        if self.min_steps < 1:
            raise ValueError(f"stage {self.name!r}: min_steps must be >= 1")
        if self.steps is not None and self.min_steps > self.steps:
            raise ValueError(f"stage {self.name!r}: min_steps ({self.min_steps}) must be <= steps ({self.steps})")
        if not (math.isfinite(self.plateau_delta) and self.plateau_delta >= 0):
            raise ValueError(f"stage {self.name!r}: plateau_delta must be finite and >= 0, got {self.plateau_delta!r}")
        return self

    def harness_config(self, base: HarnessConfig) -> HarnessConfig:
        """``base`` with this stage's budgets (the reserve is shrunk if it would not fit the context)."""
        upd = {k: getattr(self, k) for k in ("max_turns", "max_calls", "max_context_tokens", "wall_clock_s")
               if getattr(self, k) is not None}
        ctx = upd.get("max_context_tokens", base.max_context_tokens)
        if base.synthesis_reserve_tokens >= ctx:
            upd["synthesis_reserve_tokens"] = ctx // 8
        return HarnessConfig(**{**base.model_dump(), **upd})


def long_mdr_stages(opd_steps: int | None = None, steps_per_stage: int | None = None) -> list[Stage]:
    """Paper-scale schedule: ``kit/recipes/long_mdr.yaml`` (Long-MDR abstract: 10 → 20 → 50 → 75 turns,
    32k → 128k context; call budgets, wall clocks and step counts are the kit's, cited there).
    ``opd_steps`` / ``steps_per_stage`` override the OPD stage's and the fixed-length RL stages' steps."""
    from kit.recipes import load_recipe

    out = []
    for st in load_recipe("long_mdr").get("stages"):
        st = dict(st)
        if st.get("kind") == "opd" and opd_steps is not None:
            st["steps"] = opd_steps
        elif st.get("kind", "rl") == "rl" and st.get("steps") is not None and steps_per_stage is not None:
            st["steps"] = steps_per_stage
        out.append(Stage(**st))
    return out


MAX_STAGE_TURNS = 10_000  # parse_stages refuses larger horizons (the paper's longest stage has 75 turns)


def parse_stages(spec: str, base: HarnessConfig, *, max_context_tokens: int = 131_072) -> list[Stage]:
    """A schedule from a comma list ``"opd:1,h1:2,h2"``: ``opd[:steps]`` is an OPD warmup stage (default 1
    step); ``h<N>[:steps]`` an RL stage with ``N`` regular turns whose call, context and wall-clock budgets
    grow from ``base`` in proportion (``N // base.max_turns``, at least 1; context capped at
    ``max_context_tokens``). A stage without ``:steps`` runs until a plateau (the last one: forever).
    ``N`` and ``steps`` are ASCII digits; ``N`` is at most :data:`MAX_STAGE_TURNS`.

    Raises:
        ValueError: an empty spec, an unknown item, a non-positive or too large turn count, a non-positive
            step count, two stages with the same name, ``max_context_tokens < 1``.
    """
    if max_context_tokens < 1:
        raise ValueError(f"max_context_tokens must be >= 1, got {max_context_tokens!r}")
    out: list[Stage] = []
    items = [s.strip() for s in spec.split(",") if s.strip()]
    if not items:
        raise ValueError("empty stage schedule: use e.g. 'opd:1,h1:2,h2'")
    for item in items:
        nm, _, n = item.partition(":")
        n = n.strip()
        # ASCII digits only: int() also reads "١", "1_000" and " +3"; a cap keeps int() off 5,000-digit strings
        if n and not re.fullmatch(r"-?[0-9]{1,12}", n):
            raise ValueError(f"stage {item!r}: steps must be an integer")
        steps = int(n) if n else None
        if steps is not None and steps < 1:
            raise ValueError(f"stage {item!r}: steps must be >= 1 (leave the stage out instead)")
        m = re.fullmatch(r"h([0-9]{1,12})", nm)  # not str.isdigit(): "h²" and "h١" are digits to it
        turns = int(m.group(1)) if m else 0
        if nm == "opd":
            out.append(Stage("opd", "opd", steps=steps or 1))
        elif m and 1 <= turns <= MAX_STAGE_TURNS:
            scale = max(1, turns // max(1, base.max_turns))
            out.append(Stage(nm, max_turns=turns, max_calls=max(turns, base.max_calls),
                             max_context_tokens=min(base.max_context_tokens * scale, max_context_tokens),
                             wall_clock_s=base.wall_clock_s * scale, steps=steps))
        elif m or re.fullmatch(r"h[0-9]+", nm):
            raise ValueError(f"stage {item!r}: turns must be between 1 and {MAX_STAGE_TURNS}")
        else:
            raise ValueError(f"unknown stage {item!r}: use opd[:steps] or h<turns>[:steps] (turns >= 1)")
    names = [s.name for s in out]
    dup = sorted({x for x in names if names.count(x) > 1})
    if dup:  # the run log and transitions name stages: two with one name cannot be told apart
        raise ValueError(f"duplicate stage names {dup} in {spec!r}: give each stage once")
    return out


def resolve_schedule(recipe, base: HarnessConfig, spec: str | None = None) -> list[Stage]:
    """The stage list of ``spec`` (default the recipe's ``rl_run.stages``) for a resolved
    :class:`~kit.recipes.Recipe`: ``"long_mdr"`` is the one Long-MDR schedule (``kit/recipes/long_mdr.yaml``),
    a name of the recipe's ``schedules`` section is that named schedule (``"weagent"``: WeAgent-MMSearch as
    written, one RL stage at Table 5's budgets, no OPD warmup), anything else a :func:`parse_stages` list grown
    from ``base``. Under an overlay (the preflight: sizes only)
    the stages grow from the recipe's own harness, not the shrunk one, and then every stage runs
    ``rl_run.stage_steps`` steps with at most ``stage_budgets.max_turns`` turns.

    Raises:
        ValueError: an unknown schedule name, a bad stage list (:func:`parse_stages`).
    """
    from kit.recipes import Recipe, load_recipe

    spec = str(spec or recipe.get("rl_run.stages"))
    if spec == "long_mdr":  # the long_mdr recipe's own list (unvalidated here: validating it resolves this schedule)
        stages = (recipe if recipe.has("stages") else Recipe("long_mdr")).stages()
    elif recipe.has(f"schedules.{spec}"):
        stages = recipe.schedule(spec)
    elif re.fullmatch(r"[A-Za-z_]\w*", spec) and not re.fullmatch(r"opd|h[0-9]+", spec):
        named = ["long_mdr", *sorted(recipe.section("schedules"))]
        raise ValueError(f"unknown schedule {spec!r}: a named one ({named}) or a stage list such as 'opd:1,h1:2,h2'")
    else:
        grow = base
        if recipe.overlays:  # budgets grow from the paper's turns (3 preflight turns would triple h10's context)
            own = load_recipe(recipe.name)
            grow = own.harness(**own.section("rl_rollout"))
        stages = parse_stages(spec, grow)
    n1, turns = recipe.get("rl_run.stage_steps", None), recipe.get("stage_budgets.max_turns", None)
    if n1 is None and turns is None:
        return stages
    out = []
    for s in stages:
        upd: dict[str, Any] = {}
        if n1 is not None:
            upd.update(steps=int(n1), min_steps=1)
        if turns is not None:
            upd["max_turns"] = min(s.max_turns or int(turns), int(turns))
        out.append(Stage(**{**s.model_dump(), **upd}))  # validated again
    return out


def schedule_total_steps(recipe, spec: str | None = None) -> int:
    """The step total of the schedule ``spec`` (default ``rl_run.stages``) of a resolved
    :class:`~kit.recipes.Recipe`: a named schedule (``schedules.NAME``) whose stages all give ``steps`` runs
    their sum (``"weagent"``: its own count, not Long-MDR's ``rl_run.total_steps``); anything else, or an
    overlay that sets ``rl_run.total_steps`` (the preflight: a size), runs ``rl_run.total_steps``.
    Returns a step count (int >= 1)."""
    spec = str(spec or recipe.get("rl_run.stages"))
    total = int(recipe.get("rl_run.total_steps"))
    if not recipe.has(f"schedules.{spec}") or recipe.entries["rl_run.total_steps"].origin in recipe.overlays:
        return total
    steps = [s.steps for s in recipe.schedule(spec)]
    return sum(int(n) for n in steps) if all(n is not None for n in steps) else total


class RescueConfig(BaseModel):
    """Entropy-triggered rescue (see module docstring). Entropy in nats per generated token.

    Raises:
        ValueError: an unknown action or field, ``patience < 1`` or ``cooldown < 0``, a non-finite
            threshold, step or factor, ``temperature_step`` or ``max_temperature`` not > 0, a negative
            ``entropy_bonus``, ``clip_widen_factor < 1``.
    """

    model_config = ConfigDict(extra="forbid")

    entropy_threshold: float = _P("rescue.entropy_threshold", "long_mdr")
    reward_saturation: float = _P("rescue.reward_saturation", "long_mdr")
    patience: int = _P("rescue.patience", "long_mdr")
    cooldown: int = _P("rescue.cooldown", "long_mdr")
    action: RescueAction = _P("rescue.action", "long_mdr")
    temperature_step: float = _P("rescue.temperature_step", "long_mdr")
    max_temperature: float = _P("rescue.max_temperature", "long_mdr")
    entropy_bonus: float = _P("rescue.entropy_bonus", "long_mdr")
    clip_widen_factor: float = _P("rescue.clip_widen_factor", "long_mdr")

    @field_validator("action", mode="before")
    @classmethod
    def _known_action(cls, v: Any) -> Any:
        if v not in ("raise_temperature", "entropy_bonus", "widen_clip", "rollback"):
            raise ValueError(f"unknown rescue action {v!r}")
        return v

    @model_validator(mode="after")
    def _check(self) -> RescueConfig:
        if self.patience < 1 or self.cooldown < 0:
            raise ValueError("patience must be >= 1 and cooldown >= 0")
        floats = ("entropy_threshold", "reward_saturation", "temperature_step", "max_temperature", "entropy_bonus",
                  "clip_widen_factor")
        bad = [k for k in floats if not math.isfinite(getattr(self, k))]
        if bad:
            raise ValueError(f"rescue settings must be finite: {bad}")
        if self.temperature_step <= 0 or self.max_temperature <= 0:
            raise ValueError("temperature_step and max_temperature must be > 0")
        if self.entropy_bonus < 0:
            raise ValueError("entropy_bonus must be >= 0")
        if self.clip_widen_factor < 1:  # below 1 narrows the clip: the opposite of a rescue
            raise ValueError("clip_widen_factor must be >= 1")
        return self


class RunLog:
    """Append-only JSON-lines log of a run (``run_log.jsonl``): one object per event with ``type``,
    ``step`` and ``time``. Re-opening an existing file appends (resume)."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path is not None else None
        self.events: list[dict[str, Any]] = []
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists():
                self.events = [json.loads(x) for x in self.path.read_text().splitlines() if x.strip()]

    def write(self, type_: R, step: int, **data: Any) -> dict[str, Any]:
        """Append one event (``type_``: a :class:`~kit.harness.events.RunEventType`; anything else raises
        ``ValueError``) and return it."""
        ev = {"type": R(type_).value, "step": int(step), "time": round(time.time(), 3), **data}
        self.events.append(ev)
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(ev, default=_json_default) + "\n")
        return ev

    def of_type(self, type_: R) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == R(type_)]


register_section("rescue", RescueConfig)  # the recipes' rescue section (kit.recipes.sections)


def _json_default(o):
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return str(o)


@dataclass
class Knobs:
    """Training knobs the rescue may change: sampling temperature, entropy bonus coefficient, and a
    factor on ε_hi."""

    temperature: float = 1.0
    entropy_coef: float = 0.0
    eps_hi_scale: float = 1.0


@dataclass
class ScheduleState:
    stage_index: int = 0
    stage_step: int = 0
    rewards: list[float] = field(default_factory=list)  # this stage's per-step reward means
    low_entropy_run: int = 0
    last_rescue_step: int | None = None
    knobs: Knobs = field(default_factory=Knobs)


class StageSchedule:
    """Drives stages, transitions and rescues; the trainer calls :meth:`observe` after every step.

    Args:
        stages: at least one stage.
        rescue: rescue settings (``None`` disables rescue).
        log: the run log that receives ``stage_start``, ``transition`` and ``rescue`` events.
        temperature: initial sampling temperature (paper: 1.0).
    Raises:
        ValueError: no stages.
    """

    def __init__(self, stages: list[Stage], rescue: RescueConfig | None = None, log: RunLog | None = None,
                 temperature: float = 1.0):
        if not stages:
            raise ValueError("a schedule needs at least one stage")
        self.stages = list(stages)
        self.rescue = rescue
        self.log = log or RunLog(None)
        self.state = ScheduleState(knobs=Knobs(temperature=temperature))

    @property
    def stage(self) -> Stage:
        return self.stages[self.state.stage_index]

    @property
    def knobs(self) -> Knobs:
        return self.state.knobs

    def start(self, step: int) -> None:
        """Log the start of the current stage (call once at the beginning of a run)."""
        self.log.write(R.STAGE_START, step, stage=self.stage.name, kind=self.stage.kind, budgets=self._budgets())

    def _budgets(self) -> dict[str, Any]:
        s = self.stage
        return {"max_turns": s.max_turns, "max_calls": s.max_calls, "max_context_tokens": s.max_context_tokens,
                "wall_clock_s": s.wall_clock_s}

    def plateaued(self) -> bool:
        """The current stage's reward plateau test (module docstring)."""
        s, r = self.stage, self.state.rewards
        w = s.plateau_window
        if w is None or self.state.stage_step < s.min_steps or len(r) < 2 * w:
            return False
        recent, before = r[-w:], r[-2 * w:-w]
        return (sum(recent) / w) - (sum(before) / w) < s.plateau_delta

    def observe(self, step: int, reward_mean: float | None, entropy_mean: float | None) -> list[dict[str, Any]]:
        """Record one finished step (``reward_mean``/``entropy_mean`` may be None/NaN for a skipped
        step) and apply transitions and rescues. Returns the events written."""
        st, out = self.state, []
        st.stage_step += 1
        if reward_mean is not None and math.isfinite(reward_mean):
            st.rewards.append(float(reward_mean))
        if self.stage.kind == "rl" and self.rescue is not None:
            ev = self._check_rescue(step, reward_mean, entropy_mean)
            if ev:
                out.append(ev)
        last = st.stage_index == len(self.stages) - 1
        s = self.stage
        reason = None
        if not last and s.steps is not None and st.stage_step >= s.steps:
            reason = "steps"
        elif not last and self.plateaued():
            reason = "plateau"
        if reason:
            prev = s.name
            st.stage_index += 1
            st.stage_step, st.rewards, st.low_entropy_run = 0, [], 0
            out.append(self.log.write(R.TRANSITION, step, **{"from": prev, "to": self.stage.name, "reason": reason}))
            out.append(self.log.write(R.STAGE_START, step, stage=self.stage.name, kind=self.stage.kind,
                                      budgets=self._budgets()))
        return out

    def _check_rescue(self, step, reward_mean, entropy_mean) -> dict[str, Any] | None:
        rc, st = self.rescue, self.state
        if rc is None:  # no rescue configured
            return None
        if entropy_mean is None or not math.isfinite(entropy_mean) or reward_mean is None or not math.isfinite(reward_mean):
            return None
        if entropy_mean < rc.entropy_threshold and reward_mean < rc.reward_saturation:
            st.low_entropy_run += 1
        else:
            st.low_entropy_run = 0
            return None
        cooling = st.last_rescue_step is not None and step - st.last_rescue_step <= rc.cooldown
        if st.low_entropy_run < rc.patience or cooling:
            return None
        k, before = st.knobs, asdict(st.knobs)
        if rc.action == "raise_temperature":
            k.temperature = min(rc.max_temperature, k.temperature + rc.temperature_step)
        elif rc.action == "entropy_bonus":
            k.entropy_coef = rc.entropy_bonus if k.entropy_coef == 0 else k.entropy_coef * 2
        elif rc.action == "widen_clip":
            k.eps_hi_scale *= rc.clip_widen_factor
        st.last_rescue_step = step
        st.low_entropy_run = 0
        return self.log.write(R.RESCUE, step, stage=self.stage.name, action=rc.action, entropy=entropy_mean,
                              reward=reward_mean, threshold=rc.entropy_threshold, knobs_before=before,
                              knobs_after=asdict(k))

    def state_dict(self) -> dict[str, Any]:
        return asdict(self.state)

    def load_state_dict(self, d: dict[str, Any]) -> None:
        d = dict(d)
        d["knobs"] = Knobs(**d.get("knobs", {}))
        self.state = ScheduleState(**d)


def plot_run_log(events: list[dict[str, Any]], path: str | Path | None = None, title: str = "RL run", *,
                 benchmark: str | None = None, split: str | None = "train"):
    """Reward and entropy per step with stages (dashed lines at each transition, the stage's name inside the
    plot area at its start), rescues (red triangles) and skipped steps (grey hatched spans over both panels: a
    skipped step has no reward, so it is not drawn as one). The title's second line says what the run trained
    on: ``benchmark``, ``split`` and n, the rollout episodes of its steps (:func:`_rollout_episodes`).
    Returns the matplotlib figure (saved to ``path`` when given, and as ``.svg`` beside it)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from kit.figures import data_caption

    steps = [e for e in events if e["type"] == R.STEP]
    fig, ax = plt.subplots(2, 1, figsize=(8, 5.2), sharex=True)
    x = [e["step"] for e in steps]
    # step rows carry the rollout's mean reward as rollout_reward_mean (RLTrainer); reward_mean: older logs
    ax[0].plot(x, [_nan(e.get("rollout_reward_mean", e.get("reward_mean"))) for e in steps], marker="o",
               label="reward (mean)")
    ax[1].plot(x, [_nan(e.get("entropy_mean")) for e in steps], marker="o", color="tab:green", label="token entropy")
    starts = [(e["step"] + 0.5, e["to"]) for e in events if e["type"] == R.TRANSITION]
    first = next((e.get("stage") for e in events if e["type"] == R.STAGE_START), None)
    xs = x + [s for s, _ in starts] + [e["step"] for e in events if e["type"] in (R.SKIP, R.RESCUE)]
    lo, hi = (min(xs) - 0.5, max(xs) + 0.5) if xs else (-0.5, 0.5)
    for a in ax:
        a.set_xlim(lo, hi)
    for at, _ in starts:
        for a in ax:
            a.axvline(at, ls="--", color="gray")
    for e in events:
        if e["type"] == R.RESCUE:
            ax[1].plot([e["step"]], [e["entropy"]], marker="v", color="red", ms=10, label="rescue", clip_on=True)
        if e["type"] == R.SKIP:  # no update happened: a span over both panels, not a reward of 0
            for a in ax:
                a.axvspan(e["step"] - 0.4, e["step"] + 0.4, color="0.85", alpha=0.6, hatch="//", lw=0,
                          label="skipped step (no update)")
    labels = ([(lo, first)] if first else []) + starts
    for at, name in labels:  # inside the plot area: left-aligned, right-aligned near the right edge
        right = (at - lo) / (hi - lo) > 0.8
        ax[0].annotate(name, (at, 0.97), xycoords=("data", "axes fraction"), xytext=(-3 if right else 3, 0),
                       textcoords="offset points", ha="right" if right else "left", va="top", fontsize=8,
                       annotation_clip=True, bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})
    ax[0].margins(y=0.25)  # room under the stage names
    for a in ax:  # legends beside the panels, never over the data or the stage names
        h, lab = a.get_legend_handles_labels()
        a.legend(dict(zip(lab, h)).values(), dict(zip(lab, h)).keys(), fontsize=8, loc="upper left",
                 bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax[0].set_ylabel("mean reward")
    ax[1].set_ylabel("token entropy (nats)")
    ax[1].set_xlabel("training step")
    ax[1].xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    n = _rollout_episodes(events)
    fig.suptitle(f"{title}\n" + data_caption(benchmark, split, n, unit="rollout episodes",
                                              detail=f"{len(steps)} step{'s' if len(steps) != 1 else ''}"), fontsize=10)
    fig.tight_layout()
    if path is not None:  # PNG for previews, SVG beside it (vector, same data)
        fig.savefig(path, dpi=100, bbox_inches="tight")
        fig.savefig(Path(path).with_suffix(".svg"), bbox_inches="tight")
    return fig


def _rollout_episodes(events: list[dict[str, Any]]) -> int:
    """Rollout episodes of a run log: each step row's ``rollout_trajectories`` (RLTrainer), else its
    ``opd_trajectories``; a skipped step without a step row counts its groups' ``trajectories``."""
    stepped = {e["step"] for e in events if e["type"] == R.STEP}
    n = sum(int(e.get("rollout_trajectories") or e.get("opd_trajectories") or 0) for e in events if e["type"] == R.STEP)
    n += sum(int((e.get("groups") or {}).get("trajectories") or 0) for e in events
             if e["type"] == R.SKIP and e["step"] not in stepped)
    return n


def _nan(v):
    return math.nan if v is None else v
