"""scripts/launch_verl.sh refuses before Ray when the recipe's judge/summarizer needs an endpoint not given."""

import os
import subprocess
import sys

from kit.paths import PROJECT_ROOT
from kit.recipes import load_recipe
from kit.rl.verl.launch_check import launch_problems


def test_paper_recipe_needs_judge_and_summarizer_endpoints():
    r = load_recipe("weagent_mmsearch")
    assert len(launch_problems(r, [])) == 2
    assert launch_problems(r, ["kit.judge_endpoint=http://j:8000/v1", "kit.summarizer_endpoint=http://s/v1"]) == []
    (only,) = launch_problems(r, ["kit.judge=rule"])  # the labelled rule fallback needs no judge endpoint
    assert "kit.summarizer_endpoint" in only
    assert launch_problems(load_recipe("smoke"), []) == []  # offline rule judge / extractive summarizer


def test_launcher_refuses_early_without_a_judge_endpoint(tmp_path):
    model, train, val = tmp_path / "model", tmp_path / "t.parquet", tmp_path / "v.parquet"
    model.mkdir()
    train.write_text("x")
    val.write_text("x")
    env = {**os.environ, "KIT_VERL_VENV": str(PROJECT_ROOT / ".venv"), "RECIPE": "points_seeker",
           "NGPUS": "1"}  # the kit's venv stands in: the check runs before anything verl needs
    env["PATH"] = f"{os.path.dirname(sys.executable)}:{env['PATH']}"
    p = subprocess.run(["bash", str(PROJECT_ROOT / "scripts" / "launch_verl.sh"), str(model), str(train), str(val),
                        "kit.summarizer_endpoint=http://s/v1"], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 2, p.stderr
    assert "kit.judge_endpoint=URL" in p.stderr and "refused" in p.stderr
    assert "kit.rl.verl.main" not in p.stderr and "ray" not in p.stderr.lower()


def test_recipe_verl_output_names_backend_and_endpoint_keys(capsys):
    from kit.cli import main

    assert main(["recipe", "points_seeker", "--verl"]) == 0
    out, err = capsys.readouterr()
    assert any(ln.startswith("kit.backend=") for ln in out.splitlines())  # stdout: overrides only
    assert "kit.judge_endpoint=URL required" in err and "kit.summarizer_endpoint=URL required" in err
    assert "URL" not in out
