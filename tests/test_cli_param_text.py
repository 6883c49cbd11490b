"""``-p`` values as typed (issue 26 item 7): a text parameter keeps the text the user typed (``0x1F``, ``+7``,
``1_000``, ``1e3`` stay themselves, not ``'31'``, ``'7'``, ``'1000'``), a number parameter reads decimal notation
only (``0x1F`` and ``007`` are refused with one line, never guessed), and a sequence's recorded plan types the
same on resume. No notebook is executed: Papermill's executor is replaced by a recorder."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import papermill
import pytest

from kit.cli import NOTEBOOKS, NotebookFailed, SequenceError, _value, main, parse_overrides, run_sequence
from kit.cli_params import ParameterError, check_params, coerce, notebook_parameters, read_number
from kit.kernel import kernelspec

PARAMS = '''from typing import Literal
from kit.cli_params import Count
profile = "smoke"
out_dir = "."
name = "x"
tag: str | None = None
n: Count = 3
lr: float | None = None
flag = False
pick: int | str = 0
either: str | int = ""
taus: list[int] = [4096]
paths: list[str] | None = None
mode: Literal["a", "b"] = "a"
anything = None
'''
TEXTS = ["0x1F", "+7", "1_000", "007", "1e3", "-0", "1.50", "1,2", " 5", "2024", "0o7", "1j", "5 # five"]


def _notebook(path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(PARAMS)
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell, nbformat.v4.new_code_cell("raise AssertionError('never executed here')")]
    nb.metadata["kernelspec"] = kernelspec()
    nbformat.write(nb, path)


@pytest.fixture
def nb_dir(tmp_path):
    d = tmp_path / "notebooks"
    d.mkdir()
    for k in ("01", "03"):
        _notebook(d / f"{NOTEBOOKS[k]}.ipynb")
    return d


@pytest.fixture
def decl(nb_dir):
    return notebook_parameters(nb_dir / f"{NOTEBOOKS['01']}.ipynb")


def _cli(decl, name: str, raw: str):
    """``-p name raw`` as the notebook command types it."""
    return coerce(decl[name], _value(raw))


@pytest.fixture
def kernel(monkeypatch):
    """Papermill's executor replaced by a recorder: ``calls`` holds the parameters of each started kernel."""
    calls: list[dict] = []
    monkeypatch.setattr(papermill, "execute_notebook", lambda src, dest, parameters=None, **kw: calls.append(parameters))
    return calls


@pytest.mark.parametrize("raw", TEXTS)
def test_a_text_parameter_keeps_the_value_as_typed(decl, raw):
    assert _cli(decl, "name", raw) == raw
    assert _cli(decl, "tag", raw) == raw  # str | None
    assert _cli(decl, "either", raw) == raw  # str | int: text first
    common, per = parse_overrides([("name", raw), ("03.tag", raw)])
    assert check_params(decl, common) == {"name": raw} and check_params(decl, per["03"]) == {"tag": raw}
    if "," not in raw:
        assert _cli(decl, "paths", raw) == [raw]  # list[str]: a one-element list of the text


def test_none_quoted_text_and_words(decl):
    assert _cli(decl, "name", "'abc'") == "abc" and _cli(decl, "name", "'0x1F'") == "0x1F"  # quotes: unquoted
    assert _cli(decl, "name", "'None'") == "None" and _cli(decl, "tag", "'None'") == "None"
    assert _cli(decl, "tag", "None") is None and _cli(decl, "lr", "None") is None and _cli(decl, "paths", "None") is None
    for name in ("name", "n", "pick"):  # None is Python's None: refused where the type has no None
        with pytest.raises(ParameterError, match=rf"parameter '{name}' expects .*got None"):
            _cli(decl, name, "None")
    with pytest.raises(ParameterError, match=r"parameter 'name' expects str .*got True"):
        _cli(decl, "name", "True")


@pytest.mark.parametrize("raw, want", [("7", 7), ("+7", 7), ("1_000", 1000), (" 5", 5), ("12 ", 12), ("1", 1)])
def test_an_int_parameter_reads_decimal_digits(decl, raw, want):
    got = _cli(decl, "n", raw)
    assert got == want and type(got) is int


@pytest.mark.parametrize("raw", ["0x1F", "0o7", "0b1", "007", "2.5", "1e3", "1e400", "1_", "--7", "+ 7", "7 # c"])
def test_an_int_parameter_refuses_what_is_not_decimal_digits(decl, raw):
    r = re.escape(repr(raw))
    with pytest.raises(ParameterError, match=rf"parameter 'n' expects int >= 1 \(a whole number in decimal digits, "
                                             rf"which {r} is not\) \(default 3\); got {r}") as e:
        _cli(decl, "n", raw)
    assert len(str(e.value).splitlines()) == 1


