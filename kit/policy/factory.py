"""Choose the policy for a run: a served model, an in-process model, or a loudly labelled tiny one.

:func:`make_policy` returns ``(policy, info)``; ``info["smoke"]`` is True when the policy is a tiny
random-weight checkpoint, whose outputs must be labelled as smoke results everywhere.

A model or endpoint the user *named* is never replaced: when it cannot be used (endpoint down,
the server does not serve that model name, the checkpoint does not load) :func:`make_policy` raises
:class:`ModelUnavailable` before the first episode. The tiny fallback is taken only when nothing was
named, and it is announced on the terminal (:func:`announce`), not only in a log that Papermill keeps
inside the executed notebook.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import httpx

log = logging.getLogger(__name__)

TINY_PREFIX = "tiny-"
#: said on the terminal whenever the tiny model runs: under the smoke profile (no model named) and as a preflight's
#: stand-in (``tiny-<arch>`` named); the profile that ran is said by the run's own summary, not here
SMOKE_BANNER = ("TINY MODEL: using a tiny RANDOM-WEIGHT {arch} checkpoint built offline, not a real model. Its "
                "outputs are meaningless and are labelled 'smoke'.")


class ModelUnavailable(RuntimeError):
    """A named endpoint or model cannot be used; the message is one line naming what and why."""


def announce(message: str) -> None:
    """Write ``message`` (one line) to stderr, and from inside a Jupyter kernel (Papermill) also to the
    terminal that started it: ipykernel sends ``sys.stderr`` into the notebook only."""
    err = sys.stderr
    if getattr(err, "_original_stdstream_copy", None) is not None:
        # ipykernel captures fd 2 and forwards what is written there to the notebook *and* the terminal
        err.flush()
        os.write(2, (message + "\n").encode("utf-8", "replace"))
        return
    print(message, file=err, flush=True)
    if "ipykernel" in type(err).__module__ and sys.__stderr__ is not None:  # a kernel without fd capture
        sys.__stderr__.write(message + "\n")
        sys.__stderr__.flush()


MAX_MODELS_BYTES = 4 << 20  # a model list is a few kB; more is not an OpenAI-compatible server


async def _get_body(url: str, headers: dict, timeout_s: float) -> tuple[int, bytes]:
    async with httpx.AsyncClient(timeout=timeout_s) as client:
        async with client.stream("GET", url, headers=headers) as r:
            body = bytearray()
            async for chunk in r.aiter_bytes():
                body += chunk
                if len(body) > MAX_MODELS_BYTES:
                    raise ValueError(f"answer larger than {MAX_MODELS_BYTES} bytes")
            return r.status_code, bytes(body)


def _bounded_get(url: str, headers: dict, timeout_s: float) -> tuple[int, bytes]:
    """``(status, body)`` of ``GET url`` within ``timeout_s`` seconds *in all* (connect, headers, body).

    httpx's timeouts bound each socket read, so a server that drips a byte at a time never trips them;
    an asyncio deadline cancels the request (closing its socket). It runs on a private thread and
    event loop, so it also works inside a Jupyter kernel whose loop is already running.

    Raises:
        TimeoutError: no complete answer in time; httpx.HTTPError / httpx.InvalidURL / ValueError.
    """
    import asyncio
    import threading

    got: dict[str, Any] = {}

    def work() -> None:
        try:
            got["ok"] = asyncio.run(asyncio.wait_for(_get_body(url, headers, timeout_s), timeout_s))
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            got["err"] = e

    t = threading.Thread(target=work, name="kit-served-models", daemon=True)
    t.start()
    t.join(timeout_s + 5.0)  # the loop cancels itself at timeout_s; this is only a backstop
    if "ok" in got:
        return got["ok"]
    err = got.get("err")
    if err is None or isinstance(err, (TimeoutError, asyncio.TimeoutError)):
        raise TimeoutError(f"no complete answer within {timeout_s:g} s")
    raise err


def served_models(base_url: str, api_key: str | None = None, timeout_s: float = 5.0) -> list[str]:
    """Model ids listed by ``GET {base_url}/models`` (OpenAI-compatible servers: vLLM, SGLang, hosted),
    answered completely within ``timeout_s`` seconds. Entries whose id is not a string are ignored.

    Raises:
        ModelUnavailable: an invalid URL, the server cannot be reached or does not answer in time,
            answers non-200 (a 404 on a URL without ``/v1`` says so), or not with a model list.
    """
    url = base_url.rstrip("/") + "/models"
    try:
        status, body = _bounded_get(url, {"Authorization": f"Bearer {api_key}"} if api_key else {}, timeout_s)
    except TimeoutError as e:
        raise ModelUnavailable(f"endpoint {base_url} unreachable ({e})") from e
    except httpx.InvalidURL as e:  # not an httpx.HTTPError
        raise ModelUnavailable(f"endpoint {base_url!r} is an invalid URL ({e})") from e
    except httpx.UnsupportedProtocol as e:
        raise ModelUnavailable(f"endpoint {base_url!r} is an invalid URL ({e}); e.g. http://localhost:8000/v1") from e
    except (httpx.HTTPError, httpx.StreamError, OSError, ValueError) as e:
        raise ModelUnavailable(f"endpoint {base_url} unreachable ({type(e).__name__}: {e or 'no answer'})") from e
    text = body.decode("utf-8", "replace")
    if status != 200:
        hint = ""
        if status == 404 and not base_url.rstrip("/").endswith("/v1"):
            hint = f"; did you mean {base_url.rstrip('/')}/v1?"
        raise ModelUnavailable(f"endpoint {base_url} unreachable (GET {url}: HTTP {status}: "
                               f"{' '.join(text[:200].split())}){hint}")
    try:
        data = json.loads(text).get("data")
        ids = [m["id"] for m in data]
    except (ValueError, AttributeError, KeyError, TypeError) as e:
        raise ModelUnavailable(f"endpoint {base_url} does not answer GET /models with a model list "
                               f"({type(e).__name__}: {' '.join(text[:200].split())})") from e
    return [i for i in ids if isinstance(i, str) and i]  # a null id is no model (never the name 'None')


def endpoint_reachable(base_url: str, api_key: str | None = None, timeout_s: float = 5.0) -> tuple[bool, str]:
    """``(True, comma-joined model ids)`` when ``GET {base_url}/models`` lists models, else ``(False, reason)``."""
    try:
        return True, ",".join(served_models(base_url, api_key, timeout_s))
    except ModelUnavailable as e:
        return False, str(e)


def check_endpoint(endpoint: str, model: str, api_key: str | None = None, timeout_s: float = 5.0) -> tuple[str, list[str]]:
    """The model id to request from ``endpoint`` and the ids it serves.

    ``model`` empty: the server's only model (a server with several needs a name).

    Raises:
        ModelUnavailable: unreachable, ``model`` not among the served ids, or no name and not exactly one model.
    """
    ids = served_models(endpoint, api_key, timeout_s)
    if model:
        if model not in ids:
            raise ModelUnavailable(f"endpoint {endpoint} does not serve model {model!r}; it serves {ids}")
        return model, ids
    if len(ids) != 1:
        raise ModelUnavailable(f"endpoint {endpoint} serves {len(ids)} models {ids}: name one with the model parameter")
    return ids[0], ids


def local_model_problem(model: str) -> str | None:
    """Why ``model`` (named without an endpoint) cannot be loaded in process, or None when it can be tried:
    empty, a ``tiny-<arch>`` name, or a folder holding a ``config.json``. In-process models load from a
    local checkpoint folder only (the Hub is not reached at run time)."""
    if not model:
        return None
    if model.startswith(TINY_PREFIX):
        return tiny_problem(model)
    p = Path(model).expanduser()
    if p.is_dir() and (p / "config.json").is_file():
        return None
    what = "has no config.json" if p.is_dir() else "is not a local checkpoint folder"
    return (f"model {model!r} {what}: an in-process model loads from a checkpoint folder (download it first, "
            f"e.g. python -m kit.cli download {model}), or serve it and name the endpoint")


def tiny_problem(name: str) -> str | None:
    """Why ``tiny-<arch>`` names no tiny checkpoint (an unknown arch), or None."""
    from kit.models.tiny import ARCHS

    arch = name[len(TINY_PREFIX):]
    if arch in ARCHS:
        return None
    return f"model {name!r}: no tiny architecture {arch!r}; known: " + ", ".join(f"tiny-{a}" for a in ARCHS)


def checkpoint_ref_problem(name: str, value: str, *, tiny: bool = True, hub: bool = True) -> str | None:
    """Why parameter ``name``'s ``value`` names no loadable checkpoint, or None: empty, ``tiny-<arch>``
    with a known arch (when ``tiny``), a syntactically valid ``hub:[model:]owner/name@rev`` reference
    (when ``hub``; downloaded by the notebook, :func:`kit.hub.download.resolve_ref`), or a local folder
    holding a ``config.json``."""
    if not value:
        return None
    accepts = "a checkpoint folder" + (", tiny-<arch>" if tiny else "") + (" or hub:owner/name@revision" if hub else "")
    if not tiny and value.startswith(TINY_PREFIX) or not hub and value.startswith("hub:"):
        return f"{name}={value!r}: {name} takes {accepts}"
    if value.startswith(TINY_PREFIX):
        problem = tiny_problem(value)
        return f"{name}: {problem}" if problem else None
    if value.startswith("hub:"):
        from kit.hub.download import _REF

        m = _REF.match(value)
        if m and m.group(1) != "dataset":
            return None
        return (f"{name}={value!r} is not a hub model reference: expected hub:owner/name@revision "
                "(e.g. hub:Qwen/Qwen2.5-VL-7B-Instruct@main)")
    p = Path(value).expanduser()
    if p.is_dir() and (p / "config.json").is_file():
        return None
    what = "has no config.json" if p.is_dir() else "is not a local checkpoint folder"
    return f"{name}={value!r} {what}: give {accepts}"


def is_named(model: str, endpoint: str) -> bool:
    """True when the user named a real model (an endpoint, or a model that is not ``tiny-<arch>``)."""
    return bool(endpoint) or bool(model and not model.startswith(TINY_PREFIX))


def eval_policy_kind(policy_kind: str | None, profile, model: str, endpoint: str) -> str:
    """The evaluated policy of notebook 06: ``policy_kind`` when given, else ``"model"`` whenever a model
    or endpoint is named (a ``tiny-<arch>`` one too) or the profile is ``paper``, and the scripted
    demonstrator only for a smoke run that names none — a named model is never silently replaced. ``profile``:
    a profile name or a :class:`kit.profiles.ResolvedRun`.

    Raises:
        ValueError: ``policy_kind`` is not ``"demonstrator"`` / ``"model"``, or ``"demonstrator"`` was
            asked for while a model or endpoint is named (ambiguous: say which one to evaluate).
    """
    if policy_kind not in (None, "demonstrator", "model"):
        raise ValueError(f"unknown policy_kind {policy_kind!r}; choose 'demonstrator' or 'model'")
    named = bool(model or endpoint)
    if policy_kind == "demonstrator" and named:
        raise ValueError(f"policy_kind='demonstrator' but a model is named (model={model!r}, endpoint={endpoint!r}): "
                         "drop the model/endpoint or use policy_kind='model'")
    smoke = profile.smoke if hasattr(profile, "profile") else profile == "smoke"  # a ResolvedRun, or a name
    return policy_kind or ("model" if named or not smoke else "demonstrator")


def run_labels(profile, info: dict) -> list[str]:
    """Labels of a run's outputs: ``["preflight"]`` for a preflight of a paper profile (tiny stand-ins at
    the paper's settings), ``["smoke"]`` for a tiny/scripted policy (meaningless outputs),
    ``["smoke-budgets"]`` for a real model under the smoke profile's small budgets, else none; every
    ``ablation:<switch>=on|off`` label of the profile (:func:`kit.profiles.get_profile` ``switches``) is added.
    ``profile``: a name or a :class:`kit.profiles.Profile`."""
    from kit.profiles import get_profile

    prof = get_profile(profile)
    ablations = [x for x in prof.labels if x.startswith("ablation:")]  # kit mechanisms switched for an ablation
    if prof.preflight:
        return list(prof.labels)
    if info.get("smoke"):
        return ["smoke", *ablations]
    return (["smoke-budgets"] if prof.name == "smoke" else []) + ablations


def make_policy(model: str = "", endpoint: str = "", *, api_key_env: str = "OPENAI_API_KEY", tiny_arch: str = "qwen2_vl",
                max_new_tokens: int | None = 96, allow_fallback: bool = True, seed: int = 0) -> tuple[Any, dict]:
    """Build the run's policy.

    * ``endpoint`` set: :class:`~kit.policy.openai_client.OpenAIChatPolicy` serving ``model`` (checked
      with ``GET /models``; an empty ``model`` takes the server's only model).
    * ``model`` a local checkpoint folder: :class:`~kit.policy.transformers_policy.TransformersPolicy`
      (anything else is refused with :func:`local_model_problem`'s reason).
    * ``model`` ``"tiny-qwen2_vl"`` / ``"tiny-qwen2_5_vl"`` / ``"tiny-qwen3_vl"``: that tiny random checkpoint.
    * nothing named: the tiny ``tiny_arch`` checkpoint when ``allow_fallback`` (announced on the terminal).

    ``max_new_tokens`` bounds in-process generation (tiny and transformers policies).

    Raises:
        ModelUnavailable: a named endpoint/model cannot be used (never replaced by the tiny model), or
            nothing is named and ``allow_fallback`` is False.
    """
    endpoint = endpoint.strip()  # a blank endpoint names none (kit.cli_refs.main_endpoint_set)
    if endpoint:
        key = os.environ.get(api_key_env)
        name, ids = check_endpoint(endpoint, model, key)
        if name != model:
            announce(f"note: no model named; {endpoint} serves exactly one, {name!r}: using it")
        from kit.policy.openai_client import OpenAIChatPolicy

        return OpenAIChatPolicy(endpoint, name, api_key=key), {"kind": "openai", "endpoint": endpoint, "model": name,
                                                              "served_models": ",".join(ids), "smoke": False}
    if model and not model.startswith(TINY_PREFIX):
        problem = local_model_problem(model)
        if problem:
            raise ModelUnavailable(problem)
        try:
            from kit.policy.transformers_policy import TransformersPolicy

            return TransformersPolicy(model, max_new_tokens=max_new_tokens), {"kind": "transformers", "model": model,
                                                                             "smoke": False}
        except Exception as e:  # hub unreachable, bad path, unsupported architecture
            raise ModelUnavailable(f"model {model!r} could not be loaded ({type(e).__name__}: "
                                   f"{' '.join(str(e).split())[:300]})") from e
    if model.startswith(TINY_PREFIX) and tiny_problem(model):
        raise ModelUnavailable(tiny_problem(model))
    if not model and not allow_fallback:
        raise ModelUnavailable("no model or endpoint named and the tiny-model fallback is disabled")
    arch = model[len(TINY_PREFIX):] if model.startswith(TINY_PREFIX) else tiny_arch
    from kit.models.tiny import build_tiny_checkpoint
    from kit.policy.transformers_policy import TransformersPolicy

    path = build_tiny_checkpoint(arch, vocab="qwen", seed=seed)
    import torch

    # Tiny models gain nothing from intra-op threads, and on small shared CPUs extra threads
    # oversubscribe the cores (measured: a forward pass 14 ms -> 550 ms with 2 threads under load).
    torch.set_num_threads(1)
    reason = None if model else "no model or endpoint named"
    banner = SMOKE_BANNER.format(arch=arch) + (f" Reason: {reason}." if reason else f" (model {model!r} requested).")
    announce(banner)
    warnings.warn(banner, stacklevel=2)
    log.warning(banner)
    return TransformersPolicy(str(path), max_new_tokens=max_new_tokens), {"kind": "tiny", "model": f"tiny-{arch}",
                                                                          "path": str(path), "smoke": True,
                                                                          "fallback_reason": reason,
                                                                          "banner": banner}


class SynthesisPolicies:
    """The models of notebook 02 (data synthesis): the ``expert`` (stages 2-4, VQA conversion, label
    audit, solvability, stable facts) and the ``rl`` policy whose rollouts filter RL queries (WeAgent §4),
    each an :class:`~kit.policy.openai_client.OpenAIChatPolicy`, an in-process stand-in, or None (the
    offline stand-ins run instead).

    A named expert or RL endpoint is used under every profile: the smoke profile only shrinks sizes
    (a named model is never silently replaced by the offline chain-follower). ``offline`` is True when
    no expert is named (stages 2-4 use the offline expander and chain-follower); ``labels`` mark the
    outputs (``synthetic-offline``/``smoke``, or ``expert:<model>`` plus ``smoke-budgets`` under smoke).

    A preflight of a paper profile (``profile`` a :class:`kit.profiles.Profile` with ``preflight``, or
    ``get_profile(name, preflight=True)``) without an expert endpoint runs every model role on
    ``stand_in`` (default :func:`kit.profiles.stand_in_policy` ``("expert")``, a tiny random model), labelled
    ``preflight``; ``stand_in`` is refused outside a preflight (a paper run names its expert).
    """

    def __init__(self, profile: Any, expert_endpoint: str, expert_model: str, rl_endpoint: str = "",
                 rl_model: str = "", api_key: str | None = None, *, stand_in: Any | None = None):
        from kit.data import OFFLINE_LABEL
        from kit.policy.openai_client import OpenAIChatPolicy
        from kit.profiles import get_profile

        prof = get_profile(profile)
        for role, endpoint, model in (("expert", expert_endpoint, expert_model), ("rl", rl_endpoint, rl_model)):
            if model and not endpoint:
                raise ModelUnavailable(f"{role}_model={model!r} is set but {role}_endpoint is empty: name the "
                                       f"OpenAI-compatible endpoint that serves it")
        if stand_in is not None and not prof.preflight:
            raise ValueError(f"a stand-in expert is for a preflight; the {prof.name} profile names its expert")
        standing_in = prof.preflight and not expert_endpoint
        if not prof.smoke and not standing_in and not (expert_endpoint and expert_model):
            raise ModelUnavailable("the paper profile needs expert_endpoint and expert_model (an OpenAI-compatible expert)")
        self.profile, self.expert_endpoint, self.rl_endpoint = prof.name, expert_endpoint, rl_endpoint
        self.preflight = prof.preflight
        self.expert = self.rl = None
        if expert_endpoint:
            name, _ = check_endpoint(expert_endpoint, expert_model, api_key)
            self.expert = OpenAIChatPolicy(expert_endpoint, name, api_key=api_key)
        elif standing_in:
            from kit.profiles import stand_in_policy

            self.expert = stand_in if stand_in is not None else stand_in_policy("expert")
        if rl_endpoint:
            name, _ = check_endpoint(rl_endpoint, rl_model, api_key)
            self.rl = OpenAIChatPolicy(rl_endpoint, name, api_key=api_key)
        else:
            self.rl = self.expert
        self.offline = self.expert is None
        if self.offline:
            self.labels = [OFFLINE_LABEL, "smoke"]
        else:
            self.labels = ([f"expert:{self.expert_name}"] + (["smoke-budgets"] if prof.smoke else [])
                           + (["preflight"] if prof.preflight else []))
        if not self.offline or self.rl is not None:
            where = (f" at {expert_endpoint}" if expert_endpoint else " (in process, preflight stand-in)")
            announce(f"data synthesis: expert {self.expert_name + where if self.expert else 'offline'}"
                     f"; RL rollouts {policy_name(self.rl) if self.rl else 'offline'}"
                     f" (profile {prof.name}{', preflight' if prof.preflight else ''})")

    @property
    def expert_name(self) -> str | None:
        """The expert's served name (``openai``) or policy name (a stand-in); None offline."""
        return policy_name(self.expert) if self.expert is not None else None

    def manifest_model(self) -> dict[str, Any]:
        """The manifest's ``model`` entry: ``smoke`` is True only for the offline stand-ins."""
        if self.offline and self.rl is None:
            return {"smoke": True, "model": None}
        out: dict[str, Any] = {"smoke": False, "model": self.expert_name}
        if self.preflight and not self.expert_endpoint:
            out["stand_in"] = True
        if self.expert_endpoint:
            out["expert_endpoint"] = self.expert_endpoint
        if self.rl is not None:
            out["rl_model"] = policy_name(self.rl)
            if self.rl_endpoint:
                out["rl_endpoint"] = self.rl_endpoint
        return out


def policy_name(policy: Any) -> str:
    """A policy's model name for labels: the served ``model`` of an endpoint policy, else its ``name``
    (an in-process policy's ``model`` attribute is the network, not a name)."""
    model = getattr(policy, "model", None)
    return model if isinstance(model, str) else str(getattr(policy, "name", type(policy).__name__))


def synthesis_policies(profile: Any, expert_endpoint: str, expert_model: str, rl_endpoint: str = "", rl_model: str = "",
                       api_key: str | None = None, *, stand_in: Any | None = None) -> SynthesisPolicies:
    """Notebook 02's expert and RL policies (:class:`SynthesisPolicies`); ``profile``: a name or a
    :class:`kit.profiles.Profile` (a preflight without an expert endpoint: the tiny ``stand_in``).

    Raises:
        ModelUnavailable: a named endpoint is down or does not serve the named model, a model is named
            without its endpoint, or the paper profile (not a preflight) names no expert.
        ValueError: ``stand_in`` outside a preflight.
    """
    return SynthesisPolicies(profile, expert_endpoint, expert_model, rl_endpoint, rl_model, api_key, stand_in=stand_in)
