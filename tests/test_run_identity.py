"""A run is one identifiable experiment (issue 26, part 5): results/<run>/<notebook>/ named after the profile, a
run identity in every folder, and no resume (notebook command, RL trainer, SFT) of another experiment."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from kit.runs import (
    ResumeMismatch,
    RunMismatch,
    claim_folder,
    config_fingerprint,
    default_out_dir,
    read_identity,
    run_identity,
)


def test_profiles_run_one_after_another_never_share_a_folder(tmp_path):
    folders = {p: default_out_dir("05_rl_long_mdr", p, root=tmp_path) for p in
               ("smoke", "weagent_mmsearch", "long_mdr", "points_seeker")}
    assert len(set(folders.values())) == 4
    assert folders["points_seeker"] == tmp_path.resolve() / "points_seeker" / "05_rl_long_mdr"
    # "paper" is WeAgent as written: the folder names the recipe it resolved to; a preflight has its own
    assert default_out_dir("05_rl_long_mdr", "paper", root=tmp_path) == folders["weagent_mmsearch"]
    assert default_out_dir("05_rl_long_mdr", "paper", preflight=True, root=tmp_path).parent.name == "weagent_mmsearch_preflight"
    assert default_out_dir("01_harness_demo", "smoke", run="mine", root=tmp_path).parent.name == "mine"
    with pytest.raises(ValueError, match="plain folder name"):
        default_out_dir("01_harness_demo", "smoke", run="../x", root=tmp_path)


def test_a_folder_of_another_experiment_is_refused_naming_what_differs(tmp_path):
    paper = run_identity("05_rl_long_mdr", "paper", {"seed": 0, "out_dir": "/x"})
    assert paper["profile"] == "weagent_mmsearch" and paper["recipe"] == "weagent_mmsearch" and "out_dir" not in paper["params"]
    assert claim_folder(tmp_path / "f", paper) == "new" and read_identity(tmp_path / "f")["fingerprint"] == paper["fingerprint"]
    # the same experiment under its other name, and in another place, resumes
    assert claim_folder(tmp_path / "f", run_identity("05_rl_long_mdr", "weagent_mmsearch", {"seed": 0, "out_dir": "/y"})) == "resume"
    with pytest.raises(RunMismatch) as e:
        claim_folder(tmp_path / "f", run_identity("05_rl_long_mdr", "points_seeker", {"seed": 1}))
    msg = str(e.value)
    assert "profile: 'weagent_mmsearch' -> 'points_seeker'" in msg and "params.seed: 0 -> 1" in msg and "recipe_sha256" in msg
    with pytest.raises(RunMismatch, match="preflight: False -> True"):
        claim_folder(tmp_path / "f", run_identity("05_rl_long_mdr", "paper", {"seed": 0}, preflight=True))
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "summary.md").write_text("x")  # outputs without an identity: never mixed in
    with pytest.raises(RunMismatch, match="unidentified run"):
        claim_folder(tmp_path / "old", paper)


def test_the_notebook_command_exits_2_before_the_kernel_on_another_runs_folder(tmp_path, capsys):
    from kit.cli import main

    out = tmp_path / "o"
    claim_folder(out, run_identity("01_harness_demo", "smoke", {}))
    rc = main(["notebook", "01", "--profile", "points_seeker", "--preflight", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "holds another run" in err and "profile: 'smoke' -> 'points_seeker'" in err
    assert not (out / "01_harness_demo.ipynb").exists()  # refused before the kernel started


def test_sft_resume_continues_only_its_own_run(tmp_path):
    from kit.train.sft import SFT_IDENTITY, SFTTrainConfig, _claim_sft_run

    ex = [SimpleNamespace(id="a", input_ids=[1, 2, 3])]
    _claim_sft_run(tmp_path, SFTTrainConfig(), "m", "trl", ex, resuming=False)
    _claim_sft_run(tmp_path, SFTTrainConfig(save_steps=7), "m", "trl", ex, resuming=True)  # cadence: same run
    with pytest.raises(ResumeMismatch, match=r"sft\.lr_language"):
        _claim_sft_run(tmp_path, SFTTrainConfig(lr_language=3e-4), "m", "trl", ex, resuming=True)
    with pytest.raises(ResumeMismatch, match="examples"):
        _claim_sft_run(tmp_path, SFTTrainConfig(), "m", "trl", [SimpleNamespace(id="b", input_ids=[1])], resuming=True)
    (tmp_path / SFT_IDENTITY).unlink()
    with pytest.raises(ResumeMismatch, match="no run identity"):
        _claim_sft_run(tmp_path, SFTTrainConfig(), "m", "trl", ex, resuming=True)


def test_config_fingerprint_is_stable_and_canonical():
    a, b = config_fingerprint({"x": 1, "y": [1, 2]}), config_fingerprint({"y": [1, 2], "x": 1})
    assert a == b and len(a["fingerprint"]) == 16 and json.dumps(a)


def test_a_setting_of_a_mechanism_the_profile_lacks_is_refused_before_the_kernel():
    """WeAgent's and POINTS-Seeker's recipes run no entropy rescue: tuning it is an error (exit 2), unless the
    labelled ablation switch turns it on; under long_mdr it is the recipe's."""
    from kit.cli_params import ParameterError, check_combinations, notebook_parameters
    from kit.paths import PROJECT_ROOT

    d = notebook_parameters(PROJECT_ROOT / "notebooks" / "05_rl_long_mdr.ipynb")
    base = {"web_backend": "zim"}
    for profile in ("weagent_mmsearch", "points_seeker"):
        with pytest.raises(ParameterError, match="runs no entropy-triggered rescue"):
            check_combinations(d, {**base, "entropy_threshold": 0.2}, profile, preflight=True)
        check_combinations(d, {**base, "entropy_threshold": 0.2, "rescue": True}, profile, preflight=True)
    check_combinations(d, {**base, "rescue_action": "rollback"}, "long_mdr", preflight=True)


