"""The sequence runner: order, overrides, a clear error for a missing notebook, stop at the first failure,
resume from it (finished notebooks are not rerun), and a subset of the real notebooks under the smoke profile."""

from __future__ import annotations

import json

import nbformat
import pytest

from kit.cli import (
    NOTEBOOKS,
    SEQUENCE_FILE,
    NotebookFailed,
    SequenceError,
    main,
    parse_overrides,
    plan_sequence,
    run_sequence,
)
from kit.kernel import kernelspec


def _notebook(path, body: str) -> None:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('profile = "smoke"\nout_dir = "."\nfail_if = ""\nvalue = 1')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = kernelspec()  # the kit's kernel (kit.kernel)
    nbformat.write(nb, path)


BODY = """
from pathlib import Path
import json, time
if fail_if and Path(fail_if).exists():
    raise RuntimeError("deliberate failure: " + fail_if)
out = Path(out_dir); out.mkdir(parents=True, exist_ok=True)
runs = out / "runs.txt"
runs.write_text(runs.read_text() + "x" if runs.exists() else "x")
(out / "params.json").write_text(json.dumps({"profile": profile, "value": value}))
"""


@pytest.fixture
def nb_dir(tmp_path):
    d = tmp_path / "notebooks"
    d.mkdir()
    for k in ("01", "03", "06"):
        _notebook(d / f"{NOTEBOOKS[k]}.ipynb", BODY)
    return d


def test_parse_overrides_and_plan(nb_dir):
    common, per = parse_overrides([("seed", "3"), ("06.n_per_benchmark", "2"), ("name", "abc")])
    assert common == {"seed": 3, "name": "abc"} and per == {"06": {"n_per_benchmark": 2}}
    with pytest.raises(SequenceError, match="no notebook 09"):
        parse_overrides([("09.x", "1")])
    assert plan_sequence(["06", "01", "03", "01"], notebooks_dir=nb_dir) == ["01", "03", "06"]
    with pytest.raises(SequenceError, match="unknown notebook key"):
        plan_sequence(["8"], notebooks_dir=nb_dir)
    # the full sequence needs 02, 04, 05, 07 too: a clear error naming every missing file, nothing run
    with pytest.raises(SequenceError, match=r"missing notebook\(s\): 02 .*04 .*05 .*07 "):
        plan_sequence(None, notebooks_dir=nb_dir)


def test_missing_notebook_fails_before_running_anything(tmp_path, nb_dir, capsys):
    rc = main(["sequence", "--run", "r", "--only", "01", "02", "--results-dir", str(tmp_path / "res"),
               "--notebooks-dir", str(nb_dir)])
    assert rc == 2 and "missing notebook(s): 02" in capsys.readouterr().err
    assert not (tmp_path / "res" / "r").exists()


