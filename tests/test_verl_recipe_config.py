"""The verl path's config comes from the paper recipes (kit.rl.verl.recipe_config, kit.rl.verl.settings),
in the main environment (no verl): the overrides carry each recipe's numbers, merged onto
configs/verl/fa_gspo.yaml they leave no paper value hard-coded, and the agent loop's harness builder gives the
recipe's HarnessConfig with the stage's budgets (WeAgent App. A, Long-MDR schedule; POINTS-Seeker App. A.4)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import types

import pytest
import yaml

from kit.paths import PROJECT_ROOT
from kit.recipes import load_recipe
from kit.rl.objective import ALGORITHMS
from kit.rl.verl import recipe_config as rc
from kit.rl.verl import settings

YAML = PROJECT_ROOT / "configs" / "verl" / "fa_gspo.yaml"
CASES = [("weagent_mmsearch", ()), ("weagent_mmsearch", ("preflight",)), ("long_mdr", ()), ("long_mdr", ("preflight",)),
         ("points_seeker", ()), ("points_seeker", ("preflight",))]


def _parsed(lines: list[str]) -> dict:
    """Hydra override lines read back independently of the writer (YAML flow scalars)."""
    out = {}
    for line in lines:
        key, _, value = line.partition("=")
        assert key and _ and key not in out, line
        out[key] = yaml.safe_load(value)
    return out


def _get(cfg: dict, key: str):
    for p in key.split("."):
        cfg = cfg[p]
    return cfg


@pytest.mark.parametrize("name,overlays", CASES)
def test_overrides_carry_the_recipe_numbers(name, overlays):
    o = _parsed(rc.verl_overrides(name, overlays))
    pre = bool(overlays)
    ps = name == "points_seeker"
    assert o["data.train_batch_size"] == o["actor_rollout_ref.actor.ppo_mini_batch_size"] == (1 if pre else 64)
    assert o["actor_rollout_ref.rollout.n"] == (2 if pre else 8)
    assert o["actor_rollout_ref.actor.optim.lr"] == pytest.approx(1e-6 if ps else 5e-7)
    assert isinstance(o["actor_rollout_ref.actor.optim.lr"], float)
    assert o["actor_rollout_ref.rollout.temperature"] == 1.0 and o["actor_rollout_ref.actor.freeze_vision_tower"] is True
    assert o["actor_rollout_ref.actor.optim.weight_decay"] == 0.0  # the single-node trainer's, not verl's 0.01
    algo = "grpo" if ps else "fa_gspo"
    assert o["kit.algorithm"] == algo and o["algorithm.adv_estimator"] == "fa_gspo"
    assert o["actor_rollout_ref.actor.policy_loss.loss_mode"] == ("kit_grpo" if ps else "fa_gspo")
    assert o["actor_rollout_ref.actor.clip_ratio_low"] == ALGORITHMS[algo].eps_lo
    assert o["actor_rollout_ref.actor.clip_ratio_high"] == ALGORITHMS[algo].eps_hi
    assert (o["actor_rollout_ref.actor.clip_ratio_low"], o["actor_rollout_ref.actor.clip_ratio_high"]) == (
        (0.2, 0.2) if ps else (3e-4, 4e-4))
    # steps: POINTS-Seeker 60 at 10 turns (App. A.4); WeAgent's one Table 5 stage (1,000, the kit's count);
    # Long-MDR's first RL stage ends at 200 (its OPD warmup is not a verl launch)
    steps, stages, stage = {"points_seeker": (60, "h10", "h10"), "weagent_mmsearch": (1000, "weagent", "weagent_h20"),
                            "long_mdr": (200, "long_mdr", "h10")}[name]
    assert o["trainer.total_training_steps"] == ((1 if name == "long_mdr" else 2) if pre else steps)
    assert (o["kit.stages"], o["kit.stage"]) == (stages, stage)
    assert o["kit.recipe"] == name and o["kit.preflight"] is pre and o["kit.harness"] is None
    # web_extract uses the LLM summarizer, the reward the LLM judge, with the recipe's models
    assert o["kit.summarizer"] == "llm" and o["kit.judge"] == "llm"
    model = "qwen3-235b-a22b" if ps else "kimi-k2.6"
    assert o["kit.summarizer_model"] == o["kit.judge_model"] == model
    # verl's prompt + response lengths are the context the agent loop's harness runs with (paper: 32k)
    h = settings.harness_config({k[4:]: v for k, v in o.items() if k.startswith("kit.")})
    assert o["data.max_prompt_length"] + o["data.max_response_length"] == h.max_context_tokens
    if not pre:
        assert h.max_context_tokens == 32768


def test_long_mdr_stages_become_verl_launches():
    runs = rc.verl_stages("long_mdr")
    sched = load_recipe("long_mdr").get("stages")
    rl = [s for s in sched if s.get("kind", "rl") == "rl"]
    assert [v.name for v in runs] == [s["name"] for s in rl] == ["h10", "h20", "h50", "h75"]
    # 1050 steps minus the 50 OPD steps verl does not run; each fixed stage keeps its 200 steps
    assert [(v.start, v.end) for v in runs] == [(0, 200), (200, 400), (400, 600), (600, 1000)]
    for v, s in zip(runs, rl):
        o = _parsed(rc.verl_overrides("long_mdr", stage=v.name))
        assert o["trainer.total_training_steps"] == v.end and o["kit.stage"] == s["name"]
        assert o["data.max_prompt_length"] + o["data.max_response_length"] == s["max_context_tokens"]
        h = settings.harness_config({"recipe": "long_mdr", "stage": v.name, "algorithm": "fa_gspo"})
        assert (h.max_turns, h.max_calls, h.max_context_tokens, h.wall_clock_s) == (
            s["max_turns"], s["max_calls"], s["max_context_tokens"], s["wall_clock_s"])
    with pytest.raises(rc.VerlConfigError, match="no verl stage 'h99'"):
        rc.verl_overrides("long_mdr", stage="h99")
    assert [v.name for v in rc.verl_stages("weagent_mmsearch")] == ["weagent_h20"]  # WeAgent: one stage
    assert [(v.name, v.start, v.end) for v in rc.verl_stages("smoke")] == [("h1", 0, 2), ("h2", 2, 3)]


@pytest.mark.parametrize("name,overlays", CASES)
def test_merged_yaml_has_no_value_disagreeing_with_the_recipe(name, overlays):
    base = yaml.safe_load(YAML.read_text(encoding="utf-8"))
    lines = rc.verl_overrides(name, overlays)
    settings_ = _parsed(lines)
    assert set(settings_) == set(rc.verl_settings(name, overlays))
    for key in settings_:  # the YAML states no value of its own for a recipe key: `???` or null (the recipe's)
        assert _get(base, key) in ("???", None, ""), (key, _get(base, key))  # null / "": the recipe's
    merged = rc.apply_overrides(base, settings_)
    assert rc.missing_values(merged) == ["data.train_files", "data.val_files", "actor_rollout_ref.model.path"]
    assert merged == rc.merged_config(name, overlays)
    r = load_recipe(name, overlays)
    for key, rkey in [("data.train_batch_size", "rl.prompts_per_step"), ("actor_rollout_ref.rollout.n", "rl.group_size"),
                      ("actor_rollout_ref.actor.optim.lr", "rl.lr"),
                      ("actor_rollout_ref.rollout.temperature", "rl.temperature"),
                      ("actor_rollout_ref.actor.freeze_vision_tower", "rl.freeze_vision"),
                      ("kit.summarizer", "eval.summarizer"), ("kit.judge", "eval.judge")]:
        assert _get(merged, key) == r.get(rkey), key
    assert _get(merged, "actor_rollout_ref.actor.ppo_mini_batch_size") == _get(merged, "data.train_batch_size")


@pytest.mark.parametrize("name,overlays", CASES)
def test_agent_loop_builds_the_recipes_harness(name, overlays):
    kit_cfg = {**yaml.safe_load(YAML.read_text(encoding="utf-8"))["kit"],
               **{k[4:]: v for k, v in _parsed(rc.verl_overrides(name, overlays)).items() if k.startswith("kit.")}}
    got = settings.harness_config(kit_cfg)
    r = load_recipe(name, overlays)
    want = r.harness(**r.section("rl_rollout"))
    if name == "points_seeker":  # its environment, and no V-Fold during RL (App. A.4)
        assert (got.tool_set, got.protocol, got.context_strategy) == ("points_seeker", "points_seeker", "full")
        assert r.harness().context_strategy == "vfold"
        if not overlays:
            assert got == want  # h10 is exactly its 10-turn / 32k protocol
    else:  # WeAgent's tools and rules with its one Table 5 stage's / the first Long-MDR stage's budgets
        assert got.tools_enabled == want.tools_enabled and got.protocol == "weagent_mmsearch" and got.self_recovery
        assert (got.max_calls, got.max_context_tokens) == ((16 if name == "long_mdr" else 32), 32768)
        assert got.model_dump(exclude={"max_turns", "max_calls", "max_context_tokens", "wall_clock_s"}) == \
            want.model_dump(exclude={"max_turns", "max_calls", "max_context_tokens", "wall_clock_s"})
    # the preflight overlay: every stage at most stage_budgets.max_turns turns (notebook 05 does the same)
    assert got.max_turns == (r.get("stage_budgets.max_turns") if overlays else 20 if name == "weagent_mmsearch" else 10)
    assert got.max_response_tokens == (load_recipe("preflight").get("rl_rollout.max_response_tokens") if overlays else 4096)
    assert settings.algorithm_of(kit_cfg).name == ("grpo" if name == "points_seeker" else "fa_gspo")
    prof = settings.profile_of(kit_cfg)
    assert prof.recipe == name and prof.preflight is bool(overlays)


def test_recipe_mode_vanilla_gspo_and_errors():
    # vanilla GSPO on WeAgent's recipe: the recipe's self_recovery is not an explicit choice, so it is turned off
    assert settings.harness_config({"recipe": "weagent_mmsearch", "algorithm": "gspo"}).self_recovery is False
    with pytest.raises(ValueError, match="vanilla GSPO"):
        settings.harness_config({"recipe": "weagent_mmsearch", "algorithm": "gspo",
                                 "harness_overrides": {"self_recovery": True}})
    with pytest.raises(ValueError, match="both set"):
        settings.harness_config({"recipe": "weagent_mmsearch", "harness": "paper"})
    with pytest.raises(ValueError, match="not an RL stage"):
        settings.harness_config({"recipe": "weagent_mmsearch", "stage": "opd_warmup"})
    assert settings.harness_config({"recipe": "smoke", "harness_overrides": {"max_turns": 3}}).max_turns == 3
    assert settings.algorithm_of({"recipe": "points_seeker"}).name == "grpo"  # the recipe's when kit.algorithm unset


def test_recipe_judge_and_summarizer_are_the_recipes(monkeypatch):
    from kit.eval.judge_factory import JudgeConfigError
    from kit.eval.judges import LLMJudge
    from kit.harness.summarize import LLMSummarizer, SummarizerConfigError

    cfg = {"recipe": "points_seeker", "preflight": False}
    with pytest.raises(SummarizerConfigError, match="summarizer_endpoint"):
        settings.summarizer(cfg)  # the paper recipe's LLM summarizer: no silent extractive fallback
    with pytest.raises(JudgeConfigError, match="judge_endpoint"):
        settings.judge(cfg)
    s = settings.summarizer({**cfg, "summarizer_endpoint": "http://llm.test/v1"})
    assert isinstance(s, LLMSummarizer) and "qwen3-235b-a22b" in s.name
    j = settings.judge({**cfg, "judge_endpoint": "http://judge.test/v1"})
    assert isinstance(j, LLMJudge) and "qwen3-235b-a22b" in j.name
    assert settings.summarizer({**cfg, "summarizer": "extractive"}).name == "extractive_bm25 (fallback)"
    assert settings.summarizer({"recipe": "smoke"}).name == "extractive_bm25"


def test_cli_prints_the_overrides():
    def cli(*a):
        return subprocess.run([sys.executable, "-m", "kit.cli", "recipe", *a], capture_output=True, text=True,
                              cwd=PROJECT_ROOT, check=False)

    r = cli("points_seeker", "--verl")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == rc.verl_overrides("points_seeker")
    bad = cli("long_mdr", "--verl", "--stage", "h99")
    assert bad.returncode == 2 and "h10" in bad.stderr


def test_launcher_passes_recipe_overrides_before_the_users(tmp_path):
    """scripts/launch_verl.sh with a stand-in verl interpreter: one run per stage, the recipe's overrides, then
    the user's (Hydra: the last one wins)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    log = tmp_path / "calls"
    py = venv / "bin" / "python"
    py.write_text(f"""#!/usr/bin/env bash
if [ "$1" = "-c" ]; then echo 1; exit 0; fi
if [ "$2" = "kit.rl.verl.main" ]; then printf '%s\\n' "$@" > "{log}.$(ls {tmp_path} | grep -c calls)"; exit 0; fi
exec {sys.executable} "$@"
""")
    py.chmod(0o755)
    model = tmp_path / "model"
    model.mkdir()
    for f in ("train.parquet", "val.parquet"):
        (tmp_path / f).write_text("")
    env = {**os.environ, "KIT_VERL_VENV": str(venv), "RECIPE": "smoke", "PYTHONPATH": str(PROJECT_ROOT)}
    r = subprocess.run(["bash", str(PROJECT_ROOT / "scripts" / "launch_verl.sh"), str(model), str(tmp_path / "train.parquet"),
                        str(tmp_path / "val.parquet"), "actor_rollout_ref.rollout.n=4"], env=env, capture_output=True,
                       text=True, check=False, timeout=60)
    assert r.returncode == 0, r.stderr
    runs = sorted(tmp_path.glob("calls.*"))
    assert len(runs) == 2  # the smoke schedule's RL stages h1, h2
    for run, stage in zip(runs, ("h1", "h2")):
        args = run.read_text().splitlines()
        recipe = rc.verl_overrides("smoke", stage=stage)
        i = args.index(recipe[0])
        assert args[i:i + len(recipe)] == recipe and args[-1] == "actor_rollout_ref.rollout.n=4"


