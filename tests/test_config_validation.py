"""Numeric and name validation of the configuration models (issue 15, attack report: NaN budgets,
typos silently ignored, inconsistent profiles, stage schedules that parse nonsense)."""

from __future__ import annotations

import ast
import importlib.util
import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from kit.harness.config import HarnessConfig
from kit.profiles import Profile, get_profile
from kit.rl.staging import MAX_STAGE_TURNS, RescueConfig, Stage, parse_stages
from kit.rl.trainer import RLConfig
from kit.train.sft import LR_SCHEDULERS, SFTTrainConfig

nan, inf = math.nan, math.inf


# ------------------------------------------------------------------------------------ HarnessConfig
def test_harness_config_refuses_a_misspelt_field():
    with pytest.raises(ValidationError, match="max_turn"):
        HarnessConfig(max_turn=3)
    with pytest.raises(ValidationError, match="max_turn"):
        HarnessConfig.smoke(max_turn=1)
    with pytest.raises(ValidationError, match="max_turn"):
        get_profile("paper").harness(max_turn=1)
    # the callers that rebuild a config from a dump still work
    base = HarnessConfig.smoke()
    assert HarnessConfig(**base.model_dump()) == base
    assert Stage("h2", max_turns=2).harness_config(base).max_turns == 2


@pytest.mark.parametrize("field", ["wall_clock_s", "tool_timeout_s", "code_timeout_s"])
@pytest.mark.parametrize("value", [nan, inf, -inf, 0.0])
def test_harness_config_times_must_be_finite_and_positive(field, value):
    with pytest.raises(ValidationError, match=field):
        HarnessConfig(**{field: value})


# ---------------------------------------------------------------------------------------- RLConfig
@pytest.mark.parametrize("kw, words", [
    ({"temperature": nan}, r"temperature\n.*finite"), ({"temperature": inf}, r"temperature\n.*finite"),
    ({"lr": -1}, r"lr\n.*greater than 0"), ({"lr": nan}, r"lr\n.*finite"), ({"lr": 0}, r"lr\n.*greater than 0"),
    ({"top_p": 0}, "top_p"), ({"top_p": 5}, "top_p"), ({"top_p": nan}, "top_p"),
    ({"eps_lo": -0.2}, "eps_lo"), ({"eps_hi": nan}, "eps_hi"), ({"weight_decay": nan}, "weight_decay"),
    ({"max_grad_norm": -1}, "max_grad_norm"), ({"max_grad_norm": 0}, "max_grad_norm"),
    ({"finetune": "lora", "lora_rank": 0}, "lora_rank"), ({"lora_alpha": 0}, "lora_alpha"),
    ({"judge_timeout_s": -5}, "judge_timeout_s"), ({"judge_timeout_s": nan}, "judge_timeout_s"),
    ({"keep_checkpoints": 0}, "keep_checkpoints"), ({"keep_checkpoints": -1}, "keep_checkpoints"),
    ({"rollout_concurrency": 0}, "rollout_concurrency"),
    ({"device": "gpu"}, "device"), ({"device": "cuda:x"}, "device"), ({"dtype": "fp17"}, "dtype"),
])
def test_rl_config_refuses_bad_numbers_and_names(kw, words):
    with pytest.raises(ValidationError, match=words):
        RLConfig(**kw)


def test_rl_config_accepts_the_valid_edges():
    c = RLConfig(top_p=1.0, eps_lo=0.0, eps_hi=0.28, keep_checkpoints=1, device="cuda:1", dtype="bfloat16",
                 rollout_concurrency=4, lora_rank=1, lora_alpha=1)
    assert (c.device, c.dtype, c.keep_checkpoints) == ("cuda:1", "bfloat16", 1)
    for device in ("cpu", "cuda", "mps"):
        assert RLConfig(device=device, dtype=None).device == device


# ---------------------------------------------------------------------------------- SFTTrainConfig
@pytest.mark.parametrize("kw, words", [
    ({"grad_accum": 0}, "grad_accum"), ({"per_device_batch_size": -1}, "per_device_batch_size"),
    ({"save_steps": 0}, "save_steps"), ({"logging_steps": 0}, "logging_steps"),
    ({"lr_language": 0}, "lr_language"), ({"lr_language": nan}, "lr_language"), ({"lr_vision": -1e-6}, "lr_vision"),
    ({"lr_vision": inf}, "lr_vision"), ({"epochs": 0}, "epochs"), ({"epochs": nan}, "epochs"),
    ({"warmup_ratio": 5}, "warmup_ratio"), ({"warmup_ratio": -0.1}, "warmup_ratio"),
    ({"lr_scheduler": "cosin"}, "lr_scheduler"), ({"lora_dropout": 1.0}, "lora_dropout"),
    ({"lora_dropout": 1.5}, "lora_dropout"), ({"lora_rank": -1}, "lora_rank"),
])
def test_sft_config_refuses_bad_numbers(kw, words):
    with pytest.raises(ValidationError, match=words):
        SFTTrainConfig(**kw)


