"""Profile objects (issue 15 part 4): what the notebooks' ``profile == "smoke"`` branches decided."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kit.harness.config import SMOKE_PROMPT_TIME, HarnessConfig
from kit.profiles import PROFILES, Profile, get_profile


def test_smoke_and_paper_profiles():
    smoke, paper = get_profile("smoke"), get_profile("paper")
    assert isinstance(smoke, Profile) and set(PROFILES) == {"smoke", "weagent_mmsearch", "long_mdr", "points_seeker"}
    assert (smoke.name, smoke.smoke, smoke.labels, smoke.default_model) == ("smoke", True, ("smoke",), "tiny-qwen2_vl")
    # "paper" is another name of WeAgent-MMSearch as written: the profile says which recipe it resolved to
    assert (paper.name, paper.recipe, paper.smoke, paper.labels, paper.default_model) == (
        "weagent_mmsearch", "weagent_mmsearch", False, (), "")
    assert paper is get_profile("weagent_mmsearch") and paper.run_name == "weagent_mmsearch"
    assert get_profile("paper", preflight=True).run_name == "weagent_mmsearch_preflight"
    assert get_profile(smoke) is smoke
    with pytest.raises(ValidationError):
        smoke.smoke = False  # frozen: a notebook cannot flip its profile half-way


def test_harness_is_the_profiles_harness_config():
    assert get_profile("smoke").harness() == HarnessConfig.smoke()
    assert get_profile("paper").harness() == HarnessConfig()
    h = get_profile("smoke").harness(max_turns=1, tools_enabled=["web_search"])
    assert (h.max_turns, h.tools_enabled, h.max_response_tokens, h.prompt_time is not None) == (1, ["web_search"], 96, True)
    real = get_profile("smoke").harness(real_model=True)
    assert real.max_response_tokens == 4_096 and real.prompt_time is None
    assert HarnessConfig.smoke().prompt_time.isoformat() == SMOKE_PROMPT_TIME


def test_pick_chooses_by_profile_and_keeps_a_given_value():
    smoke, paper = get_profile("smoke"), get_profile("paper")
    assert smoke.pick(2, 6) == 2 and paper.pick(2, 6) == 6
    assert smoke.pick(60, None) == 60 and paper.pick(60, None) is None
    assert smoke.pick(2, 6, given=0) == 0 and paper.pick(2, 6, given=None) == 6  # 0 is a value, None is not


@pytest.mark.parametrize("bad", ["fast", "Smoke", "", None, 1])
def test_unknown_profile_is_refused_with_the_choices(bad):
    with pytest.raises(ValueError, match="unknown profile .*'smoke', 'weagent_mmsearch', 'long_mdr', 'points_seeker', 'paper'"):
        get_profile(bad)
