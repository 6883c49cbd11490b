"""The kit's documented reading of Long-MDR's "unsaturated" (docs/rl.md, kit/rl/staging.py): a per-step
level test, reward strictly below ``reward_saturation``; a step failing it resets the low-entropy count,
a skipped (NaN) step neither counts nor resets."""

from __future__ import annotations

import math

from kit.rl.staging import RescueConfig, Stage, StageSchedule


def _rescue_steps(rewards, entropies, **kw) -> list[int]:
    s = StageSchedule([Stage("rl")], rescue=RescueConfig(entropy_threshold=0.5, reward_saturation=0.8, patience=2,
                                                         cooldown=0, **kw))
    out = []
    for step, (r, e) in enumerate(zip(rewards, entropies)):
        out += [ev["step"] for ev in s.observe(step, r, e) if ev["type"] == "rescue"]
    return out


def test_reward_equal_to_saturation_is_saturated():
    assert _rescue_steps([0.8, 0.8, 0.8], [0.1, 0.1, 0.1]) == []
    assert _rescue_steps([0.79, 0.79], [0.1, 0.1]) == [1]


def test_saturated_step_resets_and_skipped_step_does_not():
    assert _rescue_steps([0.5, 0.9, 0.5], [0.1, 0.1, 0.1]) == []  # the saturated step breaks the run
    assert _rescue_steps([0.5, math.nan, 0.5], [0.1, math.nan, 0.1]) == [2]  # the skipped step is transparent
    assert _rescue_steps([0.5, 0.3], [0.1, 0.1]) == [1]  # falling reward still "unsaturated": no trend test
