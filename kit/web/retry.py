"""Retries of the live web's HTTP calls: which failures are retried (timeouts, connection errors,
408/429/5xx), exponential back-off with the server's ``Retry-After`` honoured, a wall-clock limit per
attempt, all bounded by the active :func:`kit.web.budget.time_budget`.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx
from tenacity import AsyncRetrying, RetryError, retry_if_exception, stop_after_attempt
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from kit.types import BackendError
from kit.web.budget import _DEADLINE

__all__ = ["RetryConfig", "RetryableHTTPStatus", "is_retryable_status", "parse_retry_after"]


class RetryableHTTPStatus(Exception):
    """An HTTP answer worth retrying (408, 429, 5xx); keeps the status, a body excerpt and the
    server's Retry-After in seconds."""

    def __init__(self, url: str, status: int, body: str, retry_after: float | None):
        self.url, self.status, self.body, self.retry_after = url, status, body, retry_after
        super().__init__(f"HTTP {status} from {url}: {body!r}")


def is_retryable_status(status: int) -> bool:
    """True for 408, 429 and 5xx."""
    return status in (408, 429) or status >= 500


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP-date), ``None`` if unusable."""
    if not value:
        return None
    try:
        return max(0.0, float(value.strip()))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class _Wait(wait_base):
    def __init__(self, initial: float, maximum: float, retry_after_cap: float):
        self.initial, self.maximum, self.cap = initial, maximum, retry_after_cap

    def __call__(self, retry_state) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(exc, RetryableHTTPStatus) and exc.retry_after is not None:
            return min(exc.retry_after, self.cap)
        return min(self.maximum, self.initial * 2 ** (retry_state.attempt_number - 1))


class _StopAtDeadline(stop_base):
    """Stop when the next wait would end past the deadline (tenacity computes the wait first)."""

    def __init__(self, deadline: float | None):
        self.deadline = deadline
        self.fired = False

    def __call__(self, retry_state) -> bool:
        if self.deadline is None:
            return False
        self.fired = time.monotonic() + (retry_state.upcoming_sleep or 0.0) >= self.deadline
        return self.fired


def _retryable(exc: BaseException) -> bool:
    return isinstance(
        exc, (RetryableHTTPStatus, httpx.TimeoutException, httpx.TransportError, asyncio.TimeoutError)
    )


@dataclass
class RetryConfig:
    """Retries on timeouts, connection errors, 408/429/5xx with exponential backoff (seconds);
    Retry-After is honoured up to ``retry_after_cap_s``.

    ``attempt_timeout_s`` (default 60 s; None: unbounded) bounds each attempt as a whole: httpx
    timeouts are per socket operation, so a server that trickles its body never trips them.
    ``max_total_s`` (optional) bounds all attempts and waits of one :meth:`run` together; an active
    :func:`time_budget` bounds them too. A wait that would end past that deadline is not started:
    the call fails at once instead."""

    max_retries: int = 2
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 20.0
    retry_after_cap_s: float = 30.0
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    max_total_s: float | None = None
    attempt_timeout_s: float | None = 60.0

    def deadline(self) -> float | None:
        """Monotonic time by which a :meth:`run` starting now must end (None: unbounded)."""
        ends = [d for d in (_DEADLINE.get(), None if self.max_total_s is None else time.monotonic() + self.max_total_s)
                if d is not None]
        return min(ends) if ends else None

    async def run(self, what: str, fn: Callable[[], Awaitable]):
        """Run ``fn`` with retries; raise :class:`BackendError` (``retryable=True``) once they are
        exhausted or the time budget would be passed. Non-retryable exceptions propagate unchanged."""
        deadline = self.deadline()
        if deadline is not None and deadline <= time.monotonic():
            raise BackendError(f"{what} not attempted: the time budget is used up", retryable=True)
        at_deadline = _StopAtDeadline(deadline)
        retrying = AsyncRetrying(
            retry=retry_if_exception(_retryable),
            stop=stop_after_attempt(self.max_retries + 1) | at_deadline,
            wait=_Wait(self.backoff_initial_s, self.backoff_max_s, self.retry_after_cap_s),
            sleep=self.sleep,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    limit = self.attempt_timeout_s
                    if deadline is not None:
                        limit = min(limit or math.inf, max(deadline - time.monotonic(), 0.001))
                    if limit is None:
                        return await fn()
                    try:  # an attempt may not outlive its own limit or the budget
                        return await asyncio.wait_for(fn(), limit)
                    except asyncio.TimeoutError as e:
                        if deadline is not None and time.monotonic() >= deadline - 0.001:
                            at_deadline.fired = True
                            raise BackendError(f"{what} stopped: the time budget ran out during the attempt",
                                               retryable=True) from e
                        raise  # the attempt's own limit: a timeout like any other, retried
        except RetryError as err:
            last = err.last_attempt.exception()
            n = err.last_attempt.attempt_number
            if isinstance(last, RetryableHTTPStatus):
                detail = f"HTTP {last.status}: {last.body!r}"
            elif isinstance(last, (httpx.TimeoutException, asyncio.TimeoutError)):
                detail = f"timed out ({type(last).__name__})"
            else:
                detail = f"{type(last).__name__}: {last}"
            why = " (the next retry would pass the time budget)" if at_deadline.fired else ""
            raise BackendError(f"{what} failed after {n} attempt(s){why}: {detail}", retryable=True) from last
        raise AssertionError("unreachable")  # pragma: no cover
