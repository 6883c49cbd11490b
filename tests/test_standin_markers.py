"""Preflight stand-ins say what they are (new-user trial 16, items 7 and 8): the stand-in Hub's loads are
marked ``stand_in`` with deterministic commits; manifests list only the roles a run used; the stand-in
summarizer is named like the judge; the manifest records the resolved clip range."""

from __future__ import annotations

import json

import pytest

from kit.eval import hub_loaders


@pytest.fixture
def standin_env(tmp_path, monkeypatch):
    import huggingface_hub
    import huggingface_hub.constants as hf_constants
    from huggingface_hub.utils._http import default_client_factory

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hf_cache"))
    monkeypatch.setattr(hub_loaders, "STANDIN_REPOS", set())
    yield tmp_path
    huggingface_hub.set_client_factory(default_client_factory)


def test_standin_hub_loads_are_marked_and_its_commits_are_content_derived(standin_env, recwarn):
    pytest.importorskip("datasets")
    from kit.eval.hub_standin import install_standin_hub

    commits = []
    for run in ("a", "b"):  # two preflights, two fresh stand-in hubs
        install_standin_hub(standin_env / run, n=1, names=("simplevqa",))
        lr = hub_loaders.load_hub_benchmark("simplevqa", image_dir=standin_env / run / "img",
                                            cache_dir=standin_env / run / "hf")
        assert lr.info["stand_in"] is True and lr.info["source"] == hub_loaders.STANDIN_SOURCE
        assert "stand-in" in lr.info["warnings"][0] and "to repeat this run" not in lr.info["warnings"][0]
        commits.append(lr.info["resolved_commit"])
    assert commits[0] == commits[1] and len(commits[0]) == 40


def test_a_real_hub_load_is_not_marked_stand_in(standin_env):
    pytest.importorskip("datasets")
    from huggingface_hub import CommitOperationAdd, HfApi

    from kit.eval.hub_standin import standin_release_files
    from kit.hub.localhub import LocalHub

    h = LocalHub(standin_env / "hub")
    with h.installed():
        api = HfApi(token="hf_markerTestToken0123")
        repo = hub_loaders.HUB_SOURCES["simplevqa"].repo
        api.create_repo(repo, repo_type="dataset", exist_ok=True)
        api.create_commit(repo, repo_type="dataset", commit_message="v1",
                          operations=[CommitOperationAdd(p, b) for p, b in standin_release_files("simplevqa", 1).items()])
        with pytest.warns(hub_loaders.UnpinnedRevisionWarning, match="to repeat this run"):
            lr = hub_loaders.load_hub_benchmark("simplevqa", image_dir=standin_env / "img", cache_dir=standin_env / "hf")
    assert "stand_in" not in lr.info


def test_local_hub_clock_makes_commit_ids_repeatable(tmp_path):
    from kit.hub.localhub import LocalHub

    a = LocalHub(tmp_path / "a", clock=lambda: 0.0)._new_commit
    b = LocalHub(tmp_path / "b", clock=lambda: 0.0)._new_commit
    for h in ("a", "b"):
        (tmp_path / h / "commits").mkdir(parents=True)
    assert a(tmp_path / "a", None, "m", {"f": "1"}) == b(tmp_path / "b", None, "m", {"f": "1"})


def test_rl_config_resolved_dump_records_the_algorithms_clip_range():
    from kit.rl.objective import ALGORITHMS
    from kit.rl.trainer import RLConfig

    d = RLConfig(algorithm="fa_gspo").resolved_dump()
    assert (d["eps_lo"], d["eps_hi"]) == (ALGORITHMS["fa_gspo"].eps_lo, ALGORITHMS["fa_gspo"].eps_hi)
    assert d["eps_lo"] is not None and d["eps_hi"] is not None
    assert RLConfig(algorithm="grpo", eps_hi=0.5).resolved_dump()["eps_hi"] == 0.5  # a given value is kept
    json.dumps(d)  # JSON-able for the manifest


def test_preflight_stand_ins_leave_out_roles_that_did_not_run():
    from kit.profiles import preflight_stand_ins

    got = preflight_stand_ins("points_seeker", {"image judge": "phash (perceptual hash, no model)",
                                                "OPD teacher": None, "expert": None})
    assert "OPD teacher" not in got and "expert" not in got
    assert got["image judge"]["ran"] == "phash (perceptual hash, no model)"
    assert set(got) == {"policy", "answer judge", "image judge", "summarizer"}


def test_preflight_summarizer_stand_in_is_named_like_the_judge(monkeypatch):
    import kit.profiles
    from kit.harness.summarize import make_summarizer

    class Tiny:
        name = "transformers:qwen2_vl-qwen-0"
        stand_in_for = "summarizer"

    monkeypatch.setattr(kit.profiles, "stand_in_policy", lambda role, max_new_tokens=32: Tiny())
    s = make_summarizer("", "", kit.profiles.get_profile("paper", preflight=True), kind="llm")
    paper_model = kit.profiles.get_profile("paper").value("eval.summarizer_model", None)
    assert s.name == f"llm:{kit.profiles.stand_in_name(paper_model)}"
    assert "random weights" in s.name and "stand-in" in s.name


def _cell_with(nb: str, needle: str) -> str:
    from pathlib import Path

    cells = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / nb).read_text())["cells"]
    found = ["".join(c["source"]) for c in cells if needle in "".join(c["source"])]
    assert len(found) == 1, (nb, needle, len(found))
    return found[0]


def test_notebook_manifests_name_only_the_roles_they_ran_and_the_resolved_clip_range():
    nb06 = _cell_with("06_evaluation.ipynb", "write_manifest(")
    assert '"OPD teacher": None' in nb06 and '"expert": None' in nb06 and '"image judge": target_judge.name' in nb06
    nb05 = _cell_with("05_rl_long_mdr.ipynb", "write_manifest(")
    assert "schedule_has_opd else None" in nb05 and '"image judge": None' in nb05
    assert "cfg.resolved_dump()" in nb05 and "cfg.model_dump()" not in nb05
    assert "\"harness\": trainer.base_config.model_dump()" in nb05  # still recorded beside rl


def test_preflight_rl_has_headroom_for_a_real_update():
    """Item 6: the preflight got its one RL update at step 5 of 0..5 allowed; 12 further steps give headroom."""
    params = _cell_with("05_rl_long_mdr.ipynb", "preflight_rl_steps: NonNegInt")
    assert "preflight_rl_steps: NonNegInt = 12" in params
