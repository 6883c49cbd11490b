"""One retry / back-off policy for every remote call of the kit, and the one tenacity helper that runs it.

:class:`RetryConfig` says how many attempts, which back-off (exponential, capped, optional jitter),
which errors and HTTP statuses are retried, whether the server's ``Retry-After`` is honoured and
whether the active :func:`kit.web.budget.time_budget` (the episode's wall clock) bounds the waits.
:func:`retrying` / :func:`async_retrying` turn it into a tenacity ``Retrying`` / ``AsyncRetrying``;
no other module of the kit imports tenacity (``RetryError``, raised on exhaustion, is re-exported here;
tests/test_retry_policy.py checks it with ``ast``).

Per-caller defaults (each caller's own, kept from before the merge; override with ``retry=``):

==========================================  ========  ==========  =====  ========  =======  ======
caller                                      attempts  back-off s  cap s  Retry-    attempt  budget
                                                                         After s   limit s
==========================================  ========  ==========  =====  ========  =======  ======
fetcher, Serper, reader (``RetryConfig()``)  3         0.5·2^k     20     ≤ 30      60       yes
OpenAI-compatible client                    4         1·2^k       30     ≤ 60      none     no (1)
ZIM downloads (:mod:`kit.web.kiwix`)        4         1·2^k       30     ≤ 30      none     yes
expert (:func:`kit.data.expert.with_retries`) 3       0.5·2^k     5      ―         none     yes
==========================================  ========  ==========  =====  ========  =======  ======

(1) the harness ends an episode whose wall clock runs out during a policy call as ``wall_clock``;
failing the call early would relabel it ``error``.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field
from tenacity import AsyncRetrying, RetryError, Retrying, retry_if_exception, stop_after_attempt
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from kit.types import BackendError
from kit.web.budget import _DEADLINE

__all__ = ["RetryConfig", "RetryError", "RetryableHTTPStatus", "async_retrying", "budget_stopped", "exhausted_detail",
           "is_retryable_status", "parse_retry_after", "retrying"]

_MAX_DOUBLINGS = 64  # back-off doublings: 2**64 times any positive initial wait is past every cap


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


# Transient failures of an HTTP call: the default ``retry_on``.
HTTP_TRANSIENT: tuple[type[BaseException], ...] = (
    RetryableHTTPStatus, httpx.TimeoutException, httpx.TransportError, asyncio.TimeoutError)


class RetryConfig(BaseModel):
    """The retry policy of one caller (frozen; :meth:`with_` makes a changed, validated copy).

    Fields (seconds throughout):
        max_retries: retries after the first attempt (attempts = ``max_retries + 1``).
        backoff_initial_s / backoff_max_s: wait before retry ``k`` (1-based) is
            ``min(backoff_max_s, backoff_initial_s · 2^(k−1))`` plus ``uniform(0, jitter_s)``.
        retry_after_cap_s: a server's ``Retry-After`` (an error's ``retry_after`` attribute) replaces
            the back-off, capped at this, when ``honour_retry_after``.
        retry_on: exception types that are retried; one whose ``retryable`` attribute is False never is.
        retry_statuses: HTTP statuses a caller turns into :class:`RetryableHTTPStatus`; None: 408, 429, 5xx.
        honour_time_budget: an active :func:`~kit.web.budget.time_budget` bounds attempts and waits:
            a wait that would end past it is not started (the call fails at once).
        max_total_s: optional bound on all attempts and waits of one call together.
        attempt_timeout_s: wall-clock limit of one attempt in :meth:`run` (None: unbounded); httpx
            timeouts are per socket operation, so a server that trickles its body never trips them.
        sleep / sync_sleep: how the async / sync helper waits (tests record the delays).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    max_retries: int = Field(default=2, ge=0)
    backoff_initial_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=20.0, ge=0)
    jitter_s: float = Field(default=0.0, ge=0)
    retry_after_cap_s: float = Field(default=30.0, ge=0)
    honour_retry_after: bool = True
    retry_on: tuple[type[BaseException], ...] = HTTP_TRANSIENT
    retry_statuses: frozenset[int] | None = None
    honour_time_budget: bool = True
    max_total_s: float | None = Field(default=None, gt=0)
    attempt_timeout_s: float | None = Field(default=60.0, gt=0)
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    sync_sleep: Callable[[float], None] = time.sleep

    @property
    def attempts(self) -> int:
        """Attempts in all (first one included)."""
        return self.max_retries + 1

    def with_(self, **changes: Any) -> RetryConfig:
        """A validated copy with ``changes`` applied; ``None`` values are ignored (caller shorthands)."""
        return type(self).model_validate({**dict(self), **{k: v for k, v in changes.items() if v is not None}})

    def retries_status(self, status: int) -> bool:
        """Whether an HTTP answer with ``status`` is retried."""
        return is_retryable_status(status) if self.retry_statuses is None else status in self.retry_statuses

    def is_retryable(self, exc: BaseException) -> bool:
        """Whether ``exc`` is retried: an instance of ``retry_on`` not marked ``retryable=False``."""
        return isinstance(exc, self.retry_on) and getattr(exc, "retryable", True) is not False

    def wait_s(self, retry: int, exc: BaseException | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1-based) after ``exc``."""
        after = getattr(exc, "retry_after", None) if self.honour_retry_after else None
        if after is not None:
            return min(float(after), self.retry_after_cap_s)
        # cap the exponent first: 2 ** 1024 as a float overflows (OverflowError) long before the min() applies
        wait = min(self.backoff_max_s, self.backoff_initial_s * 2.0 ** min(max(retry - 1, 0), _MAX_DOUBLINGS))
        return wait + random.uniform(0.0, self.jitter_s) if self.jitter_s else wait

    def deadline(self) -> float | None:
        """Monotonic time by which a call starting now must end (None: unbounded)."""
        ends: list[float] = [] if self.max_total_s is None else [time.monotonic() + self.max_total_s]
        budget = _DEADLINE.get() if self.honour_time_budget else None
        if budget is not None:
            ends.append(budget)
        return min(ends) if ends else None

    async def run(self, what: str, fn: Callable[[], Awaitable]):
        """Run ``fn`` with retries; raise :class:`BackendError` (``retryable=True``) once they are
        exhausted or the time budget would be passed. Non-retryable exceptions propagate unchanged."""
        r = _build(_KitAsyncRetrying, self, self.sleep, False)
        deadline = r.budget_stop.deadline
        if deadline is not None and deadline <= time.monotonic():
            raise BackendError(f"{what} not attempted: the time budget is used up", retryable=True)
        try:
            async for attempt in r:
                with attempt:
                    limit = self.attempt_timeout_s
                    if deadline is not None:
                        limit = min(limit or math.inf, max(deadline - time.monotonic(), 0.001))
                    if limit is None:
                        return await fn()
                    try:  # an attempt may not outlive its own limit or the budget
                        return await asyncio.wait_for(fn(), limit)
                    except TimeoutError as e:
                        if deadline is not None and time.monotonic() >= deadline - 0.001:
                            r.budget_stop.fired = True
                            raise BackendError(f"{what} stopped: the time budget ran out during the attempt",
                                               retryable=True) from e
                        raise  # the attempt's own limit: a timeout like any other, retried
        except RetryError as err:
            last = err.last_attempt.exception()
            why = " (the next retry would pass the time budget)" if budget_stopped(r) else ""
            raise BackendError(f"{what} failed after {err.last_attempt.attempt_number} attempt(s){why}: "
                               f"{exhausted_detail(last)}", retryable=True) from last
        raise AssertionError("unreachable")  # pragma: no cover


class _Wait(wait_base):
    def __init__(self, policy: RetryConfig):
        self.policy = policy

    def __call__(self, retry_state) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        return self.policy.wait_s(retry_state.attempt_number, exc)


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


class _KitRetrying(Retrying):
    budget_stop: _StopAtDeadline  # read by budget_stopped()


class _KitAsyncRetrying(AsyncRetrying):
    budget_stop: _StopAtDeadline


def _build(cls, policy: RetryConfig, sleep, reraise: bool):
    at_deadline = _StopAtDeadline(policy.deadline())
    r = cls(retry=retry_if_exception(policy.is_retryable), stop=stop_after_attempt(policy.attempts) | at_deadline,
            wait=_Wait(policy), sleep=sleep, reraise=reraise)
    r.budget_stop = at_deadline
    return r


def retrying(policy: RetryConfig, *, reraise: bool = False) -> Retrying:
    """A tenacity ``Retrying`` (synchronous) that applies ``policy``; the deadline is fixed now.

    ``reraise=False``: exhaustion raises ``tenacity.RetryError`` (``last_attempt`` holds the last
    error); ``True``: the last error itself. A non-retryable error always propagates unchanged."""
    return _build(_KitRetrying, policy, policy.sync_sleep, reraise)


def async_retrying(policy: RetryConfig, *, reraise: bool = False) -> AsyncRetrying:
    """The ``AsyncRetrying`` counterpart of :func:`retrying` (waits with ``policy.sleep``)."""
    return _build(_KitAsyncRetrying, policy, policy.sleep, reraise)


def budget_stopped(r: Retrying | AsyncRetrying) -> bool:
    """Whether the time budget (not the attempt count) ended a :func:`retrying` / :func:`async_retrying`."""
    return bool(getattr(getattr(r, "budget_stop", None), "fired", False))


def exhausted_detail(exc: BaseException | None) -> str:
    """A short account of the last error of an exhausted retry, for the caller's own error message."""
    if isinstance(exc, RetryableHTTPStatus):
        return f"HTTP {exc.status}: {exc.body!r}"
    if isinstance(exc, (httpx.TimeoutException, asyncio.TimeoutError)):
        return f"timed out ({type(exc).__name__})"
    return f"{type(exc).__name__}: {exc}"
