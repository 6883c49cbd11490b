"""Exit codes and summaries tell the truth (issue 26, part 8): a model role whose episodes failed for policy or
endpoint reasons makes the notebook command exit non-zero, with one line per role."""

from __future__ import annotations

import json

import pytest

from kit.run_health import failed_roles, health_lines, role_health


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"status": "err', encoding="utf-8")  # a cut line


def test_role_health_counts_error_episodes_per_role(tmp_path):
    http = "APIStatusError: HTTP 500 from http://127.0.0.1:9/v1\ntraceback..."
    _write(tmp_path / "model" / "episodes.jsonl", [{"policy": "openai:m", "status": "error", "error": http}] * 3)
    _write(tmp_path / "demo" / "x" / "episodes.jsonl", [{"policy": "scripted-demonstrator", "status": "answered"},
                                                       {"policy": "scripted-demonstrator", "status": "budget_exhausted"}])
    health = role_health(tmp_path)
    assert health_lines(health) == ["openai:m: 3/3 episodes error — APIStatusError: HTTP 500 from http://127.0.0.1:9/v1",
                                    "scripted-demonstrator: 2/2 episodes ran (no error)"]
    assert [h.role for h in failed_roles(health)] == ["openai:m"]  # a wrong answer or a budget is not an error
    assert failed_roles(health, 1.0) == []
    with pytest.raises(ValueError, match="fraction"):
        failed_roles(health, float("nan"))


@pytest.mark.slow
def test_a_server_failing_every_chat_call_makes_the_notebook_exit_non_zero(tmp_path, data_dir, capsys):
    """The server answers /models (the endpoint check passes) but every chat call fails (HTTP 501): every model
    episode is ``error``. The command exited 0 before; now 1, with the role's line, and the outputs are kept."""
    from models_server import models_server

    from kit.cli import main

    with models_server(["served"]) as url:
        rc = main(["notebook", "01", "--out", str(tmp_path / "o"), "-p", "endpoint", url, "-p", "model", "served",
                   "-p", "n_episodes", "1"])
    err = capsys.readouterr().err
    assert rc == 1, err
    line = next(x for x in err.splitlines() if "episodes error" in x)
    assert "1/1 episodes error" in line and "501" in line, err
    assert (tmp_path / "o" / "summary.md").exists()  # the notebook ran to its end; the run is reported as failed


async def test_a_resume_retries_error_episodes_and_health_counts_each_once(tmp_path):
    """After a failed endpoint, a resume runs the error episodes again (they were not finished) and the run's
    health counts each episode's last record: fixing the endpoint and resuming gives a clean exit."""
    from conftest import MemoryBackend

    from kit.harness.config import HarnessConfig
    from kit.harness.episode import Task
    from kit.harness.loop import Harness
    from kit.harness.runner import read_episodes, run_batch
    from kit.policy.scripted import ScriptedPolicy
    from kit.types import PolicyError

    def down(messages, tools):
        raise PolicyError("HTTP 500 from http://127.0.0.1:9/v1")

    tasks = [Task(id=f"t{i}", question="q") for i in range(2)]
    recs = await run_batch(Harness(ScriptedPolicy(down, name="m"), MemoryBackend(), HarnessConfig()), tasks, tmp_path,
                           progress=False)
    assert {r.status for r in recs} == {"error"} and failed_roles(role_health(tmp_path))
    up = ScriptedPolicy(lambda m, t: "<think>x</think><response>Paris</response>", name="m")
    recs = await run_batch(Harness(up, MemoryBackend(), HarnessConfig()), tasks, tmp_path, progress=False)
    assert [r.status for r in recs] == ["answered", "answered"]
    assert len(read_episodes(tmp_path / "episodes.jsonl")) == 2  # the error records were replaced, not duplicated
    assert health_lines(role_health(tmp_path)) == ["m: 2/2 episodes ran (no error)"]


# ------------------------------------------------------------------------------------------ judges as roles
LLM = "llm:gpt-x@llm-judge-v1"
VLM = "image-vlm:v@image-judge-v1"
DEAD = "judge endpoint failed: HTTP 500 from http://judge/v1"


def _item(i: int, **kw):
    """A prediction line as kit.eval.runner.score_record writes it (the real ItemResult)."""
    from kit.eval.metrics import ItemResult

    base = dict(benchmark="fvqa", config="harness", repeat=0, task_id=f"t{i}", episode_id=f"e{i}", status="answered")
    return ItemResult(**{**base, **kw})


def _dead(i: int, **kw):
    return _item(i, score=0.0, correct=None, judge=LLM, judge_error=DEAD + "\nbody...", **kw)


def _predictions(path, items, tail: str = ""):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(it.model_dump_json() + "\n" for it in items) + tail, encoding="utf-8")


def test_a_dead_answer_judge_fails_the_run_with_its_line(tmp_path):
    """Every verdict of a dead LLM judge is ``correct=None`` with ``score=0``: before, no role counted them (exit 0,
    the verdict errors read as wrong answers); now the judge is a role that fails."""
    _predictions(tmp_path / "predictions" / "fvqa__harness__r0.jsonl", [_dead(i) for i in range(3)])
    health = role_health(tmp_path)
    assert health_lines(failed_roles(health)) == [f"judge {LLM}: 3/3 verdicts error — {DEAD}"]
    assert failed_roles(health, 1.0) == []  # the same tolerance as model roles


