"""Checkpoint references (kit.cli_params.CHECKPOINT_PARAMS) are checked once, offline, before any endpoint probe;
a sequence plan does not refuse a reference that an earlier notebook of the plan writes."""

from __future__ import annotations

import pytest

from kit.cli import NOTEBOOKS, SequenceError, main, run_notebook, run_sequence
from kit.cli_params import checkpoint_problems, notebook_parameters, plan_writes, written_by_plan
from kit.paths import PROJECT_ROOT

NB04 = PROJECT_ROOT / "notebooks" / "04_sft_unsloth.ipynb"


class _Stop(Exception):
    pass


def test_a_run_checks_each_checkpoint_reference_once(tmp_path, monkeypatch):
    """run_notebook used to check base_model twice (check_combinations, then preflight_endpoints)."""
    import papermill

    import kit.policy.factory as factory

    seen = []
    real = factory.checkpoint_ref_problem
    monkeypatch.setattr(factory, "checkpoint_ref_problem", lambda name, value, **kw: seen.append(name) or real(name, value, **kw))
    monkeypatch.setattr("kit.cli_notebook.ensure_kernel", lambda *a, **kw: None)

    def no_kernel(*a, **kw):
        raise _Stop

    monkeypatch.setattr(papermill, "execute_notebook", no_kernel)  # everything before the kernel runs
    with pytest.raises(_Stop):
        run_notebook("04", "smoke", {"base_model": "tiny-qwen3_vl"}, tmp_path / "o", progress=False)
    assert seen == ["base_model"]


