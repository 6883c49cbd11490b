"""The ``kit`` section of the verl config → algorithm and harness config, without importing verl.

The ``kit_harness`` agent loop (:mod:`kit.rl.verl.agent_loop`) reads its settings through these two
functions, so the verl path and the single-node trainer make the same decisions: ``kit.algorithm``
``gspo`` (vanilla, WeAgent Table 3) runs episodes with ``HarnessConfig.self_recovery=False`` and no
runtime filtering; ``fa_gspo`` recovers and filters (§6.2); a contradiction is refused
(:func:`kit.rl.eligibility.harness_config_for`). Importable (and tested) outside the verl environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kit.harness.config import HarnessConfig
from kit.rl.eligibility import harness_config_for
from kit.rl.objective import AlgorithmSpec, algorithm


def algorithm_of(kit_cfg: Mapping[str, Any]) -> AlgorithmSpec:
    """``kit.algorithm`` (default ``fa_gspo``) as its spec. Raises ``ValueError`` for an unknown name."""
    return algorithm(str(kit_cfg.get("algorithm", "fa_gspo")))


def harness_config(kit_cfg: Mapping[str, Any]) -> HarnessConfig:
    """``kit.harness`` (``paper`` | ``smoke``) with ``kit.harness_overrides``, then the algorithm's
    self-recovery rule.

    Raises:
        ValueError: an unknown ``kit.harness``, a bad override (pydantic's message), or a combination the
            algorithm refuses (``fa_gspo`` with ``self_recovery: false``, ``gspo`` with ``self_recovery: true``).
    """
    name = kit_cfg.get("harness", "paper")
    if name not in ("paper", "smoke"):
        raise ValueError(f"unknown kit.harness {name!r} (paper | smoke)")
    base = HarnessConfig.smoke() if name == "smoke" else HarnessConfig()
    over = dict(kit_cfg.get("harness_overrides", {}) or {})
    cfg = HarnessConfig(**{**base.model_dump(), **over})
    return harness_config_for(algorithm_of(kit_cfg).name, cfg, explicit="self_recovery" in over)


__all__ = ["algorithm_of", "harness_config"]
