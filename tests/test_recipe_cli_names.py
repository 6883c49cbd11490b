"""`kit.cli recipe` as a researcher types it (issue 26): the profile name `paper` shows WeAgent's recipe, the
`preflight` overlay is shown as an overlay (no mechanism rows, all "off", that would read as a recipe), a reader that
leaves the pipe early gets no traceback, and an ablation refusal names the switch that was given."""

from __future__ import annotations

import subprocess
import sys

from kit.cli import main
from kit.paths import PROJECT_ROOT


def test_paper_is_the_weagent_recipe(capsys):
    assert main(["recipe", "paper"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("weagent_mmsearch:") and "paper is the profile name of recipe weagent_mmsearch" in err
    assert main(["recipe", "paper", "--json"]) == 0
    assert '"name": "weagent_mmsearch"' in capsys.readouterr().out


def test_the_preflight_overlay_is_not_shown_as_a_recipe_without_mechanisms(capsys):
    assert main(["recipe", "preflight"]) == 0
    out = capsys.readouterr().out
    assert "an overlay" in out and "mechanisms (on/off" not in out and "self_recovery         off" not in out
    assert main(["recipe", "preflight", "--json"]) == 0
    assert '"mechanisms"' not in capsys.readouterr().out
    assert main(["recipe", "preflight", "--preflight"]) == 2
    assert "an overlay, not a recipe" in capsys.readouterr().err


def test_a_reader_that_leaves_early_gets_no_traceback():
    p = subprocess.run(f"{sys.executable} -m kit.cli recipe long_mdr | head -1", shell=True, cwd=PROJECT_ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.stdout.startswith("long_mdr:") and "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr


def test_the_fa_gspo_refusal_names_the_switch_that_was_given():
    from kit.cli_mechanisms import mechanism_problems
    from kit.cli_params import notebook_parameters

    declared = notebook_parameters(PROJECT_ROOT / "notebooks" / "05_rl_long_mdr.ipynb")
    given = mechanism_problems(declared, {"algorithm": "fa_gspo", "self_recovery": False}, "weagent_mmsearch")
    assert len(given) == 1 and "-p self_recovery false switches it off" in given[0]
    assert "profile runs without" not in given[0]
    (profile,) = mechanism_problems(declared, {"algorithm": "fa_gspo"}, "points_seeker")
    assert "the points_seeker profile runs without self-recovery" in profile


def test_a_schedule_other_than_the_recipes_is_a_labelled_ablation():
    from kit.recipes import load_recipe
    from kit.recipes.mechanisms import stages_labels

    r = load_recipe("weagent_mmsearch")
    assert stages_labels(r, None) == [] and stages_labels(r, r.get("rl_run.stages")) == []
    assert stages_labels("long_mdr", "weagent") == ["ablation:stages=weagent"]
