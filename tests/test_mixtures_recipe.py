"""POINTS-Seeker's Agentic Seeding and SFT mixtures are recipe rows (paper values live only in the recipes)."""

from pathlib import Path

from kit.recipes import load_recipe
from kit.train.mixtures import MIXTURES, load_mixture

ROOT = Path(__file__).resolve().parents[1]


def test_points_seeker_mixtures_are_cited_recipe_rows_read_by_the_code():
    r = load_recipe("points_seeker")
    for name, key, ref in (("points_seeker_seeding", "mixtures.seeding", "A.2"), ("points_seeker_sft", "mixtures.sft", "A.3")):
        e = r.entries[key]
        assert ref in e.source and e.kit, key
        assert MIXTURES[name] == f"points_seeker:{key}"
        mix = load_mixture(name, replace=_filled(e.value))
        assert [s["kind"] for s in e.value["sources"]] == [s.kind for s in mix.sources] and mix.size == e.value["size"]
    assert all(s["note"].startswith("kit: ") for s in r.get("mixtures.seeding")["sources"])  # unverified notes
    assert not list((ROOT / "kit" / "train").glob("points_seeker_*.json"))
    page = (ROOT / "docs" / "recipes.md").read_text(encoding="utf-8")
    assert "Toucan-1.5M" in page and "Honey-Data-1M" in page


def _filled(spec):  # REQUIRED: sources replaced as a user would (load_mixture refuses them otherwise)
    return {s["name"]: {"name": f"me/{i}"} for i, s in enumerate(spec["sources"]) if s["name"].startswith("REQUIRED:")}
