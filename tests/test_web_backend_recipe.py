"""The web of RL rollouts (notebook 05, verl) and of evaluation (notebook 06) comes from the recipe: the paper
recipes' live web (WeAgent §3.2, POINTS-Seeker §4.1), checked before the kernel; the local web is labelled."""

import json
import re

import pytest

from kit.cli_params import ParameterError, check_combinations, notebook_parameters
from kit.eval.configs import config_tools, make_configs
from kit.eval.loaders import LoadResult
from kit.eval.runner import NothingEvaluated, require_tasks
from kit.harness.episode import Task
from kit.paths import PROJECT_ROOT
from kit.recipes import load_recipe

NB = PROJECT_ROOT / "notebooks"
NB05 = notebook_parameters(NB / "05_rl_long_mdr.ipynb")
NB06 = notebook_parameters(NB / "06_evaluation.ipynb")
PAPER05 = {"base_model": "tiny-qwen2_vl", "judge": "rule", "summarizer": "extractive", "rl_prompts": "x",
           "stages": "h10:1"}
PAPER06 = {"model": "m", "endpoint": "http://m.test/v1", "judge": "rule", "image_judge": "phash",
           "summarizer": "extractive"}


@pytest.mark.parametrize("recipe, section", [("weagent_mmsearch", "§3.2"), ("points_seeker", "§4.1")])
@pytest.mark.parametrize("key", ["rl_run.web_backend", "eval.web_backend"])
def test_paper_recipes_cite_the_live_web(recipe, section, key):
    e = load_recipe(recipe).entries[key]
    assert e.value == "serper" and e.source.startswith(section) and e.origin == recipe


@pytest.mark.parametrize("name, overlays", [("smoke", ()), ("weagent_mmsearch", ("preflight",)),
                                            ("points_seeker", ("preflight",))])
@pytest.mark.parametrize("key", ["rl_run.web_backend", "eval.web_backend"])
def test_smoke_and_preflight_use_the_labelled_local_web(name, overlays, key):
    e = load_recipe(name, overlays).entries[key]
    assert e.value == "zim" and e.kit == "offline: the local web, labelled"


def test_nb05_paper_run_on_the_live_web_needs_the_key_before_the_kernel(monkeypatch):
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    assert NB05["web_backend"].default is None
    with pytest.raises(ParameterError, match=r"rl_run.web_backend.*SERPER_API_KEY.*-p web_backend zim"):
        check_combinations(NB05, PAPER05, "paper")
    with pytest.raises(ParameterError, match=r"POINTS-Seeker §4.1.*-p web_backend zim"):
        check_combinations(NB05, PAPER05, "points_seeker")
    check_combinations(NB05, {**PAPER05, "web_backend": "zim"}, "paper")  # the labelled offline choice
    check_combinations(NB05, PAPER05, "paper", preflight=True)  # the overlay's local web
    check_combinations(NB05, {}, "smoke")
    with pytest.raises(ParameterError, match="SERPER_API_KEY"):
        check_combinations(NB05, {"web_backend": "serper"}, "smoke")  # asked for: the key is needed too
    monkeypatch.setenv("SERPER_API_KEY", "k")
    check_combinations(NB05, PAPER05, "paper")


def test_nb06_default_backend_is_the_recipes(monkeypatch):
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    assert NB06["backend"].default is None
    with pytest.raises(ParameterError, match=r"eval.web_backend.*-p backend zim"):
        check_combinations(NB06, PAPER06, "paper")
    check_combinations(NB06, {**PAPER06, "backend": "zim"}, "paper")
    check_combinations(NB06, {}, "smoke")
    monkeypatch.setenv("SERPER_API_KEY", "k")
    check_combinations(NB06, PAPER06, "points_seeker")


def test_notebooks_read_the_web_from_the_recipe_and_label_the_local_web():
    for name, key in (("05_rl_long_mdr", "rl_run.web_backend"), ("06_evaluation", "eval.web_backend")):
        cells = json.loads((NB / f"{name}.ipynb").read_text(encoding="utf-8"))["cells"]
        src = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        assert f'key="{key}"' in src and '"web_backend":' in src and "LOCAL_WEB_NOTE" in src
    cells = json.loads((NB / "05_rl_long_mdr.ipynb").read_text(encoding="utf-8"))["cells"]
    assert not re.search(r"^web = open_local_web\(\)", "".join("".join(c["source"]) for c in cells), re.M)


@pytest.mark.parametrize("name, overlays, web", [("weagent_mmsearch", (), "serper"), ("points_seeker", (), "serper"),
                                                 ("weagent_mmsearch", ("preflight",), "zim"), ("smoke", (), "zim")])
def test_verl_backend_comes_from_the_recipe(name, overlays, web):
    from kit.rl.verl.recipe_config import merged_config, verl_overrides

    assert merged_config(name, overlays)["kit"]["backend"] == web
    assert f"kit.backend={web}" in verl_overrides(name, overlays)


def test_zero_tasks_stop_the_evaluation_with_the_load_problems():
    failed = {"mmsearch": LoadResult("mmsearch", problems=[{"reason": "Hub unreachable"}] * 2),
              "fvqa": LoadResult("fvqa")}
    with pytest.raises(NothingEvaluated, match=r"0 tasks(.|\n)*mmsearch: 2 load problem\(s\): Hub unreachable(.|\n)*fvqa"):
        require_tasks(failed)
    assert isinstance(NothingEvaluated("x"), RuntimeError)
    ok = {**failed, "fvqa": LoadResult("fvqa", tasks=[Task(id="t", question="q", answers=["a"])])}
    assert require_tasks(ok) == 1


def test_configurations_table_lists_the_tool_sets_tools():
    cfgs = make_configs("points_seeker", ["direct", "harness"])
    assert cfgs["harness"].harness.tools_enabled == [] and cfgs["harness"].harness.tool_set == "points_seeker"
    assert config_tools(cfgs["harness"]) == ["web_search", "image_search", "visit"]
    assert config_tools(cfgs["direct"]) == []
    assert "web_search" in config_tools(make_configs("paper", ["harness"])["harness"])
