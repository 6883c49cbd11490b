"""Registries of RL parts by name: policy losses, advantage estimators, rewards and the algorithms made of them.

The papers' parts register through the same functions a researcher uses (verl's ``register_policy_loss`` /
``register_adv_est`` idea): WeAgent's sequence-level GSPO loss (Eq. 7) and POINTS-Seeker's token-level GRPO loss
(§3.2.4) in :mod:`kit.rl.objective`, the eligible-only group normalization (Eq. 4/6) there too, and the rewards
(WeAgent Eq. 5; POINTS-Seeker §4.1) in :mod:`kit.rl.rewards`. An algorithm (:class:`AlgorithmSpec`) names one of
each plus its runtime filtering and clip range; ``RLConfig(algorithm=...)`` looks it up at construction, so an
unknown name fails at once, naming the registered ones. Contracts, checked at registration (the signature) and at
each call (the result):

* **policy loss** ``fn(logp_new, logp_old, mask, advantages, weights, *, eps_lo, eps_hi) -> (loss, stats)``:
  ``logp_new`` / ``logp_old`` / ``mask`` ``[B, T]`` (log-probabilities of the taken tokens in nats, ``logp_old``
  without grad; mask 1 on model-generated tokens), ``advantages`` and ``weights`` ``[B]`` (weights: the Eq. 7
  factor ``1/(|G_train|·n_g)``, 0 for a trajectory left out, global over the batch so micro-batch losses add up);
  returns a 0-dim tensor to *minimize* and a dict of floats (the kit reads ``ratio_mean``, ``clip_frac``,
  ``rows``). ``level`` (``"sequence"`` | ``"token"``) says where the ratio is taken (manifests, docs).
* **advantage estimator** ``fn(rewards, eligible) -> GroupAdvantages``: ``[B][G]`` rewards and eligibility
  flags in, :class:`kit.rl.objective.GroupAdvantages` of the same shape out.
* **reward** ``fn(record, correct, *, protocol) -> float | RewardBreakdown``: ``correct`` is the judge's 0/1 (the
  kit calls the judge first; a failed judge makes the reward NaN without calling ``fn``), ``protocol`` the
  episode's turn protocol; a float is the reward (the kit fills the format and tool terms). The papers' rewards
  are in [0, 1] (the Long-MDR rescue reads a saturation threshold on that scale).

Built-in parts are registered when their module is imported; a lookup imports those modules first, then the modules
named in ``$MMSEARCH_KIT_PLUGINS`` (yours: how a part you register reaches verl's workers).
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

#: the modules whose import registers the kit's own parts
_BUILTIN_MODULES = ("kit.rl.objective", "kit.rl.rewards")
#: the environment variable naming your modules that register parts (:func:`plugin_modules`)
PLUGINS_ENV = "MMSEARCH_KIT_PLUGINS"

LOSS_ARGS = ("logp_new", "logp_old", "mask", "advantages", "weights")
LOSS_KEYWORDS = ("eps_lo", "eps_hi")
ADVANTAGE_ARGS = ("rewards", "eligible")
REWARD_ARGS = ("record", "correct")


@dataclass(frozen=True)
class PolicyLossSpec:
    """A registered policy loss: ``fn`` (module docstring contract), the ratio ``level`` and its ``equation``."""

    name: str
    fn: Callable[..., Any]
    level: Literal["sequence", "token"]
    equation: str


@dataclass(frozen=True)
class AdvantageSpec:
    """A registered advantage estimator ``fn(rewards, eligible) -> GroupAdvantages`` and its ``equation``."""

    name: str
    fn: Callable[..., Any]
    equation: str


@dataclass(frozen=True)
class RewardSpec:
    """A registered reward ``fn(record, correct, *, protocol) -> float | RewardBreakdown`` and its ``equation``."""

    name: str
    fn: Callable[..., Any]
    equation: str


@dataclass(frozen=True)
class AlgorithmSpec:
    """One RL algorithm: how it filters, scores, estimates advantages and clips.

    ``check_runtime``: apply the runtime eligibility checks (FA-GSPO, WeAgent §6.2); ``reward``,
    ``advantage``, ``loss``: registered names; ``eps_lo`` / ``eps_hi``: the default clip range;
    ``self_recovery``: the harness rollouts need (True: FA-GSPO recovers, then filters), refuse (False: vanilla
    GSPO, WeAgent Table 3) or leave to the config (None) the self-recovery rules
    (:func:`kit.rl.eligibility.harness_config_for`).
    """

    name: str
    check_runtime: bool
    reward: str
    loss: str
    advantage: str
    eps_lo: float
    eps_hi: float
    self_recovery: bool | None = None

    @property
    def level(self) -> str:
        """``"sequence"`` (GSPO ratio) or ``"token"`` (GRPO): the level of the algorithm's loss."""
        return policy_loss_spec(self.loss).level


