"""Bad input against the recipes (issue "paper recipes"): hostile recipe files fail with a RecipeError naming
the file and the reason; the CLI refuses a profile or a preflight a notebook does not support before a kernel
starts; check_combinations cites the profile's own recipe; every recipe value is what the code paths build."""

from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import nbformat
import pytest

import kit.recipes as recipes
from kit.recipes import RecipeError, load_recipe, recipe_names

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------- hostile files
@pytest.mark.parametrize("body, match", [
    ("- a\n- b\n", "mapping"),                                                          # YAML that is a list
    ("", "mapping"),                                                                    # an empty file
    ("name: bad\nharness:\n  max_turns: [3]\n", "entry"),                               # a non-dict entry
    ("name: bad\nharness:\n  max_turns: {value: 3, source: ''}\n", "empty"),            # value, empty source
    ("name: bad\nharness:\n  max_turns: {value: 3, source: T5, origin: smoke}\n", "origin"),  # a forged origin
    ("name: bad\nincludes: long_mdr\n", "includes"),                                    # a name, not a list
    ("name: bad\nincludes: {long_mdr: 1}\n", "includes"),
    ("name: bad\nextends: [long_mdr]\n", "extends"),                                    # a list, not a name
    ("name: bad\nincludes: [bad]\n", "cycle"),
    ("name: bad\ntitle: [1]\n", "title"),                                               # meta of the wrong type
    ("name: bad\n5:\n  x: {value: 1, kit: k}\n", "section"),                            # a non-text section name
    ("name: bad\nnotes:\n  7: {value: 1, kit: k}\n", "key"),                            # a non-text key
    ("name: bad\nharness:\n  max_turns: {value: 3, source: A}\n  max_turns: {value: 4, source: B}\n",
     "duplicate"),                                                                      # one citation silently lost
    ("name: bad\nnotes:\n  x: {value: .nan, kit: k}\n", "finite"),                      # not JSON
    ("name: bad\nnotes:\n  x: {value: [1, .inf], kit: k}\n", "finite"),
    ("name: bad\na: &a [x, x]\nnotes:\n  x: {value: *a, kit: k}\n", "alias"),           # anchors: billion laughs
    ("name: bad\nrl_run:\n  stages: {value: 'h1,bogus', kit: k}\n", "stage"),           # a bad stage spec
    ("name: bad\nextends: smoke\nrl_run:\n  stage_steps: {value: 0, kit: k}\n", "steps"),
])
def test_hostile_recipe_files_fail_clearly(recipe_dir, body, match):
    (recipe_dir / "bad.yaml").write_text(body)
    with pytest.raises(RecipeError, match=match):
        load_recipe("bad")


def test_includes_and_extends_cycles(recipe_dir):
    (recipe_dir / "bad.yaml").write_text("name: bad\nextends: bad2\n")
    (recipe_dir / "bad2.yaml").write_text("name: bad2\nincludes: [bad]\n")
    with pytest.raises(RecipeError, match="cycle: bad -> bad2 -> bad"):
        load_recipe("bad")


def test_non_utf8_and_huge_files(recipe_dir):
    (recipe_dir / "bad.yaml").write_bytes(b"name: bad\ntitle: \xff\xfe\n")
    with pytest.raises(RecipeError, match="UTF-8"):
        load_recipe("bad")
    big = "name: big\nnotes:\n" + "".join(f"  k{i}: {{value: {i}, kit: x}}\n" for i in range(40_000))
    (recipe_dir / "big.yaml").write_text(big)  # ~1 MB: PyYAML would parse it for ~10 s
    with pytest.raises(RecipeError, match="too large"):
        load_recipe("big")


@pytest.mark.parametrize("name", ["../x", "x.yaml", "x/y", "", "a\x00b", "ünï", None, 5])
def test_bad_names_never_reach_the_file_system(name):
    with pytest.raises(RecipeError, match="recipe name|unknown recipe"):
        load_recipe(name)


def test_overlays_given_as_one_string():
    assert load_recipe("points_seeker", "preflight").overlays == ("preflight",)
    with pytest.raises(RecipeError, match="bad recipe name"):
        load_recipe("points_seeker", ["../preflight"])


def test_overlay_may_add_sizes_but_config_sections_stay_validated(recipe_dir):
    (recipe_dir / "ov.yaml").write_text("name: ov\nharness:\n  max_turn: {value: 2, kit: typo}\n")
    with pytest.raises(RecipeError, match="max_turn"):
        load_recipe("points_seeker", ["ov"])
    # the preflight overlay adds keys a base lacks (sizes only); they come from the overlay file
    r = load_recipe("points_seeker", ["preflight"])
    assert r.entries["rl_run.stage_steps"].origin == "preflight"


def test_paper_default_on_a_missing_key_or_recipe():
    with pytest.raises(RecipeError, match="no value 'rl.nope'"):
        recipes.paper_default("rl.nope")
    with pytest.raises(RecipeError, match="unknown recipe"):
        recipes.paper_default("rl.lr", "nope")


