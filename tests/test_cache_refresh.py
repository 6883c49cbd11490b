"""Optional periodic refresh of the exact-match tool cache (WeAgent §3.2 "Cache-backed search":
"Periodic refreshes prevent the pool from becoming a fixed offline corpus"), with a fake clock."""

from __future__ import annotations

import asyncio

import pytest

from kit.types import BackendError, SearchHit
from kit.web import open_tool_cache
from kit.web.cache import CachedBackend, ToolCache


class Clock:
    def __init__(self, t: float = 1_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


class Counting:
    """A backend whose answer changes with every live call (so a refetch is visible)."""

    name = "counting"

    def __init__(self):
        self.live = 0
        self.fail = False

    async def search(self, query, num):
        if self.fail:
            raise BackendError("upstream 503", retryable=True)
        self.live += 1
        return [SearchHit(title=f"v{self.live}", url="https://example.org/a")]


def _title(backend) -> str:
    return asyncio.run(backend.search("Eiffel  Tower", 1))[0].title


def test_entries_older_than_refresh_after_are_refetched_and_replaced(tmp_path):
    clock, live = Clock(), Counting()
    cache = open_tool_cache(tmp_path / "c.sqlite", "readwrite", refresh_after_s=3600, clock=clock)
    b = CachedBackend(live, cache)
    assert _title(b) == "v1"
    clock.t += 3599
    assert _title(b) == "v1" and live.live == 1  # still fresh: served from the cache
    clock.t += 2
    assert _title(b) == "v2" and live.live == 2  # stale: refetched ...
    assert len(cache) == 1 and cache.stats["refreshed"] == 1  # ... and replaced, not added
    clock.t += 10
    assert _title(b) == "v2" and live.live == 2  # the replacement is fresh again (its own time)


def test_default_never_refreshes(tmp_path):
    clock, live = Clock(), Counting()
    b = CachedBackend(live, ToolCache(tmp_path / "c.sqlite", clock=clock))
    _title(b)
    clock.t += 10 ** 9
    assert _title(b) == "v1" and live.live == 1


def test_readonly_snapshot_never_refreshes(tmp_path):
    clock, live = Clock(), Counting()
    rw = ToolCache(tmp_path / "c.sqlite", clock=clock)
    _title(CachedBackend(live, rw))
    rw.snapshot(tmp_path / "snap.sqlite")
    rw.close()
    clock.t += 10 ** 6
    ro = open_tool_cache(tmp_path / "snap.sqlite", "readonly", refresh_after_s=1, clock=clock)
    assert _title(CachedBackend(live, ro)) == "v1" and live.live == 1 and ro.stats["refreshed"] == 0


def test_failed_refresh_keeps_the_old_entry(tmp_path):
    """A refetch that fails is not cached; the stale entry stays for the next try (and the error is
    the tool's, as for any live miss)."""
    clock, live = Clock(), Counting()
    cache = ToolCache(tmp_path / "c.sqlite", refresh_after_s=60, clock=clock)
    b = CachedBackend(live, cache)
    _title(b)
    clock.t += 61
    live.fail = True
    with pytest.raises(BackendError):
        _title(b)
    assert len(cache) == 1
    live.fail = False
    assert _title(b) == "v2"


@pytest.mark.parametrize("bad", [0, -5, float("nan"), float("inf"), "3600", True])
def test_bad_refresh_after_is_refused(tmp_path, bad):
    with pytest.raises(ValueError, match="refresh_after_s"):
        ToolCache(tmp_path / "c.sqlite", refresh_after_s=bad)