def test_ablation_switches_are_labelled_and_unknown_ones_name_the_supported():
    from kit.profiles import get_profile

    ps = get_profile("points_seeker", switches={"self_recovery": True})
    assert ps.harness().self_recovery is True and "ablation:self_recovery=on" in ps.labels
    assert get_profile("points_seeker").harness().self_recovery is False  # the paper's: no recovery rules
    same = get_profile("weagent_mmsearch", switches={"self_recovery": True})  # the recipe's own value: no ablation
    assert not any(x.startswith("ablation") for x in same.labels)
    assert get_profile("points_seeker", switches={"self_recovery": None}) is get_profile("points_seeker")
    with pytest.raises(ValueError, match="supported: rescue, self_recovery"):
        get_profile("weagent_mmsearch", switches={"opd": True})
    assert "ablation self_recovery=on" in ps.describe() and "recipe points_seeker" in ps.describe()


def test_algorithm_and_self_recovery_that_cannot_run_together_stop_before_the_kernel():
    from kit.cli_params import ParameterError, check_combinations, notebook_parameters
    from kit.paths import PROJECT_ROOT

    d = notebook_parameters(PROJECT_ROOT / "notebooks" / "05_rl_long_mdr.ipynb")
    base = {"web_backend": "zim"}
    with pytest.raises(ParameterError, match="fa_gspo.*without self-recovery"):
        check_combinations(d, {**base, "algorithm": "fa_gspo"}, "points_seeker", preflight=True)
    with pytest.raises(ParameterError, match="fa_gspo.*-p self_recovery false switches it off"):
        check_combinations(d, {**base, "self_recovery": False}, "weagent_mmsearch", preflight=True)
    with pytest.raises(ParameterError, match="gspo.*self_recovery true"):
        check_combinations(d, {**base, "algorithm": "gspo", "self_recovery": True}, "points_seeker", preflight=True)
    check_combinations(d, {**base, "algorithm": "fa_gspo", "self_recovery": True}, "points_seeker", preflight=True)


def test_ablation_labels_reach_every_run_label_set():
    from kit.policy.factory import run_labels
    from kit.profiles import get_profile

    ps = get_profile("points_seeker", switches={"self_recovery": True})
    assert run_labels(ps, {"smoke": False}) == ["ablation:self_recovery=on"]
    assert run_labels(get_profile("smoke", switches={"rescue": False}), {"smoke": True}) == ["smoke", "ablation:rescue=off"]


def test_make_sequence_names_no_run_so_an_alias_resolves():
    from kit.paths import PROJECT_ROOT

    line = next(x for x in (PROJECT_ROOT / "Makefile").read_text().splitlines() if "kit.cli sequence" in x)
    assert "--run" not in line  # `make sequence PROFILE=paper` writes results/weagent_mmsearch/, not results/paper/


def test_make_demo_resumes_the_committed_smoke_folders_instead_of_refusing_them():
    """`make demo` (`notebook 01 --profile smoke`) and every `notebook NN --profile smoke` write the committed
    results/smoke/<NN>/ folders: their recorded identity must be the one those commands compute."""
    from kit.cli import NOTEBOOKS
    from kit.paths import PROJECT_ROOT

    for name in NOTEBOOKS.values():
        folder = PROJECT_ROOT / "results" / "smoke" / name
        if not folder.is_dir():
            continue
        recorded = read_identity(folder)
        assert recorded is not None, f"{folder} has no run identity: regenerate with make sequence"
        from kit.cli_params import notebook_parameters

        declared = notebook_parameters(PROJECT_ROOT / "notebooks" / f"{name}.ipynb")
        given = {} if name == "01_harness_demo" else recorded["params"]  # 01: exactly make demo's command
        mine = run_identity(name, "smoke", given, declared=declared, base=PROJECT_ROOT / "notebooks")
        assert recorded["fingerprint"] == mine["fingerprint"], (name, recorded, mine)
