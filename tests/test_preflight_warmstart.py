"""Preflights stay small (issue 26 item 6): notebook 05's warm start under ``--preflight`` trains a bounded number of
steps and tokens (kit.rl.warmstart.PREFLIGHT_WARM_START, PREFLIGHT_WARM_START_TOKENS) with a bounded number of torch
threads (WARM_START_THREADS), checked on those counts, not on wall time.

The plan is built from the demonstrations the notebook trains on: :class:`ProtocolDemonstrator` (``direct``) in the
recipe's RL harness (the paper's system prompt and tool schemas, which make a full-context step ~5.6K tokens)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from kit.models.tiny import build_tiny_checkpoint
from kit.rl.warmstart import (
    PREFLIGHT_WARM_START,
    PREFLIGHT_WARM_START_TOKENS,
    SMOKE_WARM_START,
    WARM_START_THREADS,
    warm_start_plan,
    warm_start_sizes,
)

MAX_PREFLIGHT_STEPS = 80  # notebook 05's comment: "a preflight 40 + 40 (about 25 s ...)"


def _claim_checks(n=6):
    from kit.eval.vistarget import VERIFY_QUESTION
    from kit.harness.episode import Task

    return [Task(id=f"t{i}_verify", question=VERIFY_QUESTION.format(caption=f"A bridge over river {i}", title=f"River {i}"),
                 answers=["yes" if i % 2 == 0 else "no"], source="vistarget_zim_verify", metadata={"rule_mode": "exact"})
            for i in range(n)]


def _preflight_demonstrations(profile, backend, tmp_path, model_path):
    """Notebook 05's warm-start inputs under ``--profile <profile> --preflight``: the recipe's RL harness, the direct
    protocol demonstrator's trajectories on claim checks, the harness's tool schemas."""
    from kit.harness.loop import Harness
    from kit.harness.runner import run_batch
    from kit.harness.toolsets import config_tool_specs
    from kit.policy.tokens import counter_for
    from kit.profiles import get_profile
    from kit.rl.warmstart import ProtocolDemonstrator

    P = get_profile(profile, preflight=True)
    config = P.harness(**P.recipe_obj().section("rl_rollout"))
    policy = ProtocolDemonstrator(config.protocol, token_counter=counter_for(model_path), direct=True)
    demo = asyncio.run(run_batch(Harness(policy, backend, config, labels=["preflight"]), _claim_checks(),
                                 tmp_path / "demonstrations", progress=False))
    return P, demo, [s.schema() for s in config_tool_specs(config).values()]


def test_profile_sizes():
    assert warm_start_sizes("smoke") == SMOKE_WARM_START == (300, 300, None)  # the smoke run as before
    assert SMOKE_WARM_START.student_at == 450 and SMOKE_WARM_START.total == 600
    for profile in ("paper", "long_mdr", "points_seeker"):
        from kit.profiles import get_profile

        sizes = warm_start_sizes(get_profile(profile, preflight=True))
        assert sizes == PREFLIGHT_WARM_START and sizes.total <= MAX_PREFLIGHT_STEPS
        assert sizes.max_tokens == PREFLIGHT_WARM_START_TOKENS
        # the caller's steps are taken, the preflight's token bound is kept
        assert warm_start_sizes(get_profile(profile, preflight=True), full_steps=5) == (40, 5, PREFLIGHT_WARM_START_TOKENS)
    with pytest.raises(ValueError, match="no warm start"):
        warm_start_sizes("paper")


@pytest.mark.parametrize("profile", ["paper", "points_seeker"])
def test_preflight_warm_start_trains_a_bounded_count(tmp_path, memory_backend, profile):
    model_path = build_tiny_checkpoint("qwen2_vl", vocab="local")
    P, demo, tools = _preflight_demonstrations(profile, memory_backend, tmp_path, model_path)
    sizes = warm_start_sizes(P)
    planned = warm_start_plan(model_path, demo, steps=sizes.steps, full_steps=sizes.full_steps, tools=tools,
                              max_tokens=sizes.max_tokens)
    stages = [st for st, _ in planned["plan"]]
    assert len(stages) == sizes.total <= MAX_PREFLIGHT_STEPS  # optimizer steps
    assert stages.count("full") == sizes.full_steps and all(len(b) == 1 for st, b in planned["plan"] if st == "full")
    assert sum(len(b) for _, b in planned["plan"]) <= 4 * sizes.steps + sizes.full_steps  # samples
    tok = planned["tokens"]
    assert tok["total"] == tok["short"] + tok["full"] <= PREFLIGHT_WARM_START_TOKENS  # tokens
    # the full-context stage really renders the recipe's harness (the paper's long system prompt and tool schemas)
    assert planned["max_example_tokens"] > 2000 and tok["full"] > tok["short"]
    # more full-context steps than the bound allows are refused before any model is loaded, with the count that fits
    fit = (PREFLIGHT_WARM_START_TOKENS - tok["short"]) // (tok["full"] // sizes.full_steps)
    with pytest.raises(ValueError, match=r"over its bound of 300,000 .*-p warm_full_steps \d+") as err:
        warm_start_plan(model_path, demo, steps=sizes.steps, full_steps=fit + 40, tools=tools, max_tokens=sizes.max_tokens)
    assert abs(int(str(err.value).rsplit(" ", 1)[1].rstrip(")")) - fit) <= 1


def test_warm_start_trains_on_bounded_threads(tmp_path, monkeypatch):
    """Two intra-op threads on 2 shared cores made the paper preflight's 80 steps 7x slower (217 s vs 32 s wall):
    the warm start trains with WARM_START_THREADS and gives the caller's setting back."""
    import kit.rl.logprobs as logprobs
    from kit.rl.warmstart import sft_warm_start
    from kit.train.sample_records import sample_record

    seen, real = [], logprobs.token_logprobs

    def counting(model, batch, *a, **k):
        seen.append(torch.get_num_threads())
        return real(model, batch, *a, **k)

    monkeypatch.setattr(logprobs, "token_logprobs", counting)
    path = build_tiny_checkpoint("qwen2_vl", vocab="local")
    recs = [sample_record(tmp_path / f"w{i}", rid=f"r{i}") for i in range(2)]
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        res = sft_warm_start(path, recs, tmp_path / "warm", steps=1, full_steps=1, batch_size=1)
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert seen == [WARM_START_THREADS] * 2 and res["threads"] == WARM_START_THREADS == 1
    assert after == 2  # restored
    assert res["tokens"]["total"] == sum(res["tokens"][k] for k in ("short", "full")) > 0


def test_over_bound_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    from transformers import AutoModelForImageTextToText

    from kit.rl.warmstart import sft_warm_start
    from kit.train.sample_records import sample_record

    def never(*a, **k):
        raise AssertionError("the model was loaded for a plan over its bound")

    monkeypatch.setattr(AutoModelForImageTextToText, "from_pretrained", never)
    path = build_tiny_checkpoint("qwen2_vl", vocab="local")
    recs = [sample_record(tmp_path / "w", rid="r")]
    with pytest.raises(ValueError, match="over its bound of 100"):
        sft_warm_start(path, recs, tmp_path / "warm", steps=2, full_steps=2, max_tokens=100)
