"""Notebook parameters are checked before anything runs: types against the parameters cell, every
NN.name override of a sequence, named endpoints (reachable, serving the named model), and --resume
with corrected parameters for notebooks not yet finished."""

from __future__ import annotations

import json

import nbformat
import pytest
from models_server import closed_port_url, models_server

from kit.cli import NOTEBOOKS, SequenceError, main, parse_overrides, run_notebook, run_sequence
from kit.cli_params import ParameterError, coerce, notebook_parameters

PARAMS = '''profile = "smoke"
out_dir = "."
n_episodes = 3
flag = True
zim_paths: list[str] | None = None   # list of archives; None = all
taus = [4096, 8192]
name = "x"
anything = None
lr = 1e-4
mapping = {}
endpoint = ""
model = ""
fail_if = ""
'''
BODY = '''
from pathlib import Path
import json
if fail_if and Path(fail_if).exists():
    raise RuntimeError("deliberate failure: " + fail_if)
out = Path(out_dir); out.mkdir(parents=True, exist_ok=True)
(out / "params.json").write_text(json.dumps({"n_episodes": n_episodes, "flag": flag, "zim_paths": zim_paths,
                                             "taus": taus, "name": name, "model": model, "fail_if": fail_if}))
'''


def _notebook(path) -> None:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell(PARAMS)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(BODY)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@pytest.fixture
def nb_dir(tmp_path):
    d = tmp_path / "notebooks"
    d.mkdir()
    for k in ("01", "03", "06"):
        _notebook(d / f"{NOTEBOOKS[k]}.ipynb")
    return d


def _cli(pairs):
    """``-p`` values as the CLI parses them."""
    return parse_overrides(pairs)[0]


def test_types_from_defaults_and_annotations(nb_dir):
    p = notebook_parameters(nb_dir / "01_harness_demo.ipynb")
    got = {k: coerce(p[k], v) for k, v in _cli([("n_episodes", "2"), ("flag", "false"), ("zim_paths", "/d/a.zim"),
                                                ("taus", "4096"), ("name", "2024"), ("anything", "two"), ("lr", "1"),
                                                ("mapping", "{'a': 1}")]).items()}
    assert got == {"n_episodes": 2, "flag": False, "zim_paths": ["/d/a.zim"], "taus": [4096], "name": "2024",
                   "anything": "two", "lr": 1.0, "mapping": {"a": 1}}
    assert coerce(p["flag"], "True") is True and coerce(p["flag"], "yes") is True and coerce(p["zim_paths"], None) is None
    assert coerce(p["zim_paths"], ["a.zim", "b.zim"]) == ["a.zim", "b.zim"]
    for name, raw in [("n_episodes", "two"), ("n_episodes", "2.5"), ("flag", "maybe"), ("taus", "['a']"),
                      ("mapping", "a=1"), ("name", "None"), ("lr", "fast"), ("n_episodes", "True")]:
        with pytest.raises(ParameterError, match=rf"parameter '{name}' expects .*got"):
            coerce(p[name], _cli([(name, raw)])[name])


