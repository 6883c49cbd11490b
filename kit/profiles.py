"""Run profiles: what ``profile="smoke"`` or ``"paper"`` means for a notebook or a script, in one place.

``smoke`` is the CPU pipeline check (tiny random-weight model, small budgets, outputs labelled
``smoke``); ``paper`` is the papers' setting (WeAgent Table 5 budgets, a named model). Notebooks get the
profile as a string (Papermill injects it) and turn it into a :class:`Profile` with :func:`get_profile`::

    P = get_profile(profile)
    n_episodes = P.pick(2, 6, given=n_episodes)   # smoke 2, paper 6, unless the caller set it
    config = P.harness(max_turns=1)               # HarnessConfig.smoke(...) if P.smoke else HarnessConfig(...)
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

    @model_validator(mode="after")
    def _consistent(self) -> Profile:
        # the two reserved names must mean what they say: harness() follows the flag, not the name
        if (self.name == "smoke" and not self.smoke) or (self.name == "paper" and self.smoke):
            raise ValueError(f"profile {self.name!r} with smoke={self.smoke} is inconsistent")
        return self

    def harness(self, *, real_model: bool = False, **overrides: Any):
        """The profile's :class:`~kit.harness.config.HarnessConfig` with ``overrides``: smoke budgets
        (:meth:`HarnessConfig.smoke`) when ``smoke`` is set, else Table 5's; built from the flag, so a
        custom profile works without being named anywhere else. ``real_model``: a named real model keeps
        Table 5's response length under smoke (the paper budgets have it already)."""
        from kit.harness.config import HarnessConfig

        if self.smoke:
            return HarnessConfig.smoke(real_model=real_model, **overrides)
        return HarnessConfig(**overrides)

    def pick(self, smoke_value: T, paper_value: T, *, given: T | None = None) -> T:
        """``given`` when it is not None (a caller's explicit value, 0 included), else ``smoke_value``
        under the smoke profile and ``paper_value`` under paper."""
        if given is not None:
            return given
        return smoke_value if self.smoke else paper_value


PROFILES: dict[str, Profile] = {
    "smoke": Profile(name="smoke", smoke=True, labels=("smoke",), default_model="tiny-qwen2_vl"),
    "paper": Profile(name="paper", smoke=False),
}


def get_profile(name: str | Profile) -> Profile:
    """The :class:`Profile` called ``name`` (a :class:`Profile` is returned as it is).

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    if isinstance(name, Profile):
        return name
    if not isinstance(name, str) or name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {', '.join(map(repr, PROFILES))}")
    return PROFILES[name]
