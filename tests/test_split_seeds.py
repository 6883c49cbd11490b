"""Characterization of :func:`kit.data.seeds.stable_seeds` (issue 30 part 7: split into steps, behaviour unchanged).

One archive, a web whose fetch fails for some pages, and a fact reader that rejects, fails (expert and policy)
or reads: a sequence of runs into shared folders exercises the limit, the fact quota, ``max_candidates`` (its
stop message), resumes (all-decided articles, decided candidates counting towards the limit) and the argument
checks. ``EXPECTED`` was recorded with the function before the split; the counts and the order of decisions
must stay the same."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

RAY_ZIM = "wikipedia_en_ray_charles_2015-06"
AS_OF = "2026-01-01T00:00:00+00:00"
RUNS: list[tuple[str, dict[str, Any]]] = [
    ("a", {"limit": 10, "max_fact_share": 0.4}), ("a", {"limit": 25, "max_fact_share": 0.4}),
    ("a", {"limit": 25, "max_fact_share": 0.4}),
    ("b", {"max_candidates": 7}), ("b", {"max_candidates": 12, "limit": 4}), ("b", {"max_candidates": 30}),
    ("c", {"limit": 12, "reader": True, "max_candidates": 40}), ("c", {"limit": 30, "reader": True}),
    ("d", {"limit": 8, "max_images_per_page": 1}), ("e", {"limit": 1}), ("e", {"limit": 1, "max_candidates": 1}),
]
BAD_ARGS = [{"max_fact_share": 0.5}, {"max_candidates": 0}, {"limit": 3, "max_fact_share": 1.5}]


def _h(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest(), 16)


def _digest(items: list[Any]) -> str:
    return hashlib.sha256(repr(items).encode()).hexdigest()[:16]


class _FlakyWeb:
    """Fails the fetch of one page in seven (``page_unreachable``)."""

    def __init__(self, web):
        self.web, self.name = web, "flaky"

    async def fetch(self, url):
        from kit.types import BackendError

        if _h(url) % 7 == 0:
            raise BackendError(f"boom {url}")
        return await self.web.fetch(url)


class _Reader:
    """A fact reader that fails (expert, policy), rejects or reads the pixel fact, by the image's hash."""

    name, attempts = "fake", 2

    def __init__(self, seeds_module):
        self.mod = seeds_module

    async def read(self, content, *, title, position, fields):
        from kit.data.expert import ExpertError
        from kit.types import PolicyError

        k = _h(hashlib.sha256(content).hexdigest()) % 6
        if k == 0:
            raise ExpertError("nope", reason="expert_unparsable")
        if k == 1:
            raise PolicyError("down")
        if k == 2:
            raise self.mod.SeedError("fact_rejected", "x")
        return self.mod.pixel_fact(content)


async def run_scenarios(seeds_module, web, graph, root) -> dict[str, Any]:
    """Every run of ``RUNS`` and ``BAD_ARGS`` through ``seeds_module.stable_seeds``, summarized."""
    out: dict[str, Any] = {}
    flaky = _FlakyWeb(web)
    for i, (folder, kw) in enumerate(RUNS):
        kw = dict(kw)
        reader = _Reader(seeds_module) if kw.pop("reader", False) else None
        f = await seeds_module.stable_seeds(flaky, graph, root / folder, as_of=AS_OF, fact_reader=reader, **kw)
        c = f.counts()
        decisions = ([s.id for s in f.accepted.read()], [(r.id, r.reason, r.detail) for r in f.rejected.read()],
                     [(x.id, x.error, x.attempts) for x in f.failed.read()])
        out[f"{i}{folder}"] = (f.stopped, (c["accepted"], c["rejected"], c["failed"]), c["reasons"],
                               c.get("failures"), seeds_module.seed_summary(f)["facts"], _digest(list(decisions)))
    for bad in BAD_ARGS:
        with pytest.raises(ValueError) as e:
            await seeds_module.stable_seeds(flaky, graph, root / "z", **bad)
        out[repr(bad)] = str(e.value)
    return out