def test_words_bounds_and_bools_for_an_int(decl):
    with pytest.raises(ParameterError, match=r"parameter 'n' expects int >= 1 \(default 3\); got 'seven'"):
        _cli(decl, "n", "seven")  # a word: no reason needed
    for raw in ("0", "-3", "True"):
        with pytest.raises(ParameterError, match=r"parameter 'n' expects int >= 1"):
            _cli(decl, "n", raw)


@pytest.mark.parametrize("raw, want", [("1e-4", 1e-4), ("1", 1.0), (".5", 0.5), ("5.", 5.0), ("-2.5e3", -2500.0),
                                       ("1_000.5", 1000.5), ("+0.25", 0.25), ("007.5", 7.5), ("1E3", 1000.0)])
def test_a_float_parameter_reads_decimal_notation(decl, raw, want):
    got = _cli(decl, "lr", raw)
    assert got == want and type(got) is float


@pytest.mark.parametrize("raw, why", [("0x1F", "a number in decimal notation"), ("1j", "a number in decimal notation"),
                                      ("007", "a number in decimal notation"), ("1e400", "a finite number"),
                                      ("nan", ""), ("inf", ""), ("fast", "")])
def test_a_float_parameter_refuses_the_rest(decl, raw, why):
    with pytest.raises(ParameterError, match=rf"parameter 'lr' expects float or none .*got {re.escape(repr(raw))}") as e:
        _cli(decl, "lr", raw)
    assert why in str(e.value)


def test_bools_lists_choices(decl):
    assert [_cli(decl, "flag", r) for r in ("yes", "no", "True", "false", "1", "0")] == [True, False, True, False,
                                                                                         True, False]
    for raw in ("maybe", "2", "+1", "None"):
        with pytest.raises(ParameterError, match=r"parameter 'flag' expects bool"):
            _cli(decl, "flag", raw)
    assert _cli(decl, "taus", "[1,2]") == [1, 2] and _cli(decl, "taus", "(1, 2)") == [1, 2]
    assert _cli(decl, "taus", "4096") == [4096] and _cli(decl, "taus", "+7") == [7]
    assert _cli(decl, "paths", "['0x1F', '+7']") == ["0x1F", "+7"]
    with pytest.raises(ParameterError, match=r"a list written as a list \(\['1', '2'\]\)"):
        _cli(decl, "taus", "1,2")  # a bare 1,2 is text, not the tuple (1, 2)
    for raw in ("0x1F", "1e3", "[1, 'a']"):
        with pytest.raises(ParameterError, match=r"parameter 'taus' expects list of int"):
            _cli(decl, "taus", raw)
    assert _cli(decl, "mode", "b") == "b"
    with pytest.raises(ParameterError, match=r"parameter 'mode' expects one of 'a', 'b'"):
        _cli(decl, "mode", "c")


def test_a_union_tries_its_types_in_the_declared_order(decl):
    assert _cli(decl, "pick", "7") == 7 and _cli(decl, "pick", "+7") == 7  # int | str
    assert _cli(decl, "pick", "0x1F") == "0x1F" and _cli(decl, "pick", "abc") == "abc"
    assert _cli(decl, "either", "7") == "7" and _cli(decl, "either", "+7") == "+7"  # str | int


def test_an_untyped_parameter_gets_the_value_as_read(decl):
    assert decl["anything"].kinds == ("any",)
    assert [_cli(decl, "anything", r) for r in ("7", "1e-4", "0x1F", "abc", "[1]", "None")] == \
        [7, "1e-4", "0x1F", "abc", [1], None]


def test_python_values_keep_working(decl):
    """run_notebook(params=...) / run_sequence(common=...) callers pass Python values: unchanged."""
    assert coerce(decl["n"], 5) == 5 and coerce(decl["name"], 2024) == "2024" and coerce(decl["lr"], 0.5) == 0.5
    assert coerce(decl["name"], Path("a/b")) == "a/b" and coerce(decl["paths"], "a.zim") == ["a.zim"]
    assert coerce(decl["flag"], True) is True and coerce(decl["taus"], (1, 2)) == [1, 2]
    assert coerce(decl["name"], "0x1F") == "0x1F" and coerce(decl["anything"], "7") == "7"
    for name, value in (("n", 2.5), ("n", True), ("name", None), ("lr", float("inf")), ("n", "two")):
        with pytest.raises(ParameterError):
            coerce(decl[name], value)


@pytest.mark.parametrize("raw", TEXTS + ["None", "'abc'", "[1,2]", "{'a': 1}", "yes", "(1, 2)", "{1, 2}", "[(1, 2)]",
                                 "{1: (2,)}", "[1e-4]"])
def test_a_recorded_value_types_the_same_after_json(decl, raw):
    """sequence.json holds _value's result: read back, every parameter types it as the first attempt did."""
    value = _value(raw)
    back = json.loads(json.dumps(value, default=str))
    for p in decl.values():
        try:
            first = coerce(p, value)
        except ParameterError:
            with pytest.raises(ParameterError):
                coerce(p, back)
            continue
        assert coerce(p, back) == first, (p.name, raw)


