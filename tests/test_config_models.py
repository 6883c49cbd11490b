"""One config style (issue 15 part 4): the RL, stage, rescue, SFT and evaluation configs are pydantic models
with the validation, defaults and call styles they had as dataclasses."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from kit.eval.configs import EvalConfig, make_configs
from kit.harness.config import HarnessConfig
from kit.rl.staging import RescueConfig, Stage, long_mdr_stages, parse_stages
from kit.rl.trainer import RLConfig
from kit.train import sft as sft_mod
from kit.train.sft import SFTTrainConfig

# What the dataclass versions wrote with dataclasses.asdict() into run_log.jsonl (run_start) and
# checkpoints/step_*/trainer_state.json before the change: these must still load.
OLD_RL_CONFIG = {"algorithm": "fa_gspo", "group_size": 8, "prompts_per_step": 2, "temperature": 1.0, "top_p": 1.0,
                 "lr": 0.0001, "eps_lo": None, "eps_hi": None, "updates_per_batch": 1, "micro_batch": 2,
                 "max_grad_norm": 1.0, "weight_decay": 0.0, "finetune": "full", "lora_rank": 16, "lora_alpha": 32,
                 "freeze_vision": True, "judge_timeout_s": 60.0, "rollout_concurrency": None, "save_every": 1,
                 "keep_checkpoints": 2, "seed": 0, "device": "cpu", "dtype": None}
OLD_STAGE = {"name": "h1", "kind": "rl", "max_turns": 1, "max_calls": 8, "max_context_tokens": 16384,
             "wall_clock_s": 86400.0, "steps": 2, "min_steps": 1, "plateau_window": None, "plateau_delta": 0.01}
OLD_RESCUE = {"entropy_threshold": 0.5, "reward_saturation": 0.9, "patience": 2, "cooldown": 5,
              "action": "raise_temperature", "temperature_step": 0.1, "max_temperature": 1.5, "entropy_bonus": 0.001,
              "clip_widen_factor": 2.0}


def test_configs_are_pydantic_models_and_the_sft_config_no_longer_shadows_trl():
    for cls in (RLConfig, Stage, RescueConfig, SFTTrainConfig, EvalConfig):
        assert issubclass(cls, BaseModel), cls
    assert not hasattr(sft_mod, "SFTConfig")  # trl.SFTConfig is the only SFTConfig


def test_defaults_keep_the_paper_values():
    rl = RLConfig()
    assert (rl.group_size, rl.prompts_per_step, rl.temperature, rl.lr, rl.freeze_vision) == (8, 64, 1.0, 5e-7, True)
    s = SFTTrainConfig()
    assert (s.lr_language, s.lr_vision, s.grad_accum, s.per_device_batch_size) == (1e-5, 1e-6, 32, 1)
    assert s.report_to == "none"  # one kit.tracking back end (was TrainingArguments' list; [] still reads as "none")
    r = RescueConfig()
    assert (r.entropy_threshold, r.patience, r.cooldown, r.action) == (0.3, 2, 5, "raise_temperature")


@pytest.mark.parametrize("make, match", [
    (lambda: RLConfig(algorithm="ppo"), "unknown algorithm"),
    (lambda: RLConfig(finetune="qlora"), "finetune"),
    (lambda: RLConfig(group_size=0), r"group_size\n.*greater than or equal to 1"),
    (lambda: RLConfig(save_every=0), r"save_every\n.*greater than or equal to 1"),
    (lambda: RLConfig(temperature=0), r"temperature\n.*greater than 0"),
    (lambda: RLConfig(lrr=1e-3), "lrr"),  # a typo is refused, as the dataclass refused an unknown keyword
    (lambda: Stage("x", kind="sft"), "kind must be 'opd' or 'rl'"),
    (lambda: Stage("x", steps=0), "steps must be >= 1"),
    (lambda: Stage("x", plateau_window=0), "plateau_window must be >= 1"),
    (lambda: RescueConfig(action="pray"), "unknown rescue action 'pray'"),
    (lambda: RescueConfig(patience=0), "patience must be >= 1"),
    (lambda: RescueConfig(cooldown=-1), "cooldown >= 0"),
    (lambda: SFTTrainConfig(epochs_=1), "epochs_"),
    (lambda: EvalConfig(name="x", label="X", harness=HarnessConfig(), colour="red"), "colour"),
])
def test_validation_is_kept(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_stage_is_still_built_positionally():
    s = Stage("opd", "opd", steps=1)
    assert (s.name, s.kind, s.steps) == ("opd", "opd", 1)
    assert Stage("rl").kind == "rl" and Stage(name="h2", max_turns=2).max_turns == 2
    with pytest.raises(TypeError):
        Stage("a", name="b")
    assert [s.name for s in long_mdr_stages()] == ["opd_warmup", "h10", "h20", "h50", "h75"]
    assert parse_stages("opd:2,h1", HarnessConfig.smoke(max_turns=1))[0] == Stage("opd", "opd", steps=2)


def test_eval_configs_keep_their_fields():
    c = make_configs("smoke", ["direct", "text_only"])
    assert (c["direct"].name, c["direct"].label, c["direct"].harness.tools_enabled) == ("direct", "Direct answer", [])
    assert c["text_only"].text_only and c["text_only"].labels == []


def test_old_run_logs_and_checkpoints_load_and_dumps_are_json():
    # the dicts written by dataclasses.asdict() before validate into the models and dump back unchanged
    assert RLConfig.model_validate(OLD_RL_CONFIG).model_dump() == OLD_RL_CONFIG
    assert Stage.model_validate(OLD_STAGE).model_dump() == OLD_STAGE
    assert RescueConfig.model_validate(OLD_RESCUE).model_dump() == OLD_RESCUE
    assert RLConfig.model_validate(OLD_RL_CONFIG) == RLConfig(prompts_per_step=2, lr=1e-4, micro_batch=2)
    json.dumps(RLConfig().model_dump())
    # to_dict() (sft_config.json) has the same keys as before, in the same order
    assert list(SFTTrainConfig().to_dict()) == [
        "lr_language", "lr_vision", "epochs", "max_steps", "per_device_batch_size", "grad_accum", "weight_decay",
        "warmup_ratio", "lr_scheduler", "lora_rank", "lora_alpha", "lora_dropout", "gradient_checkpointing", "bf16",
        "logging_steps", "save_steps", "save_total_limit", "seed", "report_to",
        # added for POINTS-Seeker's SFT recipe (issue 16), after the old keys
        "loss_normalization", "packing", "max_packed_tokens"]


def test_model_copy_replaces_dataclasses_replace():
    cfg = SFTTrainConfig(max_steps=3, lr_language=3e-3)
    short = cfg.model_copy(update={"epochs": 2.0, "max_steps": -1})
    assert (short.epochs, short.max_steps, short.lr_language) == (2.0, -1, 3e-3) and cfg.max_steps == 3
