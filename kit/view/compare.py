"""Item-by-item comparison of two runs, or of two configurations inside one run (docs/viewer.md).

Items are matched by key: (benchmark, configuration, episode id, repeat) across two runs, or (run,
benchmark, episode id, repeat) across two configurations. An item's outcome is its verdict, the one the
run's summary counts (:mod:`kit.view.verdict`): the judged correctness and score of an evaluation item
(``ItemResult.correct`` / ``score``, with the cited-image match ``M_i`` of WeAgent §5.2), else the rule
answer match (``kit.eval.judges.rule_match``, contains / exact) of an episode with reference answers, else
its episode status. A verdict that flips between two verdicts of the same kind is a regression or an
improvement; rows whose outcome changed come first (regressions, then improvements, then other changes),
then items present on one side only, then unchanged ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from kit.view.load import Item
from kit.view.verdict import NONE

CHANGE_ORDER = {"regressed": 0, "improved": 1, "changed": 2, "only A": 3, "only B": 4, "same": 5}


def outcome(item: Item | None) -> tuple[object, ...] | None:
    """(verdict source, correct, exact, score, image match) for an item with a verdict, else (status,);
    None for a missing item."""
    if item is None:
        return None
    v = item.verdict
    if v.source != NONE:
        return (*v.key, item.match)
    return (item.status,)


@dataclass
class Pair:
    key: tuple[object, ...]
    a: Item | None
    b: Item | None

    @property
    def change(self) -> str:
        """``regressed`` / ``improved`` (the verdict flipped: judged correct, or rule answer match, on both
        sides), ``changed`` (another difference: score, exact match, image match, status, or verdicts of two
        kinds), ``only A`` / ``only B``, or ``same``."""
        if self.a is None:
            return "only B"
        if self.b is None:
            return "only A"
        va, vb = self.a.verdict, self.b.verdict
        if va.source == vb.source != NONE and va.correct is not None and vb.correct is not None \
                and va.correct != vb.correct:
            return "improved" if vb.correct else "regressed"
        return "same" if outcome(self.a) == outcome(self.b) else "changed"


def _pairs(a: dict[tuple[object, ...], Item], b: dict[tuple[object, ...], Item]) -> list[Pair]:
    keys = list(dict.fromkeys([*a, *b]))
    pairs = [Pair(k, a.get(k), b.get(k)) for k in keys]
    return sorted(pairs, key=lambda p: (CHANGE_ORDER[p.change], tuple(str(x) for x in p.key)))


def _index(items: list[Item], key) -> dict[tuple[object, ...], Item]:
    out: dict[tuple[object, ...], Item] = {}
    for it in items:
        k = key(it)
        if k in out:
            raise ValueError(f"two items share the comparison key {k!r}: {out[k].source} and {it.source}")
        out[k] = it
    return out


def compare_runs(a: list[Item], b: list[Item]) -> list[Pair]:
    """Pairs of two runs matched by (benchmark, configuration, episode id, repeat), changed first.

    Raises:
        ValueError: two items of one run share a key (the comparison would be ambiguous)."""
    return _pairs(_index(a, lambda i: i.key), _index(b, lambda i: i.key))


def compare_configurations(items: list[Item], config_a: str, config_b: str) -> list[Pair]:
    """Pairs of configuration ``config_a`` vs ``config_b`` inside the same run(s), matched by (run,
    benchmark, episode id, repeat), changed first.

    Raises:
        ValueError: a configuration has no item, or two items share a key."""
    sides = []
    for c in (config_a, config_b):
        its = [i for i in items if i.configuration == c]
        if not its:
            known = sorted({i.configuration for i in items})
            raise ValueError(f"configuration {c!r} has no episode; the run has: {', '.join(known)}")
        sides.append(_index(its, lambda i: (i.run, i.benchmark, i.episode_id, i.repeat)))
    return _pairs(sides[0], sides[1])


def change_counts(pairs: list[Pair]) -> dict[str, int]:
    """Number of pairs per change kind, in :data:`CHANGE_ORDER`."""
    out = {k: 0 for k in CHANGE_ORDER}
    for p in pairs:
        out[p.change] += 1
    return {k: v for k, v in out.items() if v}


__all__ = ["CHANGE_ORDER", "Pair", "change_counts", "compare_configurations", "compare_runs", "outcome"]
