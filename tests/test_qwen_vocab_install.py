"""The Qwen BPE vocabulary is a one-time build input, not a core dependency: ``dashscope`` (which ships
``qwen.tiktoken`` but pulls a web-server stack) is installed by ``make setup`` with ``--no-deps`` from
requirements/qwen-vocab.txt, and the kit finds the file without importing the package."""

from __future__ import annotations

import importlib
import sys
import tomllib

import pytest

from kit.models import qwen_tokenizer as qt
from kit.paths import PROJECT_ROOT


def test_dashscope_is_out_of_the_core_deps_and_installed_without_its_own():
    deps = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not [d for d in deps if d.lower().startswith("dashscope")]
    pins = [ln.strip() for ln in (PROJECT_ROOT / "requirements" / "qwen-vocab.txt").read_text().splitlines()
            if ln.strip() and not ln.startswith("#")]
    assert pins == ["dashscope==2.0.2"]
    setup = (PROJECT_ROOT / "Makefile").read_text().split("\n$(VENV)/.installed:", 1)[1].split("\n\n", 1)[0]
    assert "requirements/qwen-vocab.txt" in setup.splitlines()[0]  # a prerequisite: editing it reinstalls
    assert "--no-deps -r requirements/qwen-vocab.txt" in setup


def test_vocabulary_found_in_a_package_that_cannot_be_imported(tmp_path, monkeypatch):
    """What ``--no-deps`` leaves: the package's files, whose ``__init__`` fails on a missing dependency."""
    pkg = tmp_path / "dashscope"
    (pkg / "resources").mkdir(parents=True)
    (pkg / "__init__.py").write_text("import aiohttp_that_is_not_installed\n")
    (pkg / "resources" / "qwen.tiktoken").write_text("IQ== 0\n")
    monkeypatch.delenv("MMSEARCH_KIT_QWEN_TIKTOKEN", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "dashscope", raising=False)
    importlib.invalidate_caches()
    assert qt.find_qwen_tiktoken() == pkg / "resources" / "qwen.tiktoken" and qt.is_qwen_vocab_available()
    with pytest.raises(ImportError):  # so tests gate on the file, not on importing dashscope
        importlib.import_module("dashscope")
    monkeypatch.delitem(sys.modules, "dashscope", raising=False)


def test_missing_vocabulary_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.delenv("MMSEARCH_KIT_QWEN_TIKTOKEN", raising=False)
    monkeypatch.setattr(qt.importlib.util, "find_spec", lambda name: None)
    assert not qt.is_qwen_vocab_available()
    with pytest.raises(qt.QwenVocabularyNotFound, match="--no-deps -r requirements/qwen-vocab.txt"):
        qt.find_qwen_tiktoken()
