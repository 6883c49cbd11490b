"""The named endpoints of a notebook run and their check before it starts (reachable, serves the
named model), with the main ``model`` and ``rl_prompts`` checked offline when nothing serves them.
Split from :mod:`kit.cli_params` (which re-exports these names)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kit.cli_refs import Written, endpoint_named, main_endpoint_set, model_and_prompt_refs

if TYPE_CHECKING:
    from kit.cli_spec import Param
    from kit.profiles import ResolvedRun


def recipe_model(profile, prefix: str) -> str:
    """The served name the profile's recipe gives role ``prefix`` (``"judge_"`` → ``eval.judge_model``:
    WeAgent ``kimi-k2.6``, POINTS-Seeker ``qwen3-235b-a22b``), or ``""`` when it names none (the main
    ``endpoint``, an expert). What the notebooks use when ``<prefix>model`` is left empty
    (:mod:`kit.eval.judge_factory`, :func:`kit.harness.summarize.make_summarizer`). ``profile``: a name or a
    :class:`kit.profiles.ResolvedRun`."""
    if not prefix:
        return ""
    from kit.profiles import get_profile

    return str(get_profile(profile).value(f"eval.{prefix}model", None) or "")


def named_endpoints(declared: dict[str, Param], params: dict[str, Any],
                    profile: str | ResolvedRun = "smoke") -> list[tuple[str, str, str, str]]:
    """``(parameter, endpoint, model, api-key variable)`` for every ``*endpoint`` parameter whose value
    (override, else default) is a non-empty string; the model is the matching ``*model`` parameter
    (empty: the profile recipe's, :func:`recipe_model`) and the key variable the matching
    ``*api_key_env`` (else ``api_key_env``, else ``OPENAI_API_KEY``)."""
    value = {k: params.get(k, p.default) for k, p in declared.items()}
    out = []
    for name in sorted(declared):
        if not name.endswith("endpoint") or not endpoint_named(value[name]):
            continue
        prefix = name[: -len("endpoint")]
        model = value.get(prefix + "model") or recipe_model(profile, prefix)
        key_env = value.get(prefix + "api_key_env") or value.get("api_key_env") or "OPENAI_API_KEY"
        out.append((name, value[name].strip(), str(model), str(key_env)))
    return out


def preflight_endpoints(declared: dict[str, Param], params: dict[str, Any], where: str = "",
                        timeout_s: float = 5.0, *, profile: str | ResolvedRun = "smoke", written: Written | None = None) -> list[str]:
    """Check every named endpoint of a notebook run (reachable, serves the named model), a ``model``
    named without an endpoint (a local checkpoint folder, :func:`kit.policy.factory.local_model_problem`)
    and ``rl_prompts`` (:func:`kit.rl.prompts.rl_prompts_problem`), before it starts. The checkpoint
    references of :data:`kit.cli_refs.CHECKPOINT_PARAMS` are not checked here but once, offline, by
    :func:`kit.cli_params.check_combinations` (``local_refs=True``, :func:`kit.cli_refs.checkpoint_problems`),
    which runs first.
    ``written``: per parameter, the exact outputs earlier notebooks of a sequence plan write
    (:func:`kit.cli_refs.plan_writes`); a ``model`` or ``rl_prompts`` naming one is not checked (it does not
    exist yet; the sequence re-checks it right before the notebook starts, :func:`kit.cli_refs.local_ref_problems`).

    Returns one line per endpoint checked. Raises :class:`kit.policy.factory.ModelUnavailable` (one
    line naming the parameter) at the first one that cannot be used. The main ``endpoint`` may omit
    its model when the server serves exactly one; any other (``judge_endpoint`` …) left without its
    model is asked for the ``profile`` recipe's (:func:`recipe_model`), and needs one when the recipe has none.
    """
    import os

    from kit.policy.factory import ModelUnavailable, check_endpoint

    lines = []
    written = written or {}
    prefix = f"{where}: " if where else ""
    run_endpoints = getattr(profile, "endpoints", ())  # a kit.profiles.ResolvedRun resolved them with these params
    same = bool(run_endpoints) and dict(getattr(profile, "overrides", {})) == dict(params)
    endpoints = list(run_endpoints) if same else named_endpoints(declared, params, profile)
    for name, endpoint, model, key_env in endpoints:
        if not model and name != "endpoint":
            raise ModelUnavailable(f"{prefix}{name}={endpoint} is set but {name[:-len('endpoint')]}model is empty "
                                   f"(the {profile} recipe names no model for it)")
        try:
            served, _ = check_endpoint(endpoint, model, os.environ.get(key_env), timeout_s)
        except ModelUnavailable as e:  # its message names the endpoint already
            raise ModelUnavailable(f"{prefix}{e}" if name == "endpoint" else f"{prefix}{name}: {e}") from e
        lines.append(f"{prefix}{name} {endpoint} serves {served!r}")
    # the main model named without an endpoint is loaded in process (a checkpoint folder or tiny-<arch>);
    # the checkpoint references of kit.cli_refs.CHECKPOINT_PARAMS were checked offline by
    # kit.cli_params.check_combinations(local_refs=True)
    served = main_endpoint_set(declared, params)
    for name, ref, problem in model_and_prompt_refs(declared, params, served=served, written=written):
        if problem:
            raise ModelUnavailable(f"{prefix}{problem}")
        lines.append(f"{prefix}model {ref!r} loads in process" if name == "model"
                     else f"{prefix}rl_prompts {ref!r} holds RL prompts")
    return lines
