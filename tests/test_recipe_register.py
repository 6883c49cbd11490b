"""A recipe of your own (kit.recipes.register_recipe): loadable by name, validated, never shadowing a paper's."""

from __future__ import annotations

import pytest

import kit.recipes as R
from kit.recipes import RecipeError, load_recipe, paper_default, register_recipe


@pytest.fixture(autouse=True)
def _forget():
    yield
    R._USER_RECIPES.clear()
    R._clear_caches()


def _write(tmp_path, body, name="mine.yaml"):
    p = tmp_path / name
    p.write_text(body)
    return p


GOOD = "name: mine\nextends: weagent_mmsearch\nharness:\n  max_turns: {value: 30, kit: 'ablation'}\n"


def test_registered_recipe_extends_and_overrides(tmp_path):
    rec = register_recipe(_write(tmp_path, GOOD))
    assert rec.harness().max_turns == 30 and load_recipe("mine") is rec
    assert paper_default("harness.max_turns", "mine") == 30
    assert paper_default("rl.lr", "mine") == paper_default("rl.lr")  # inherited unchanged
    assert load_recipe("weagent_mmsearch").harness().max_turns == 20  # the paper recipe is untouched


@pytest.mark.parametrize("body,msg", [
    ("name: weagent_mmsearch\n", "shipped recipe"),
    ("name: 'bad name'\n", "letters, digits"),
    ("- a list\n", "not a recipe mapping"),
    ("name: mine\nextends: weagent_mmsearch\nharness:\n  max_turnz: {value: 3, kit: x}\n", "max_turns"),
    ("name: mine\nextends: weagent_mmsearch\nharness:\n  max_turns: {value: 3}\n", "source"),
])
def test_bad_files_are_refused_and_leave_nothing_registered(tmp_path, body, msg):
    with pytest.raises(RecipeError, match=msg):
        register_recipe(_write(tmp_path, body))
    assert "mine" not in R._USER_RECIPES
    with pytest.raises(RecipeError, match="unknown recipe"):
        load_recipe("mine")


def test_a_second_file_under_the_same_name_needs_replace(tmp_path):
    register_recipe(_write(tmp_path, GOOD))
    other = _write(tmp_path, GOOD.replace("30", "25"), "other.yaml")
    with pytest.raises(RecipeError, match="replace=True"):
        register_recipe(other)
    assert register_recipe(other, replace=True).harness().max_turns == 25  # caches cleared
    with pytest.raises(RecipeError, match="does not exist"):
        register_recipe(tmp_path / "missing.yaml")
