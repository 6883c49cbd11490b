"""Attack findings N1, N2, the notebook lows and R1-R6 (issue "paper recipes"): a bad notebook-05 stage list,
a missing or unreadable ``rl_prompts``, ``backend='verl'`` and an endpoint its offline switch never calls stop
before the kernel with one line; recipe files with unknown sections or keys (overlays too), bools for numbers,
non-positive step counts, deep nesting or unknown tools fail at load with a RecipeError; ``recipe --stage(s)``
without ``--verl`` is refused."""

from __future__ import annotations

import json

import pytest

import kit.recipes as recipes
from kit.cli_params import ParameterError, check_combinations, notebook_parameters
from kit.paths import PROJECT_ROOT
from kit.recipes import RecipeError, load_recipe

NB05 = notebook_parameters(PROJECT_ROOT / "notebooks" / "05_rl_long_mdr.ipynb")
# web_backend "zim": the labelled local web (the recipe's live web needs SERPER_API_KEY; tests/test_web_backend_recipe.py)
PAPER = {"base_model": "tiny-qwen2_vl", "judge": "rule", "summarizer": "extractive", "rl_prompts": "x", "web_backend": "zim"}


# ------------------------------------------------------------------- N1: notebook 05's stages, one parser
@pytest.mark.parametrize("profile, preflight, stages", [
    ("smoke", False, "h0"), ("smoke", False, "zzz"), ("smoke", False, ""), ("smoke", False, "  "),
    ("smoke", False, "h1:0"), ("smoke", False, "OPD:1,h2"), ("paper", False, "h0"), ("paper", True, "h0"),
    ("points_seeker", False, "h1,h1"),
])
def test_bad_stages_are_refused_before_the_kernel(profile, preflight, stages):
    given = {} if profile == "smoke" or preflight else dict(PAPER, teacher_model="t")
    with pytest.raises(ParameterError, match="stages"):
        check_combinations(NB05, {**given, "stages": stages}, profile, preflight=preflight)


def test_teacher_rule_reads_the_resolved_schedule():
    # " opd :1" is not an OPD stage to the notebook's parser either: refused as a stage, never run without a teacher
    with pytest.raises(ParameterError, match="unknown stage 'opd :1'"):
        check_combinations(NB05, {**PAPER, "stages": " opd :1,h2"}, "paper")
    with pytest.raises(ParameterError, match="teacher_model"):
        check_combinations(NB05, {**PAPER, "stages": "h2, opd:1"}, "paper")
    for ok in ("weagent", "h10:200,h20", " h10 , h20 "):
        check_combinations(NB05, {**PAPER, "stages": ok}, "paper")
    check_combinations(NB05, {"stages": "weagent"}, "smoke")


# ------------------------------------------------------------------------------ N2: rl_prompts before the kernel
def test_paper_profile_without_rl_prompts_is_refused_before_the_kernel():
    given = {k: v for k, v in PAPER.items() if k != "rl_prompts"}
    with pytest.raises(ParameterError, match="rl_prompts"):
        check_combinations(NB05, {**given, "stages": "weagent"}, "paper")
    check_combinations(NB05, {**given, "stages": "weagent"}, "paper", preflight=True)  # local prompts, labelled
    check_combinations(NB05, {}, "smoke")


def _tasks(path, *lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(lines))
    return path


@pytest.mark.parametrize("name, body, why", [
    ("splits/rl_prompts.jsonl", b"", "empty"),
    ("splits/rl_prompts.jsonl", b"\n  \n", "empty"),
    ("p.jsonl", b"not json {{{\n", "not a task"),
    ("p.jsonl", b'{"id": "t", "question": "q", "answers": []}\n', "no reference answer"),
    ("p.jsonl", b"\xff\xfe\x00\n", "not a task"),
    ("a.zim", b"ZIM\x04" + b"\x00" * 64, "not a .jsonl"),
    ("p.jsonl", b'{"id": "t", "question": "q", "answers": ["a"]}', None),  # no final newline: fine
    ("p.jsonl", b'\n{"id": "t", "question": "q", "answers": ["a"]}\nlater lines are the notebook\'s\n', None),
])
def test_rl_prompts_problem_reads_the_first_record(tmp_path, name, body, why):
    from kit.rl.prompts import RLPromptError, load_rl_prompts, rl_prompts_problem

    path = _tasks(tmp_path / name, body)
    source = tmp_path if name.startswith("splits/") else path
    problem = rl_prompts_problem(source)
    if why is None:
        assert problem is None
    else:
        assert problem and why in problem and "rl_prompts" in problem, problem
        if name.endswith(".zim"):
            with pytest.raises(RLPromptError, match="not a .jsonl"):
                load_rl_prompts(path, tmp_path / "img")


