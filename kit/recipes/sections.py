"""Known keys (and their types) of every recipe section (issue "paper recipes", attack R1-R3, R5).

Sections with a config class (:data:`kit.recipes.SECTION_MODELS`: ``harness``, ``rl``, ``rescue``, ``sft``) know
their keys from the class; ``rl_rollout`` holds :class:`~kit.harness.config.HarnessConfig` overrides, so its
keys are that class's. The other sections are declared here as strict pydantic models (:data:`SECTION_KEYS`):
an unknown key, a bool where a number is expected (``max_turns: true`` is not 1), a step count or size below 1
fails. ``schedules`` (any name: a list of stages) and ``paper_only`` (any key: values the kit does not run) are
open. :func:`check_keys` names an unknown section or key with the nearest known one (:mod:`difflib`).

The recipes stay data: :mod:`kit.recipes` imports nothing from the harness or RL code, whose config classes take
their defaults from it (:func:`kit.recipes.paper_default`). A config class registers its section here when its
module is imported (:func:`register_section`: ``HarnessConfig`` as ``harness``, ``RescueConfig`` as ``rescue``);
validating a recipe imports the owner modules by the names :data:`kit.recipes.SECTION_MODELS` and :data:`PARTS`
give (:func:`section_model`, :func:`recipe_part`), at call time, never when :mod:`kit.recipes` is imported.
"""

from __future__ import annotations

import datetime
import difflib
import importlib
import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

Pos = Annotated[StrictInt, Field(ge=1)]  # a count, size or number of steps
NonNeg = Annotated[StrictInt, Field(ge=0)]
Num = StrictFloat | StrictInt  # strict: a bool is not a number
PosNum = Annotated[Num, Field(gt=0)]
NonNegNum = Annotated[Num, Field(ge=0)]
Zero = Annotated[StrictInt, Field(ge=0, le=0)]  # a Table 8 value the renderer supports only at 0
One = Annotated[Num, Field(ge=1, le=1)]
HexColor = Annotated[StrictStr, Field(pattern=r"^#[0-9A-Fa-f]{6}$")]  # "#RRGGBB"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Tools(_Section):
    web_search_top_k: Pos | None = None
    image_search_top_k: Pos | None = None
    image_search_max_calls: Pos | None = None
    image_search_by: StrictStr | None = None
    visit_summary_chars: Pos | None = None
    image_page_summary_chars: Pos | None = None


class Clip(_Section):
    grpo_eps: PosNum | None = None
    gspo_eps_lo: PosNum | None = None
    gspo_eps_hi: PosNum | None = None


class RLRun(_Section):
    stages: StrictStr | None = None  # resolved by kit.rl.staging.resolve_schedule in Recipe.validate
    total_steps: Pos | None = None  # a run of 0 or -5 steps trains nothing, silently
    stage_steps: Pos | None = None
    web_backend: StrictStr | None = None  # the web of the RL rollouts: "serper" (live) | "zim" (local, labelled)


class Reward(_Section):
    correct: Num | None = None
    format: Num | None = None
    tool: Num | None = None


class Eval(_Section):
    judge: StrictStr | None = None
    judge_model: StrictStr | None = None
    judge_prompt_version: StrictStr | None = None
    summarizer: StrictStr | None = None
    summarizer_model: StrictStr | None = None
    summarizer_max_input_chars: Pos | None = None
    image_judge: StrictStr | None = None
    image_judge_model: StrictStr | None = None
    protocol: StrictStr | None = None
    scoring: StrictStr | None = None
    filters: dict[StrictStr, list[StrictStr]] | None = None
    benchmarks: list[StrictStr] | None = None
    configs: list[StrictStr] | None = None
    trials_threshold: NonNeg | None = None
    trials_below: Pos | None = None
    trials_above: Pos | None = None
    hard_subset_min_rounds: NonNeg | None = None
    repeats: Pos | None = None
    max_trials: Pos | None = None
    n_per_benchmark: Pos | None = None
    web_backend: StrictStr | None = None  # the web of evaluation: "serper" (live) | "zim" (local, labelled)


class SFTRun(_Section):
    global_batch: Pos | None = None