def test_mixed_judges_are_counted_apart_and_a_rule_judge_shows_no_error(tmp_path):
    rule = "rule:contains@rule-v1"
    _predictions(tmp_path / "predictions" / "a__harness__r0.jsonl", [
        _dead(0, has_target=True, cited=True, image_judge=VLM, image_judge_error="judge endpoint failed: refused"),
        _item(1, score=1.0, correct=True, judge=LLM, has_target=True, cited=True, image_judge=VLM, match=True),
        _item(2, score=0.0, correct=False, judge=LLM, has_target=True),  # a wrong answer, no citation: no image verdict
        _item(3, status="error", error="HTTP 500", correct=False, judge=LLM),  # an episode error, judged empty
        # a configured fallback decided: a verdict, not a judge error (as metrics.run_scores)
        _item(4, score=1.0, correct=True, judge=f"{rule} (fallback from {LLM})", judge_error=DEAD)])
    _predictions(tmp_path / "predictions" / "b__direct__r0.jsonl", [_item(i, correct=i % 2 == 0, judge=rule)
                                                                    for i in range(4)])
    health = role_health(tmp_path)
    assert health_lines(health) == [
        f"image judge {VLM}: 1/2 verdicts error — judge endpoint failed: refused",
        f"judge {LLM}: 1/4 verdicts error — {DEAD}",
        f"judge {rule}: 4/4 verdicts given (no error)",
        f"judge {rule} (fallback from {LLM}): 1/1 verdicts given (no error)"]
    assert [h.role for h in failed_roles(health, 0.3)] == [f"image judge {VLM}"]  # 1/2 > 0.3; 1/4 is not


def test_a_rewritten_record_counts_once_its_last_line(tmp_path):
    """A resume with the judge back re-judges the items: each (file, episode id) counts once, its last line."""
    f = tmp_path / "predictions" / "fvqa__harness__r0.jsonl"
    _predictions(f, [_dead(0), _dead(1), _item(0, score=1.0, correct=True, judge=LLM)])
    assert health_lines(role_health(tmp_path)) == [f"judge {LLM}: 1/2 verdicts error — {DEAD}"]
    _predictions(f, [_item(i, correct=True, judge=LLM) for i in range(2)])  # the runner rewrites the whole file
    assert failed_roles(role_health(tmp_path)) == []


def test_malformed_prediction_lines_are_skipped(tmp_path):
    junk = '{"judge": "llm:x", "judge_err\n[1, 2]\n"not an object"\n{"benchmark": "no judge field"}\n\n'
    _predictions(tmp_path / "predictions" / "fvqa__harness__r0.jsonl", [_dead(0)], tail=junk + '{"episode_id": "e9", ')
    (tmp_path / "predictions" / "unreadable.jsonl").mkdir()  # a folder named like a file: skipped, no OSError
    _predictions(tmp_path / "other" / "items.jsonl", [_dead(1)])  # not under predictions/: not an evaluation item
    assert health_lines(role_health(tmp_path, tmp_path / "missing")) == [f"judge {LLM}: 1/1 verdicts error — {DEAD}"]


async def test_an_evaluation_with_a_dead_judge_endpoint_fails_its_judge_role(tmp_path, data_dir):
    """The real path: kit.eval.runner judges with an LLM judge whose endpoint answers HTTP 500; the model role
    ran, the judge role fails (the notebook command would exit 1 with this line)."""
    import httpx
    from conftest import MemoryBackend

    from kit.eval.configs import make_configs
    from kit.eval.judges import LLMJudge
    from kit.eval.runner import load_benchmarks, run_evaluation
    from kit.policy.openai_client import OpenAIChatPolicy
    from kit.policy.scripted import CharTokenCounter, ScriptedPolicy

    judge = LLMJudge(OpenAIChatPolicy("http://judge/v1", "j", api_key="k", token_counter=CharTokenCounter(),
                                      max_retries=0, transport=httpx.MockTransport(lambda r: httpx.Response(500))), "j")
    loaded = await load_benchmarks(["fvqa"], limit=2, data_dir=data_dir)
    await run_evaluation(loaded, make_configs("smoke", ["direct"]), out_dir=tmp_path, repeats=1, judge=judge,
                         policy=ScriptedPolicy(lambda m, t: "<response>Paris</response>", name="m"),
                         backend=MemoryBackend(), private_dir=tmp_path / "p")
    health = role_health(tmp_path, tmp_path / "p")
    assert health_lines(health)[0] == "m: 2/2 episodes ran (no error)"
    (line,) = health_lines(failed_roles(health))
    assert line.startswith(f"judge {judge.name}: 2/2 verdicts error — judge endpoint failed") and "500" in line, line


def test_the_rl_reward_judge_is_a_role_read_from_the_trainers_step_metrics(tmp_path):
    """Notebook 05: a dead reward judge excludes every trajectory (judge_error) and trains nothing; the run says so."""
    from kit.run_health import RL_JUDGE_ROLE, failed_roles, role_health

    run = tmp_path / "05_rl_long_mdr" / "run"
    run.mkdir(parents=True)
    rows = [{"step": 0, "rollout_trajectories": 8, "rollout_judge_errors": 8},
            {"step": 1, "rollout_trajectories": 8, "rollout_judge_errors": 0},
            {"step": 1, "rollout_trajectories": 8, "rollout_judge_errors": 2},  # the step rerun after a resume
            {"step": 2, "skipped": "no eligible group"}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"cut')
    (h,) = [x for x in role_health(tmp_path) if x.role == RL_JUDGE_ROLE]
    assert (h.episodes, h.errors, h.unit) == (16, 10, "verdicts")
    assert failed_roles([h], 0.5) == [h] and failed_roles([h], 0.7) == []
    assert h.line().startswith(f"{RL_JUDGE_ROLE}: 10/16 verdicts error — reward not computed")
