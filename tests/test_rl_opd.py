"""On-policy distillation losses (per-token reverse KL) and the endpoint teacher's wire format."""

from __future__ import annotations

import json
import math

import httpx
import pytest
import torch

from kit.rl.opd import (
    EndpointTeacher,
    TeacherError,
    reverse_kl_full,
    reverse_kl_sampled,
    row_index_of,
)


def test_reverse_kl_full_hand_value_and_per_trajectory_mean():
    ps = torch.tensor([[0.5, 0.5], [0.9, 0.1], [0.5, 0.5]])
    pt = torch.tensor([[0.25, 0.75], [0.9, 0.1], [0.5, 0.5]])
    s = ps.log().requires_grad_(True)
    loss, kl = reverse_kl_full(s, pt.log(), torch.tensor([0, 0, 1]), 2)
    k0 = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)  # 0.1438
    # trajectory 0: mean(k0, 0); trajectory 1: 0; loss = mean over trajectories
    assert float(loss) == pytest.approx((k0 / 2 + 0.0) / 2, rel=1e-5)
    assert kl == pytest.approx(k0 / 3, rel=1e-5)
    with pytest.raises(ValueError, match="vocabularies"):
        reverse_kl_full(s, torch.zeros(3, 5))


def test_reverse_kl_sampled_gradient_is_score_function():
    s = torch.tensor([-0.5, -1.0], requires_grad=True)
    t = torch.tensor([-1.0, -1.0])
    loss, kl = reverse_kl_sampled(s, t)
    loss.backward()
    assert kl == pytest.approx(0.25)
    assert s.grad.tolist() == pytest.approx([0.5 / 2, 0.0])  # d/ds mean(sg(s - t) * s)
    assert row_index_of(torch.tensor([[False, True], [True, True]])).tolist() == [0, 1, 1]


async def test_endpoint_teacher_reads_prompt_logprobs():
    seen = {}

    def handler(request: httpx.Request):
        body = json.loads(request.content)
        seen.update(body)
        ids = body["prompt"]
        plp = [None] + [{str(t): {"logprob": -0.1 * (i + 1), "rank": 1}} for i, t in enumerate(ids[1:])]
        return httpx.Response(200, json={"choices": [{"text": "", "prompt_logprobs": plp}]})

    tea = EndpointTeacher("http://teacher/v1", "t", transport=httpx.MockTransport(handler))
    out = await tea.prompt_logprobs([5, 6, 7])
    assert out == [None, pytest.approx(-0.1), pytest.approx(-0.2)]
    assert seen["prompt_logprobs"] == 0 and seen["max_tokens"] == 1

    class Ex:
        id, pixel_values, input_ids = "e", None, torch.tensor([5, 6, 7])

    lp = await tea.sampled_logprobs(Ex())
    assert lp.tolist() == pytest.approx([-0.1, -0.2])
    Ex.pixel_values = torch.zeros(1)
    with pytest.raises(TeacherError, match="text-only"):
        await tea.sampled_logprobs(Ex())
    bad = EndpointTeacher("http://teacher/v1", "t", transport=httpx.MockTransport(lambda r: httpx.Response(500)))
    with pytest.raises(TeacherError, match="endpoint failed"):
        await bad.prompt_logprobs([1, 2])
    no_lp = EndpointTeacher("http://teacher/v1", "t",
                            transport=httpx.MockTransport(lambda r: httpx.Response(200, json={"choices": [{}]})))
    with pytest.raises(TeacherError, match="prompt_logprobs"):
        await no_lp.prompt_logprobs([1, 2])