def test_sft_config_valid_edges_and_scheduler_names():
    assert SFTTrainConfig(lr_vision=0.0, warmup_ratio=1.0, lora_dropout=0.0, lr_scheduler="constant").lr_vision == 0.0
    # LR_SCHEDULERS is transformers.SchedulerType, read from its source (importing transformers takes seconds)
    spec = importlib.util.find_spec("transformers")
    src = Path(spec.origin).parent / "trainer_utils.py"
    cls = next(n for n in ast.walk(ast.parse(src.read_text())) if isinstance(n, ast.ClassDef) and n.name == "SchedulerType")
    values = [a.value.value for a in cls.body if isinstance(a, ast.Assign) and isinstance(a.value, ast.Constant)]
    assert set(LR_SCHEDULERS) == set(values)


# ---------------------------------------------------------------------------- Stage, RescueConfig
@pytest.mark.parametrize("kw, words", [
    ({"max_turns": 0}, "budgets must be >= 1"), ({"max_calls": -3}, "budgets must be >= 1"),
    ({"max_context_tokens": 0}, "budgets must be >= 1"), ({"wall_clock_s": nan}, "wall_clock_s"),
    ({"wall_clock_s": inf}, "wall_clock_s"), ({"wall_clock_s": 0}, "wall_clock_s"),
    ({"min_steps": -5}, "min_steps"), ({"steps": 2, "min_steps": 10}, r"min_steps \(10\) must be <= steps \(2\)"),
    ({"plateau_delta": nan}, "plateau_delta"), ({"plateau_delta": -0.1}, "plateau_delta"),
])
def test_stage_refuses_bad_budgets(kw, words):
    with pytest.raises(ValidationError, match=words):
        Stage("h", **kw)


@pytest.mark.parametrize("kw, words", [
    ({"entropy_threshold": nan}, "finite"), ({"reward_saturation": nan}, "finite"),
    ({"clip_widen_factor": nan}, "finite"), ({"temperature_step": -0.1}, "temperature_step"),
    ({"max_temperature": 0}, "max_temperature"), ({"entropy_bonus": -1}, "entropy_bonus"),
    ({"clip_widen_factor": 0.5}, "clip_widen_factor"),
])
def test_rescue_config_refuses_bad_numbers(kw, words):
    with pytest.raises(ValidationError, match=words):
        RescueConfig(**kw)


# ------------------------------------------------------------------------------------ parse_stages
@pytest.mark.parametrize("spec, words", [
    ("opd:1,opd:1", "duplicate stage names"), ("h1,h1", "duplicate stage names"),
    ("opd:1,h2,opd:1", "duplicate stage names"), ("h²", "unknown stage"), ("h١", "unknown stage"),
    ("h1:١", "steps must be an integer"), ("h1:1_000", "steps must be an integer"),
    ("h99999999999999999999", f"between 1 and {MAX_STAGE_TURNS}"), (f"h{MAX_STAGE_TURNS + 1}", "between 1"),
    ("h" + "9" * 5000, "between 1"),
])
def test_parse_stages_refuses_duplicates_and_odd_numbers(spec, words):
    with pytest.raises(ValueError, match=words):
        parse_stages(spec, HarnessConfig.smoke())


def test_parse_stages_checks_the_context_cap():
    for bad in (0, -5):
        with pytest.raises(ValueError, match="max_context_tokens"):
            parse_stages("h1", HarnessConfig.smoke(), max_context_tokens=bad)
    assert [s.max_turns for s in parse_stages(f"h2,h{MAX_STAGE_TURNS}", HarnessConfig.smoke())] == [2, MAX_STAGE_TURNS]


# ---------------------------------------------------------------------------------------- profiles
def test_profile_harness_follows_its_smoke_flag():
    """Before: Profile.harness() passed the name to HarnessConfig.for_profile, so a custom profile raised."""
    assert Profile(name="custom", smoke=True).harness() == HarnessConfig.smoke()
    assert Profile(name="lab", smoke=False).harness(max_turns=3) == HarnessConfig(max_turns=3)
    assert Profile(name="lab", smoke=True).harness(real_model=True) == HarnessConfig.smoke(real_model=True)


@pytest.mark.parametrize("name, smoke", [("smoke", False), ("weagent_mmsearch", True), ("points_seeker", True)])
def test_inconsistent_profiles_are_refused(name, smoke):
    with pytest.raises(ValidationError, match="inconsistent"):
        Profile(name=name, smoke=smoke)
