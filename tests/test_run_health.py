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
    from kit.cli import main
    from tests.models_server import models_server

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
    from kit.harness.config import HarnessConfig
    from kit.harness.episode import Task
    from kit.harness.loop import Harness
    from kit.harness.runner import read_episodes, run_batch
    from kit.policy.scripted import ScriptedPolicy
    from kit.types import PolicyError
    from tests.conftest import MemoryBackend

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
