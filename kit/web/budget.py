"""Time budget shared by all retries of one task (e.g. one episode of the harness).

Its own module, with the standard library only, so that the harness can set the episode's budget
without importing the HTTP stack; :class:`kit.web.retry.RetryConfig` and
:class:`kit.web.fetch.HttpFetcher` read it.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator

__all__ = ["time_budget"]

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("kit_web_deadline", default=None)


@contextlib.contextmanager
def time_budget(seconds: float) -> Iterator[float]:
    """Within this block (and asyncio tasks started in it), every :class:`RetryConfig` and
    :class:`HttpFetcher` attempt and retry wait ends by ``now + seconds`` (monotonic clock), or by an
    enclosing budget's end if that is sooner. Yields the deadline. A harness sets it once per episode
    so that backoff never sleeps past the episode's wall-clock budget.

    Raises:
        ValueError: ``seconds`` is not positive.
    """
    if not seconds > 0:
        raise ValueError(f"time budget must be > 0 seconds, got {seconds!r}")
    deadline = time.monotonic() + seconds
    outer = _DEADLINE.get()
    token = _DEADLINE.set(deadline if outer is None else min(deadline, outer))
    try:
        yield _DEADLINE.get()  # type: ignore[misc]
    finally:
        _DEADLINE.reset(token)