# ------------------------------------------------------------------------------------------ notebook lows
def test_backend_verl_is_refused_before_the_kernel():
    with pytest.raises(ParameterError, match="launch_verl.sh"):
        check_combinations(NB05, {"backend": "verl"}, "smoke")
    check_combinations(NB05, {"backend": "inprocess"}, "smoke")


@pytest.mark.parametrize("switch, offline", [("judge", "rule"), ("summarizer", "extractive")])
def test_an_endpoint_its_offline_switch_never_calls_is_a_clear_error(switch, offline):
    with pytest.raises(ParameterError, match=f"{switch}_endpoint=.*{switch}='{offline}' does not use it"):
        check_combinations(NB05, {switch: offline, f"{switch}_endpoint": "http://127.0.0.1:9/v1"}, "smoke")


def test_image_judge_endpoint_with_phash_is_a_clear_error():
    nb06 = notebook_parameters(PROJECT_ROOT / "notebooks" / "06_evaluation.ipynb")
    with pytest.raises(ParameterError, match="image_judge='phash' does not use it"):
        check_combinations(nb06, {"image_judge": "phash", "image_judge_endpoint": "http://127.0.0.1:9/v1"}, "smoke")


# -------------------------------------------------------------------------------------------- recipes R1-R5
@pytest.mark.parametrize("body, match", [
    ("eval:\n  judgee: {value: rule, kit: x}\n", r"unknown key 'eval.judgee' \(did you mean 'judge'\?\)"),      # R1
    ("harnes:\n  max_turns: {value: 3, kit: x}\n", r"unknown section 'harnes' \(did you mean 'harness'\?\)"),
    ("rl_rollout:\n  max_turnz: {value: 3, kit: x}\n", r"rl_rollout.max_turnz.*did you mean 'max_turns'"),
    ("harness:\n  max_turns: {value: true, kit: x}\n", "bool, not a number"),                                   # R2
    ("rl:\n  group_size: {value: false, kit: x}\n", "bool, not a number"),
    ("rl_run:\n  total_steps: {value: true, kit: x}\n", "total_steps"),
    ("schedules:\n  s: {value: [{name: a, steps: true}], kit: x}\n", "bool, not a number"),
    ("rl_run:\n  total_steps: {value: -5, kit: x}\n", "total_steps.*greater than or equal to 1"),               # R3
    ("rl_run:\n  total_steps: {value: 0, kit: x}\n", "total_steps"),
    ("stage_budgets:\n  max_turns: {value: 0, kit: x}\n", "stage_budgets.max_turns"),
    ("harness:\n  tools_enabled: {value: [web_search, rm_rf], kit: x}\n", r"tools.*rm_rf"),                   # R5
    ("rl_rollout:\n  tools_enabled: {value: [rm_rf], kit: x}\n", r"rl_rollout: tools.*rm_rf"),
    ("harness:\n  tool_set: {value: nosuchset, kit: x}\n", "nosuchset"),
])
def test_recipe_keys_types_and_tools_are_validated(recipe_dir, body, match):
    (recipe_dir / "bad.yaml").write_text("name: bad\nextends: weagent_mmsearch\n" + body)
    with pytest.raises(RecipeError, match=match):
        load_recipe("bad")


def test_an_overlay_typo_is_named_in_the_overlay_file(recipe_dir):
    (recipe_dir / "ov.yaml").write_text("name: ov\neval:\n  n_per_benchmrk: {value: 1, kit: y}\n")
    with pytest.raises(RecipeError, match=r"ov\.yaml: unknown key 'eval.n_per_benchmrk'.*n_per_benchmark"):
        load_recipe("weagent_mmsearch", "ov")


def test_deeply_nested_yaml_is_a_recipe_error(recipe_dir):  # R4
    (recipe_dir / "bad.yaml").write_text("name: bad\nnotes:\n  x: {value: " + "[" * 5000 + "]" * 5000 + ", kit: x}\n")
    with pytest.raises(RecipeError, match="nested too deeply"):
        load_recipe("bad")


def test_every_shipped_recipe_key_is_declared():
    from kit.recipes.sections import check_keys

    for name in recipes.recipe_names():
        r = load_recipe(name)
        assert check_keys(r.entries, recipes.SECTION_MODELS, {}) is None


# ---------------------------------------------------------------------------------------------------- R6
@pytest.mark.parametrize("argv, flag", [(["--stages", "h0"], "--stages"), (["--stage", "h20"], "--stage"),
                                        (["--json", "--stages", "weagent"], "--stages")])
def test_recipe_stage_flags_without_verl_are_refused(capsys, argv, flag):
    from kit.cli import main

    assert main(["recipe", "smoke", *argv]) == 2
    out, err = capsys.readouterr()
    assert not out and f"recipe: {flag} " in err and "--verl" in err
    assert main(["recipe", "weagent_mmsearch", "--verl-stages", "--stages", "weagent"]) == 0
    assert json.loads(json.dumps(capsys.readouterr().out))
