"""Where a run writes and what identifies it, under bad input (issue 26, parts 5 and 8): one run-name rule for the
notebook and sequence commands, folder errors and damaged identity or state files as exit 2 (never a traceback or a
hang), every parameter value and input file content in the identity, a notebook opened by hand claiming its folder,
and a sequence that never clears another experiment's folders."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from kit.cli import main
from kit.cli_params import notebook_parameters
from kit.cli_sequence import NOTEBOOKS, SEQUENCE_FILE, SequenceError, run_sequence
from kit.paths import PROJECT_ROOT
from kit.runs import (
    IDENTITY_FILE,
    RUN_NAME_MAX,
    FolderError,
    RunMismatch,
    check_run_name,
    claim_folder,
    default_out_dir,
    effective_params,
    identity_diff,
    read_identity,
    resolve_out_dir,
    run_identity,
)

NB = PROJECT_ROOT / "notebooks"


@pytest.mark.parametrize("name, why", [
    ("a\nb", "control character"), ("a\x1b[31m", "control character"), ("a\u200bb", "control character"),
    ("x" * (RUN_NAME_MAX + 1), "longer than"), ("a/b", "path separator"), ("..", "relative folder"),
    (" a", "space"), ("-p", "starts with '-'"), ("", "non-empty")])
def test_one_run_name_rule_for_the_notebook_and_sequence_commands(tmp_path, name, why):
    with pytest.raises(ValueError, match=why):
        check_run_name(name)
    with pytest.raises(ValueError, match=why):
        default_out_dir("01_harness_demo", "smoke", run=name, root=tmp_path)
    with pytest.raises(SequenceError, match=why):
        run_sequence(name, ["01"], results_dir=tmp_path, runner=lambda *a, **k: None)
    assert list(tmp_path.iterdir()) == []
    assert check_run_name("weagent_mmsearch_preflight") == "weagent_mmsearch_preflight"


def _notebook(argv, capsys):
    rc = main(["notebook", *argv])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("argv, why", [
    (["01", "--run", "x" * 300], "longer than"),
    (["01", "--run", "a\rb"], "control character"),
    (["01", "--run", "mine", "--out", "{tmp}/o"], "not both"),
    (["01", "--out", ""], "--out is empty"),
    (["../../escaped", "--out", "{tmp}/o"], "no notebook"),
    (["01", "--out", "{tmp}/file"], "a file (not a folder) is in the way"),
    (["01", "--out", "{tmp}/file/below"], "cannot use"),
])
def test_folder_errors_exit_2_with_one_line_not_a_traceback(tmp_path, capsys, argv, why):
    (tmp_path / "file").write_text("not a folder")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    rc, err = _notebook([*argv, "-p", "n_episodes", "1"], capsys)
    assert rc == 2 and why in err and "Traceback" not in err, err
    assert not (PROJECT_ROOT / "escaped").exists() and not (PROJECT_ROOT / "results" / "escaped").exists()


def _claimed(tmp_path) -> Path:
    folder = tmp_path / "f"
    claim_folder(folder, run_identity("01_harness_demo", "smoke", {}))
    return folder


@pytest.mark.parametrize("damage, why", [
    (lambda p: p.write_text(json.dumps({"fingerprint": "x", "notebook": "n", "profile": "smoke", "preflight": False,
                                        "params": ["a"]})), "params is list"),
    (lambda p: p.write_text("[1, 2]"), "not an object"),
    (lambda p: p.write_text("{"), "not readable JSON"),
    (lambda p: p.write_bytes(b"\xff\xfe"), "not readable JSON"),
    (lambda p: (p.unlink(), os.mkfifo(p)), "not a regular file"),
    (lambda p: (p.unlink(), p.symlink_to("/dev/zero")), "not a regular file"),
    (lambda p: (p.unlink(), p.symlink_to(p.parent / "gone")), "a link to nothing"),
    (lambda p: p.write_text(" " * (2 << 20)), "more than an identity holds"),
])
def test_a_damaged_identity_is_refused_by_name_without_hanging(tmp_path, damage, why):
    folder = _claimed(tmp_path)
    damage(folder / IDENTITY_FILE)
    signal.alarm(20)  # a FIFO opened for reading would block forever: fail instead
    try:
        with pytest.raises(RunMismatch, match=why):
            claim_folder(folder, run_identity("01_harness_demo", "smoke", {}))
        assert read_identity(folder) is None  # the lenient reader (a manifest's copy) skips it
    finally:
        signal.alarm(0)


def test_every_parameter_value_is_the_identity_not_how_it_was_given():
    declared = notebook_parameters(NB / "01_harness_demo.ipynb")
    assert declared["seed"].default == 0
    bare = run_identity("01_harness_demo", "smoke", {}, declared=declared)
    same = run_identity("01_harness_demo", "smoke", {"seed": 0, "out_dir": "/elsewhere"}, declared=declared)
    other = run_identity("01_harness_demo", "smoke", {"seed": 1}, declared=declared)
    assert bare["fingerprint"] == same["fingerprint"] != other["fingerprint"]
    assert bare["params"]["seed"] == 0 and "out_dir" not in bare["params"] and "profile" not in bare["params"]
    assert identity_diff(bare, other) == ["params.seed: 0 -> 1"]
    assert effective_params(declared, {"zim_paths": ("a", "b")})["zim_paths"] == ["a", "b"]  # JSON: a tuple is a list


def test_the_same_path_with_other_contents_is_another_run(tmp_path):
    data = tmp_path / "tasks.jsonl"
    data.write_text('{"id": 1}\n')
    declared = notebook_parameters(NB / "01_harness_demo.ipynb")
    first = run_identity("01_harness_demo", "smoke", {"task_dir": str(data)}, declared=declared)
    assert first["inputs"]["task_dir"]["bytes"] == data.stat().st_size
    claim_folder(tmp_path / "f", first)
    data.write_text('{"id": 2}\n')  # same size, other content
    with pytest.raises(RunMismatch, match=r"inputs\.task_dir\.sha256"):
        claim_folder(tmp_path / "f", run_identity("01_harness_demo", "smoke", {"task_dir": str(data)}, declared=declared))
    big = tmp_path / "big.zim"  # only the ends of a large file are read
    big.write_bytes(b"\0" * (3 << 20))
    t0 = time.perf_counter()
    ident = run_identity("01_harness_demo", "smoke", {"zim_paths": [str(big), "missing.zim"]}, declared=declared)
    assert set(ident["inputs"]) == {"zim_paths[0]"} and time.perf_counter() - t0 < 5


def test_a_notebook_run_by_hand_claims_its_folder_like_the_command_line(tmp_path, monkeypatch):
    monkeypatch.chdir(NB)  # JupyterLab runs a notebook in its folder
    ns = {n: p.default for n, p in notebook_parameters(NB / "01_harness_demo.ipynb").items()}
    out = resolve_out_dir(str(tmp_path / "o"), "01_harness_demo", "smoke", params=ns)
    assert read_identity(out)["params"]["n_episodes"] == ns["n_episodes"]
    # the command line's identity of the same run resumes it; the cell edited by hand is another experiment
    declared = notebook_parameters(NB / "01_harness_demo.ipynb")
    assert claim_folder(out, run_identity("01_harness_demo", "smoke", {}, declared=declared, base=NB)) == "resume"
    with pytest.raises(RunMismatch, match="params.n_episodes: 10 -> 7"):
        resolve_out_dir(str(out), "01_harness_demo", "smoke", params={**ns, "n_episodes": 7})
    monkeypatch.setattr("kit.runs.PROJECT_ROOT", tmp_path)  # "" (the default): results/<profile run name>/<notebook>
    got = resolve_out_dir("", "01_harness_demo", "paper", preflight=True, params=ns)
    assert got == tmp_path.resolve() / "results" / "weagent_mmsearch_preflight" / "01_harness_demo"
    assert read_identity(got)["preflight"] is True


def test_the_committed_notebooks_claim_their_folder_before_any_parameter_is_reassigned():
    import nbformat

    for name in NOTEBOOKS.values():
        nb = nbformat.read(NB / f"{name}.ipynb", as_version=4)
        i = next(k for k, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
        code = nb.cells[i + 1].source
        claim = code.index(f'resolve_out_dir(out_dir, "{name}", profile, preflight=preflight, params=globals())')
        declared = notebook_parameters(NB / f"{name}.ipynb")
        before = code[:claim]
        assert not [n for n in declared if f"\n{n} =" in "\n" + before], name


def _runner(calls):
    def run(key, profile, params, out, **kw):
        calls.append((key, profile, kw.get("preflight", False)))
        out.mkdir(parents=True, exist_ok=True)
        (out / "ran.txt").write_text(key)
        return out / "x.ipynb"
    return run


def test_a_fresh_sequence_never_clears_another_experiments_folders(tmp_path):
    calls: list = []
    run_sequence("r", ["01"], profile="smoke", results_dir=tmp_path, runner=_runner(calls), echo=lambda s: None,
                 preflight=False)
    marker = tmp_path / "r" / NOTEBOOKS["01"] / "ran.txt"
    with pytest.raises(SequenceError, match="another experiment under run 'r'.*profile: 'smoke' -> 'points_seeker'"):
        run_sequence("r", ["01"], profile="points_seeker", results_dir=tmp_path, runner=_runner(calls),
                     echo=lambda s: None, preflight=False)
    with pytest.raises(SequenceError, match="common.seed"):
        run_sequence("r", ["01"], profile="smoke", common={"seed": 3}, results_dir=tmp_path, runner=_runner(calls),
                     echo=lambda s: None, preflight=False)
    assert marker.exists() and len(calls) == 1
    run_sequence("r", ["01"], profile="smoke", results_dir=tmp_path, runner=_runner(calls), echo=lambda s: None,
                 preflight=False)  # the same experiment reruns from scratch, as before
    assert len(calls) == 2


def test_paper_and_weagent_mmsearch_are_one_plan_and_a_preflight_sequence_is_recorded(tmp_path):
    calls: list = []
    run_sequence("w", ["01"], profile="paper", results_dir=tmp_path, runner=_runner(calls), echo=lambda s: None,
                 preflight=False, profile_preflight=True)
    state = json.loads((tmp_path / "w" / SEQUENCE_FILE).read_text())
    assert state["plan"]["profile"] == "weagent_mmsearch" and state["plan"]["preflight"] is True
    assert calls == [("01", "weagent_mmsearch", True)]
    lines: list = []
    run_sequence("w", resume=True, profile="paper", results_dir=tmp_path, runner=_runner(calls), echo=lines.append,
                 preflight=False)  # not a change of plan: nothing starts afresh
    assert not any("corrected" in x for x in lines) and len(calls) == 1
    with pytest.raises(SequenceError, match="preflight: recorded True, given False"):
        run_sequence("w", resume=True, results_dir=tmp_path, runner=_runner(calls), preflight=False,
                     profile_preflight=False)
    with pytest.raises(SequenceError, match="smoke is already small"):
        run_sequence("s", ["01"], results_dir=tmp_path, runner=_runner(calls), preflight=False, profile_preflight=True)


@pytest.mark.parametrize("edit, why", [
    (lambda s: s["plan"].update(keys="01"), "plan.keys"),
    (lambda s: s["plan"].update(per_notebook=[1]), "per_notebook"),
    (lambda s: s["plan"].update(profile=7), "plan.profile"),
    (lambda s: s["steps"]["01"].update(status=1), "status"),
    (lambda s: s["steps"]["01"].update(seconds="fast"), "seconds"),
    (lambda s: s["steps"].update({"09": {"status": "ok"}}), "do not match"),
])
def test_a_damaged_sequence_state_is_one_error_on_resume(tmp_path, capsys, edit, why):
    run_sequence("r", ["01"], results_dir=tmp_path, runner=_runner([]), echo=lambda s: None, preflight=False)
    path = tmp_path / "r" / SEQUENCE_FILE
    state = json.loads(path.read_text())
    state["steps"]["01"]["status"] = "failed"
    edit(state)
    path.write_text(json.dumps(state))
    rc = main(["sequence", "--run", "r", "--resume", "--results-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and why in err and "not a readable sequence state" in err and "Traceback" not in err, err


def test_a_checkpoint_of_another_run_raised_in_the_kernel_exits_2(monkeypatch, capsys):
    class Cell(Exception):  # what papermill raises for a failing cell: the cell's exception by name
        ename, evalue = "ResumeMismatch", "results/x/05_rl_long_mdr/run holds a checkpoint of another run"

    def fail(*a, **k):
        raise Cell("cell failed")

    monkeypatch.setattr("kit.cli.run_notebook", fail)
    rc, err = _notebook(["05"], capsys)
    assert rc == 2 and "ResumeMismatch" in err and "another run" in err


def test_folder_error_is_a_value_error_for_the_commands():
    assert issubclass(FolderError, ValueError)


def test_every_path_parameter_of_the_command_line_is_an_input_whose_content_counts():
    from kit.cli_refs import PATH_PARAMS
    from kit.runs import INPUT_PARAMS

    assert set(PATH_PARAMS) <= set(INPUT_PARAMS)
    declared = notebook_parameters(NB / "01_harness_demo.ipynb")
    # a setting that happens to name a file is not an input (a flag file a test deletes before resuming)
    assert run_identity("01_harness_demo", "smoke", {"api_key_env": str(NB / "01_harness_demo.ipynb")},
                        declared=declared)["inputs"] == {}


@pytest.mark.parametrize("argv", [["sequence", "--preflight"], ["sequence", "--profile", "smoke", "--preflight"]])
def test_a_smoke_preflight_sequence_is_one_line_and_exit_2(argv, capsys):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("sequence: ") and "smoke is already small" in err and "Traceback" not in err
