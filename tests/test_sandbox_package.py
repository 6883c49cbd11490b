"""The execute_code sandbox package (issue 15 part 5): one interface, old import path kept, the
driver stays standard-library only, the mode selection agrees with HarnessConfig, no giant module."""

from __future__ import annotations

import ast
import sys
import typing
from pathlib import Path

import kit.harness.code_exec as code_exec
import kit.harness.sandbox as sandbox
from kit.harness.config import HarnessConfig
from kit.harness.sandbox import ISOLATION_MODES, CodeSandbox, Sandbox

PKG = Path(sandbox.__file__).parent


def test_old_import_path_names_the_same_objects():
    assert set(code_exec.__all__) <= set(sandbox.__all__)
    for name in code_exec.__all__:
        assert getattr(code_exec, name) is getattr(sandbox, name), name


def test_code_sandbox_implements_the_interface(tmp_path):
    box = CodeSandbox(tmp_path / "ws", isolation="rlimits")  # nothing starts before the first run()
    assert isinstance(box, Sandbox)
    assert box.isolation == "rlimits" and box.pid is None


def test_harness_config_offers_exactly_the_sandbox_modes():
    hint = typing.get_type_hints(HarnessConfig)["code_isolation"]
    assert tuple(typing.get_args(hint)) == ISOLATION_MODES


def test_driver_imports_only_the_standard_library():
    tree = ast.parse((PKG / "driver.py").read_text(encoding="utf-8"))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import in the driver"
            roots.add(node.module.split(".")[0])
    roots.discard("__future__")
    assert roots and roots <= set(sys.stdlib_module_names), roots - set(sys.stdlib_module_names)


def test_no_module_of_the_package_is_a_giant():
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in PKG.glob("*.py")}
    assert max(sizes.values()) <= 600, sizes
