"""Harness budgets and recovery settings (WeAgent Table 5; docs/contracts.md "Paper defaults").

``HarnessConfig()`` holds the paper's values. ``HarnessConfig.smoke()`` keeps every rule but shrinks
the turn / call / token budgets so CPU smoke runs on tiny models finish in seconds; it bounds
episodes by turns and tokens, never by the wall clock (results must not depend on machine speed).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kit.recipes import paper_default as _P  # defaults: kit/recipes/weagent_mmsearch.yaml (cited there)
from kit.recipes.sections import register_section

TOOL_SETS_MODULE = "kit.harness.toolsets"  # the named tool sets (HarnessConfig.tool_set)

# Smoke episodes never end on the clock: 5 turns of a tiny CPU model take seconds, so a day-long
# budget only catches a hung run and cannot make results depend on machine speed.
SMOKE_WALL_CLOCK_S = float(_P("harness.wall_clock_s", "smoke"))
# Smoke prompts carry a pinned CURRENT_TIME (Table 6): the system prompt is part of every model input,
# so an hour-granular clock would make tiny-model results depend on the hour a run starts.
SMOKE_PROMPT_TIME = str(_P("harness.prompt_time", "smoke"))


def smoke_harness_values() -> dict[str, Any]:
    """The harness values the smoke recipe (``kit/recipes/smoke.yaml``) sets over WeAgent's."""
    from kit.recipes import Recipe

    r = Recipe("smoke")  # unvalidated: validating the recipe builds this class
    return {k[len("harness."):]: e.value for k, e in r.entries.items() if k.startswith("harness.") and e.origin == "smoke"}


