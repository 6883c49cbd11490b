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
from kit.kernel import kernelspec

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
    nb.metadata["kernelspec"] = kernelspec()  # the kit's kernel (kit.kernel)
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
    nb.metadata["kernelspec"] = kernelspec()  # the kit's kernel (kit.kernel)
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


def test_profile_and_out_dir_are_not_parameters(tmp_path, nb_dir, capsys, no_kernel):
    """-p profile / -p out_dir would silently contradict --profile / --out and the sequence's record (C11)."""
    with pytest.raises(ParameterError, match=r"-p out_dir is not accepted: set it with --out"):
        run_notebook("01", "smoke", {"out_dir": str(tmp_path / "x")}, tmp_path / "o", notebooks_dir=nb_dir)
    rc = main(["notebook", "01", "--out", str(tmp_path / "o"), "-p", "profile", "smoke"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "-p profile is not accepted: set it with --profile" in err and len(err.splitlines()) == 1
    base = ["--results-dir", str(tmp_path), "--notebooks-dir", str(nb_dir), "--no-progress"]
    for p in (["-p", "out_dir", str(tmp_path / "x")], ["-p", "06.profile", "smoke"]):
        assert main(["sequence", "--run", "r", "--only", "01", "06", *p, *base]) == 2
        assert "is not accepted" in capsys.readouterr().err
    assert not (tmp_path / "r").exists() and not (tmp_path / "x").exists()


def test_invalid_endpoint_url_is_one_line_exit_2(tmp_path, nb_dir, capsys, no_kernel):
    """An invalid URL stops notebook and sequence with exit 2 and one line, no traceback (C12)."""
    rc = main(["notebook", "01", "--out", str(tmp_path / "o"), "-p", "endpoint", "http://[::1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "invalid URL" in err and len(err.splitlines()) == 1
    rc = main(["sequence", "--run", "r", "--only", "01", "-p", "endpoint", "http://[::1", "--results-dir", str(tmp_path),
               "--notebooks-dir", str(nb_dir)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "invalid URL" in err and len(err.splitlines()) == 1


def test_every_model_like_parameter_is_preflighted(tmp_path, capsys, no_kernel):
    """base_model (04, 05), sft_model (02) and a tiny-<arch> model are checked before the kernel starts (C13)."""
    for key, name, value, msg in [("04", "base_model", "tiny-bogus", "no tiny architecture 'bogus'"),
                                  ("05", "base_model", "hub:Qwen/Qwen2-VL", "not a hub model reference"),
                                  ("04", "base_model", "hub:dataset:o/n@v1", "not a hub model reference"),
                                  ("05", "base_model", str(tmp_path / "none"), "is not a local checkpoint folder"),
                                  ("02", "sft_model", str(tmp_path / "none"), "is not a local checkpoint folder"),
                                  ("02", "sft_model", "tiny-qwen2_vl", "sft_model takes a checkpoint folder"),
                                  ("01", "model", "tiny-bogus", "no tiny architecture 'bogus'")]:
        rc = main(["notebook", key, "--out", str(tmp_path / "o"), "-p", name, value])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and msg in err and len(err.splitlines()) == 1, (key, name, value, err)
    assert not (tmp_path / "o").exists()
    from kit.cli_params import checkpoint_problems

    decl = notebook_parameters(__import__("kit.paths").paths.PROJECT_ROOT / "notebooks" / "04_sft_unsloth.ipynb")
    assert checkpoint_problems(decl, {"base_model": "hub:Qwen/Qwen2-VL-2B-Instruct@main"}) == []  # syntax only
    assert checkpoint_problems(decl, {"base_model": "tiny-qwen3_vl"}) == []


REAL_REFUSALS = [
    ("01", "n_episodes", "-1", "int >= 1"), ("01", "n_episodes", "0", "int >= 1"), ("01", "concurrency", "0", ">= 1"),
    ("06", "repeats", "-3", ">= 1"), ("06", "repeats", "0", ">= 1"), ("03", "n_episodes", "0", ">= 1"),
    ("06", "temperature", "-5", ">= 0"), ("01", "wall_clock_s", "1e400", "finite"), ("06", "concurrency", "0", ">= 1"),
    ("01", "backend", "bing", "one of 'zim', 'serper'"), ("06", "cache_mode", "rw", "one of 'readwrite'"),
    ("06", "judge", "gpt", "one of 'rule', 'llm'"), ("06", "policy_kind", "Model", "one of 'demonstrator', 'model'"),
    ("06", "missing_images", "bogus", "one of 'problem', 'text_only'"), ("06", "benchmarks", "fvqa,livevqa", "['fvqa', 'livevqa']"),
    ("06", "configs", "['harness', 'oracle']", "list of one of"), ("05", "algorithm", "ppo", "one of 'fa_gspo'"),
    ("04", "finetune", "qlora", "one of 'full', 'lora'"), ("02", "depths", "[0]", "list of int >= 1"),
    ("02", "holdout_seed_fraction", "1.5", "<= 1"), ("05", "lr", "0", "> 0"), ("04", "backend", "deepspeed", "one of 'auto'"),
    ("06", "judge", "llm", "judge='llm' of notebook 06_evaluation needs judge_endpoint"),
    ("06", "policy_kind", "demonstrator", "policy_kind='demonstrator' but a model is named"),
    ("02", "expert_model", "kimi", "expert_model='kimi' of notebook 02_data_synthesis is set but expert_endpoint is empty"),
]


@pytest.fixture
def no_kernel(monkeypatch):
    """A notebook that gets past the checks would start a kernel: fail at once instead."""
    import papermill

    def refuse(*a, **kw):
        raise AssertionError("the notebook started: the value was not refused before the kernel")

    monkeypatch.setattr(papermill, "execute_notebook", refuse)


@pytest.mark.parametrize("key,name,raw,msg", REAL_REFUSALS)
def test_real_notebook_values_are_refused_before_the_kernel(tmp_path, capsys, no_kernel, key, name, raw, msg):
    """Counts, finite floats, choices, list items and rules across parameters of the real notebooks (C14)."""
    extra = ["-p", "model", "tiny-qwen2_vl"] if (name, raw) == ("policy_kind", "demonstrator") else []
    rc = main(["notebook", key, "--out", str(tmp_path / "o"), "-p", name, raw, *extra])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and msg in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


def test_paper_profile_needs_its_models_before_the_kernel(tmp_path, capsys, no_kernel):
    for key, what in (("02", "expert_endpoint"), ("04", "base_model"), ("05", "base_model")):
        rc = main(["notebook", key, "--profile", "paper", "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and "the paper profile" in err and what in err, err


def test_choices_bounds_and_lists_from_annotations(tmp_path):
    """The annotation vocabulary: Literal choices, bounded aliases, Annotated bounds, list elements, and a
    comma-joined single value that is refused rather than guessed."""
    d = tmp_path / "nbs"
    d.mkdir()
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(
        "from typing import Annotated, Literal\nfrom annotated_types import Ge, Lt\n"
        "from kit.cli_params import Count, Fraction, NonNegFloat\n"
        'mode: Literal["a", "b"] | None = None\nn: Count = 2\nf: Fraction = 0.5\nt: NonNegFloat = 1.0\n'
        "k: Annotated[int, Ge(0), Lt(10)] = 3\nitems: list[Count] = [1]\nnames: list[str] = []\nopts: list[Literal['x', 'y']] | None = None\n")  # noqa: E501
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell]
    nbformat.write(nb, d / "x.ipynb")
    p = notebook_parameters(d / "x.ipynb")
    ok = {"mode": ["a", None], "n": [1, 10**6], "f": [0, 1, 0.25], "t": [0, 2.5], "k": [0, 9], "items": [[1, 2], 3],
          "names": ["a.zim", ["a,b.zim"]], "opts": [["x"], "y", None]}
    for name, values in ok.items():
        for v in values:
            coerce(p[name], v)
    bad = {"mode": ["c", "A", 1], "n": [0, -1, 1.5, True], "f": [-0.1, 1.01, float("nan")], "t": [-1e-9, float("inf")],
           "k": [-1, 10], "items": [[0], [1, -2]], "names": ["a.zim,b.zim"], "opts": [["x", "z"], "z"]}
    for name, values in bad.items():
        for v in values:
            with pytest.raises(ParameterError, match=rf"parameter '{name}' expects"):
                coerce(p[name], v)
    assert coerce(p["items"], 3) == [3] and coerce(p["f"], 1) == 1.0
    exec(compile(nb.cells[0].source, "params", "exec"), {})  # the parameters cell itself runs


def test_notebooks_declare_choices_and_bounds():
    """Every enum-like parameter of the real notebooks declares its choices and every count its bound,
    and no notebook turns a count of 0 into its default with ``x or default``."""
    import re

    from kit.paths import PROJECT_ROOT

    enums = {"backend", "cache_mode", "judge", "image_judge", "policy_kind", "missing_images", "profile", "finetune",
             "algorithm", "tiny_vocab", "event_backend", "source", "rescue_action"}
    counts = {"n_episodes", "concurrency", "repeats", "n_per_benchmark", "max_seeds", "variants", "samples", "n_tasks",
              "rl_group_size", "rl_filter_queries", "vqa_n", "vistarget_n", "n_reads", "group_size", "prompts_per_step",
              "total_steps", "lora_rank", "max_turns", "max_calls", "max_context_tokens", "open_source_limit"}
    for nb in sorted((PROJECT_ROOT / "notebooks").glob("*.ipynb")):
        params = notebook_parameters(nb)
        for name, prm in params.items():
            if name in enums:
                assert prm.choices, (nb.name, name)
            if name in counts:
                assert ("int" in prm.kinds and (">=", 1) in prm.bounds), (nb.name, name, prm)
        code = "\n".join(c.source for c in nbformat.read(str(nb), as_version=4).cells
                         if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", []))
        numeric = [n for n, prm in params.items() if {"int", "float"} & set(prm.kinds)]
        used = [n for n in numeric if re.search(rf"\b{n} or\b", code)]
        assert not used, (nb.name, used)


def test_papermill_does_not_warn_about_parameters_the_kit_checked(tmp_path, caplog):
    """Papermill's regex inspector cannot read ``Literal[...]`` / ``X | None`` annotations and warned
    'Passed unknown parameter' for names the kit had already checked."""
    import logging

    d = tmp_path / "nbs"
    d.mkdir()
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell('from typing import Literal\nprofile: Literal["smoke", "paper"] = "smoke"\n'
                                     'out_dir = "."\nmode: Literal["a", "b"] = "a"')
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell, nbformat.v4.new_code_cell("assert mode == 'b' and profile == 'smoke'")]
    nb.metadata["kernelspec"] = kernelspec()  # the kit's kernel (kit.kernel)
    nbformat.write(nb, d / "01_harness_demo.ipynb")
    with caplog.at_level(logging.WARNING, logger="papermill"):
        run_notebook("01", "smoke", {"mode": "b"}, tmp_path / "o", notebooks_dir=d)
    assert not [r for r in caplog.records if "unknown parameter" in r.getMessage()]


@pytest.mark.parametrize("endpoint", ["", "   ", None, "undeclared"])
def test_model_is_checked_locally_unless_an_endpoint_serves_it(tmp_path, endpoint):
    """The sequence's re-check before a notebook (``local_ref_problems``) and the preflight apply one
    rule: a blank ``endpoint`` (or none declared) serves nothing, so ``model`` must load in process."""
    from kit.cli_params import Param, preflight_endpoints
    from kit.cli_refs import local_ref_problems, main_endpoint_set
    from kit.policy.factory import ModelUnavailable

    missing = str(tmp_path / "no-such-checkpoint")
    declared = {"model": Param("model", "", ("str",))}
    params = {"model": missing}
    if endpoint == "undeclared":
        params["endpoint"] = "http://127.0.0.1:9/v1"  # a stray value of a parameter it lacks
    elif endpoint is not None:
        declared["endpoint"] = Param("endpoint", "", ("str",))
        params["endpoint"] = endpoint
    assert not main_endpoint_set(declared, params)
    (problem,) = local_ref_problems(declared, params, "notebook 04")
    assert problem.startswith("notebook 04: ") and "no-such-checkpoint" in problem
    with pytest.raises(ModelUnavailable, match="no-such-checkpoint"):
        preflight_endpoints(declared, params)
    declared["endpoint"] = Param("endpoint", "", ("str",))
    assert main_endpoint_set(declared, {"endpoint": " http://h/v1 "})
    assert local_ref_problems(declared, {"model": missing, "endpoint": "http://h/v1"}) == []
