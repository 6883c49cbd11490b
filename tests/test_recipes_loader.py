"""The recipe files are parsed with libyaml's C loader (``yaml.CSafeLoader``, ~5x faster here than the pure-Python
parser), falling back to ``SafeLoader``; both refuse aliases and duplicate keys the same way (issue 30, part 7)."""

from __future__ import annotations

import pytest
import yaml

from kit import recipes


@pytest.fixture(params=["c", "python"])
def loader(request, monkeypatch):
    if request.param == "c":
        if not getattr(yaml, "__with_libyaml__", False):
            pytest.skip("PyYAML built without libyaml")
    else:
        monkeypatch.delattr(yaml, "CSafeLoader")
    return recipes._loader()


def test_the_c_loader_is_used_when_pyyaml_has_it():
    if not getattr(yaml, "__with_libyaml__", False):
        pytest.skip("PyYAML built without libyaml")
    assert issubclass(recipes._loader(), yaml.CSafeLoader)


@pytest.mark.parametrize("text, why", [
    ("a: &x [1, 2]\nb: *x\n", "aliases"),
    ("a: &x {k: 1}\nb: {c: *x}\n", "aliases"),
    ("a: 1\na: 2\n", "duplicate key 'a'"),
])
def test_aliases_and_duplicate_keys_are_refused_by_either_loader(loader, text, why):
    with pytest.raises(yaml.YAMLError, match=why):
        yaml.load(text, Loader=loader)


def test_either_loader_reads_every_recipe_file_alike(loader):
    for name in recipes.recipe_names():
        text = (recipes.RECIPE_DIR / f"{name}.yaml").read_text(encoding="utf-8")
        assert yaml.load(text, Loader=loader) == yaml.load(text, Loader=yaml.SafeLoader), name
