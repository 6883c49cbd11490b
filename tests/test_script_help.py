"""Every command-line script of ``benchmarks/`` and ``scripts/`` answers ``--help`` (exit 0, a
usage line): argparse formats help strings with ``%``, so a literal ``10%`` in one crashed
``gen_zim_archive.py --help`` with a TypeError."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kit.paths import PROJECT_ROOT

_SCRIPTS = sorted(
    p for folder in ("benchmarks", "scripts") for p in (PROJECT_ROOT / folder).glob("*.py")
    if "ArgumentParser(" in (text := p.read_text(encoding="utf-8")) and '__name__ == "__main__"' in text
)


def test_the_scripts_are_found():
    assert len(_SCRIPTS) >= 20, _SCRIPTS


@pytest.mark.parametrize("script", _SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_help_exits_zero(script):
    done = subprocess.run([sys.executable, str(script), "--help"], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage:"), done.stdout[:200]
