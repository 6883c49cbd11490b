"""Issue 27 part 6, the small rules: a tool call carrying two different argument objects is an invalid call with
both readings named (never one chosen silently); a Jina-reader 200 whose header says the target returned an error is
a structured fetch error, never evidence; a NaN or ±inf at a masked position leaves every loss finite."""

from __future__ import annotations

import math

import httpx
import pytest
import torch

from kit.harness.parsing import parse_turn
from kit.rl.logprobs import masked_mean
from kit.rl.objective import grpo_loss, gspo_loss, sequence_log_ratio, token_nll_loss
from kit.web.live import SerperBackend, reader_target_error
from kit.web.retry import RetryConfig


def test_two_different_argument_objects_are_an_invalid_call_naming_both():
    text = ('<tool_call>{"name": "web_search", "arguments": {"query": "Lisbon"}, '
            '"parameters": {"query": "Porto"}}</tool_call>')
    call = parse_turn(text).calls[0]
    assert call.error == "bad_arguments" and call.arguments is None
    assert '"Lisbon"' in call.message and '"Porto"' in call.message
    same = ('<tool_call>{"name": "web_search", "arguments": {"query": "Lisbon"}, '
            '"parameters": {"query": "Lisbon"}}</tool_call>')
    assert parse_turn(same).calls[0].arguments == {"query": "Lisbon"}  # one reading: nothing to choose
    only = '<tool_call>{"name": "web_search", "parameters": {"query": "Porto"}}</tool_call>'
    assert parse_turn(only).calls[0].arguments == {"query": "Porto"}


NOT_FOUND = ("Title: \n\nURL Source: https://example.org/gone\n\nWarning: Target URL returned error 404: Not Found\n\n"
             "Markdown Content:\nUnknown.")


def test_reader_target_error_is_read_from_the_header_only():
    assert reader_target_error(NOT_FOUND) == "Warning: Target URL returned error 404: Not Found"
    about = "Title: HTTP 404\n\nURL Source: https://a.org\n\nMarkdown Content:\nWarning: Target URL returned error 404"
    assert reader_target_error(about) is None  # a page about error pages is a page
    assert reader_target_error("Title: A\n\nWarning: Target URL returned error 302\n\nMarkdown Content:\nx") is None


async def test_a_reader_answer_for_a_failed_target_is_a_fetch_error_not_evidence():
    from kit.types import BackendError
    from kit.web.fetch import HttpFetcher

    async def resolver(host, port):
        return ["93.184.216.34"]

    async def no_sleep(_s):
        return None

    retry = RetryConfig(max_retries=0, backoff_initial_s=0.0, sleep=no_sleep)
    fetcher = HttpFetcher(transport=httpx.MockTransport(lambda r: httpx.Response(500)), resolver=resolver, retry=retry)
    backend = SerperBackend(api_key="k", transport=httpx.MockTransport(lambda r: httpx.Response(200, text=NOT_FOUND)),
                            fetcher=fetcher, reader_base_url="https://r.jina.ai/", retry=retry)
    with pytest.raises(BackendError, match="Target URL returned error 404"):
        await backend.fetch("https://example.org/gone")


def _poisoned():
    new = torch.tensor([[-1.0, -2.0, float("nan")], [-0.5, float("-inf"), float("inf")]], requires_grad=True)
    old = torch.tensor([[-1.1, -2.0, float("nan")], [-0.4, -1.0, float("-inf")]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    return new, old, mask


@pytest.mark.parametrize("loss", [gspo_loss, grpo_loss])
def test_nan_and_inf_at_masked_positions_leave_the_loss_and_gradient_finite(loss):
    new, old, mask = _poisoned()
    value, stats = loss(new, old, mask, [1.0, -1.0], [0.5, 0.5], eps_lo=0.2, eps_hi=0.2)
    value.backward()
    assert math.isfinite(float(value.detach())) and math.isfinite(stats["ratio_mean"])
    assert torch.isfinite(new.grad).all()
    clean_new = torch.where(mask, new.detach(), torch.zeros(()))
    clean_old = torch.where(mask, old, torch.zeros(()))
    ref, _ = loss(clean_new, clean_old, mask, [1.0, -1.0], [0.5, 0.5], eps_lo=0.2, eps_hi=0.2)
    assert float(value.detach()) == pytest.approx(float(ref))  # the same loss as with the masked positions zeroed


def test_masked_means_ignore_what_is_off_the_mask():
    new, old, mask = _poisoned()
    assert torch.isfinite(sequence_log_ratio(new, old, mask)).all()
    assert math.isfinite(float(token_nll_loss(new, mask)))
    assert masked_mean(new.detach(), mask) == pytest.approx((-1.0 - 2.0 - 0.5) / 3)
