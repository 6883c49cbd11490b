"""report_to problems are refused by kit.cli_params.check_combinations (before any kernel): a tracking package
that is not installed, W&B online with no key; a sequence with one refuses before notebook 01 starts. The
check is kit.tracking.report_to_problem, the one the trainers' Tracker uses too."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from kit.cli import SequenceError, run_notebook, run_sequence
from kit.cli_params import ParameterError


class _ReachedKernel(Exception):
    pass


@pytest.fixture
def no_wandb_key(tmp_path, monkeypatch):
    if importlib.util.find_spec("wandb") is None:  # not imported: the check must not need it
        pytest.skip("make setup installs wandb")
    for k in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))


@pytest.fixture
def no_kernel(monkeypatch):
    import papermill

    def reached(*a, **kw):
        raise _ReachedKernel

    monkeypatch.setattr(papermill, "execute_notebook", reached)
    monkeypatch.setattr("kit.cli_notebook.ensure_kernel", lambda *a, **kw: None)


@pytest.mark.parametrize("key", ["04", "05", "06"])
def test_wandb_online_without_a_key_is_refused_before_the_kernel(key, tmp_path, no_wandb_key, no_kernel):
    with pytest.raises(ParameterError, match=r"report_to='wandb' runs online.*no W&B API key.*WANDB_MODE=offline"):
        run_notebook(key, "smoke", {"report_to": "wandb"}, tmp_path / key, check_endpoints=False)


def test_a_tracking_package_that_is_missing_is_refused_before_the_kernel(tmp_path, monkeypatch, no_kernel):
    monkeypatch.setitem(sys.modules, "trackio", None)  # as if not installed (find_spec raises ValueError)
    with pytest.raises(ParameterError, match=r"report_to='trackio' needs trackio.*pip install trackio"):
        run_notebook("04", "smoke", {"report_to": "trackio"}, tmp_path / "o", check_endpoints=False)


def test_wandb_offline_reaches_the_kernel(tmp_path, no_wandb_key, no_kernel, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    with pytest.raises(_ReachedKernel):
        run_notebook("04", "smoke", {"report_to": "wandb"}, tmp_path / "o", check_endpoints=False)


def test_a_sequence_with_wandb_online_and_no_key_refuses_before_notebook_01(tmp_path, no_wandb_key):
    calls = []

    def runner(key, profile, params, out, **kw):
        calls.append(key)
        out.mkdir(parents=True, exist_ok=True)
        return out / "x.ipynb"

    with pytest.raises(SequenceError, match=r"report_to='wandb'.*no W&B API key.*notebook 04"):
        run_sequence("wb", ["01", "02", "03", "04"], per_notebook={"04": {"report_to": "wandb"}},
                     results_dir=tmp_path, runner=runner, echo=lambda s: None)
    assert calls == []
