"""Run profiles: what ``profile="smoke"``, ``"paper"`` or ``"points_seeker"`` means for a notebook or a
script, in one place. Each profile selects a recipe (``kit/recipes``: every paper value with its citation).

``smoke`` is the CPU pipeline check (tiny random-weight model, small budgets, outputs labelled ``smoke``;
recipe ``smoke``); ``paper`` is WeAgent-MMSearch as written (recipe ``weagent_mmsearch``, a named model);
``points_seeker`` is POINTS-Seeker as written (recipe ``points_seeker``). ``preflight=True`` keeps a paper
profile's settings and shrinks only sizes (batch, steps, response length) and the model (a tiny stand-in),
through the ``preflight`` overlay recipe, so every object of a paper run is built and stepped on 2 cores;
its outputs are labelled ``preflight``. Notebooks get the profile as a string (Papermill injects it) and
turn it into a :class:`Profile` with :func:`get_profile`::

    P = get_profile(profile, preflight=preflight)
    n_episodes = P.size(2, 6, given=n_episodes)   # a size: smoke/preflight 2, paper 6, unless the caller set it
    turns = P.value("harness.max_turns")          # a recipe value (its citation: `kit.cli recipe NAME`)
    config = P.harness(max_turns=1)               # the recipe's HarnessConfig (smoke: HarnessConfig.smoke)
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, model_validator

T = TypeVar("T")


class Profile(BaseModel):
    """One run profile (frozen).

    Attributes:
        name: ``"smoke"`` or ``"paper"`` (the string :meth:`HarnessConfig.for_profile` takes).
        smoke: True for the tiny-model CPU check.
        labels: labels stored on every output of a run under this profile (``("smoke",)`` or ``()``).
        default_model: the model used when none is named (``"tiny-qwen2_vl"`` under smoke; ``""``: none,
            the paper profile needs a named checkpoint or endpoint).

    Raises:
        ValueError: a profile called ``"smoke"`` with ``smoke=False`` or ``"paper"`` with ``smoke=True``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    smoke: bool
    labels: tuple[str, ...] = ()
    default_model: str = ""
    recipe: str = "weagent_mmsearch"
    preflight: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> Profile:
        # the two reserved names must mean what they say: harness() follows the flag, not the name
        if (self.name == "smoke" and not self.smoke) or (self.name == "paper" and self.smoke):
            raise ValueError(f"profile {self.name!r} with smoke={self.smoke} is inconsistent")
        if self.preflight and self.smoke:
            raise ValueError("preflight applies to a paper profile; the smoke profile is already small")
        return self

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
        (:meth:`HarnessConfig.smoke`) when ``smoke`` is set, else Table 5's; built from the flag, so a
        custom profile works without being named anywhere else. ``real_model``: a named real model keeps
        Table 5's response length under smoke (the paper budgets have it already)."""
        from kit.harness.config import HarnessConfig

        if self.smoke:
            return HarnessConfig.smoke(real_model=real_model, **overrides)
        if self.recipe == "weagent_mmsearch" and not self.preflight:
            return HarnessConfig(**overrides)  # the class defaults are this recipe's values
        return self.recipe_obj().harness(**overrides)

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
    "paper": Profile(name="paper", smoke=False, recipe="weagent_mmsearch"),
    "points_seeker": Profile(name="points_seeker", smoke=False, recipe="points_seeker"),
}
PREFLIGHT_MODEL = "tiny-qwen2_vl"  # the stand-in policy (and judge / summarizer / teacher) of a preflight


def get_profile(name: str | Profile, *, preflight: bool = False) -> Profile:
    """The :class:`Profile` called ``name`` (a :class:`Profile` is returned as it is, made a preflight
    when ``preflight``).

    Raises:
        ValueError: an unknown name (the message lists the known ones); ``preflight`` with ``smoke``.
    """
    if isinstance(name, Profile):
        prof = name
    elif not isinstance(name, str) or name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {', '.join(map(repr, PROFILES))}")
    else:
        prof = PROFILES[name]
    if not preflight or prof.preflight:
        return prof
    if prof.smoke:
        raise ValueError("--preflight applies to a paper profile (paper, points_seeker); smoke is already small")
    return prof.model_copy(update={"preflight": True, "labels": (*prof.labels, "preflight"),
                                   "default_model": PREFLIGHT_MODEL})


def stand_in_policy(role: str, *, max_new_tokens: int = 32):
    """The tiny in-process policy that stands in for a paper role's endpoint (answer judge, image judge,
    summarizer, expert, teacher) in a preflight: a real model call on :data:`PREFLIGHT_MODEL` (random
    weights), so the role's prompt, parsing and error paths run. ``role`` is only for the label."""
    import torch

    from kit.models.tiny import build_tiny_checkpoint
    from kit.policy.transformers_policy import TransformersPolicy

    torch.set_num_threads(1)  # tiny models gain nothing from intra-op threads (see kit.policy.factory.make_policy)
    path = build_tiny_checkpoint(PREFLIGHT_MODEL[len("tiny-"):], vocab="qwen", seed=0)
    policy = TransformersPolicy(str(path), max_new_tokens=max_new_tokens)
    policy.stand_in_for = role  # a preflight's stand-in, not the role's model (no smoke banner: the run says preflight)
    return policy