# --------------------------------------------------------------------------------------------------- CLI
def _cli(*argv):
    from kit.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as e:  # argparse
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def _strict_json(text):
    def refuse(c):
        raise ValueError(f"not JSON: {c}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("name", recipe_names())
def test_cli_recipe_json_is_valid_json_for_every_recipe(name):
    for extra in ((), ("--preflight",)) if name != "preflight" else ((),):  # the overlay is applied to a recipe
        rc, out, err = _cli("recipe", name, "--json", *extra)
        assert rc == 0, err
        data = _strict_json(out)
        r = load_recipe(name, ("preflight",) if extra else ())
        assert [row["key"] for row in data["values"]] == [row["key"] for row in r.rows()]
        for row in data["values"]:  # dicts and lists come back as themselves
            assert row["value"] == json.loads(json.dumps(r.get(row["key"]), default=str)), row["key"]


@pytest.mark.parametrize("name", ["../weagent_mmsearch", "x.yaml", "", "ünï", "smoke\n"])
def test_cli_recipe_bad_names(name):
    rc, out, err = _cli("recipe", name)
    assert rc == 2 and out == "" and "choose one of" in err


def _notebook(folder: Path, key_name: str, profiles: tuple[str, ...], preflight: bool) -> None:
    lit = ", ".join(repr(p) for p in profiles)
    src = f"from typing import Literal\nprofile: Literal[{lit}] = 'smoke'\nout_dir = ''\n" + ("preflight = False\n" if preflight else "")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src, metadata={"tags": ["parameters"]})])
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(folder / f"{key_name}.ipynb"))


@pytest.fixture
def no_kernel(monkeypatch):
    import papermill

    started = []
    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: started.append(k["parameters"]))
    return started


def test_notebook_refuses_a_profile_its_parameters_cell_does_not_declare(tmp_path, no_kernel):
    from kit.cli import run_notebook
    from kit.cli_params import ParameterError

    nbs = tmp_path / "nbs"
    _notebook(nbs, "07_publish", ("smoke", "paper"), preflight=True)
    for pf in (False, True):
        with pytest.raises(ParameterError, match="points_seeker.*smoke.*paper"):
            run_notebook("07", "points_seeker", {}, tmp_path / "o", notebooks_dir=nbs, check_endpoints=False, preflight=pf)
    run_notebook("07", "paper", {}, tmp_path / "o", notebooks_dir=nbs, check_endpoints=False, preflight=True)
    assert [p["profile"] for p in no_kernel] == ["paper"]
    # the real notebook 02 (WeAgent's data pipeline only), through the command line
    rc, _, err = _cli("notebook", "02", "--profile", "points_seeker", "--preflight", "--out", str(tmp_path / "b"))
    assert rc == 2 and "profile 'points_seeker'" in err and len(no_kernel) == 1


def test_sequence_refuses_a_profile_a_planned_notebook_does_not_declare(tmp_path):
    from kit.cli import SequenceError, run_sequence

    nbs = tmp_path / "nbs"
    _notebook(nbs, "01_harness_demo", ("smoke", "paper", "points_seeker"), preflight=True)
    _notebook(nbs, "02_data_synthesis", ("smoke", "paper"), preflight=True)
    ran = []
    with pytest.raises(SequenceError, match="02.*points_seeker"):
        run_sequence("r", ["01", "02"], profile="points_seeker", results_dir=tmp_path / "res", notebooks_dir=nbs,
                      runner=lambda *a, **k: ran.append(a), echo=lambda s: None, preflight=False)
    assert ran == []


def test_dash_p_preflight_is_refused_with_or_without_the_flag(tmp_path, no_kernel):
    from kit.cli import run_notebook
    from kit.cli_params import ParameterError

    nbs = tmp_path / "nbs"
    _notebook(nbs, "01_harness_demo", ("smoke", "paper", "points_seeker"), preflight=True)
    for pf in (False, True):
        with pytest.raises(ParameterError, match="-p preflight is not accepted"):
            run_notebook("01", "paper", {"preflight": True}, tmp_path / "o", notebooks_dir=nbs, check_endpoints=False,
                         preflight=pf)
    with pytest.raises(ParameterError, match="-p profile is not accepted"):
        run_notebook("01", "paper", {"profile": "smoke"}, tmp_path / "o", notebooks_dir=nbs, check_endpoints=False)
    with pytest.raises(ParameterError, match="smoke is already small"):
        run_notebook("01", "smoke", {}, tmp_path / "o", notebooks_dir=nbs, check_endpoints=False, preflight=True)
    assert no_kernel == []


# ------------------------------------------------------------------------------------- check_combinations
def _declared(key):
    from kit.cli import NOTEBOOKS
    from kit.cli_params import notebook_parameters

    return notebook_parameters(ROOT / "notebooks" / f"{NOTEBOOKS[key]}.ipynb")


