"""The single-node RL trainer's settings (:class:`RLConfig`; WeAgent Appendix A, recipe section ``rl``).

Defaults come from the recipe files (``kit.recipes.paper_default``), so a paper value is written once, with its
citation. Bounds are pydantic constraints (finite numbers: ``allow_inf_nan=False``); the algorithm is looked up
in the registry (:mod:`kit.rl.registry`) at construction, so an unknown name, or an algorithm whose loss,
advantage estimator or reward is not registered, fails here and not at the first step.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kit.recipes import paper_default as _P  # defaults: kit/recipes/weagent_mmsearch.yaml, section rl
from kit.recipes.sections import register_section
from kit.rl.registry import algorithm

DTYPES = ("auto", "float32", "float16", "bfloat16")  # names TransformersPolicy resolves (None/"auto": by device)
_Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
_NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
_Count = Annotated[int, Field(ge=1)]


class RLConfig(BaseModel):
    """Trainer settings. Paper values (WeAgent Appendix A): 64 prompts × 8 samples, temperature 1.0,
    constant learning rate 5e-7, vision tower frozen. ``micro_batch`` trajectories go through one
    forward/backward (gradient accumulation over the rest); ``updates_per_batch > 1`` reuses a rollout
    batch for several updates against its stored old log-probs. ``keep_checkpoints`` >= 1 (0 would keep all).

    Raises:
        pydantic.ValidationError (a ``ValueError``): an unknown algorithm (naming the registered ones),
            ``finetune``, ``device``, ``dtype`` or field, a count below 1, a non-positive or non-finite
            temperature / learning rate / grad-norm / judge timeout, ``top_p`` outside (0, 1], a negative or
            non-finite ε or weight decay.
    """

    model_config = ConfigDict(extra="forbid")

    algorithm: str = _P("rl.algorithm")
    group_size: _Count = _P("rl.group_size")
    prompts_per_step: _Count = _P("rl.prompts_per_step")
    temperature: _Positive = _P("rl.temperature")  # the ratio needs the sampling distribution
    top_p: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = _P("rl.top_p")
    lr: _Positive = _P("rl.lr")
    eps_lo: _NonNegative | None = None  # None: the algorithm's default (kit.rl.registry.ALGORITHMS)
    eps_hi: _NonNegative | None = None
    updates_per_batch: _Count = 1
    micro_batch: _Count = 1
    max_grad_norm: _Positive = _P("rl.max_grad_norm")
    weight_decay: _NonNegative = 0.0
    finetune: Literal["full", "lora"] = "full"
    lora_rank: _Count = 16
    lora_alpha: _Count = 32
    freeze_vision: bool = _P("rl.freeze_vision")
    judge_timeout_s: _Positive = 60.0
    rollout_concurrency: _Count | None = None
    save_every: _Count = 1
    keep_checkpoints: _Count = 2
    seed: int = 0
    device: Annotated[str, Field(pattern=r"^(cpu|cuda(:\d+)?|mps)$")] = "cpu"
    dtype: Literal["auto", "float32", "float16", "bfloat16"] | None = None

    @field_validator("algorithm")
    @classmethod
    def _registered(cls, name: str) -> str:
        algorithm(name)  # ValueError naming the registered algorithms
        return name

    def resolved_dump(self) -> dict[str, Any]:
        """``model_dump()`` with ``eps_lo`` / ``eps_hi`` resolved: ``None`` becomes the algorithm's clip range
        (:data:`kit.rl.registry.ALGORITHMS`, from the recipes), the values the loss really used (for manifests)."""
        spec = algorithm(self.algorithm)
        out = self.model_dump()
        out["eps_lo"] = spec.eps_lo if self.eps_lo is None else self.eps_lo
        out["eps_hi"] = spec.eps_hi if self.eps_hi is None else self.eps_hi
        return out


register_section("rl", RLConfig)  # the recipes' rl section (kit.recipes.sections)