def test_stop_at_failure_then_resume(tmp_path, nb_dir, capsys):
    res, flag = tmp_path / "res", tmp_path / "fail_flag"
    flag.write_text("1")
    argv = ["sequence", "--run", "smoke1", "--only", "01", "03", "06", "-p", "value", "7", "-p", "03.fail_if", str(flag),
            "--results-dir", str(res), "--notebooks-dir", str(nb_dir), "--no-progress"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "notebook 03 (03_vfold_rendering) failed" in err and "deliberate failure" in err and "--resume" in err
    state = json.loads((res / "smoke1" / "sequence.json").read_text())
    assert [state["steps"][k]["status"] for k in ("01", "03", "06")] == ["ok", "failed", "pending"]
    assert (res / "smoke1" / "03_vfold_rendering" / "03_vfold_rendering.ipynb").exists()  # the failing copy is kept
    assert not (res / "smoke1" / "06_evaluation").exists()
    assert json.loads((res / "smoke1" / "01_harness_demo" / "params.json").read_text()) == {"profile": "smoke", "value": 7}

    # a resume with a different plan is refused
    assert main(["sequence", "--run", "smoke1", "--resume", "--only", "01", "--results-dir", str(res),
                 "--notebooks-dir", str(nb_dir)]) == 2
    assert "different plan" in capsys.readouterr().err

    flag.unlink()
    assert main(["sequence", "--run", "smoke1", "--resume", "--results-dir", str(res), "--notebooks-dir", str(nb_dir),
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "[1/3] 01 01_harness_demo: done in an earlier attempt" in out and "[3/3] 06 06_evaluation: ok" in out
    assert (res / "smoke1" / "01_harness_demo" / "runs.txt").read_text() == "x"  # not rerun
    assert (res / "smoke1" / "03_vfold_rendering" / "runs.txt").read_text() == "x"
    assert json.loads((res / "smoke1" / "06_evaluation" / "params.json").read_text())["value"] == 7  # recorded overrides
    state = json.loads((res / "smoke1" / "sequence.json").read_text())
    assert all(s["status"] == "ok" for s in state["steps"].values())
    manifest = json.loads((res / "smoke1" / "manifest.json").read_text())
    assert manifest["kind"] == "sequence" and manifest["config"]["sequence"]["keys"] == ["01", "03", "06"]


def test_fresh_sequence_clears_earlier_outputs_resume_keeps_them(tmp_path, nb_dir):
    def runner(key, profile, params, out, **kw):
        out.mkdir(parents=True, exist_ok=True)
        (out / "ran.txt").write_text(key)
        if key == "03" and (tmp_path / "fail").exists():
            raise ValueError("boom")
        return out / "x.ipynb"

    stale = tmp_path / "r" / NOTEBOOKS["01"] / "run" / "checkpoints"
    stale.mkdir(parents=True)
    (stale / "COMPLETE").write_text("")
    lines = []
    # outputs no sequence of this run wrote (a notebook run on its own, e.g. a GPU run's checkpoints): never cleared
    with pytest.raises(SequenceError, match=r"01_harness_demo hold\(s\) outputs that no sequence of run 'r' wrote"):
        run_sequence("r", ["01", "03", "06"], results_dir=tmp_path, notebooks_dir=nb_dir, runner=runner, echo=lines.append)
    assert stale.exists()
    run_sequence("r", ["01"], results_dir=tmp_path / "other", notebooks_dir=nb_dir, runner=runner, echo=lines.append)
    (tmp_path / "other" / "r" / SEQUENCE_FILE).replace(tmp_path / "r" / SEQUENCE_FILE)  # now this run's sequence wrote 01
    (tmp_path / "fail").write_text("1")
    with pytest.raises(NotebookFailed):
        run_sequence("r", ["01", "03", "06"], results_dir=tmp_path, notebooks_dir=nb_dir, runner=runner, echo=lines.append)
    assert not stale.exists() and any("cleared the earlier outputs" in x for x in lines)  # a fresh run starts clean
    kept = tmp_path / "r" / NOTEBOOKS["03"] / "partial.txt"
    kept.write_text("state of the failed notebook")
    stale06 = tmp_path / "r" / NOTEBOOKS["06"] / "old.txt"
    stale06.parent.mkdir(parents=True)
    stale06.write_text("from an older sequence")
    from kit.eval.runner import default_private_dir

    private06 = default_private_dir(stale06.parent) / "mmbrowsecomp" / "episodes.jsonl"  # encrypted benchmark's episodes
    private06.parent.mkdir(parents=True, exist_ok=True)
    private06.write_text("{}\n")
    (tmp_path / "fail").unlink()
    run_sequence("r", resume=True, results_dir=tmp_path, notebooks_dir=nb_dir, runner=runner, echo=lines.append)
    assert kept.exists()  # the failed notebook resumes inside its folder
    assert not stale06.exists() and (stale06.parent / "ran.txt").exists()  # a never-started one starts clean
    assert not private06.exists()  # with its private episodes: an older run's MM-BrowseComp episodes are not resumed


def test_resume_without_state_and_bad_run_name(tmp_path, nb_dir):
    with pytest.raises(SequenceError, match="nothing to resume"):
        run_sequence("none", resume=True, results_dir=tmp_path, notebooks_dir=nb_dir)
    with pytest.raises(SequenceError, match="plain folder name"):
        run_sequence("../x", ["01"], results_dir=tmp_path, notebooks_dir=nb_dir)


def test_failure_is_raised_with_the_notebook_named(tmp_path, nb_dir):
    def runner(key, profile, params, out, **kw):
        if key == "03":
            raise ValueError("boom")
        out.mkdir(parents=True, exist_ok=True)
        return out / "x.ipynb"

    lines = []
    with pytest.raises(NotebookFailed) as ei:
        run_sequence("r", ["01", "03", "06"], results_dir=tmp_path, notebooks_dir=nb_dir, runner=runner, echo=lines.append)
    assert ei.value.key == "03" and "boom" in str(ei.value)
    assert lines[0].startswith("[1/3] 01 01_harness_demo: running") and "[2/3] 03" in lines[2]


@pytest.mark.slow
def test_real_notebook_subset_smoke(tmp_path, data_dir):
    """01 and 03 of the real sequence, smoke profile with small parameters, into one run folder."""
    state = run_sequence("smoke", ["01", "03"], profile="smoke", per_notebook={"01": {"n_episodes": 1}},
                         results_dir=tmp_path, progress=False)
    assert all(s["status"] == "ok" for s in state["steps"].values())
    for k in ("01", "03"):
        d = tmp_path / "smoke" / NOTEBOOKS[k]
        assert (d / f"{NOTEBOOKS[k]}.ipynb").exists() and (d / "manifest.json").exists()
    assert (tmp_path / "smoke" / "manifest.json").exists()


def test_bad_parameters_state_files_and_relative_out(tmp_path, nb_dir, monkeypatch, capsys):
    """A misspelt parameter is refused before anything runs (one notebook: exit 2; a sequence: when no
    planned notebook declares it); a damaged sequence.json is a clear error; a relative --out is taken
    from the caller's working directory, not from notebooks/."""
    from kit.cli import run_notebook

    with pytest.raises(ValueError, match=r"no parameter\(s\) \['valeu'\]"):
        run_notebook("01", "smoke", {"valeu": 2}, tmp_path / "o", notebooks_dir=nb_dir)
    assert not (tmp_path / "o").exists()
    res = tmp_path / "res"
    with pytest.raises(SequenceError, match=r"no planned notebook has parameter\(s\) \['valeu'\]"):
        run_sequence("r", ["01"], common={"valeu": 2}, results_dir=res, notebooks_dir=nb_dir, progress=False)
    (res / "r").mkdir(parents=True)
    (res / "r" / "sequence.json").write_text("{not json")
    with pytest.raises(SequenceError, match="not a readable sequence state"):
        run_sequence("r", resume=True, results_dir=res, notebooks_dir=nb_dir, progress=False)
    (res / "r" / "sequence.json").write_text("{}")
    with pytest.raises(SequenceError, match="not a readable sequence state"):
        run_sequence("r", resume=True, results_dir=res, notebooks_dir=nb_dir, progress=False)
    monkeypatch.chdir(tmp_path)
    rc = main(["notebook", "01", "--out", "rel_out", "-p", "value", "5"] + [])  # real notebooks/ has no 'value'
    assert rc == 2 and "no parameter(s) ['value']" in capsys.readouterr().err
    dest = run_notebook("01", "smoke", {"value": 5}, "rel_out", notebooks_dir=nb_dir)
    assert dest == tmp_path / "rel_out" / "01_harness_demo.ipynb"
    assert json.loads((tmp_path / "rel_out" / "params.json").read_text())["value"] == 5


def test_declared_parameters_of_the_real_notebooks():
    """Every real notebook's parameters are found, including lines whose comments papermill's own
    inspector cannot parse (a refused real parameter would make the notebook unusable from the CLI)."""
    from kit.cli import _declared
    from kit.paths import PROJECT_ROOT

    for key, name in NOTEBOOKS.items():
        assert {"profile", "out_dir"} <= _declared(PROJECT_ROOT / "notebooks" / f"{name}.ipynb"), key
    assert {"data", "lr_language", "lr_vision"} <= _declared(PROJECT_ROOT / "notebooks" / "04_sft_unsloth.ipynb")
    assert "stages" in _declared(PROJECT_ROOT / "notebooks" / "05_rl_long_mdr.ipynb")


def test_sequence_preflights_model_parameters_and_rules_before_the_first_notebook(tmp_path):
    """A bad base_model of 04, a count of 0 or an LLM judge without endpoint stop the whole sequence before
    01 runs (C13, C14)."""
    calls = []

    def runner(key, *a, **kw):
        calls.append(key)
        raise AssertionError("no notebook may run")

    for keys, common, per, msg in [
            (["01", "04"], {}, {"04": {"base_model": "tiny-bogus"}}, r"notebook 04 .*no tiny architecture 'bogus'"),
            (["01", "06"], {"concurrency": 0}, {}, r"'concurrency' of notebook 01 .* expects int >= 1"),
            (["01", "06"], {}, {"06": {"judge": "llm"}}, r"judge='llm' of notebook 06 .* needs judge_endpoint")]:
        with pytest.raises(SequenceError, match=msg):
            run_sequence("r", keys, common=common, per_notebook=per, results_dir=tmp_path, runner=runner,
                         echo=lambda s: None)
    assert calls == [] and not (tmp_path / "r").exists()