def test_points_seeker_image_judge_is_phash_and_needs_no_endpoint():
    from kit.cli_params import check_combinations

    d = _declared("06")
    named = {"judge_endpoint": "http://j", "summarizer_endpoint": "http://s", "summarizer_model": "m",
             "backend": "zim"}  # the labelled local web: the recipe's live web needs SERPER_API_KEY
    check_combinations(d, named, "points_seeker")  # no image_judge_endpoint asked for
    from kit.cli_params import ParameterError

    with pytest.raises(ParameterError, match="image_judge_endpoint"):
        check_combinations(d, named, "paper")  # WeAgent's VLM Target Match judge needs one
    check_combinations(d, {}, "points_seeker", preflight=True)  # a preflight's stand-ins


@pytest.mark.parametrize("switch, needs, cite", [("judge", "judge_endpoint", "§3.2.4"),
                                                 ("summarizer", "summarizer_endpoint", "§4.1")])
def test_points_seeker_errors_cite_its_own_recipe(switch, needs, cite):
    from kit.cli_params import ParameterError, check_combinations

    named = {"judge_endpoint": "http://j", "summarizer_endpoint": "http://s", "summarizer_model": "m",
             "image_judge_endpoint": "http://i"}
    given = {k: v for k, v in named.items() if not k.startswith(switch)}
    with pytest.raises(ParameterError, match=needs) as e:
        check_combinations(_declared("06"), given, "points_seeker")
    assert cite in str(e.value) and "WeAgent" not in str(e.value)
    with pytest.raises(ParameterError, match="WeAgent") as e:
        check_combinations(_declared("06"), given, "paper")


def test_opd_teacher_rule():
    from kit.cli_params import ParameterError, check_combinations

    d = _declared("05")
    base = {"base_model": "tiny-qwen2_vl", "rl_prompts": "x", "judge": "rule", "summarizer": "extractive",
            "web_backend": "zim"}  # the labelled local web: the recipe's live web needs SERPER_API_KEY
    with pytest.raises(ParameterError, match="teacher_model"):
        check_combinations(d, base, "long_mdr")  # Long-MDR's OPD warmup
    with pytest.raises(ParameterError, match="teacher_model"):
        check_combinations(d, {**base, "stages": "h1, opd:2"}, "points_seeker")
    with pytest.raises(ParameterError, match="teacher_model"):
        check_combinations(d, {**base, "stages": "long_mdr"}, "paper")
    check_combinations(d, base, "points_seeker")  # h10: no OPD stage
    check_combinations(d, base, "paper")  # WeAgent: one stage at Table 5's budgets, no OPD
    check_combinations(d, {**base, "stages": "h10,h20"}, "long_mdr")
    check_combinations(d, {**base, "teacher_model": "t"}, "long_mdr")
    check_combinations(d, base, "long_mdr", preflight=True)  # a stand-in teacher


# ------------------------------------------------------------------------- recipe values vs built objects
def _jsonable(v):
    return json.loads(json.dumps(v, default=str))


@pytest.mark.parametrize("name, preflight", [("smoke", False), ("paper", False), ("paper", True),
                                             ("points_seeker", False), ("points_seeker", True)])
def test_every_recipe_section_value_is_what_the_code_paths_build(name, preflight):
    from kit.profiles import get_profile

    P = get_profile(name, preflight=preflight)
    r = P.recipe_obj()
    built = {"harness": P.harness().model_dump(mode="json")}  # the notebooks' path (smoke: HarnessConfig.smoke)
    for section in recipes.SECTION_MODELS:
        if r.section(section) and section != "harness":
            built[section] = r.build(section).model_dump(mode="json")
    checked = 0
    for section, obj in built.items():
        for k, v in r.section(section).items():
            assert obj[k] == _jsonable(v), f"{r.label}: {section}.{k}: recipe {v!r}, built {obj[k]!r}"
            checked += 1
    assert checked > 20


def test_class_defaults_are_the_weagent_recipe_for_every_config_section():
    import importlib

    w = load_recipe("weagent_mmsearch")
    long_mdr = load_recipe("long_mdr")
    for section, path in recipes.SECTION_MODELS.items():
        mod, cls = path.split(":")
        default = getattr(importlib.import_module(mod), cls)().model_dump(mode="json")
        src = long_mdr if section == "rescue" else w
        for k, v in src.section(section).items():
            assert default[k] == _jsonable(v), f"{cls}().{k} = {default[k]!r}, recipe {src.name} says {v!r}"


def test_profile_size_and_stand_ins_outside_a_preflight():
    from kit.eval.judge_factory import _stand_in
    from kit.harness.summarize import SummarizerConfigError, make_summarizer
    from kit.profiles import get_profile

    paper = get_profile("paper")
    assert paper.size(2, 6, given=0) == 0 and paper.size(2, 6) == 6 and get_profile("smoke").size(2, 6) == 2
    assert _stand_in("paper", "judge") is None and _stand_in("points_seeker", "judge") is None
    with pytest.raises(SummarizerConfigError, match="summarizer_endpoint"):
        make_summarizer(profile="paper")  # a paper run never gets a random stand-in summarizer
    assert math.isfinite(paper.value("rl.lr"))