class VFold(_Section):
    # App. B.2 Table 8 (RenderConfig's defaults, kit.vfold.render_config); only the values RenderConfig
    # supports are accepted (left alignment, horizontal scale 1, no indents, spacing or borders)
    page_width: Pos | None = None
    page_height: Pos | None = None
    dpi: Pos | None = None
    margin_x: NonNeg | None = None
    margin_y: NonNeg | None = None
    font: StrictStr | None = None
    font_size: PosNum | None = None
    line_height: PosNum | None = None
    font_color: HexColor | None = None
    alignment: Literal["left"] | None = None
    horizontal_scale: One | None = None
    first_line_indent: Zero | None = None
    left_indent: Zero | None = None
    right_indent: Zero | None = None
    space_before: Zero | None = None
    space_after: Zero | None = None
    border_width: Zero | None = None
    border_padding: Zero | None = None
    page_bg_color: HexColor | None = None
    para_bg_color: HexColor | None = None
    auto_crop_width: StrictBool | None = None
    auto_crop_last_page: StrictBool | None = None
    sweep_tau: list[Pos] | None = None
    sweep_keep: list[NonNeg] | None = None


class Verl(_Section):
    prompt_tokens: Pos | None = None
    total_epochs: Pos | None = None
    lr_warmup_steps: NonNeg | None = None
    use_kl_loss: StrictBool | None = None
    entropy_coeff: NonNegNum | None = None


class StageBudgets(_Section):
    max_turns: Pos | None = None


class Data(_Section):
    event_start: StrictStr | datetime.date | None = None  # an unquoted YAML date is a date
    event_end: StrictStr | datetime.date | None = None
    event_window_days: Pos | None = None
    web_backend: StrictStr | None = None
    stable_fact: StrictStr | None = None
    rl_group_size: Pos | None = None
    rl_filter_judge: Literal["rule", "llm"] | None = None  # who judges the RL filter's rollouts (kit.data.rl_filter)
    rl_label_audit: Literal["rule", "llm"] | None = None  # the RL queries' label audit: deterministic | a model
    rl_label_audit_model: StrictStr | None = None
    require_target_match: StrictBool | None = None
    hop_depths: list[Pos] | None = None


class Advantage(_Section):
    delta: NonNegNum | None = None


class ToolArgs(_Section):
    web_search_queries: Pos | None = None
    web_search_num: dict[StrictStr, StrictInt] | None = None
    image_search_queries: Pos | None = None
    image_search_num: dict[StrictStr, StrictInt] | None = None
    reverse_search_images: Pos | None = None
    reverse_search_num: dict[StrictStr, StrictInt] | None = None
    extract_urls: Pos | None = None


class SFTData(_Section):
    max_response_tokens: Pos | None = None
    max_trajectory_tokens: Pos | None = None


#: the sections without a config class, each validated by its strict model
SECTION_KEYS: dict[str, type[BaseModel]] = {
    "tools": Tools, "clip": Clip, "rl_run": RLRun, "reward": Reward, "eval": Eval, "sft_run": SFTRun,
    "vfold": VFold, "verl": Verl, "stage_budgets": StageBudgets, "data": Data, "advantage": Advantage,
    "tool_args": ToolArgs, "sft_data": SFTData,
}
OPEN_SECTIONS = ("schedules", "paper_only", "mixtures")  # any key: named schedules, values not run, SFT mixtures


#: sections validated by a config class: its owner's ``"module:Class"`` (``kit.recipes.SECTION_MODELS``)
SECTION_MODELS: dict[str, str] = {
    "harness": "kit.harness.config:HarnessConfig",
    "rl": "kit.rl.config:RLConfig",
    "rescue": "kit.rl.staging:RescueConfig",
    "sft": "kit.train.sft:SFTTrainConfig",
}
#: the other objects a recipe's validation uses, ``"module:name"`` (imported at validation time): the RL stage
#: class (``stages``, ``schedules.*``), the schedule resolver (``rl_run.stages``) and the tool registry's check
#: of a harness config's tools (``harness.tools_enabled`` / ``tool_set``)
PARTS: dict[str, str] = {
    "stage": "kit.rl.staging:Stage",
    "resolve_schedule": "kit.rl.staging:resolve_schedule",
    "config_tool_specs": "kit.harness.toolsets:config_tool_specs",
}
_REGISTERED: dict[str, type[BaseModel]] = {}  # section -> config class, as its module registered it


