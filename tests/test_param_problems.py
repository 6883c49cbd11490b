"""The paper command's missing/invalid parameters are reported together, in one ParameterError (no network)."""

import pytest

from kit.cli_params import ParameterError, check_combinations, notebook_parameters
from kit.paths import PROJECT_ROOT

NB05 = PROJECT_ROOT / "notebooks" / "05_rl_long_mdr.ipynb"


def test_every_missing_piece_of_the_paper_command_in_one_error(tmp_path):
    declared = notebook_parameters(NB05)
    bad = tmp_path / "no_such_checkpoint"
    with pytest.raises(ParameterError) as e:  # base_model a missing folder; no judge endpoint; OPD without teacher
        check_combinations(declared, {"base_model": str(bad), "rl_prompts": str(tmp_path)}, "long_mdr",
                           "notebook 05", local_refs=True)
    msg = str(e.value)
    lines = [ln for ln in msg.splitlines() if ln.startswith("  - ")]
    assert int(msg.split()[0]) == len(lines) >= 3, msg  # "N problems ...", then one line each
    for piece in ("judge_endpoint", "teacher_model", str(bad)):
        assert sum(piece in ln for ln in lines) == 1, (piece, msg)


def test_a_sequence_plan_does_not_check_folders_earlier_notebooks_write(tmp_path):
    declared = notebook_parameters(NB05)
    # without local_refs a not-yet-written base_model folder is no problem (kit.cli_sequence plans)
    check_combinations(declared, {"base_model": str(tmp_path / "later")}, "smoke", "notebook 05")
    with pytest.raises(ParameterError, match="not a local checkpoint folder"):  # one problem: its own line
        check_combinations(declared, {"base_model": str(tmp_path / "later")}, "smoke", "notebook 05", local_refs=True)
