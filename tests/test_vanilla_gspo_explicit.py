"""Vanilla GSPO (WeAgent Table 3) from a profile's or a rebuilt harness config: the recipe's own
``self_recovery=True`` (built by :meth:`kit.profiles.Profile.harness`, or copied by ``model_dump()``) is not
the user's choice, so ``harness_config_for("gspo", ...)`` turns it off; a value the caller set is refused."""

from __future__ import annotations

import pytest

from kit.harness.config import HarnessConfig
from kit.profiles import get_profile
from kit.rl.eligibility import explicit_self_recovery, harness_config_for


@pytest.mark.parametrize("name, preflight", [("paper", False), ("paper", True), ("long_mdr", False),
                                             ("long_mdr", True)])
def test_gspo_from_every_paper_profile_runs_without_self_recovery(name, preflight):
    P = get_profile(name, preflight=preflight)
    rollout = P.recipe_obj().section("rl_rollout")
    for cfg in (P.harness(), P.harness(**rollout), P.harness(max_turns=3)):
        assert cfg.self_recovery is True and not explicit_self_recovery(cfg)
        vanilla = harness_config_for("gspo", cfg)
        assert vanilla.self_recovery is False and vanilla.max_turns == cfg.max_turns
    with pytest.raises(ValueError, match="vanilla GSPO"):  # named by the caller: a contradiction
        harness_config_for("gspo", P.harness(self_recovery=True))


@pytest.mark.parametrize("preflight", [False, True])
def test_points_seeker_runs_without_self_recovery_under_every_algorithm(preflight):
    """POINTS-Seeker's recipe has no recovery rules (§3.2.4): gspo keeps it off, and fa_gspo (which needs them)
    is refused unless the labelled ablation switch turns them on."""
    P = get_profile("points_seeker", preflight=preflight)
    cfg = P.harness(**P.recipe_obj().section("rl_rollout"))
    assert cfg.self_recovery is False and harness_config_for("gspo", cfg).self_recovery is False
    ablation = get_profile("points_seeker", preflight=preflight, switches={"self_recovery": True}).harness()
    assert ablation.self_recovery is True and explicit_self_recovery(ablation)


def test_a_config_rebuilt_from_model_dump_is_not_an_explicit_choice():
    base = get_profile("paper", preflight=True).harness()
    rebuilt = HarnessConfig(**base.model_dump())
    assert not explicit_self_recovery(rebuilt) and harness_config_for("gspo", rebuilt).self_recovery is False
    # a rebuilt config that differs from the recipe was changed on purpose
    assert explicit_self_recovery(HarnessConfig(**{**base.model_dump(), "self_recovery": False}))
    assert explicit_self_recovery(HarnessConfig(self_recovery=True, max_turns=4))


def test_paper_profile_harness_is_the_recipes_and_keeps_overrides():
    P = get_profile("paper")
    assert P.harness() == HarnessConfig() and P.harness().model_fields_set == set()
    cfg = P.harness(max_turns=7)
    assert cfg.max_turns == 7 and cfg.model_fields_set == {"max_turns"}
    ps = get_profile("points_seeker").harness()
    assert ps.max_turns == get_profile("points_seeker").value("harness.max_turns")
