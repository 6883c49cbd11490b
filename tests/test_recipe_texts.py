"""Recipe reasons that read true under every paper recipe, and citations that cite what the row does."""

from kit.recipes import load_recipe


def test_preflight_reasons_do_not_assume_long_mdr():
    pre = load_recipe("points_seeker", ("preflight",))
    for key in ("stage_budgets.max_turns", "rl_run.total_steps"):
        kit = pre.entries[key].kit
        assert "each Long-MDR stage" not in kit and not kit.startswith("a size: two steps (the schedule's first two stages: OPD"), key


def test_points_seeker_sft_count_notes_the_papers_conflict():
    e = load_recipe("points_seeker").entries["paper_only.sft_trajectories"]
    assert "3.2.2" in e.source and "A.3" in e.kit and "5,339" in e.kit


def test_weagent_stable_fact_cites_the_stable_branch():
    e = load_recipe("weagent_mmsearch").entries["data.stable_fact"]
    assert "concept name, definition and category" in e.source and "concise fact" not in e.source