POLICY_LOSSES: dict[str, PolicyLossSpec] = {}
ADVANTAGE_ESTIMATORS: dict[str, AdvantageSpec] = {}
REWARDS: dict[str, RewardSpec] = {}
ALGORITHMS: dict[str, AlgorithmSpec] = {}


def plugin_modules() -> list[str]:
    """The modules named in ``$MMSEARCH_KIT_PLUGINS`` (comma-separated, e.g. ``my_lab.losses,my_lab.rewards``):
    imported with the built-ins, so parts registered there exist in every process that reads the registry, verl's
    Ray workers included (they inherit the driver's environment)."""
    return [m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip()]


def _builtins() -> None:
    """Import the modules that register the kit's own parts, then the plugins. Re-entrant: while one of them is
    importing, the import system hands back the partly run module, so a registration inside it can call this again.

    Raises:
        ImportError: a module named in ``$MMSEARCH_KIT_PLUGINS`` cannot be imported (naming the variable).
    """
    for mod in _BUILTIN_MODULES:
        importlib.import_module(mod)
    for mod in plugin_modules():
        try:
            importlib.import_module(mod)
        except ImportError as e:
            raise ImportError(f"{PLUGINS_ENV} names {mod!r}, which cannot be imported: {e}") from e


def _check_name(kind: str, name: str, table: dict, replace: bool, module: str | None) -> None:
    """Raises ``ValueError`` for a malformed name or one taken (a built-in's too: they are loaded first, unless
    ``module``, the registering module, is one of the built-in modules themselves)."""
    if module not in _BUILTIN_MODULES:
        _builtins()
    if not isinstance(name, str) or not name.strip() or not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"a {kind} name is letters, digits, '_' or '-', got {name!r}")
    if name in table and not replace:
        raise ValueError(f"{kind} {name!r} is registered already (pass replace=True)")


def _check_signature(kind: str, name: str, fn: Callable, positional: tuple[str, ...], keywords: tuple[str, ...]) -> None:
    """``fn`` takes ``positional`` first (by position) and accepts ``keywords`` by name. Raises ``TypeError``."""
    if not callable(fn):
        raise TypeError(f"{kind} {name!r}: {fn!r} is not callable")
    params = list(inspect.signature(fn).parameters.values())
    pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    varpos = any(p.kind is p.VAR_POSITIONAL for p in params)
    if len(pos) < len(positional) and not varpos:
        raise TypeError(f"{kind} {name!r}: takes {[p.name for p in pos]}, the contract passes {list(positional)} "
                        f"by position (kit.rl.registry)")
    names = {p.name for p in params}
    varkw = any(p.kind is p.VAR_KEYWORD for p in params)
    missing = [k for k in keywords if k not in names and not varkw]
    if missing:
        raise TypeError(f"{kind} {name!r}: no keyword parameter(s) {missing} (the contract passes them by name)")
    required = [p.name for p in params[len(positional):] if p.default is p.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in keywords]
    if required:
        raise TypeError(f"{kind} {name!r}: parameter(s) {required} have no default; the kit passes only "
                        f"{list(positional) + list(keywords)}")


def register_policy_loss(name: str, *, level: Literal["sequence", "token"], equation: str = "",
                         replace: bool = False) -> Callable[[Callable], Callable]:
    """Decorator: register ``fn`` as the policy loss ``name`` (contract: module docstring). Returns ``fn``.

    Raises:
        ValueError: a bad or taken name (without ``replace``), ``level`` not ``"sequence"`` / ``"token"``.
        TypeError: ``fn``'s signature does not take the contract's arguments.
    """
    if level not in ("sequence", "token"):
        raise ValueError(f"policy loss {name!r}: level is 'sequence' or 'token', got {level!r}")

    def deco(fn: Callable) -> Callable:
        _check_name("policy loss", name, POLICY_LOSSES, replace, getattr(fn, "__module__", None))
        _check_signature("policy loss", name, fn, LOSS_ARGS, LOSS_KEYWORDS)
        POLICY_LOSSES[name] = PolicyLossSpec(name, fn, level, equation)
        return fn

    return deco


def register_advantage_estimator(name: str, *, equation: str = "", replace: bool = False) -> Callable[[Callable], Callable]:
    """Decorator: register ``fn(rewards, eligible) -> GroupAdvantages`` as the estimator ``name``. Returns ``fn``.

    Raises: ``ValueError`` (bad or taken name), ``TypeError`` (signature).
    """
    def deco(fn: Callable) -> Callable:
        _check_name("advantage estimator", name, ADVANTAGE_ESTIMATORS, replace, getattr(fn, "__module__", None))
        _check_signature("advantage estimator", name, fn, ADVANTAGE_ARGS, ())
        ADVANTAGE_ESTIMATORS[name] = AdvantageSpec(name, fn, equation)
        return fn

    return deco


