"""Each paper profile is exactly its paper (issue 26, part 1): a paper recipe switches on only mechanisms its
paper describes, each decided by a cited entry; `kit.cli recipe NAME` lists them."""

from __future__ import annotations

import pytest

from kit.recipes import load_recipe
from kit.recipes.mechanisms import MECHANISMS, PAPER_RECIPES, mechanisms


def _on(name):
    return {m["name"] for m in mechanisms(name) if m["on"]}


@pytest.mark.parametrize("name", PAPER_RECIPES)
@pytest.mark.parametrize("overlays", [(), ("preflight",)])
def test_a_paper_recipe_runs_only_mechanisms_its_paper_has(name, overlays):
    rows = mechanisms(load_recipe(name, overlays))
    assert len(rows) == len(MECHANISMS)
    bad = [m["name"] for m in rows if m["on"] and not m["paper"]]
    assert not bad, f"{name}{overlays}: mechanisms on that the paper lacks (no cited entry): {bad}"


def test_each_profile_switches_on_what_its_paper_describes():
    assert _on("weagent_mmsearch") == {"self_recovery", "model_label_audit"}  # Table 5, §4.5; no OPD/stages/rescue
    assert _on("points_seeker") == {"context_folding"}  # V-Fold; no WeAgent rule, no synthesis turn
    assert _on("long_mdr") == {"self_recovery", "model_label_audit", "opd_warmup", "progressive_horizons",
                               "entropy_rescue"}
    assert _on("smoke") == _on("long_mdr") - {"model_label_audit"}  # every RL mechanism; offline rule audit, labelled
    assert all(m["paper"] is None for m in mechanisms("smoke"))


def test_weagent_rl_is_one_stage_at_table5_budgets_temperature_one():
    from kit.rl.staging import resolve_schedule, schedule_total_steps

    r = load_recipe("weagent_mmsearch")
    schedule = resolve_schedule(r, r.harness())
    assert [(s.kind, s.max_turns, s.max_calls, s.max_context_tokens, s.wall_clock_s) for s in schedule] == [
        ("rl", 20, 32, 32768, 900.0)]
    assert r.get("rl.temperature") == 1.0 and not r.has("rescue.action") and schedule_total_steps(r) == 1000
    assert "long_mdr" not in (r.entries["rl_run.stages"].origin, *(e.origin for e in r.entries.values()))
    lm = load_recipe("long_mdr")
    assert [s.name for s in resolve_schedule(lm, lm.harness())][:2] == ["opd_warmup", "h10"]
    assert lm.get("rl.algorithm") == "fa_gspo" and lm.get("harness.max_turns") == 20  # WeAgent's harness and objective


def test_long_mdr_ladder_is_cited_to_what_the_abstract_says():
    e = load_recipe("long_mdr").entries["stages"]
    assert "128k" in e.source and "75+" in e.source and "50-turn" in e.source
    assert "10 -> 20 -> 50" not in e.source and "LONG_MDR.md" in e.kit  # the intermediate ladder is the kit's


def test_recipe_command_lists_the_mechanisms(capsys):
    from kit.cli import main

    assert main(["recipe", "weagent_mmsearch"]) == 0
    out = capsys.readouterr().out
    lines = {ln.split()[0]: ln for ln in out.split("mechanisms (on/off")[1].splitlines()[1:] if ln.strip()}
    assert "on   paper: yes" in lines["self_recovery"] and "off  paper: no" in lines["entropy_rescue"]
    assert main(["recipe", "points_seeker", "--json"]) == 0
    import json

    got = {m["name"]: m for m in json.loads(capsys.readouterr().out)["mechanisms"]}
    assert got["self_recovery"]["on"] is False and got["context_folding"]["paper"] is True


def test_the_paper_column_is_the_specification_not_the_recipes_citation():
    """A recipe that switches a mechanism on with a cited entry still fails when its paper lacks it."""
    from kit.recipes import Recipe
    from kit.recipes.mechanisms import mechanisms as rows

    r = Recipe("points_seeker")  # unvalidated copy with WeAgent's rules switched on, a source and all
    from kit.recipes import Entry

    r.entries["harness.self_recovery"] = Entry(value=True, source="§3.2.4", origin="points_seeker")
    row = next(m for m in rows(r) if m["name"] == "self_recovery")
    assert row["on"] is True and row["paper"] is False
    assert next(m for m in rows("points_seeker") if m["name"] == "context_folding")["where"].startswith("§3.3")
