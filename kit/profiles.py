"""Run profiles: what ``profile="smoke"``, ``"weagent_mmsearch"``, ``"long_mdr"`` or ``"points_seeker"`` means for a
notebook or a script, in one place. Each profile selects a recipe (``kit/recipes``: every paper value with its
citation); a paper profile runs only the mechanisms its paper describes (:mod:`kit.recipes.mechanisms`).

``smoke`` is the CPU pipeline check (tiny random-weight model, small budgets, outputs labelled ``smoke``; recipe
``smoke``: WeAgent's inside Long-MDR's staging, so every mechanism is exercised); ``weagent_mmsearch`` is
WeAgent-MMSearch as written (``paper`` is another name for it: :data:`PROFILE_ALIASES`; a run under it says
``weagent_mmsearch`` in its folder and manifest); ``long_mdr`` is WeAgent's harness and FA-GSPO inside Long-MDR's
staging; ``points_seeker`` is POINTS-Seeker as written. ``preflight=True`` keeps a paper profile's settings and
shrinks only sizes (batch, steps, response length) and the model (a tiny stand-in), through the ``preflight``
overlay recipe, so every object of a paper run is built and stepped on 2 cores; its outputs are labelled
``preflight``. ``switches`` turn a kit mechanism on or off for an ablation (``{"self_recovery": True}`` under
``points_seeker``); each is labelled on every output. Notebooks get the profile as a string (Papermill injects
it) and turn it into a :class:`Profile` with :func:`get_profile`::

    P = get_profile(profile, preflight=preflight, switches={"self_recovery": self_recovery})
    n_episodes = P.size(2, 6, given=n_episodes)   # a size: smoke/preflight 2, paper 6, unless the caller set it
    turns = P.value("harness.max_turns")          # a recipe value (its citation: `kit.cli recipe NAME`)
    config = P.harness(max_turns=1)               # the recipe's HarnessConfig (smoke: HarnessConfig.smoke)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, model_validator

T = TypeVar("T")
PAPER_PROFILE_NAMES = ("weagent_mmsearch", "long_mdr", "points_seeker")  # profiles that run a paper as written


class Profile(BaseModel):
    """One run profile (frozen).

    Attributes:
        name: the profile's name (:data:`PROFILES`; an alias such as ``"paper"`` resolves to its profile).
        smoke: True for the tiny-model CPU check.
        labels: labels stored on every output of a run under this profile (``("smoke",)`` or ``()``).
        default_model: the model used when none is named (``"tiny-qwen2_vl"`` under smoke; ``""``: none,
            the paper profile needs a named checkpoint or endpoint).

        switches: kit mechanisms turned on or off for an ablation (``{"self_recovery": True}``;
            :data:`kit.recipes.mechanisms.SWITCHES`), labelled ``ablation:<name>=on|off`` on every output.

    Raises:
        ValueError: a profile called ``"smoke"`` with ``smoke=False``, a paper recipe with ``smoke=True``, an
            unknown switch (the message lists the known ones).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    smoke: bool
    labels: tuple[str, ...] = ()
    default_model: str = ""
    recipe: str = "weagent_mmsearch"
    preflight: bool = False
    switches: tuple[tuple[str, bool], ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> Profile:
        # the two reserved names must mean what they say: harness() follows the flag, not the name
        if (self.name == "smoke" and not self.smoke) or (self.name in PAPER_PROFILE_NAMES and self.smoke):
            raise ValueError(f"profile {self.name!r} with smoke={self.smoke} is inconsistent")
        from kit.recipes.mechanisms import SWITCHES

        bad = sorted(k for k, _ in self.switches if k not in SWITCHES)
        if bad:
            raise ValueError(f"unknown mechanism switch(es) {bad}; known: {sorted(SWITCHES)}")
        if self.preflight and self.smoke:
            raise ValueError("preflight applies to a paper profile; the smoke profile is already small")
        return self

    def switch(self, name: str) -> bool | None:
        """The ablation value of mechanism switch ``name`` (None: the recipe's)."""
        return dict(self.switches).get(name)

    @property
    def run_name(self) -> str:
        """The default run folder name: the profile (an alias resolved), ``_preflight`` added for a preflight
        (``results/<run_name>/<notebook>/``, :mod:`kit.runs`)."""
        return f"{self.name}_preflight" if self.preflight else self.name

    def describe(self) -> str:
        """What ran, for summaries, figures and cards: ``profile `weagent_mmsearch` (recipe weagent_mmsearch+preflight;
        ablation self_recovery=off)``: the resolved profile, the recipe with its overlays, and every switch."""
        ab = [x[len("ablation:"):] for x in self.labels if x.startswith("ablation:")]  # switches that change the recipe
        sw = "; ablation " + ", ".join(ab) if ab else ""
        return f"profile `{self.name}` (recipe {'+'.join((self.recipe, *self.overlays))}{sw})"

    @property
    def overlays(self) -> tuple[str, ...]:
        return ("preflight",) if self.preflight else ()

    def recipe_obj(self):
        """The resolved :class:`~kit.recipes.Recipe` (with the preflight overlay when set)."""
        from kit.recipes import load_recipe

        return load_recipe(self.recipe, self.overlays)

    def value(self, key: str, default: Any = ...) -> Any:
        """The recipe value ``key`` (``"section.name"``); ``default`` when the recipe has none (else an error)."""
        return self.recipe_obj().get(key, default)

    @property
    def small(self) -> bool:
        """True when sizes are small: the smoke profile or a preflight."""
        return self.smoke or self.preflight

    def harness(self, *, real_model: bool = False, **overrides: Any):
        """The profile's :class:`~kit.harness.config.HarnessConfig` with ``overrides``: smoke budgets
        (:meth:`HarnessConfig.smoke`) when ``smoke`` is set, else the recipe's (``harness`` section, with the
        preflight overlay when set); built from the flag, so a custom profile works without being named
        anywhere else. ``real_model``: a named real model keeps Table 5's response length under smoke (the
        paper budgets have it already). Only ``overrides`` count as set (``model_fields_set``): a recipe
        value is not the caller's choice (:func:`kit.rl.eligibility.explicit_self_recovery`)."""
        from kit.harness.config import HarnessConfig

        sw = self.switch("self_recovery")
        if sw is not None and "self_recovery" not in overrides:  # an ablation: the caller's choice (fields set)
            overrides = {**overrides, "self_recovery": sw}
        if self.smoke:
            return HarnessConfig.smoke(real_model=real_model, **overrides)
        return self.recipe_obj().harness(**overrides)  # validated; only overrides are set (Recipe.harness)

    def pick(self, smoke_value: T, paper_value: T, *, given: T | None = None) -> T:
        """``given`` when it is not None (a caller's explicit value, 0 included), else ``smoke_value``
        under the smoke profile and ``paper_value`` under paper."""
        if given is not None:
            return given
        return smoke_value if self.smoke else paper_value

    def size(self, small_value: T, paper_value: T, *, given: T | None = None) -> T:
        """A size (a count of tasks, episodes, steps): ``given`` when not None, else ``small_value`` under
        smoke or preflight, ``paper_value`` otherwise."""
        if given is not None:
            return given
        return small_value if self.small else paper_value


PROFILES: dict[str, Profile] = {
    "smoke": Profile(name="smoke", smoke=True, labels=("smoke",), default_model="tiny-qwen2_vl", recipe="smoke"),
    "weagent_mmsearch": Profile(name="weagent_mmsearch", smoke=False, recipe="weagent_mmsearch"),
    "long_mdr": Profile(name="long_mdr", smoke=False, recipe="long_mdr"),
    "points_seeker": Profile(name="points_seeker", smoke=False, recipe="points_seeker"),
}
#: other names of a profile: ``paper`` is WeAgent-MMSearch as written (the run says weagent_mmsearch)
PROFILE_ALIASES: dict[str, str] = {"paper": "weagent_mmsearch"}
#: every name ``--profile`` accepts (the command line's choices; notebooks' ``profile: Literal[...]``)
PROFILE_NAMES: tuple[str, ...] = ("smoke", "weagent_mmsearch", "long_mdr", "points_seeker", "paper")
PREFLIGHT_MODEL = "tiny-qwen2_vl"  # the stand-in policy (and judge / summarizer / teacher) of a preflight


def resolve_profile_name(name: str) -> str:
    """``name`` with an alias resolved (``"paper"`` → ``"weagent_mmsearch"``). Raises ``ValueError`` (unknown)."""
    if not isinstance(name, str) or name not in (*PROFILES, *PROFILE_ALIASES):
        raise ValueError(f"unknown profile {name!r}; choose one of {', '.join(map(repr, PROFILE_NAMES))}")
    return PROFILE_ALIASES.get(name, name)


@dataclass(frozen=True)
class ResolvedRun:
    """A notebook run's profile, resolved once where the run starts (:func:`resolve_run`) and handed down to the
    checks that read it (:func:`kit.cli_params.check_combinations`, :mod:`kit.cli_endpoints`,
    :func:`kit.data.synthesis_web.resolve_web_backend`, :func:`kit.policy.factory.eval_policy_kind`), so the alias,
    the preflight and the recipe are worked out in one place.

    Attributes:
        given: the profile's name as the caller wrote it (``"paper"``): what messages say.
        profile: the :class:`Profile`, alias resolved, without the preflight overlay (its recipe values:
            :meth:`value`).
        preflight: a paper profile's preflight (:attr:`run_profile` has the overlay).
        overrides: the run's typed parameter overrides (read-only), ``{}`` when not known yet.
        endpoints: ``(parameter, endpoint, model, api-key variable)`` of every endpoint the run names
            (:func:`kit.cli_params.resolved_run` fills it from the notebook's parameters; ``()`` otherwise).
    """

    given: str
    profile: Profile
    preflight: bool = False
    overrides: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    endpoints: tuple[tuple[str, str, str, str], ...] = ()

    @property
    def name(self) -> str:
        """The profile's name after its alias (``"weagent_mmsearch"`` for ``"paper"``)."""
        return self.profile.name

    @property
    def smoke(self) -> bool:
        return self.profile.smoke

    @functools.cached_property
    def run_profile(self) -> Profile:
        """The profile the run executes: :attr:`profile` with the preflight overlay when :attr:`preflight`."""
        return get_profile(self.profile, preflight=self.preflight)

    def value(self, key: str, default: Any = ...) -> Any:
        """The recipe value ``key`` of the profile (no overlay), ``default`` when the recipe has none."""
        return self.profile.value(key, default)

    def __str__(self) -> str:
        return self.given


def resolve_run(profile: str | Profile | ResolvedRun, *, preflight: bool = False,
                overrides: Mapping[str, Any] | None = None) -> ResolvedRun:
    """``profile`` resolved once for a run (a :class:`ResolvedRun` is returned as it is, given ``overrides``
    when it had none).

    Raises:
        ValueError: an unknown profile name (:func:`resolve_profile_name`).
    """
    if isinstance(profile, ResolvedRun):
        if overrides is not None and not profile.overrides:
            return ResolvedRun(profile.given, profile.profile, profile.preflight, MappingProxyType(dict(overrides)),
                               profile.endpoints)
        return profile
    given = profile.name if isinstance(profile, Profile) else profile
    prof = profile if isinstance(profile, Profile) else PROFILES[resolve_profile_name(profile)]
    return ResolvedRun(given, prof, bool(preflight), MappingProxyType(dict(overrides or {})))


def get_profile(name: str | Profile | ResolvedRun, *, preflight: bool = False, switches: dict[str, bool | None] | None = None) -> Profile:
    """The :class:`Profile` called ``name`` (an alias resolved; a :class:`Profile` is returned as it is, a
    :class:`ResolvedRun` gives its profile), made a preflight when ``preflight``, with the ablation ``switches``
    whose value is not None.

    Raises:
        ValueError: an unknown name (the message lists the known ones); ``preflight`` with ``smoke``; an unknown
            switch, or one the profile's recipe cannot change (:func:`kit.recipes.mechanisms.switch_problem`).
    """
    if isinstance(name, ResolvedRun):
        name = name.profile
    prof = name if isinstance(name, Profile) else PROFILES[resolve_profile_name(name)]
    if preflight and not prof.preflight:
        if prof.smoke:
            raise ValueError("--preflight applies to a paper profile (weagent_mmsearch, long_mdr, points_seeker); "
                             "smoke is already small")
        prof = prof.model_copy(update={"preflight": True, "labels": (*prof.labels, "preflight"),
                                       "default_model": PREFLIGHT_MODEL})
    given = {k: bool(v) for k, v in (switches or {}).items() if v is not None}
    if given:
        from kit.recipes.mechanisms import switch_labels, switch_problem

        problem = switch_problem(prof.recipe, given)
        if problem:
            raise ValueError(problem)
        merged = {**dict(prof.switches), **given}
        prof = Profile(**{**prof.model_dump(), "switches": tuple(sorted(merged.items())),
                          "labels": (*prof.labels, *(x for x in switch_labels(prof.recipe, given) if x not in prof.labels))})
    return prof


class StandInRole(NamedTuple):
    """Where a preflight finds the paper model a stand-in replaces: ``recipe_key`` (the recipe value naming it,
    or None: the recipe gives none) and ``parameter`` (the notebook parameter that names it when the recipe
    does not: a checkpoint, or the endpoint serving the role)."""

    recipe_key: str | None
    parameter: str


#: the paper roles a preflight runs on a tiny stand-in (one table: the recipe key naming the paper's model, and
#: the parameter naming it when the recipe gives none, e.g. the SFT checkpoint or the OPD teacher)
STAND_IN_ROLES: dict[str, StandInRole] = {
    "policy": StandInRole("paper_only.base_model", "base_model"),
    "answer judge": StandInRole("eval.judge_model", "judge_endpoint"),
    "image judge": StandInRole("eval.image_judge_model", "image_judge_endpoint"),
    "summarizer": StandInRole("eval.summarizer_model", "summarizer_endpoint"),
    "expert": StandInRole("paper_only.expert_model", "expert_endpoint"),
    "OPD teacher": StandInRole(None, "teacher_model")}


#: what :func:`preflight_stand_ins` records for a role the notebook does not override
DEFAULT_STAND_IN = f"{PREFLIGHT_MODEL} (random weights, in process) where this notebook uses the role"


def stand_in_name(paper_model: str) -> str:
    """The label of a model that stands in for ``paper_model`` in a preflight, e.g. ``"tiny stand-in
    (tiny-qwen2_vl, random weights) for kimi-k2.6"`` (what a preflight's judge names record instead of the
    paper's model)."""
    return f"tiny stand-in ({PREFLIGHT_MODEL}, random weights) for {paper_model}"


def preflight_stand_ins(profile: str | Profile, ran: dict[str, str | None] | None = None) -> dict[str, dict[str, str]]:
    """What really ran for each paper role (:data:`STAND_IN_ROLES`) of a preflight of ``profile``:
    ``{role: {"stands_in_for": the recipe's model (else the parameter naming it), "ran": what ran}}``. ``ran``
    overrides the default :data:`DEFAULT_STAND_IN` per role (e.g. a warm-started stand-in policy, the phash
    image judge); a role given as ``None`` did not run and is left out, so the manifest names only the roles
    the run used. Written by :func:`kit.manifest.write_manifest` into every preflight manifest.

    Raises:
        ValueError: an unknown profile, or a role in ``ran`` that is not in :data:`STAND_IN_ROLES`.
    """
    prof = get_profile(profile, preflight=True)
    ran = dict(ran or {})
    bad = sorted(set(ran) - set(STAND_IN_ROLES))
    if bad:
        raise ValueError(f"unknown stand-in roles {bad}; known: {sorted(STAND_IN_ROLES)}")
    out = {}
    for role, (key, parameter) in STAND_IN_ROLES.items():
        if role in ran and ran[role] is None:
            continue  # the role did not run in this notebook: no stand-in to name
        named = prof.value(key, None) if key else None
        out[role] = {"stands_in_for": str(named) if named else parameter, "ran": str(ran.get(role, DEFAULT_STAND_IN))}
    return out


def stand_in_policy(role: str, *, max_new_tokens: int = 32):
    """The tiny in-process policy that stands in for a paper role's endpoint (answer judge, image judge,
    summarizer, expert, teacher) in a preflight: a real model call on :data:`PREFLIGHT_MODEL` (random
    weights), so the role's prompt, parsing and error paths run. ``role`` is only for the label
    (``policy.stand_in_for``). Cached per process and per ``(role, max_new_tokens)``: a preflight builds each
    role's model once, however many judges / summarizers it makes (``stand_in_policy.cache_clear()`` drops them).

    Raises:
        ValueError: ``max_new_tokens`` below 1.
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    return _stand_in_policy(str(role), int(max_new_tokens))


@functools.cache
def _stand_in_policy(role: str, max_new_tokens: int):
    import torch

    from kit.models.tiny import build_tiny_checkpoint
    from kit.policy.transformers_policy import TransformersPolicy

    torch.set_num_threads(1)  # tiny models gain nothing from intra-op threads (see kit.policy.factory.make_policy)
    path = build_tiny_checkpoint(PREFLIGHT_MODEL[len("tiny-"):], vocab="qwen", seed=0)
    policy = TransformersPolicy(str(path), max_new_tokens=max_new_tokens)
    policy.stand_in_for = role  # a preflight's stand-in, not the role's model (no smoke banner: the run says preflight)
    return policy


stand_in_policy.cache_clear = _stand_in_policy.cache_clear  # type: ignore[attr-defined]
