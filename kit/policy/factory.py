"""Choose the policy for a run: a served model, an in-process model, or a loudly labelled tiny one.

:func:`make_policy` returns ``(policy, info)``; ``info["smoke"]`` is True when the policy is a tiny
random-weight checkpoint, whose outputs must be labelled as smoke results everywhere.
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

import httpx

log = logging.getLogger(__name__)

TINY_PREFIX = "tiny-"
SMOKE_BANNER = ("SMOKE PROFILE: no real model configured or reachable; using a tiny RANDOM-WEIGHT {arch} checkpoint "
                "built offline. Its outputs are meaningless and are labelled 'smoke'.")


def endpoint_reachable(base_url: str, api_key: str | None = None, timeout_s: float = 5.0) -> tuple[bool, str]:
    """``(True, model ids)`` when ``GET {base_url}/models`` answers 200, else ``(False, reason)``."""
    try:
        r = httpx.get(base_url.rstrip("/") + "/models", timeout=timeout_s,
                      headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    except httpx.HTTPError as e:
        return False, f"{type(e).__name__}: {e}"
    if r.status_code != 200:
        return False, f"HTTP {r.status_code}: {r.text[:200]}"
    try:
        return True, ",".join(m.get("id", "?") for m in r.json().get("data", []))
    except ValueError:
        return True, "?"


def make_policy(model: str = "", endpoint: str = "", *, api_key_env: str = "OPENAI_API_KEY", tiny_arch: str = "qwen2_vl",
                max_new_tokens: int = 96, allow_fallback: bool = True, seed: int = 0) -> tuple[Any, dict]:
    """Build the run's policy.

    * ``endpoint`` set: :class:`~kit.policy.openai_client.OpenAIChatPolicy` serving ``model``.
    * ``model`` a local path or hub id: :class:`~kit.policy.transformers_policy.TransformersPolicy`.
    * ``model`` ``"tiny-qwen2_vl"`` / ``"tiny-qwen2_5_vl"`` / ``"tiny-qwen3_vl"`` or empty: a tiny random
      checkpoint (smoke). When the configured endpoint or model cannot be reached and
      ``allow_fallback`` is True, the tiny checkpoint is used with a loud warning.

    Raises:
        RuntimeError: the configured model is unreachable and ``allow_fallback`` is False.
    """
    reason = ""
    if endpoint:
        key = os.environ.get(api_key_env)
        ok, detail = endpoint_reachable(endpoint, key)
        if ok:
            from kit.policy.openai_client import OpenAIChatPolicy

            return OpenAIChatPolicy(endpoint, model, api_key=key), {"kind": "openai", "endpoint": endpoint, "model": model,
                                                                   "served_models": detail, "smoke": False}
        reason = f"endpoint {endpoint} unreachable ({detail})"
    elif model and not model.startswith(TINY_PREFIX):
        try:
            from kit.policy.transformers_policy import TransformersPolicy

            return TransformersPolicy(model, max_new_tokens=max_new_tokens), {"kind": "transformers", "model": model,
                                                                             "smoke": False}
        except Exception as e:  # hub unreachable, bad path, unsupported architecture
            reason = f"model {model!r} could not be loaded ({type(e).__name__}: {e})"
    if reason and not allow_fallback:
        raise RuntimeError(reason)
    arch = model[len(TINY_PREFIX):] if model.startswith(TINY_PREFIX) else tiny_arch
    from kit.models.tiny import build_tiny_checkpoint
    from kit.policy.transformers_policy import TransformersPolicy

    path = build_tiny_checkpoint(arch, vocab="qwen", seed=seed)
    import torch

    # Tiny models gain nothing from intra-op threads, and on small shared CPUs extra threads
    # oversubscribe the cores (measured: a forward pass 14 ms -> 550 ms with 2 threads under load).
    torch.set_num_threads(1)
    banner = SMOKE_BANNER.format(arch=arch) + (f" Reason: {reason}." if reason else "")
    warnings.warn(banner, stacklevel=2)
    log.warning(banner)
    return TransformersPolicy(str(path), max_new_tokens=max_new_tokens), {"kind": "tiny", "model": f"tiny-{arch}",
                                                                          "path": str(path), "smoke": True,
                                                                          "fallback_reason": reason or None,
                                                                          "banner": banner}
