"""Notebook 05 reads whether its schedule has an OPD stage with the kit's stage parser (the one the command line
checks ``stages`` with: kit.cli_params.resolved_stages), not a parse of its own (the notebook is not run here)."""

from __future__ import annotations

import json

import pytest

from kit.cli_params import resolved_stages
from kit.paths import PROJECT_ROOT

NB05 = PROJECT_ROOT / "notebooks" / "05_rl_long_mdr.ipynb"


def _opd_line() -> str:
    cells = [c for c in json.loads(NB05.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
    first = next(i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", [])) + 1
    lines = [ln for ln in "".join(cells[first]["source"]).splitlines() if ln.startswith("schedule_has_opd =")]
    assert len(lines) == 1, lines  # the flag the stand-in teacher and the teacher check read
    return lines[0]


@pytest.mark.parametrize("stages, profile, preflight, has_opd", [
    ("long_mdr", "paper", True, True), ("weagent", "paper", False, False), ("opd:1,h1:2,h2", "smoke", False, True),
    ("h10:200,h20", "points_seeker", False, False), ("opd:2, h10", "points_seeker", True, True)])
def test_nb05_first_cell_reads_opd_with_the_kit_parser(stages, profile, preflight, has_opd):
    ns = {"resolved_stages": resolved_stages, "stages": stages, "profile": profile, "preflight": preflight}
    exec(_opd_line(), ns)
    assert ns["schedule_has_opd"] is has_opd
    assert any(s.kind == "opd" for s in resolved_stages(stages, profile, preflight=preflight)) is has_opd


def test_nb05_first_cell_sees_the_opd_stage_of_a_named_schedule(monkeypatch):
    """A recipe's named schedule with an OPD warmup (``-p stages warm``): the notebook's own split saw no 'opd'
    in the name, so a preflight built no stand-in teacher and its trainer cell stopped."""
    import copy

    from kit.profiles import Profile
    from kit.recipes import Entry

    real = Profile.recipe_obj

    def with_warm(self):
        r = copy.copy(real(self))
        r.entries = {**r.entries, "schedules.warm": Entry(value=[{"name": "opd", "kind": "opd", "steps": 1},
                                                                 {"name": "warm_h20", "max_turns": 20, "steps": 5}],
                                                          kit="a test schedule")}
        return r

    monkeypatch.setattr(Profile, "recipe_obj", with_warm)
    ns = {"resolved_stages": resolved_stages, "stages": "warm", "profile": "paper", "preflight": True}
    exec(_opd_line(), ns)
    assert ns["schedule_has_opd"] is True