def test_kit_grpo_loss_registered_and_equal_to_the_kit_loss(monkeypatch):
    """kit/rl/verl/algos.py under a stand-in verl registry: the names VERL_LOSS uses are registered, and
    kit_grpo is kit.rl.objective.grpo_loss with the fa_gspo plumbing (weights, excluded rows, aggregation)."""
    import torch

    from kit.rl.objective import grpo_loss

    reg: dict[str, dict] = {"adv": {}, "loss": {}}
    core = types.ModuleType("verl.trainer.ppo.core_algos")
    core.register_adv_est = lambda n: (lambda f: reg["adv"].setdefault(n, f))
    core.register_policy_loss = lambda n: (lambda f: reg["loss"].setdefault(n, f))
    for m in ("verl", "verl.trainer", "verl.trainer.ppo"):
        monkeypatch.setitem(sys.modules, m, types.ModuleType(m))
    monkeypatch.setitem(sys.modules, "verl.trainer.ppo.core_algos", core)
    spec = importlib.util.spec_from_file_location("_algos_stub", PROJECT_ROOT / "kit" / "rl" / "verl" / "algos.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert {e for e, _ in rc.VERL_LOSS.values()} <= set(reg["adv"])
    assert {loss for _, loss in rc.VERL_LOSS.values()} <= set(reg["loss"])
    torch.manual_seed(0)
    B, T = 4, 5
    old = -torch.rand(B, T)
    new = (old + 0.3 * torch.randn(B, T)).requires_grad_(True)
    mask = torch.ones(B, T)
    mask[1] = 0  # excluded
    mask[2, 3:] = 0
    adv = torch.tensor([[1.0], [5.0], [-0.5], [0.7]]).expand(B, T) * mask
    cfg = types.SimpleNamespace(clip_ratio_low=0.2, clip_ratio_high=0.2, global_batch_info={"dp_size": 2, "global_batch_size": 8})
    loss, metrics = reg["loss"]["kit_grpo"](old, new, adv, mask, "seq-mean-token-mean", cfg)
    ref, stats = grpo_loss(new, old, mask, torch.tensor([1.0, 5.0, -0.5, 0.7]), torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float64),
                           eps_lo=0.2, eps_hi=0.2)
    assert loss.item() == pytest.approx((ref / 8 * 2).item(), rel=1e-6)
    assert metrics["actor/kit_grpo_rows"] == stats["rows"] == 3
    loss.backward()
    assert torch.count_nonzero(new.grad[1]) == 0  # the excluded row gets no gradient
