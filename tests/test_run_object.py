"""Issue 30 (parts 7 and 8) for the command line: a notebook's profile is resolved once into one run object
(:class:`kit.profiles.ResolvedRun`) that every check receives; a notebook parameter's value is typed by pydantic
``TypeAdapter``s with the module table's rules; the sequence state and the run identity are read by one bounded
JSON-file reader with the same messages; the long functions are split into named steps."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from kit.cli_params import ParameterError, check_combinations, coerce, notebook_parameters
from kit.paths import PROJECT_ROOT

NB = PROJECT_ROOT / "notebooks"


# ------------------------------------------------------------------------------------------- the run object
def test_a_run_resolves_its_profile_once():
    from kit.profiles import ResolvedRun, get_profile, resolve_run

    run = resolve_run("paper", preflight=True, overrides={"seed": 1})
    assert isinstance(run, ResolvedRun) and (run.given, run.name, str(run)) == ("paper", "weagent_mmsearch", "paper")
    assert run.run_profile.preflight and not run.profile.preflight and get_profile(run) is run.profile
    assert get_profile(run, preflight=True) == run.run_profile and dict(run.overrides) == {"seed": 1}
    assert resolve_run(run) is run and run.value("harness.max_turns") == get_profile("paper").value("harness.max_turns")
    with pytest.raises(TypeError):
        run.overrides["seed"] = 2  # type: ignore[index]  # read-only
    with pytest.raises(ValueError, match="unknown profile"):
        resolve_run("nope")


def test_check_combinations_resolves_the_profile_name_once(monkeypatch):
    """It used to resolve the name in every rule (judges, web, stages, mechanisms): now once, into the run."""
    import kit.profiles as profiles

    monkeypatch.setenv("SERPER_API_KEY", "k")
    calls = []
    real = profiles.resolve_profile_name
    monkeypatch.setattr(profiles, "resolve_profile_name", lambda name: calls.append(name) or real(name))
    declared = notebook_parameters(NB / "06_evaluation.ipynb")
    with pytest.raises(ParameterError, match="judge_endpoint"):
        check_combinations(declared, {}, "paper", "notebook 06")
    assert calls == ["paper"]


def test_a_run_object_and_its_name_give_the_same_problems(monkeypatch):
    from kit.cli_params import resolved_run

    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    for key, params in (("06", {}), ("05", {"stages": "opd:1,h1"}), ("02", {})):
        declared = notebook_parameters(next(NB.glob(f"{key}_*.ipynb")))
        errors = []
        for profile in ("paper", resolved_run(declared, params, "paper")):
            with pytest.raises(ParameterError) as e:
                check_combinations(declared, params, profile, f"notebook {key}")
            errors.append(str(e.value))
        assert errors[0] == errors[1] and "the paper profile" in errors[0], key


def test_the_run_holds_the_endpoints_its_parameters_name():
    from kit.cli_params import resolved_run
    from kit.policy.factory import eval_policy_kind

    declared = notebook_parameters(NB / "06_evaluation.ipynb")
    run = resolved_run(declared, {"judge": "llm", "judge_endpoint": "http://127.0.0.1:9/v1"}, "paper")
    assert [e[:2] for e in run.endpoints] == [("judge_endpoint", "http://127.0.0.1:9/v1")]
    assert run.endpoints[0][2] == run.value("eval.judge_model")  # the recipe's served name
    assert eval_policy_kind(None, run, "", "") == "model"
    assert eval_policy_kind(None, resolved_run(declared, {}, "smoke"), "", "") == "demonstrator"


# ------------------------------------------------------------------------------------------- TypeAdapter
def test_every_kind_is_typed_by_a_pydantic_type_adapter():
    from pydantic import TypeAdapter

    from kit import cli_params

    for kind in ("none", "bool", "int", "float", "str", "dict"):
        assert isinstance(cli_params._adapter(kind), TypeAdapter), kind


_TABLE = {  # the module docstring's table: VALUE -> (str, int, float, bool, list[int]); None: refused
    "7": ("7", 7, 7.0, None, [7]), "+7": ("+7", 7, 7.0, None, [7]), "1_000": ("1_000", 1000, 1000.0, None, [1000]),
    "0x1F": ("0x1F", None, None, None, None), "007": ("007", None, None, None, None),
    "1e3": ("1e3", None, 1000.0, None, None), "yes": ("yes", None, None, True, None),
    "1,2": ("1,2", None, None, None, None),
}


@pytest.mark.parametrize("text", sorted(_TABLE))
def test_the_documented_table_holds(text):
    from kit.cli import _value
    from kit.cli_spec import Param

    params = [Param("x", "", ("str",)), Param("x", 0, ("int",)), Param("x", 0.0, ("float",)),
              Param("x", False, ("bool",)), Param("x", [], ("list",), "int")]
    for param, want in zip(params, _TABLE[text], strict=True):
        if want is None:
            with pytest.raises(ParameterError):
                coerce(param, _value(text))
        else:
            got = coerce(param, _value(text))
            assert got == want and type(got) is type(want), (text, param.kinds)


# ------------------------------------------------------------------------------------------- JSON state files
def _sequence_error(path: Path) -> str:
    from kit.cli_sequence import SequenceError, _read_state

    with pytest.raises(SequenceError) as e:
        _read_state(path)
    return str(e.value)


def _identity_error(folder: Path) -> str:
    from kit.runs import IDENTITY_FILE, RunMismatch, read_identity

    assert (folder / IDENTITY_FILE).exists() or (folder / IDENTITY_FILE).is_symlink()
    with pytest.raises(RunMismatch) as e:
        read_identity(folder, strict=True)
    return str(e.value)


@pytest.mark.parametrize("damage, why", [
    (lambda p: p.write_text("{"), "not readable JSON (JSONDecodeError)"),
    (lambda p: p.write_bytes(b"\xff\xfe"), "not readable JSON (UnicodeDecodeError)"),
    (lambda p: os.mkfifo(p), "not a regular file"),
    (lambda p: p.symlink_to(p.parent / "nothing"), "a link to nothing"),
])
def test_a_damaged_state_file_reads_the_same_for_a_sequence_and_a_run(tmp_path, damage, why):
    from kit.runs import IDENTITY_FILE

    (tmp_path / "seq").mkdir()
    (tmp_path / "run").mkdir()
    damage(tmp_path / "seq" / "sequence.json")
    damage(tmp_path / "run" / IDENTITY_FILE)
    assert why in _sequence_error(tmp_path / "seq" / "sequence.json")
    assert why in _identity_error(tmp_path / "run")


def test_a_state_file_over_its_cap_is_never_parsed(tmp_path):
    from kit.paths import JsonFileError, read_json_file

    p = tmp_path / "s.json"
    p.write_text(json.dumps({"a": "x" * 100}))
    with pytest.raises(JsonFileError, match=r"^\d+ bytes, more than a test state holds$"):
        read_json_file(p, max_bytes=50, what="a test state")
    assert read_json_file(p, max_bytes=1000, what="a test state") == {"a": "x" * 100}
    with pytest.raises(FileNotFoundError):
        read_json_file(tmp_path / "none.json", max_bytes=10, what="x")


# ------------------------------------------------------------------------------------------- named steps
@pytest.mark.parametrize("path, name", [
    ("kit/cli_sequence.py", "run_sequence"), ("kit/cli_params.py", "check_combinations"),
    ("kit/cli.py", "build_parser"), ("kit/cli_notebook.py", "run_notebook"),
    ("kit/web/zim/backend.py", "reverse_image_search_sync"),
])
def test_the_long_functions_are_split_into_named_steps(path, name):
    tree = ast.parse((PROJECT_ROOT / path).read_text(encoding="utf-8"))
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)
    assert fn.end_lineno - fn.lineno + 1 <= 80, f"{path}:{name} is {fn.end_lineno - fn.lineno + 1} lines"
