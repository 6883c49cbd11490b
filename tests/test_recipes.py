"""Paper recipes as data (kit/recipes): loaded, validated, cited; the config classes take their defaults from
them; the generated docs page is current; the CLI prints them; profiles select them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kit.recipes import Entry, RecipeError, load_recipe, paper_default, recipe_names, recipes_markdown

ROOT = Path(__file__).resolve().parents[1]
PAPERS = ("weagent_mmsearch", "points_seeker", "long_mdr")


def test_every_recipe_loads_validates_and_cites_every_value():
    assert set(PAPERS) | {"smoke", "preflight"} <= set(recipe_names())
    for name in recipe_names():
        r = load_recipe(name)
        assert r.entries, name
        for key, e in r.entries.items():
            assert e.source or e.kit, (name, key)
    for name in ("weagent_mmsearch", "points_seeker"):
        load_recipe(name, ["preflight"])  # the overlay keeps every section valid


def test_entry_needs_a_source_or_a_reason():
    with pytest.raises(ValueError, match="source"):
        Entry(value=1)
    with pytest.raises(ValueError, match="empty"):
        Entry(value=1, source="  ")
    assert Entry(value=1, source="Table 5").cited and not Entry(value=1, source="T", kit="why").cited


@pytest.mark.parametrize("body, match", [
    ("name: bad\nharness:\n  max_turns: {value: 3}\n", "source"),                      # uncited
    ("name: bad\nharness:\n  max_turn: {value: 3, source: T5}\n", "max_turn"),         # a typo: the class refuses it
    ("name: bad\nharness:\n  max_turns: {value: 0, source: T5}\n", "positive"),        # a bad value
    ("name: bad\nharness:\n  max_turns: 3\n", "entry"),                                # a bare value
    ("name: other\n", "name"),                                                         # name differs from the file
    ("name: bad\nextends: bad\n", "cycle"),
    ("name: bad\nharness: [1]\n", "mapping"),
    ("name: bad\n  x: [\n", "YAML"),
    ("name: bad\nstages: {value: [{name: s, kind: nope}], kit: k}\n", "kind"),
])
def test_bad_recipe_files_fail_clearly(recipe_dir, body, match):
    (recipe_dir / "bad.yaml").write_text(body)
    with pytest.raises(RecipeError, match=match):
        load_recipe("bad")


def test_unknown_recipe_and_key():
    with pytest.raises(RecipeError, match="choose one of"):
        load_recipe("weagent")
    with pytest.raises(RecipeError, match="no value"):
        paper_default("harness.max_turnz")
    with pytest.raises(RecipeError, match="no value"):
        load_recipe("points_seeker").get("rl.nope")


def test_config_defaults_are_the_recipe_values():
    from kit.harness.config import HarnessConfig
    from kit.rl.objective import ALGORITHMS
    from kit.rl.rewards import POINTS_SEEKER_WEIGHTS, WEAGENT_WEIGHTS
    from kit.rl.staging import RescueConfig, long_mdr_stages
    from kit.rl.trainer import RLConfig
    from kit.train.sft import SFTTrainConfig

    w = load_recipe("weagent_mmsearch")
    h = HarnessConfig().model_dump()
    for k, v in w.section("harness").items():
        assert h[k] == v, k
    assert HarnessConfig().max_turns == 20 and HarnessConfig().max_context_tokens == 32_768  # Table 5
    rl = RLConfig().model_dump()
    for k, v in w.section("rl").items():
        assert rl[k] == v, k
    assert RLConfig().lr == 5e-7 and RLConfig().prompts_per_step == 64  # App. A
    sft = SFTTrainConfig().model_dump()
    for k, v in w.section("sft").items():
        assert sft[k] == v, k
    assert RescueConfig().model_dump() == {**RescueConfig().model_dump(), **load_recipe("long_mdr").section("rescue")}
    assert [s.model_dump() for s in long_mdr_stages()] == [s.model_dump() for s in load_recipe("long_mdr").stages()]
    assert [s.max_turns for s in long_mdr_stages()] == [10, 10, 20, 50, 75]
    assert WEAGENT_WEIGHTS == {"correct": 0.9, "format": 0.1}  # Eq. 5
    assert POINTS_SEEKER_WEIGHTS == {"correct": 0.7, "format": 0.2, "tool": 0.1}
    assert (ALGORITHMS["fa_gspo"].eps_lo, ALGORITHMS["grpo"].eps_hi) == (3e-4, 0.2)


def test_smoke_recipe_is_the_smoke_config():
    from kit.harness.config import HarnessConfig

    smoke = HarnessConfig.smoke().model_dump(mode="json")
    for k, e in load_recipe("smoke").entries.items():
        if k.startswith("harness.") and e.origin == "smoke":
            assert smoke[k[8:]] == e.value, k
    # everything else of the smoke harness is WeAgent's
    assert HarnessConfig.smoke().persist_threshold_chars == paper_default("harness.persist_threshold_chars")


def test_profiles_select_recipes():
    from kit.profiles import get_profile

    ps = get_profile("points_seeker")
    h = ps.harness()
    assert (h.max_turns, h.max_context_tokens, h.context_strategy, h.context_tau, h.context_keep) == (10, 32_768, "vfold", 8192, 2)
    assert ps.value("rl.lr") == 1e-6 and ps.value("rl_run.total_steps") == 60
    paper = get_profile("paper")
    assert paper.harness().max_turns == 20 and paper.value("rl.lr") == 5e-7
    pre = get_profile("paper", preflight=True)
    assert pre.preflight and "preflight" in pre.labels and pre.default_model.startswith("tiny-")
    assert pre.value("rl.lr") == 5e-7 and pre.value("rl.group_size") == 2  # settings kept, sizes shrunk
    h = pre.harness()  # the context, rules and tools stay the paper's; turns and response length are sizes
    assert (h.max_context_tokens, h.wall_clock_s, h.tools_enabled) == (32_768, 900.0, paper.harness().tools_enabled)
    assert h.max_turns < 20 and h.max_response_tokens < 100
    # the RL rollouts' turns are longer (a warm-started stand-in's answer must fit, or no group ever updates) and
    # still a size: 1/32 of Table 5's 4,096, so notebook 05's preflight stays a CPU check
    rl_turn = pre.harness(**pre.recipe_obj().section("rl_rollout")).max_response_tokens
    assert h.max_response_tokens < rl_turn <= 128 < paper.harness().max_response_tokens
    assert pre.size(1, 64) == 1 and paper.size(1, 64) == 64 and paper.size(1, 64, given=0) == 0
    with pytest.raises(ValueError, match="paper profile"):
        get_profile("smoke", preflight=True)


def test_docs_page_is_generated_from_the_recipes():
    page = (ROOT / "docs" / "recipes.md").read_text(encoding="utf-8")
    assert page == recipes_markdown(), "docs/recipes.md is stale: regenerate it with kit.recipes.recipes_markdown()"
    assert "| `rl.lr` | 5e-07 | 5e-07 | App. A" in page


def test_cli_recipe_json_and_errors():
    def run(*a):
        return subprocess.run([sys.executable, "-m", "kit.cli", "recipe", *a], capture_output=True, text=True,
                              cwd=ROOT, timeout=120)

    out = run("points_seeker", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    rows = {r["key"]: r for r in data["values"]}
    assert rows["rl.lr"]["value"] == 1e-6 and rows["rl.lr"]["source"].startswith("§4.1")
    assert rows["harness.max_calls"]["kit"] and rows["harness.max_calls"]["paper"] is None
    pre = run("weagent_mmsearch", "--preflight", "--json")
    assert json.loads(pre.stdout)["overlays"] == ["preflight"]
    bad = run("nope")
    assert bad.returncode == 2 and "choose one of" in bad.stderr


def test_a_direct_recipe_harness_marks_only_the_callers_values_as_set():
    """Recipe.harness() used to mark every recipe value as set: vanilla GSPO then refused the recipe's own
    self_recovery as an explicit choice instead of turning it off (Table 3); Profile.harness never did."""
    from kit.profiles import get_profile
    from kit.rl.eligibility import explicit_self_recovery, harness_config_for

    r = load_recipe("weagent_mmsearch")
    cfg = r.harness()
    assert cfg.model_fields_set == set() and cfg.self_recovery is True and not explicit_self_recovery(cfg)
    assert harness_config_for("gspo", cfg).self_recovery is False  # the later override applies
    assert r.harness(max_turns=3).model_fields_set == {"max_turns"}
    assert explicit_self_recovery(r.harness(self_recovery=True))  # the caller's own choice stays one
    assert r.harness(max_turns=3) == get_profile("paper").harness(max_turns=3)  # one rule for both
    with pytest.raises(ValueError):
        r.harness(max_turns=0)  # still validated


def test_stand_in_roles_is_one_table_of_recipe_keys_and_parameters():
    from kit.profiles import STAND_IN_ROLES, preflight_stand_ins

    got = preflight_stand_ins("points_seeker")  # its recipe names no image judge, expert or teacher model
    for role, (key, parameter) in STAND_IN_ROLES.items():
        named = load_recipe("points_seeker").get(key, None) if key else None
        assert got[role]["stands_in_for"] == (str(named) if named else parameter), role
    assert got["OPD teacher"]["stands_in_for"] == "teacher_model" and got["expert"]["stands_in_for"] == "expert_endpoint"
