"""Notebook 05's stage schedule as the command line checks it, before the kernel: parsed by the notebook's own
resolver (:func:`kit.rl.staging.resolve_schedule`) with the profile's recipe. Split from :mod:`kit.cli_params`
(which re-exports these names; notebook 05 imports :func:`resolved_stages` from there)."""

from __future__ import annotations

from typing import Any

from kit.cli_spec import ParameterError


def get_profile_value(profile, key: str) -> Any:
    """The value ``key`` of the profile's recipe (no overlay)."""
    from kit.profiles import get_profile

    return get_profile(profile).value(key)


def resolved_stages(spec: str | None, profile: Any = "smoke", *, preflight: bool = False, where: str = "") -> list:
    """Notebook 05's stage schedule for ``stages=spec`` (None: the recipe's ``rl_run.stages``) under ``profile`` (a
    name or a :class:`kit.profiles.ResolvedRun`),
    resolved as the notebook resolves it (:func:`kit.rl.staging.resolve_schedule` with the profile's recipe
    and rollout harness), so the checks before the kernel and the run read one parser.

    Returns:
        list of :class:`kit.rl.staging.Stage`.
    Raises:
        ParameterError: an empty spec, an unknown schedule name or a bad stage list (one line).
    """
    from kit.profiles import get_profile
    from kit.rl.staging import resolve_schedule

    at = f" of {where}" if where else ""
    if spec is not None and not str(spec).strip():  # resolve_schedule would read "" as the recipe's schedule
        raise ParameterError(f"stages={spec!r}{at} is empty: leave stages unset for the recipe's schedule, or "
                             "name one (e.g. 'opd:1,h1:2,h2', 'weagent')")
    P = get_profile(profile, preflight=preflight)
    R = P.recipe_obj()
    # the rollout harness notebook 05 grows the stages from (its cell "the harness of the rollouts")
    base = P.harness(max_turns=1, tools_enabled=["web_search"]) if P.smoke else P.harness(**R.section("rl_rollout"))
    try:
        return resolve_schedule(R, base, spec)
    except ValueError as e:
        raise ParameterError(f"stages={spec!r}{at}: {str(e).splitlines()[0]}") from None


__all__ = ["get_profile_value", "resolved_stages"]