def test_a_missing_checkpoint_folder_is_one_line(tmp_path, capsys):
    missing = tmp_path / "no_such_checkpoint"
    rc = main(["notebook", "05", "--out", str(tmp_path / "o"), "-p", "base_model", str(missing)])
    err = capsys.readouterr().err
    assert rc == 2 and sum(str(missing) in ln for ln in err.splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


def test_checkpoint_problems_lines_and_written_folders(tmp_path):
    decl = notebook_parameters(NB04)
    assert checkpoint_problems(decl, {"base_model": "hub:Qwen/Qwen2-VL-2B-Instruct@main"}) == []  # syntax only
    assert checkpoint_problems(decl, {"base_model": "tiny-qwen3_vl"}) == []
    assert checkpoint_problems(decl, {"base_model": "tiny-bogus"}) == [
        "base_model: model 'tiny-bogus': no tiny architecture 'bogus'; known: " +
        ", ".join(f"tiny-{a}" for a in __import__("kit.models.tiny").models.tiny.ARCHS)]
    later = tmp_path / "r" / "04_sft_unsloth" / "run" / "full" / "final"
    assert len(checkpoint_problems(decl, {"base_model": str(later)})) == 1
    written = plan_writes([tmp_path / "r" / "04_sft_unsloth"])
    assert written["base_model"] == [later] and "rl_prompts" not in written
    assert checkpoint_problems(decl, {"base_model": str(later)}, written=written) == []
    assert not written_by_plan(str(tmp_path / "r" / "04_sft_unsloth_x"), [tmp_path / "r" / "04_sft_unsloth"])
    assert not written_by_plan(str(later / "x"), [later]) and written_by_plan(str(later) + "/", [later])
    assert not written_by_plan("tiny-qwen3_vl", [PROJECT_ROOT])


def _runner(calls):
    def runner(key, profile, params, out, **kw):
        calls.append((key, params))
        out.mkdir(parents=True, exist_ok=True)
        return out / f"{NOTEBOOKS[key]}.ipynb"
    return runner


def _writer(calls):
    """A runner that writes what the notebook would (kit.cli_refs.NOTEBOOK_OUTPUTS): a model folder, RL prompts."""
    def runner(key, profile, params, out, **kw):
        calls.append((key, params))
        out.mkdir(parents=True, exist_ok=True)
        if key in ("04", "05"):
            final = out / "run" / ("full/final" if key == "04" else "final")
            final.mkdir(parents=True)
            (final / "config.json").write_text("{}")
        if key == "02":
            (out / "splits").mkdir()
            (out / "splits" / "rl_prompts.jsonl").write_text(
                '{"id": "t", "question": "q?", "answers": ["a"]}\n')
        return out / f"{NOTEBOOKS[key]}.ipynb"
    return runner


def test_a_sequence_is_not_refused_for_a_checkpoint_an_earlier_notebook_writes(tmp_path):
    """Plan 04 -> 05 whose 05 trains 04's checkpoint: preflight_endpoints used to refuse the not-yet-written folder."""
    calls = []
    ckpt = str(tmp_path / "r" / NOTEBOOKS["04"] / "run" / "full" / "final")
    run_sequence("r", ["04", "05"], per_notebook={"05": {"base_model": ckpt}}, results_dir=tmp_path,
                 runner=_writer(calls), echo=lambda s: None)
    assert [k for k, _ in calls] == ["04", "05"] and calls[1][1]["base_model"] == ckpt


@pytest.mark.parametrize("keys, folder", [(["05"], "04"), (["05", "06"], "06"), (["04", "05"], None)])
def test_a_sequence_refuses_a_checkpoint_no_earlier_notebook_writes(tmp_path, keys, folder):
    """Only a folder of an EARLIER planned notebook may be missing: 04 unplanned, 06 runs after 05, elsewhere."""
    calls = []
    ckpt = str(tmp_path / ("elsewhere" if folder is None else f"r/{NOTEBOOKS[folder]}") / "final")
    with pytest.raises(SequenceError, match="not a local checkpoint folder") as e:
        run_sequence("r", keys, per_notebook={"05": {"base_model": ckpt}}, results_dir=tmp_path,
                     runner=_runner(calls), echo=lambda s: None)
    assert calls == [] and str(e.value).count(ckpt) == 1


@pytest.mark.parametrize("keys, per", [
    (["02", "05"], {"05": {"rl_prompts": "results/r/02_data_synthesis"}}),  # relative, from the caller's folder
    # 06 may name 04's or 05's trained model (kit.cli_refs.NOTEBOOK_OUTPUTS)
    (["04", "06"], {"06": {"model": "results/r/04_sft_unsloth/run/full/final"}}),
    (["05", "06"], {"06": {"model": "results/r/05_rl_long_mdr/run/final"}})])
def test_a_sequence_is_not_refused_for_prompts_or_a_model_an_earlier_notebook_writes(tmp_path, monkeypatch, keys, per):
    monkeypatch.chdir(tmp_path)
    calls = []
    run_sequence("r", keys, per_notebook=per, results_dir=tmp_path / "results", runner=_writer(calls), echo=lambda s: None)
    assert [k for k, _ in calls] == keys
    (key, params), = per.items()
    with pytest.raises(SequenceError, match="notebook " + key):  # the same path with no earlier notebook writing it
        run_sequence("r2", [key], per_notebook={key: {n: v.replace("/r/", "/r2/") for n, v in params.items()}},
                     results_dir=tmp_path / "results", runner=_runner(calls), echo=lambda s: None)


R4 = "r/04_sft_unsloth"


@pytest.mark.parametrize("keys, key, name, ref, ok", [
    (["04", "05"], "05", "base_model", f"{R4}/run/full/final", True),
    (["04", "05"], "05", "base_model", f"{R4}/run/full/final/", True),  # a trailing /
    (["04", "05"], "05", "teacher_model", f"{R4}/run/full/final", True),
    (["04", "05"], "05", "base_model", f"{R4}/typo_never_written", False),
    (["04", "05"], "05", "base_model", R4, False),  # the folder itself
    (["04", "05"], "05", "base_model", f"{R4}/manifest.json", False),
    (["04", "05"], "05", "base_model", f"{R4}/run/full/final/x", False),  # inside the output
    (["04", "05"], "05", "base_model", f"{R4}/run/final", False),  # not what 04 writes
    (["04", "05"], "05", "base_model", f"{R4}/../../r2/04_sft_unsloth/run/full/final", False),
    (["05", "06"], "06", "model", "r/05_rl_long_mdr/run/checkpoints/final", False),  # trainer state, not a model
    (["05", "06"], "06", "model", "r/05_rl_long_mdr/run/final", True),  # RLTrainer.save_final
    (["02", "05"], "05", "rl_prompts", "r/02_data_synthesis/typo.jsonl", False),
    (["02", "05"], "05", "rl_prompts", "r/02_data_synthesis/splits/rl_prompts.jsonl", True),
    (["02", "05"], "05", "rl_prompts", "r/02_data_synthesis", True),  # its output folder (kit.rl.prompts)
    (["02", "05"], "05", "base_model", "r/02_data_synthesis", False),  # 02 writes prompts, not a model
])
def test_a_plan_accepts_only_the_exact_outputs_an_earlier_notebook_writes(tmp_path, keys, key, name, ref, ok):
    calls = []
    go = lambda: run_sequence("r", keys, per_notebook={key: {name: str(tmp_path / ref)}}, results_dir=tmp_path,  # noqa: E731
                              runner=_writer(calls), echo=lambda s: None)
    if ok:
        go()
        assert [k for k, _ in calls] == keys
    else:
        with pytest.raises(SequenceError, match=f"notebook {key}"):
            go()
        assert calls == []


def test_a_reference_is_checked_again_right_before_its_notebook_starts(tmp_path):
    """04 ran but did not write its checkpoint: 05 is not started (its runner has no checks of its own)."""
    calls = []
    ckpt = str(tmp_path / R4 / "run" / "full" / "final")
    with pytest.raises(SequenceError, match=r"(?s)\[2/2\] 05 .*not started.*base_model") as e:
        run_sequence("r", ["04", "05"], per_notebook={"05": {"base_model": ckpt}}, results_dir=tmp_path,
                     runner=_runner(calls), echo=lambda s: None)
    assert [k for k, _ in calls] == ["04"] and ckpt in str(e.value)
    # on resume 04 is finished: its outputs must exist now, so the plan is refused before anything runs
    with pytest.raises(SequenceError, match="(?s)notebook 05.*base_model"):
        run_sequence("r", resume=True, results_dir=tmp_path, runner=_runner(calls), echo=lambda s: None)
    assert [k for k, _ in calls] == ["04"]
    (tmp_path / R4 / "run" / "full" / "final").mkdir(parents=True)
    (tmp_path / R4 / "run" / "full" / "final" / "config.json").write_text("{}")
    run_sequence("r", resume=True, results_dir=tmp_path, runner=_runner(calls), echo=lambda s: None)
    assert [k for k, _ in calls] == ["04", "05"]


def test_resume_drops_finished_steps_from_what_the_plan_writes(tmp_path):
    """a7: 04 finished earlier, 05 failed; 05's base_model names 04's output, which 04 never wrote."""
    calls = []

    def failing(key, profile, params, out, **kw):
        calls.append(key)
        out.mkdir(parents=True, exist_ok=True)
        if key == "05":
            raise RuntimeError("05 failed")
        return out / "x.ipynb"

    ckpt = str(tmp_path / R4 / "run" / "full" / "final")
    with pytest.raises(Exception, match="not started|05 failed"):
        run_sequence("r", ["04", "05"], per_notebook={"05": {"base_model": ckpt}}, results_dir=tmp_path,
                     runner=failing, echo=lambda s: None, preflight=False)  # no checks: 05 starts and fails
    assert calls == ["04", "05"]
    with pytest.raises(SequenceError, match="(?s)notebook 05.*base_model"):
        run_sequence("r", resume=True, results_dir=tmp_path, runner=failing, echo=lambda s: None)
    assert calls == ["04", "05"]  # refused before anything reran
