"""Subpackages re-export their public names (issue 15 part 4): every name in a package's ``__all__``
resolves to an object defined in the kit, unknown names raise AttributeError, and the README quickstart needs
only a handful of imports."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

PACKAGES = ["kit.harness", "kit.policy", "kit.rl", "kit.train", "kit.vfold", "kit.eval", "kit.hub", "kit.data",
            "kit.web", "kit.models"]


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_resolves(name):
    pkg = importlib.import_module(name)
    assert pkg.__all__, f"{name} exports nothing"
    for n in pkg.__all__:
        obj = getattr(pkg, n)
        mod = getattr(obj, "__module__", None) or name
        assert mod.startswith("kit"), (n, mod)
        assert n in dir(pkg)
    with pytest.raises(AttributeError):
        getattr(pkg, "no_such_name_anywhere")  # noqa: B009  (the lookup itself is the test)


def test_the_readme_quickstart_needs_a_handful_of_imports():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    imports = [ln for ln in block.splitlines() if re.match(r"\s*(from kit|import kit)", ln)]
    assert 1 <= len(imports) <= 4, imports
