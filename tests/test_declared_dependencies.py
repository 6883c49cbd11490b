"""Every third-party package ``kit/`` imports directly is declared in ``pyproject.toml`` (core or an
extra), not merely present because some other package pulled it in (issue 15 part 6).

Imports are collected with ``ast`` from every module, including the lazy ones inside functions, and
mapped to distributions with ``importlib.metadata.packages_distributions()``.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]

# Imported by code that runs only in environments this venv does not hold, so the installed
# metadata cannot map them; the name they are published under (must be declared all the same).
NOT_INSTALLED_HERE = {
    "unsloth": "unsloth",  # GPU extra
    "verl": "verl",  # kit/rl/verl runs in .venv-verl (scripts/setup_verl.sh), declared in the verl extra
    "vllm": "vllm",  # GPU extra
    "trackio": "trackio",  # tracking extra: report_to="trackio" (kit.tracking), imported only when chosen
    "wandb": "wandb",  # tracking extra: report_to="wandb"
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def third_party_imports(root: Path) -> dict[str, set[str]]:
    """``{top-level import name: {files importing it}}`` over ``root/**/*.py``; stdlib, ``kit`` and
    relative imports left out."""
    found: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in {"kit", "__future__"}:
                    continue
                found.setdefault(top, set()).add(str(path.relative_to(root.parent)))
    return found


def declared_distributions(pyproject: Path) -> dict[str, str]:
    """``{normalized distribution name: "core" or the extra's name}`` from ``pyproject.toml``."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    out = {_norm(Requirement(r).name): "core" for r in project["dependencies"]}
    for extra, reqs in project.get("optional-dependencies", {}).items():
        for r in reqs:
            out.setdefault(_norm(Requirement(r).name), extra)
    return out


def undeclared(imports: dict[str, set[str]], declared: dict[str, str],
               mapping: dict[str, list[str]]) -> list[str]:
    """Import names none of whose distributions is declared, each with the files importing it."""
    problems = []
    for top, files in sorted(imports.items()):
        dists = mapping.get(top) or ([NOT_INSTALLED_HERE[top]] if top in NOT_INSTALLED_HERE else [])
        if not dists:
            problems.append(f"{top} (imported by {sorted(files)[:3]}) maps to no installed distribution; "
                            "install it or add it to NOT_INSTALLED_HERE with its published name")
        elif not any(_norm(d) in declared for d in dists):
            problems.append(f"{top} -> {sorted(set(dists))} (imported by {sorted(files)[:3]}) is not declared "
                            "in pyproject.toml")
    return problems


def test_collector_sees_lazy_and_from_imports(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text("import os\nfrom . import x\nimport lxml.html\n"
                              "def f():\n    from pyarrow import parquet\n    import json_repair as jr\n")
    found = third_party_imports(pkg)
    assert set(found) == {"lxml", "pyarrow", "json_repair"}
    assert found["pyarrow"] == {"pkg/m.py"}


def test_an_undeclared_import_is_reported():
    # lxml is installed (as a dependency of trafilatura) but would be flagged if pyproject forgot it
    problems = undeclared({"lxml": {"kit/web/zim.py"}}, {"trafilatura": "core"},
                          importlib.metadata.packages_distributions())
    assert len(problems) == 1 and "lxml" in problems[0]


def test_every_direct_import_of_the_kit_is_declared():
    imports = third_party_imports(ROOT / "kit")
    assert {"pydantic", "PIL", "httpx"} <= set(imports)  # the walk found the kit's imports at all
    problems = undeclared(imports, declared_distributions(ROOT / "pyproject.toml"),
                          importlib.metadata.packages_distributions())
    assert not problems, "\n".join(problems)