@pytest.mark.parametrize("raw", ["{[]: 1}", "[" * 3000, "9" * 5000, "", "   ", "b'x'", "...", "\x00", "'unclosed",
                                 "1e999999", "__import__('os')"])
def test_value_never_raises(raw):
    assert _value(raw) == raw


def test_value_reads_only_plain_literals():
    assert [_value(t) for t in ("7", "-3", "None", "True", "'a b'", "[1, 'x']", "(1, 2)", "{'k': [1]}")] == \
        [7, -3, None, True, "a b", [1, "x"], [1, 2], {"k": [1]}]  # a tuple is a list: JSON has no tuples
    assert _value("{1: (2,)}") == {"1": [2]} and _value("[{1, 2}]") == "[{1, 2}]"  # as JSON records it
    assert [_value(t) for t in ("0x1F", "+7", "1_000", "1e-4", "1,2", "{1, 2}", "a.zim", "two words")] == \
        ["0x1F", "+7", "1_000", "1e-4", "1,2", "{1, 2}", "a.zim", "two words"]


def test_read_number():
    assert [read_number(t, "int") for t in ("7", "+7", "-7", "1_000", " 0 ", "00")] == [7, 7, -7, 1000, 0, 0]
    assert [read_number(t, "int") for t in ("0x1F", "007", "0_7", "7.0", "1e3", "", "-", "٣", "7 7")] == [None] * 9
    assert read_number("-.5", "float") == -0.5 and read_number("7", "float") == 7.0
    assert [read_number(t, "float") for t in ("0x1F", "1j", "nan", "inf", "1__0", "1e", "e3", "5-3")] == [None] * 8


def test_notebook_command_refuses_an_unreadable_number_before_the_kernel(tmp_path, kernel, capsys):
    """The real notebook 01 (text ``api_key_env``, int ``n_episodes``): exit 2, one line, no kernel, no folder."""
    for raw in ("0x1F", "007", "1e3"):
        rc = main(["notebook", "01", "--out", str(tmp_path / "o"), "-p", "n_episodes", raw])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1, err
        assert "'n_episodes'" in err and "expects int >= 1" in err and f"got {raw!r}" in err, err
    assert not kernel and not (tmp_path / "o").exists()


def test_notebook_command_passes_text_as_typed_and_numbers_read(tmp_path, kernel):
    argv = ["notebook", "01", "--out", str(tmp_path / "o"), "-p", "api_key_env", "0x1F", "-p", "n_episodes", "+7",
            "-p", "concurrency", "1_000", "-p", "wall_clock_s", "1e3", "-p", "task_dir", "007"]
    assert main(argv) == 0
    (params,) = kernel
    assert params["api_key_env"] == "0x1F" and params["n_episodes"] == 7 and params["concurrency"] == 1000
    assert params["wall_clock_s"] == 1000.0 and params["task_dir"] == "007"


def test_sequence_records_the_text_and_resumes_with_the_same_values(tmp_path, nb_dir):
    seen: list[tuple[str, dict]] = []
    fail = {"03"}

    def runner(key, profile, params, out, **kw):
        seen.append((key, dict(params)))
        out.mkdir(parents=True, exist_ok=True)
        if key in fail:
            raise RuntimeError("deliberate failure")
        return out / "x.ipynb"

    pairs = [("name", "0x1F"), ("03.lr", "1e-4"), ("03.n", "+7"), ("01.tag", "1_000")]
    kw = dict(results_dir=tmp_path / "res", notebooks_dir=nb_dir, runner=runner, echo=lambda s: None, progress=False)
    common, per = parse_overrides(pairs)
    with pytest.raises(NotebookFailed):
        run_sequence("r", ["01", "03"], common=common, per_notebook=per, **kw)
    first = dict(seen)
    assert first["01"] == {"name": "0x1F", "tag": "1_000"}
    assert first["03"] == {"name": "0x1F", "lr": 1e-4, "n": 7}
    state = json.loads((tmp_path / "res" / "r" / "sequence.json").read_text())
    assert state["plan"]["common"] == {"name": "0x1F"}  # the text as typed
    assert state["plan"]["per_notebook"] == {"01": {"tag": "1_000"}, "03": {"lr": "1e-4", "n": "+7"}}
    # a resume with the same -p values changes nothing finished; 03 gets what it got the first time
    fail.clear()
    common, per = parse_overrides(pairs)
    run_sequence("r", common=common, per_notebook=per, resume=True, **kw)
    assert seen[-1] == ("03", first["03"])
    # a different text for finished notebook 01 is a change (0x1f is not 0x1F), refused
    with pytest.raises(SequenceError, match=r"finished notebook\(s\) 01"):
        run_sequence("r", common={}, per_notebook=parse_overrides([("01.name", "0x1f")])[1], resume=True, **kw)
