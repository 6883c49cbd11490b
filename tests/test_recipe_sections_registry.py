"""The recipes stay data (issue 30, part 8): kit.recipes imports nothing from the harness or RL code; the config
classes register their sections (kit.recipes.sections.register_section), and validating a recipe imports the
owners by name, so every section is still validated."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import BaseModel, ConfigDict

from kit import recipes
from kit.recipes import RecipeError, load_recipe
from kit.recipes.sections import SECTION_MODELS, register_section, section_model


def test_importing_the_recipes_imports_no_harness_or_rl_module():
    code = ("import sys, kit.recipes, kit.recipes.sections, kit.recipes.mechanisms; "
            "print(sorted(m for m in sys.modules if m.startswith(('kit.harness', 'kit.rl'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_config_classes_register_their_sections():
    from kit.harness.config import HarnessConfig
    from kit.rl.staging import RescueConfig

    assert section_model("harness") is HarnessConfig and section_model("rescue") is RescueConfig
    assert SECTION_MODELS is recipes.SECTION_MODELS


class _Probe(BaseModel):
    model_config = ConfigDict(extra="forbid")
    depth: int = 1


@pytest.fixture
def probe_section(recipe_dir):
    register_section("probe", _Probe)
    yield recipe_dir
    from kit.recipes import sections

    SECTION_MODELS.pop("probe", None)
    sections._REGISTERED.pop("probe", None)
    recipes._clear_caches()


def test_a_section_registered_from_outside_is_checked_and_built(probe_section):
    (probe_section / "mine.yaml").write_text("name: mine\nextends: weagent_mmsearch\nprobe:\n"
                                             "  depth: {value: 3, kit: a probe}\n")
    assert load_recipe("mine").build("probe") == _Probe(depth=3)
    (probe_section / "bad.yaml").write_text("name: bad\nextends: weagent_mmsearch\nprobe:\n"
                                            "  depht: {value: 3, kit: a typo}\n")
    with pytest.raises(RecipeError, match="unknown key 'probe.depht'.*depth"):
        load_recipe("bad")


def test_a_section_cannot_be_taken_by_another_class():
    with pytest.raises(ValueError, match="belongs to kit.harness.config:HarnessConfig"):
        register_section("harness", _Probe)
    with pytest.raises(TypeError):
        register_section("x", dict)  # type: ignore[arg-type]


def test_no_recipes_module_imports_the_harness_or_rl_code():
    import ast
    from pathlib import Path

    for path in sorted(Path(recipes.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad = [n for n in names if n.startswith(("kit.harness", "kit.rl"))]
            assert not bad, f"{path.name}:{node.lineno} imports {bad}"