def register_reward(name: str, *, equation: str = "", replace: bool = False) -> Callable[[Callable], Callable]:
    """Decorator: register ``fn(record, correct, *, protocol) -> float | RewardBreakdown`` as the reward ``name``.

    Raises: ``ValueError`` (bad or taken name), ``TypeError`` (signature).
    """
    def deco(fn: Callable) -> Callable:
        _check_name("reward", name, REWARDS, replace, getattr(fn, "__module__", None))
        _check_signature("reward", name, fn, REWARD_ARGS, ("protocol",))
        REWARDS[name] = RewardSpec(name, fn, equation)
        return fn

    return deco


def register_algorithm(name: str, *, loss: str, advantage: str, reward: str, check_runtime: bool, eps_lo: float,
                       eps_hi: float, self_recovery: bool | None = None, replace: bool = False) -> AlgorithmSpec:
    """Register the algorithm ``name`` made of registered parts; returns its spec (``RLConfig(algorithm=name)``).

    Raises:
        ValueError: a bad or taken name, an unregistered loss / estimator / reward (naming the registered
            ones), or a clip bound that is not a finite number >= 0.
    """
    _check_name("algorithm", name, ALGORITHMS, replace, None)
    return _add_algorithm(name, loss=loss, advantage=advantage, reward=reward, check_runtime=check_runtime,
                          eps_lo=eps_lo, eps_hi=eps_hi, self_recovery=self_recovery)


def _add_algorithm(name: str, *, loss: str, advantage: str, reward: str, check_runtime: bool, eps_lo: float,
                   eps_hi: float, self_recovery: bool | None = None) -> AlgorithmSpec:
    """:func:`register_algorithm` after its name check. The kit's own algorithms come here straight from
    ``kit.rl.objective`` while it is imported (a name check would load the built-ins and plugins from inside it)."""
    import math

    policy_loss_spec(loss), advantage_spec(advantage), reward_spec(reward)
    for k, v in (("eps_lo", eps_lo), ("eps_hi", eps_hi)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"algorithm {name!r}: {k} must be a finite number >= 0, got {v!r}")
    if self_recovery not in (True, False, None):
        raise ValueError(f"algorithm {name!r}: self_recovery is True, False or None, got {self_recovery!r}")
    spec = AlgorithmSpec(name, bool(check_runtime), reward, loss, advantage, float(eps_lo), float(eps_hi), self_recovery)
    ALGORITHMS[name] = spec
    return spec


def _lookup(kind: str, table: dict, name: str) -> Any:
    if name not in table:
        _builtins()
    try:
        return table[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown {kind} {name!r}; registered: {sorted(table)}") from None


def policy_loss_spec(name: str) -> PolicyLossSpec:
    """The registered policy loss ``name``. Raises ``ValueError`` naming the registered ones."""
    return _lookup("policy loss", POLICY_LOSSES, name)


def advantage_spec(name: str) -> AdvantageSpec:
    """The registered advantage estimator ``name``. Raises ``ValueError`` naming the registered ones."""
    return _lookup("advantage estimator", ADVANTAGE_ESTIMATORS, name)


def reward_spec(name: str) -> RewardSpec:
    """The registered reward ``name``. Raises ``ValueError`` naming the registered ones."""
    return _lookup("reward", REWARDS, name)


def algorithm(name: str) -> AlgorithmSpec:
    """The registered algorithm ``name`` (``fa_gspo`` | ``gspo`` | ``grpo`` | yours). Raises ``ValueError``."""
    return _lookup("algorithm", ALGORITHMS, name)


def registered() -> dict[str, list[str]]:
    """Every registered name by kind (built-ins loaded), for docs and error messages."""
    _builtins()
    return {"policy_losses": sorted(POLICY_LOSSES), "advantage_estimators": sorted(ADVANTAGE_ESTIMATORS),
            "rewards": sorted(REWARDS), "algorithms": sorted(ALGORITHMS)}


__all__ = [
    "ADVANTAGE_ESTIMATORS", "ALGORITHMS", "AdvantageSpec", "AlgorithmSpec", "PLUGINS_ENV", "POLICY_LOSSES",
    "PolicyLossSpec", "REWARDS", "RewardSpec", "advantage_spec", "algorithm", "plugin_modules", "policy_loss_spec",
    "register_advantage_estimator", "register_algorithm", "register_policy_loss", "register_reward", "registered",
    "reward_spec",
]