def test_bad_type_is_refused_before_the_notebook_runs(tmp_path, nb_dir, capsys):
    with pytest.raises(ParameterError, match=r"'n_episodes' of notebook 01_harness_demo expects int \(default 3\); got 'two'"):
        run_notebook("01", "smoke", {"n_episodes": "two"}, tmp_path / "o", notebooks_dir=nb_dir)
    assert not (tmp_path / "o").exists()
    # the real notebook 01 from the command line: refused at once, exit 2, one line
    rc = main(["notebook", "01", "--out", str(tmp_path / "real"), "-p", "n_episodes", "two"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "expects int" in err and len(err.splitlines()) == 1 and not (tmp_path / "real").exists()
    # a single path for the list parameter reaches the notebook as a one-element list
    run_notebook("01", "smoke", _cli([("zim_paths", "/d/a.zim"), ("flag", "false")]), tmp_path / "ok", notebooks_dir=nb_dir)
    seen = json.loads((tmp_path / "ok" / "params.json").read_text())
    assert seen["zim_paths"] == ["/d/a.zim"] and seen["flag"] is False


def test_sequence_checks_every_override_before_the_first_notebook(tmp_path, nb_dir):
    calls = []

    def runner(key, *a, **kw):
        calls.append(key)
        raise AssertionError("no notebook may run")

    for per, msg in [({"06": {"valeu": 1}}, r"notebook 06 \(06_evaluation\) has no parameter\(s\) \['valeu'\]"),
                     ({"06": {"n_episodes": "two"}}, r"'n_episodes' of notebook 06 .* expects int"),
                     ({"03": {"flag": "maybe"}}, r"'flag' of notebook 03 .* expects bool")]:
        with pytest.raises(SequenceError, match=msg):
            run_sequence("r", ["01", "03", "06"], per_notebook=per, results_dir=tmp_path, notebooks_dir=nb_dir,
                         runner=runner, echo=lambda s: None)
    with pytest.raises(SequenceError, match=r"notebook 01 .*'n_episodes' .*expects int|'n_episodes' of notebook 01"):
        run_sequence("r", ["01", "03"], common={"n_episodes": "two"}, results_dir=tmp_path, notebooks_dir=nb_dir,
                     runner=runner, echo=lambda s: None)
    with pytest.raises(SequenceError, match=r"override\(s\) for notebook\(s\) \['06'\] that the plan \['01'\] does not run"):
        run_sequence("r", ["01"], per_notebook={"06": {"n_episodes": 1}}, results_dir=tmp_path, notebooks_dir=nb_dir,
                     runner=runner, echo=lambda s: None)
    assert calls == []


def test_resume_accepts_corrected_parameters_of_unfinished_notebooks(tmp_path, nb_dir, capsys):
    res, flag = tmp_path / "res", tmp_path / "fail_flag"
    flag.write_text("1")
    base = ["--results-dir", str(res), "--notebooks-dir", str(nb_dir), "--no-progress"]
    assert main(["sequence", "--run", "s", "--only", "01", "03", "06", "-p", "03.fail_if", str(flag), *base]) == 1
    (res / "s" / NOTEBOOKS["03"] / "stale.txt").write_text("from the failed attempt")
    capsys.readouterr()
    # a change to finished notebook 01 is refused, naming it
    assert main(["sequence", "--run", "s", "--resume", "-p", "01.n_episodes", "9", *base]) == 2
    assert "finished notebook(s) 01" in capsys.readouterr().err
    # corrected parameters for 03 (failed) and 06 (not started) are accepted; 03 starts afresh
    assert main(["sequence", "--run", "s", "--resume", "-p", "03.fail_if", "", "-p", "06.n_episodes", "5", *base]) == 0
    out = capsys.readouterr().out
    assert "01 01_harness_demo: done in an earlier attempt" in out and "03 03_vfold_rendering: corrected" in out
    assert not (res / "s" / NOTEBOOKS["03"] / "stale.txt").exists()
    assert json.loads((res / "s" / NOTEBOOKS["03"] / "params.json").read_text())["fail_if"] == ""
    assert json.loads((res / "s" / NOTEBOOKS["06"] / "params.json").read_text())["n_episodes"] == 5
    state = json.loads((res / "s" / "sequence.json").read_text())
    assert state["plan"]["per_notebook"] == {"03": {"fail_if": ""}, "06": {"n_episodes": 5}}
    assert all(s["status"] == "ok" for s in state["steps"].values())


def test_named_endpoint_is_checked_before_the_first_notebook(tmp_path, nb_dir, capsys):
    calls = []

    def runner(key, profile, params, out, **kw):
        calls.append(key)
        out.mkdir(parents=True, exist_ok=True)
        return out / "x.ipynb"

    dead = closed_port_url()
    base = ["--results-dir", str(tmp_path), "--notebooks-dir", str(nb_dir), "--no-progress"]
    with models_server(["served-a", "served-b"]) as url:
        with pytest.raises(SequenceError, match=r"notebook 03 .*: endpoint .* does not serve model 'mine'; "
                                                r"it serves \['served-a', 'served-b'\]"):
            run_sequence("r", ["01", "03"], per_notebook={"03": {"endpoint": url, "model": "mine"}}, results_dir=tmp_path,
                         notebooks_dir=nb_dir, runner=runner, echo=lambda s: None)
        assert calls == []  # 01 did not run either
        run_sequence("r", ["01"], common={"endpoint": url, "model": "served-b"}, results_dir=tmp_path,
                     notebooks_dir=nb_dir, runner=runner, echo=lambda s: None)
        assert calls == ["01"]
        rc = main(["notebook", "01", "--out", str(tmp_path / "one"), "-p", "endpoint", url, "-p", "model", "mine"])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and "does not serve model 'mine'" in err and len(err.splitlines()) == 1
        assert err.startswith("notebook 01: endpoint ")  # said once, no stutter
    rc = main(["sequence", "--run", "d", "--only", "01", "-p", "endpoint", dead, "-p", "model", "m", *base])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and f"endpoint {dead} unreachable" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "d" / NOTEBOOKS["01"]).exists()


def test_tiny_fallback_is_announced_on_the_terminal_from_a_papermill_kernel(tmp_path, capfd):
    """Inside a kernel, sys.stderr goes into the executed notebook only; the announcement also reaches
    the terminal (the process's own stderr) that ran the command."""
    d = tmp_path / "nbs"
    d.mkdir()
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('profile = "smoke"\nout_dir = "."')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(
        "import warnings\nfrom kit.policy.factory import announce\nwarnings.warn('WARNING-ONLY')\nannounce('BANNER-ON-TERMINAL')")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, d / "01_harness_demo.ipynb")
    run_notebook("01", "smoke", {}, tmp_path / "o", notebooks_dir=d)
    err = capfd.readouterr().err
    assert "BANNER-ON-TERMINAL" in err and "WARNING-ONLY" not in err  # a warning alone would not have been seen


def test_every_notebook_parameter_has_a_checkable_type():
    """A parameter whose default is None must carry an annotation, or ``-p`` could not type-check it."""
    from pathlib import Path

    from kit.cli_params import notebook_parameters

    untyped = {nb.name: [k for k, p in notebook_parameters(nb).items() if p.kinds == ("any",)]
               for nb in sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))}
    assert len(untyped) == 7 and not any(untyped.values()), untyped


def test_named_local_model_that_cannot_load_stops_before_the_kernel(tmp_path, capsys):
    """A model named without an endpoint loads in process: a name that is not a checkpoint folder stops the
    run with one line and exit 2 before any notebook runs (not a traceback from inside the kernel)."""
    from kit.policy.factory import ModelUnavailable, local_model_problem, make_policy

    for model in ("foo", "Qwen/Qwen2.5-VL-7B-Instruct", str(tmp_path)):
        rc = main(["notebook", "01", "--out", str(tmp_path / "out"), "-p", "model", model])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1 and f"model {model!r}" in err, err
        assert not (tmp_path / "out").exists()
        with pytest.raises(ModelUnavailable, match="checkpoint folder"):
            make_policy(model)
    assert local_model_problem("") is None and local_model_problem("tiny-qwen3_vl") is None
    (tmp_path / "config.json").write_text("{}")
    assert local_model_problem(str(tmp_path)) is None