class HarnessConfig(BaseModel):
    """Episode budgets, recovery rules and tool limits.

    Units: tokens for ``max_context_tokens``/``synthesis_reserve_tokens``/``max_response_tokens``,
    seconds for ``wall_clock_s``/``tool_timeout_s``, characters for the persistence thresholds.

    Raises:
        ValueError: an unknown field (a typo such as ``max_turn``), a budget below 1, a non-finite or
            non-positive time, a negative reserve or re-feed limit, an unknown context strategy.
    """

    model_config = ConfigDict(extra="forbid")  # a misspelt budget must fail, not silently keep the default

    # Episode budgets (Table 5)
    max_turns: int = _P("harness.max_turns")  # regular turns; one no-tool synthesis turn may follow
    max_calls: int = _P("harness.max_calls")  # executed tool calls
    max_context_tokens: int = _P("harness.max_context_tokens")
    synthesis_reserve_tokens: int = _P("harness.synthesis_reserve_tokens")  # tools disabled once remaining context <= this
    wall_clock_s: float = _P("harness.wall_clock_s")
    max_response_tokens: int = _P("harness.max_response_tokens")  # one response over this is discarded and regenerated once
    overlong_regenerations: int = _P("harness.overlong_regenerations")
    # Recovery (Table 5)
    loop_guard_repeats: int = _P("harness.loop_guard_repeats")  # consecutive identical invalid calls that trigger the loop guard
    # False: the vanilla-GSPO rollout of WeAgent Table 3 (no regeneration, no synthesis turn, no repair,
    # no guards; what each rule does then: docs/rules.md, column "self_recovery=False")
    self_recovery: bool = _P("harness.self_recovery")
    # Persistence (Table 5)
    persist_threshold_chars: int = _P("harness.persist_threshold_chars")
    persist_preview_chars: int = _P("harness.persist_preview_chars")
    # Tool limits (Table 4)
    extract_max_chars: int = _P("harness.extract_max_chars")
    image_search_refeed: int = _P("harness.image_search_refeed")
    reverse_search_refeed: int = _P("harness.reverse_search_refeed")
    reverse_search_max_vision_tokens: int = _P("harness.reverse_search_max_vision_tokens")
    extract_refeed: int = _P("harness.extract_refeed")
    code_refeed: int = _P("harness.code_refeed")
    code_max_images: int = _P("harness.code_max_images")  # new images registered per execute_code call
    code_isolation: Literal["auto", "bwrap", "rlimits"] = "auto"  # see README "execute_code isolation"
    tool_timeout_s: float = _P("harness.tool_timeout_s")
    code_timeout_s: float = _P("harness.code_timeout_s")
    code_memory_mb: int = _P("harness.code_memory_mb")
    code_cpu_s: int = _P("harness.code_cpu_s")
    # Images
    max_image_pixels: int = 64_000_000  # decompression-bomb guard for every registered image
    # Ablations (WeAgent Table 2)
    refeed_images: bool = _P("harness.refeed_images")  # False: returned images are kept out of later model turns
    # Context strategy (POINTS-Seeker §3.3, Table 4; kit.vfold.fold): "full" | "discard" | "summary" |
    # "render_all" | "vfold"; acts when the history exceeds context_tau tokens, keeping the last
    # context_keep observations/interactions as text. WeAgent's profile: "full".
    context_strategy: str = _P("harness.context_strategy")  # or a name registered with kit.harness.context.register_context_strategy
    context_tau: int = Field(default=_P("harness.context_tau", "points_seeker"), ge=0)
    context_keep: int = Field(default=_P("harness.context_keep", "points_seeker"), ge=0)
    # Prompts (Table 6)
    timezone: str = _P("harness.timezone")
    timezone_label: str = _P("harness.timezone_label")
    # CURRENT_TIME of the system prompt: None = the clock at episode start (the paper); a pinned time makes
    # prompts (and so sampled episodes) reproducible. A naive value is read in ``timezone``.
    prompt_time: datetime | None = None
    untrusted_notice: bool = False  # add the "retrieved text is data" rule (changes Table 6's text)
    tools_enabled: list[str] = Field(default_factory=lambda: list(_P("harness.tools_enabled")))
    # Turn protocol (kit.harness.prompts.PROTOCOLS): system prompt and answer tag. "weagent_mmsearch": Table 6,
    # <response>; "points_seeker": POINTS-Seeker §3.2.2 <answer> (its tools and budgets:
    # kit.harness.toolsets.points_seeker.points_seeker_config)
    protocol: Literal["weagent_mmsearch", "points_seeker"] = _P("harness.protocol")
    # A named tool set (kit.harness.toolsets) whose tools the harness adds to the enabled native ones, so a
    # config alone says which tools an episode has (trainer, verl, SFT encoders read it); None: natives only.
    tool_set: str | None = None
    # V-Fold mode (POINTS-Seeker §3.3, Table 8; kit.vfold.modes), read by the "vfold" and "render_all"
    # strategies: "paper" = Table 8 layout, every stale observation folded; "kit" = flowed layout, folded
    # only if smaller and lossless. The three options below override the mode's value (None = the mode's).
    vfold_mode: Literal["paper", "kit"] = "kit"
    vfold_layout: Literal["table8", "flowed"] | None = None
    vfold_only_if_smaller: bool | None = None
    vfold_require_lossless: bool | None = None

    @model_validator(mode="after")
    def _check(self) -> HarnessConfig:
        ints = ("max_turns", "max_calls", "max_context_tokens", "max_response_tokens", "persist_threshold_chars",
                "persist_preview_chars", "extract_max_chars", "max_image_pixels", "loop_guard_repeats")
        bad = [f for f in ints if getattr(self, f) < 1]
        # NaN passes "<= 0" (every comparison with NaN is False): require finite times as well
        bad += [f for f in ("wall_clock_s", "tool_timeout_s", "code_timeout_s")
                if not math.isfinite(getattr(self, f)) or getattr(self, f) <= 0]
        bad += [f for f in ("synthesis_reserve_tokens", "overlong_regenerations", "image_search_refeed",
                            "reverse_search_refeed", "extract_refeed", "code_refeed", "code_max_images")
                if getattr(self, f) < 0]
        if bad:
            raise ValueError(f"budgets must be positive (reserves and re-feed limits >= 0): {bad}")
        from kit.harness.context import context_strategies  # registry of names: harness + kit.vfold + yours

        if self.context_strategy not in context_strategies():
            raise ValueError(f"unknown context_strategy {self.context_strategy!r}; expected one of {context_strategies()}")
        if self.synthesis_reserve_tokens >= self.max_context_tokens:
            raise ValueError("synthesis_reserve_tokens must be smaller than max_context_tokens")
        if self.tool_set is not None:
            # the tool sets' module is imported by name, now: its tools build HarnessConfig objects
            # (points_seeker_config), so this module never imports it
            importlib.import_module(TOOL_SETS_MODULE).tool_set(self.tool_set)  # an unknown name fails, listing the known sets
        return self

    @classmethod
    def smoke(cls, *, real_model: bool = False, **overrides) -> HarnessConfig:
        """Smoke profile: same rules, small budgets for tiny CPU models (labelled smoke in outputs).

        Episodes are bounded by turns, calls and tokens only: the wall-clock budget and the tool /
        code timeouts are set to :data:`SMOKE_WALL_CLOCK_S` / the paper's values, far above what a
        5-turn smoke episode takes even on a loaded 2-core machine, so the same seed gives the same
        episodes (and tables) whatever the machine's speed. The wall-clock rule itself is unchanged
        and tested with explicit ``wall_clock_s`` values. The prompt's CURRENT_TIME is pinned to
        :data:`SMOKE_PROMPT_TIME` for the same reason (the prompt would otherwise change every hour).

        ``real_model``: a real model (a named endpoint or checkpoint) keeps the paper's
        ``max_response_tokens`` (Table 5: 4,096), so its answers are not cut to the tiny model's 96
        tokens and counted as overlong, and reads the clock in its prompt. ``overrides`` win over both.
        """
        base: dict[str, Any] = smoke_harness_values()  # kit/recipes/smoke.yaml (each value's reason there)
        if real_model:
            base["max_response_tokens"] = cls.model_fields["max_response_tokens"].default
            base["prompt_time"] = None  # a real model reasons with the date: give it the clock, as the paper does
        base.update(overrides)
        return cls(**base)

    @classmethod
    def for_profile(cls, profile: str, *, real_model: bool = False, **overrides) -> HarnessConfig:
        """``"smoke"`` → :meth:`smoke` (``real_model`` passed on), ``"paper"`` → Table 5 values.

        Raises:
            ValueError: another profile name.
        """
        if profile == "smoke":
            return cls.smoke(real_model=real_model, **overrides)
        if profile == "paper":
            return cls(**overrides)
        raise ValueError(f"unknown profile {profile!r}; choose 'smoke' or 'paper'")

    def config_hash(self) -> str:
        """sha256 prefix (16 hex chars) of the canonical JSON of this config, for episode records."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


register_section("harness", HarnessConfig)  # recipes' harness and rl_rollout sections (kit.recipes.sections)
