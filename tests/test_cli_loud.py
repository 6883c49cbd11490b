"""Bad notebook-05/06 parameters stop the CLI before the kernel starts (exit 2, one line naming the
parameter): a missing ``rl_prompts``, a malformed ``teacher_model``; an endpoint given without its model
uses the recipe's served name (kimi-k2.6 / qwen3-235b-a22b) instead of being refused. The kernel is
replaced by a recorder, so a check that lets a bad value through shows as ``rc == 0``."""

from __future__ import annotations

import json

import papermill
import pytest
from models_server import models_server

from kit.cli import main


@pytest.fixture
def kernel(monkeypatch):
    """Papermill's executor replaced by a recorder: ``calls`` holds the parameters of each started kernel."""
    calls: list[dict] = []
    monkeypatch.setattr(papermill, "execute_notebook", lambda src, dest, parameters=None, **kw: calls.append(parameters))
    return calls


def _run(tmp_path, nb, profile, *params, preflight=True):
    # one folder a run: a folder holding another run (other parameters) is refused (kit.runs)
    out = tmp_path / f"o{len(list(tmp_path.glob('o*')))}"
    argv = ["notebook", nb, "--profile", profile, *(["--preflight"] if preflight else []), "--out", str(out)]
    for k, v in params:
        argv += ["-p", k, v]
    return main(argv)


def _task_jsonl(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"id": "t1", "question": "q?", "answers": ["a"]}) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("value, why", [
    ("{tmp}/nowhere", "does not exist"),
    ("{tmp}/empty_dir", "no RL prompts"),
    ("hub:dataset:owner/name", "revision"),
    ("hub:model:owner/name@main", "dataset"),
])
def test_bad_rl_prompts_stop_before_the_kernel(tmp_path, kernel, capsys, value, why):
    (tmp_path / "empty_dir").mkdir()
    rc = _run(tmp_path, "05", "paper", ("rl_prompts", value.format(tmp=tmp_path)))
    err = capsys.readouterr().err
    assert rc == 2 and not kernel, err
    assert "rl_prompts" in err and why in err


def test_every_accepted_rl_prompts_form_starts_the_kernel(tmp_path, kernel, monkeypatch):
    run02 = tmp_path / "run02"
    _task_jsonl(run02 / "splits" / "rl_prompts.jsonl")
    mixture = tmp_path / "mix"
    (mixture / "arrow").mkdir(parents=True)
    forms = [str(_task_jsonl(tmp_path / "p.jsonl")), str(run02), str(mixture), "hub:dataset:owner/name@main"]
    for v in forms:
        assert _run(tmp_path, "05", "paper", ("rl_prompts", v)) == 0
    assert [c["rl_prompts"] for c in kernel] == forms
    # a path relative to the caller's folder reaches the notebook (which runs inside notebooks/) absolute
    monkeypatch.chdir(tmp_path)
    assert _run(tmp_path, "05", "paper", ("rl_prompts", "run02")) == 0
    assert kernel[-1]["rl_prompts"] == str(run02)


@pytest.mark.parametrize("value", ["hub:owner/name", "hub:dataset:owner/name@main", "{tmp}/no_teacher",
                                   "tiny-nosucharch"])
def test_malformed_teacher_model_stops_before_the_kernel(tmp_path, kernel, capsys, value):
    rc = _run(tmp_path, "05", "paper", ("teacher_model", value.format(tmp=tmp_path)))
    err = capsys.readouterr().err
    assert rc == 2 and not kernel and "teacher_model" in err, err


def test_well_formed_teacher_models_start_the_kernel(tmp_path, kernel):
    ckpt = tmp_path / "teacher"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    for v in ("tiny-qwen2_vl", "hub:owner/teacher@main", str(ckpt)):
        assert _run(tmp_path, "05", "paper", ("teacher_model", v)) == 0
    assert len(kernel) == 3


@pytest.mark.parametrize("profile, served", [("paper", "kimi-k2.6"), ("points_seeker", "qwen3-235b-a22b")])
@pytest.mark.parametrize("role", ["judge", "summarizer"])
def test_endpoint_without_model_uses_the_recipes_model(tmp_path, kernel, capsys, profile, served, role):
    with models_server([served]) as url:
        assert _run(tmp_path, "05", profile, (f"{role}_endpoint", url)) == 0, capsys.readouterr().err
    assert kernel[-1][f"{role}_endpoint"] == url
    with models_server(["some-other-model"]) as url:  # the recipe's name is what is asked for
        assert _run(tmp_path, "05", profile, (f"{role}_endpoint", url)) == 2
    err = capsys.readouterr().err
    assert f"{role}_endpoint" in err and repr(served) in err


def test_image_judge_endpoint_without_model_uses_the_recipes_model(tmp_path, kernel, capsys):
    with models_server(["kimi-k2.6"]) as url:
        assert _run(tmp_path, "06", "paper", ("image_judge_endpoint", url)) == 0, capsys.readouterr().err


def test_paper_run_with_judge_and_summarizer_endpoints_but_no_models_passes_the_offline_check(monkeypatch):
    """check_combinations (no network): ``summarizer="llm"`` with an endpoint needs no summarizer_model when
    the recipe names one."""
    monkeypatch.setenv("SERPER_API_KEY", "k")  # the recipe's live web (eval.web_backend) is not the subject here
    from kit.cli_params import check_combinations, notebook_parameters
    from kit.paths import PROJECT_ROOT

    declared = notebook_parameters(PROJECT_ROOT / "notebooks" / "06_evaluation.ipynb")
    check_combinations(declared, {"judge_endpoint": "http://j/v1", "image_judge_endpoint": "http://j/v1",
                                  "summarizer": "llm", "summarizer_endpoint": "http://s/v1"}, "paper")