EXPECTED: dict[str, Any] = {
    '0a': (None, (10, 4, 0), {'ambiguous_orientation': 1, 'ambiguous_tone': 3}, None,
            {'colour, square': 3,
             'black-and-white, portrait': 2,
             'colour, portrait': 2,
             'black-and-white, landscape': 2,
             'black-and-white, square': 1},
            '153d4115325a11f0'),
    '1a': (None, (25, 21, 0),
            {'ambiguous_orientation': 5,
             'ambiguous_tone': 5,
             'fact_quota_full': 5,
             'page_unreachable': 5,
             'unstable_fact': 1},
            None,
            {'colour, square': 10,
             'black-and-white, portrait': 2,
             'colour, portrait': 7,
             'black-and-white, landscape': 3,
             'black-and-white, square': 1,
             'colour, landscape': 2},
            'bc5936176325d82a'),
    '2a': (None, (25, 21, 0),
            {'ambiguous_orientation': 5,
             'ambiguous_tone': 5,
             'fact_quota_full': 5,
             'page_unreachable': 5,
             'unstable_fact': 1},
            None,
            {'colour, square': 10,
             'black-and-white, portrait': 2,
             'colour, portrait': 7,
             'black-and-white, landscape': 3,
             'black-and-white, square': 1,
             'colour, landscape': 2},
            'bc5936176325d82a'),
    '3b': ('max_candidates: 7 candidates decided', (6, 1, 0), {'ambiguous_tone': 1}, None,
            {'colour, square': 1,
             'black-and-white, portrait': 2,
             'colour, portrait': 2,
             'black-and-white, landscape': 1},
            '667cf39202709ca1'),
    '4b': (None, (6, 1, 0), {'ambiguous_tone': 1}, None,
            {'colour, square': 1,
             'black-and-white, portrait': 2,
             'colour, portrait': 2,
             'black-and-white, landscape': 1},
            '667cf39202709ca1'),
    '5b': ('max_candidates: 30 candidates decided', (18, 12, 0),
            {'ambiguous_orientation': 3, 'ambiguous_tone': 4, 'page_unreachable': 4, 'unstable_fact': 1}, None,
            {'colour, square': 10,
             'black-and-white, portrait': 2,
             'colour, portrait': 3,
             'black-and-white, landscape': 2,
             'black-and-white, square': 1},
            '0f408570932f0c65'),
    '6c': ('max_candidates: 40 candidates decided', (10, 20, 10),
            {'ambiguous_orientation': 4, 'ambiguous_tone': 3, 'fact_rejected': 8, 'page_unreachable': 5},
            {'expert_unparsable': 5, 'policy': 5},
            {'black-and-white, portrait': 1,
             'colour, portrait': 3,
             'black-and-white, landscape': 1,
             'colour, square': 4,
             'black-and-white, square': 1},
            'fb477cf433a7f16c'),
    '7c': (None, (30, 28, 17),
            {'ambiguous_orientation': 4,
             'ambiguous_tone': 4,
             'fact_rejected': 14,
             'page_unreachable': 5,
             'unstable_fact': 1},
            {'expert_unparsable': 9, 'policy': 8},
            {'black-and-white, portrait': 1,
             'colour, portrait': 7,
             'black-and-white, landscape': 3,
             'colour, square': 16,
             'black-and-white, square': 1,
             'colour, landscape': 2},
            'e638bc70bb6c3fc8'),
    '8d': (None, (8, 4, 0), {'ambiguous_orientation': 1, 'ambiguous_tone': 3}, None,
            {'colour, square': 3,
             'black-and-white, portrait': 1,
             'colour, portrait': 1,
             'black-and-white, landscape': 2,
             'black-and-white, square': 1},
            'f0741cf74ec61120'),
    '9e': (None, (1, 0, 0), {}, None, {'colour, square': 1}, '0fd9834323af39f1'),
    '10e': (None, (1, 0, 0), {}, None, {'colour, square': 1}, '0fd9834323af39f1'),
    "{'max_fact_share': 0.5}": 'max_fact_share must be in (0, 1] and needs a limit',
    "{'max_candidates': 0}": 'max_candidates must be >= 1, got 0',
    "{'limit': 3, 'max_fact_share': 1.5}": 'max_fact_share must be in (0, 1] and needs a limit',
}


@pytest.fixture(scope="module")
def ray(data_dir):
    from kit.data.linkgraph import LinkGraph
    from kit.data.pipeline import zim_paths
    from kit.web.zim import LocalZimWeb

    paths = zim_paths(data_dir, [RAY_ZIM])
    return LocalZimWeb(paths), LinkGraph.build(LocalZimWeb(paths, keep_links=True))


async def test_stable_seeds_decisions_are_unchanged(tmp_path, ray):
    import kit.data.seeds as seeds

    web, graph = ray
    assert await run_scenarios(seeds, web, graph, tmp_path) == EXPECTED
