"""Every paper profile preflights: ``python -m kit.cli notebook NN --profile P --preflight`` builds every object
the paper run builds (tools, judges, summarizer, datasets, trainer, schedule) at the recipe's settings with tiny
sizes and stand-in models, and executes it to the end on 2 CPU cores (issue "paper recipes", part 4).

Each case checks what the recipe decides reached the run (its manifest), so a paper value that stops flowing
(or a paper command that crashes, like notebook 05's OPD stage without a teacher did) fails here."""

from __future__ import annotations

import json

import pytest

# (notebook, profile) pairs a recipe applies to: notebook 02 is WeAgent's data pipeline only; long_mdr differs from
# WeAgent's recipe only in notebook 05 (its RL staging), so it preflights there only
CASES = [("01", "paper"), ("01", "points_seeker"), ("02", "paper"), ("03", "points_seeker"), ("04", "paper"), ("04", "points_seeker"),
         ("05", "weagent_mmsearch"), ("05", "long_mdr"), ("05", "points_seeker"), ("06", "paper"), ("06", "points_seeker"),
         ("07", "paper")]


def _manifest(out):
    return json.loads((out / "manifest.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("key, profile", CASES, ids=[f"{k}-{p}" for k, p in CASES])
def test_paper_profile_preflights(tmp_path, data_dir, key, profile):
    from kit.cli import run_notebook
    from kit.paths import PROJECT_ROOT
    from kit.recipes import load_recipe

    out = tmp_path / f"nb{key}"
    # notebook 07 publishes (to a local stand-in Hub) and replays the committed smoke evaluation
    params = {"source_run": str(PROJECT_ROOT / "results" / "smoke" / "06_evaluation")} if key == "07" else {}
    run_notebook(key, profile, params, out, preflight=True)
    m = _manifest(out)
    cfg = m["config"]
    recipe = load_recipe("weagent_mmsearch" if profile == "paper" else profile, ["preflight"])  # settings + preflight sizes
    assert m["run_identity"]["recipe"] == recipe.label and m["profile_resolved"] == recipe.name
    assert cfg["recipe"] == recipe.label and cfg["preflight"] is True
    assert "preflight" in m["labels"] and "smoke" not in m["labels"]
    from kit.profiles import STAND_IN_ROLES  # what really ran for every paper role (tiny stand-ins), not its model

    # only the roles the notebook ran are named (nb05: no image judge / expert; nb06: no teacher / expert)
    assert set(m["stand_ins"]) <= set(STAND_IN_ROLES) and all(v["ran"] for v in m["stand_ins"].values())
    assert {"05": not {"image judge", "expert"} & set(m["stand_ins"]),
            "06": not {"OPD teacher", "expert"} & set(m["stand_ins"])}.get(key, True)
    if key == "01":
        h = cfg["harness"]
        assert (h["max_turns"], h["max_context_tokens"], h["protocol"]) == (
            recipe.get("harness.max_turns"), recipe.get("harness.max_context_tokens"), recipe.get("harness.protocol"))
        assert h.get("tool_set") == recipe.get("harness.tool_set", None)
        assert cfg["summarizer"].startswith("llm:")  # the paper's LLM summarizer (a tiny stand-in)
    elif key == "02":  # the expert's facts, the live web (a preflight: the local web without SERPER_API_KEY)
        assert cfg["stable_fact"] == recipe.get("data.stable_fact") and cfg["summarizer"].startswith("llm:")
        assert (cfg["event_window_days"]) == recipe.get("data.event_window_days")
    elif key == "03":
        assert cfg["vfold_mode"] == "paper" and cfg["tau"] == recipe.get("harness.context_tau")
    elif key == "04":
        sft = cfg["sft"]
        assert sft["lr_language"] == recipe.get("sft.lr_language")
        assert sft["loss_normalization"] == recipe.get("sft.loss_normalization")
        assert sft.get("packing", False) == recipe.get("sft.packing", False)
    elif key == "05":
        rl, h = cfg["rl"], cfg["harness"]
        assert (rl["algorithm"], rl["lr"], rl["temperature"]) == (recipe.get("rl.algorithm"), recipe.get("rl.lr"),
                                                                  recipe.get("rl.temperature"))
        # at least one real RL update under the recipe's objective (kit.rl.preflight), counted from the run's metrics
        from kit.rl.preflight import is_rl_update

        steps = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
        updates = [s for s in steps if is_rl_update(s)]
        assert updates and m["summary"]["rl_updates"] == len(updates)
        assert all(s["kind"] == "rl" and s["advantage_abs_mean"] > 0 and s["loss"] is not None for s in updates)
        assert "tiny stand-in" in cfg["judge"] and m["stand_ins"]["answer judge"]["stands_in_for"] == recipe.get(
            "eval.judge_model")
        assert rl["freeze_vision"] is True and rl["group_size"] == 2  # settings kept; the group is a size
        if profile == "long_mdr":  # the one Long-MDR schedule, every stage once, an OPD teacher stand-in, rescue on
            assert [s["name"] for s in cfg["schedule"]] == [s.name for s in load_recipe("long_mdr").stages()]
            assert cfg["judge"].startswith("llm:") and cfg["summarizer"].startswith("llm:") and cfg["rescue"]
        elif profile == "weagent_mmsearch":  # WeAgent as written: one stage at Table 5's budgets, no OPD, no rescue
            assert [s["name"] for s in cfg["schedule"]] == ["weagent_h20"] and cfg["rescue"] is None
            assert "OPD teacher" not in m["stand_ins"] and rl["temperature"] == 1.0
            assert cfg["judge"].startswith("llm:") and cfg["summarizer"].startswith("llm:")
        else:  # POINTS-Seeker RL: GRPO at 10 turns, V-Fold bypassed (A.4), its three tools
            assert h["context_strategy"] == "full" and h["tool_set"] == "points_seeker" and h["protocol"] == "points_seeker"
            assert [s["name"] for s in cfg["schedule"]] == ["h10"]
            assert cfg["schedule"][0]["max_context_tokens"] == recipe.get("harness.max_context_tokens")  # not grown
    elif key == "07":
        assert cfg["tag"].startswith("preflight-") and cfg["local_hub"] and m["published"]
        assert m["replay"]["identical"] is True
    elif key == "06":
        assert cfg["protocol"] == recipe.get("eval.protocol")
        assert cfg["answer_judge"].startswith("llm:") and cfg["summarizer"].startswith("llm:")
        assert set(cfg["configs"]) == set(recipe.get("eval.configs"))
        sources = cfg["benchmark_sources"]  # the unpinned hub releases came through the hub path (a stand-in Hub)
        hub = [k for k, v in sources.items() if v.get("resolved_commit")]
        assert hub and all(v.get("unpinned") for k, v in sources.items() if k in hub)
        assert all(sources[k].get("stand_in") is True for k in hub)  # the stand-in Hub's commits say so


def test_preflight_is_refused_for_smoke_and_for_notebooks_without_it(tmp_path):
    from kit.cli import main

    assert main(["notebook", "01", "--profile", "smoke", "--preflight", "--out", str(tmp_path / "a")]) == 2
    assert main(["notebook", "01", "--profile", "paper", "--preflight", "-p", "preflight", "True",
                 "--out", str(tmp_path / "b")]) == 2


def test_paper_command_without_a_teacher_stops_before_the_kernel(tmp_path, capsys):
    """Notebook 05's documented paper command used to crash in its trainer cell (an OPD stage without a teacher)."""
    from kit.cli import main

    rc = main(["notebook", "05", "--profile", "long_mdr", "-p", "base_model", "tiny-qwen2_vl", "-p", "rl_prompts", "x",
               "-p", "judge", "rule", "-p", "summarizer", "extractive", "-p", "web_backend", "zim",
               "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "teacher_model" in err and "OPD" in err


@pytest.mark.slow
def test_nb05_preflight_fails_loudly_without_a_real_rl_update(tmp_path, data_dir, capsys):
    """A preflight whose RL steps never update (here: a stand-in warm-started for one step, no extra steps) exits
    non-zero with kit.rl.preflight's message, instead of passing on OPD or skipped steps (~30 s)."""
    from kit.cli import main

    rc = main(["notebook", "05", "--profile", "points_seeker", "--preflight", "-p", "warm_steps", "1",
               "-p", "warm_full_steps", "0", "-p", "preflight_rl_steps", "0", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc != 0 and "PreflightError" in err and "no RL step performed a real policy update" in err