def register_section(section: str, model: type[BaseModel]) -> type[BaseModel]:
    """Register ``model`` as the config class of recipe section ``section`` (called by the class's module when
    it is imported: ``register_section("harness", HarnessConfig)``); returns ``model``. A section that
    :data:`kit.recipes.SECTION_MODELS` does not list yet is added to it (its keys are then known to
    :func:`check_keys` and :meth:`kit.recipes.Recipe.validate` builds it).

    Raises:
        TypeError: ``model`` is not a pydantic model class.
        ValueError: ``section`` is empty, or is listed for another class.
    """
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"section {section!r}: {model!r} is not a pydantic model class")
    if not isinstance(section, str) or not section.strip():
        raise ValueError(f"a recipe section needs a non-empty name, got {section!r}")
    path = f"{model.__module__}:{model.__qualname__}"
    if SECTION_MODELS.setdefault(section, path) != path:
        raise ValueError(f"recipe section {section!r} belongs to {SECTION_MODELS[section]}, not {path}")
    _REGISTERED[section] = model
    return model


def _imported(path: str) -> Any:
    mod, name = path.split(":")
    return getattr(importlib.import_module(mod), name)


def section_model(section: str, section_models: dict[str, str] | None = None) -> type[BaseModel]:
    """The config class of ``section``: the registered one, else its owner module (``section_models``, default
    :data:`SECTION_MODELS`: ``"module:Class"``) is imported, which registers it (or defines it under that name).

    Raises:
        KeyError: ``section`` has no config class.
    """
    if section not in _REGISTERED:
        _REGISTERED[section] = _imported((SECTION_MODELS if section_models is None else section_models)[section])
    return _REGISTERED[section]


def recipe_part(name: str) -> Any:
    """The object :data:`PARTS` names (``"stage"``, ``"resolve_schedule"``, ``"config_tool_specs"``), imported
    from its owner now. Raises KeyError on another name."""
    return _imported(PARTS[name])


def _nearest(name: str, known) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def known_keys(section: str, section_models: dict[str, str]) -> set[str] | None:
    """The keys ``section`` may hold, or None when it is open (:data:`OPEN_SECTIONS`).

    Raises:
        KeyError: an unknown section.
    """
    if section in OPEN_SECTIONS:
        return None
    if section in SECTION_KEYS:
        return set(SECTION_KEYS[section].model_fields)
    return set(section_model("harness" if section == "rl_rollout" else section, section_models).model_fields)


def check_keys(keys, section_models: dict[str, str], origin: dict[str, str]) -> str | None:
    """Why one of ``keys`` (``"section.key"``; ``"stages"``) is not a known recipe key, or None. ``origin``
    maps a key to the file it came from (an overlay's typo is named in the overlay)."""
    sections = {*SECTION_KEYS, *OPEN_SECTIONS, *section_models, "rl_rollout"}
    for k in keys:
        if k == "stages":
            continue
        section, _, key = k.partition(".")
        where = f"{origin.get(k, '?')}.yaml"
        if section not in sections:
            return f"{where}: unknown section {section!r}{_nearest(section, sections | {'stages'})}"
        known = known_keys(section, section_models)
        if known is not None and key not in known:
            return f"{where}: unknown key {k!r}{_nearest(key, known)}; {section} keys: {sorted(known)}"
    return None


def _allows_bool(annotation: Any) -> bool:
    if annotation is bool or annotation is Any:
        return True
    return any(_allows_bool(a) for a in typing.get_args(annotation) if a is not type(None))


def bool_problem(model: type[BaseModel], values: dict[str, Any], where: str) -> str | None:
    """A ``true``/``false`` given for a field of ``model`` that is not a bool (pydantic's lax mode reads
    ``True`` as 1), or None."""
    for k, v in values.items():
        field = model.model_fields.get(k)
        if field is None or field.annotation is None:
            continue
        items = v if isinstance(v, list) else [v]
        if any(isinstance(x, bool) for x in items) and not _allows_bool(field.annotation):
            return f"{where}.{k}: {v!r} is a bool, not a number ({_type_name(field.annotation)}); write the number"
    return None


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def section_problem(section: str, values: dict[str, Any]) -> tuple[str, str] | None:
    """``("section.key", why)`` when the values of a declared section (:data:`SECTION_KEYS`) do not fit
    it (one line), or None."""
    from pydantic import ValidationError

    try:
        SECTION_KEYS[section](**values)
    except ValidationError as e:
        err = e.errors()[0]
        key = f"{section}.{err['loc'][0]}" if err["loc"] else section
        return key, f"{key}: {err['msg']} (got {err.get('input')!r})"
    return None


__all__ = ["OPEN_SECTIONS", "PARTS", "SECTION_MODELS", "SECTION_KEYS", "bool_problem", "check_keys", "known_keys", "recipe_part",
           "register_section", "section_model", "section_problem"]
