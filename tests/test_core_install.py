"""The light core install (issue 30, part 6): kit.extras gives a one-line message naming the missing extra."""

from __future__ import annotations

import pytest

from kit import extras


def test_is_available_finds_stdlib_and_rejects_missing():
    assert extras.is_available("json")
    assert extras.is_available("json.decoder")
    assert not extras.is_available("no_such_module_kit_test_xyz")


def test_require_passes_when_present():
    extras.require("train", "json", "os")


def test_require_names_the_extra_in_one_line():
    with pytest.raises(extras.MissingExtraError) as info:
        extras.require("train", "json", "no_such_module_kit_test_xyz", feature="kit train")
    err = info.value
    assert isinstance(err, ImportError)
    assert err.extra == "train" and err.missing == ["no_such_module_kit_test_xyz"]
    msg = str(err)
    assert "\n" not in msg
    assert "kit train needs the 'train' extra" in msg and "pip install 'mmsearch-kit[train]'" in msg


def test_require_rejects_unknown_extra():
    with pytest.raises(ValueError, match="unknown extra"):
        extras.require("nope", "json")


def test_extras_match_pyproject():
    """Every extra a feature may ask for exists in pyproject.toml, so the printed pip command works."""
    import tomllib
    from pathlib import Path
    opt = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras.EXTRAS) <= set(opt)
    core = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not any(d.startswith(("torch", "transformers", "playwright", "kaleido", "faiss", "mcp", "uvicorn")) for d in core)


def test_kit_train_without_torch_names_the_extra():
    """With torch hidden (a core install), ``import kit.train`` fails with the one-line extra message."""
    import subprocess
    import sys
    code = ("import sys, importlib.abc\n"
            "class Block(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'torch': raise ModuleNotFoundError(name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "try:\n    import kit.train\nexcept ImportError as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.strip()
    assert out.startswith("MissingExtraError kit.train needs the 'train' extra"), out
    assert "pip install 'mmsearch-kit[train]'" in out and "\n" not in out


_EPISODE = """
import asyncio, sys, tempfile
from kit.harness.config import HarnessConfig
from kit.harness.episode import Task
from kit.harness.loop import Harness
from kit.policy.scripted import ScriptedPolicy
from kit.web.zim import LocalZimWeb
web = LocalZimWeb([sys.argv[1]])
pol = ScriptedPolicy(['<tool_call>{"name": "search", "arguments": {"query": "Ray Charles"}}</tool_call>',
                      "<response>Ray Charles</response>"])
with tempfile.TemporaryDirectory() as d:
    rec = asyncio.run(Harness(pol, web, HarnessConfig.smoke(max_turns=3)).run(Task(id="q", question="Who?"), d))
assert len(rec.messages) >= 3, rec.messages
assert not {"torch", "transformers", "faiss", "plotly"} & {k.split(".")[0] for k in sys.modules}
try:
    import kit.train
except ImportError as e:
    print("EXTRA:", e)
print("EPISODE OK")
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_core_install_is_light_and_runs_an_episode():
    """A fresh core venv (cached under /tmp by pyproject hash): <= 45 distributions, no torch, one ZIM episode."""
    import hashlib
    import socket
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).parents[1]
    zim = Path("/work/shared/data/zim/wikipedia_en_ray_charles_2015-06.zim")
    if not zim.exists():
        pytest.skip(f"shared ZIM not found: {zim}")
    key = hashlib.sha256((root / "pyproject.toml").read_bytes()
                         + (root / "requirements/constraints-cpu.txt").read_bytes()).hexdigest()[:12]
    venv = Path(f"/tmp/kit-core-venv-{key}")
    py = venv / "bin/python"
    if not (venv / ".ok").exists():
        try:
            socket.create_connection(("pypi.org", 443), timeout=5).close()
        except OSError as e:
            pytest.skip(f"PyPI unreachable, cannot build the core venv: {e}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "-c", str(root / "requirements/constraints-cpu.txt"),
                        str(root)], check=True, timeout=480)
        (venv / ".ok").touch()
    else:   # the kit's own code may have changed since: refresh it without touching the dependencies
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", str(root)],
                       check=True, timeout=240)
    names = subprocess.run([str(py), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                           check=True).stdout.split()
    dists = {n.split("==")[0].lower() for n in names} - {"pip", "setuptools", "wheel"}
    assert "torch" not in dists
    assert len(dists) <= 45, (len(dists), sorted(dists))
    out = subprocess.run([str(py), "-c", _EPISODE, str(zim)], capture_output=True, text=True, timeout=180, cwd="/tmp")
    assert "EPISODE OK" in out.stdout, out.stdout + out.stderr
    assert "needs the 'train' extra" in out.stdout


def test_rl_losses_without_torch_name_the_extra():
    """A core install reads the RL registry (names, algorithms) but a loss asks for the 'train' extra in one line."""
    import subprocess
    import sys
    code = ("import sys, importlib.abc\n"
            "class Block(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'torch': raise ModuleNotFoundError(name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "from kit.rl.registry import algorithm, registered\n"
            "print(algorithm('fa_gspo').loss, registered()['rewards'])\n"
            "from kit.rl.objective import gspo_loss\n"
            "try:\n    gspo_loss([[0.0]], [[0.0]], [[1]], [1.0], [1.0], eps_lo=0.2, eps_hi=0.2)\n"
            "except ImportError as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    lines = out.stdout.strip().split("\n")
    assert lines[0] == "gspo ['points_seeker', 'weagent']", out.stderr[-2000:]
    assert lines[1].startswith("MissingExtraError kit.rl (losses, log-probs, training) needs the 'train' extra"), lines
