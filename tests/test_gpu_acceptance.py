"""scripts/gpu_acceptance.py: the CPU mode end to end (every phase reported, finite numbers, the loss-mask and
loss checks true), the phase runner keeping a failure to its phase, the 7B -> 3B fallback on out-of-memory only,
and the paper architecture configs (parameter counts of the released Qwen2.5-VL-7B / 3B)."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_acceptance.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_acceptance", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_acceptance"] = mod  # dataclasses resolve their module by name
    spec.loader.exec_module(mod)
    return mod


def _numbers(x):
    if isinstance(x, bool):
        return
    if isinstance(x, (int, float)):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _numbers(v)
    elif isinstance(x, list):
        for v in x:
            yield from _numbers(v)


@pytest.mark.slow
def test_cpu_mode_runs_every_phase(tmp_path):
    pytest.importorskip("trl", reason="the SFT phase runs TRL (pip install -e '.[train]')")
    from kit.paths import zim_paths

    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--mode", "cpu", "--out", str(out), "--workdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=90, cwd=ROOT)
    rep = json.loads(out.read_text())
    assert json.loads(proc.stdout) == rep  # printed and written
    phases = rep["phases"]
    assert list(phases) == ["sft", "rl", "generation", "vfold", "unsloth"]
    for name, p in phases.items():
        if name == "unsloth" or (name == "generation" and not zim_paths()):
            assert p["status"] in ("ok", "skipped"), p
            if p["status"] == "skipped":
                assert p["reason"].startswith("unsloth not importable" if name == "unsloth" else "no ZIM"), p
        else:
            assert p["status"] == "ok", (name, p)
    assert all(math.isfinite(v) for v in _numbers(rep)), "a number in the report is not finite"
    sft, rl = phases["sft"], phases["rl"]
    assert sft["mask_equal_cpu"] is True and sft["tokens_per_s"] > 0 and sft["loss"] > 0 and sft["mfu"] >= 0
    assert rl["loss_equal_cpu"] is True and rl["loss_check"]["mask_equal"] is True and rl["group"] == 8
    assert rl["tokens_per_s"] > 0 and rl["trained_tokens"] > 0
    if phases["generation"]["status"] == "ok":
        assert phases["generation"]["ttft_s"] > 0 and phases["generation"]["completion_tokens"] > 0
    assert phases["vfold"]["vision_tokens_per_page"] > 0 and phases["vfold"]["pages_per_s"] > 0
    assert rep["mode"] == "cpu" and rep["versions"]["torch"] and rep["date"] and rep["ok"] is True
    assert proc.returncode == 0


def test_a_failing_phase_records_its_error_and_the_others_run():
    mod = _load()
    ran = []

    def broken(ctx):
        raise ValueError("pixel_values on cuda:0, weights on cpu")

    def fine(ctx):
        ran.append(ctx)
        return {"tokens_per_s": 1.5}

    def absent(ctx):
        raise mod.PhaseSkipped("unsloth not importable: not installed")

    out = mod.run_phases([("a", broken), ("b", fine), ("c", absent), ("d", fine)], "ctx")
    err = out["a"]["error"]
    assert out["a"]["status"] == "error" and err["type"] == "ValueError" and "cuda:0" in err["message"]
    assert any("broken" in line for line in err["traceback"]) and err["traceback"][-1].startswith("ValueError")
    assert out["b"]["status"] == out["d"]["status"] == "ok" and out["b"]["tokens_per_s"] == 1.5 and ran == ["ctx", "ctx"]
    assert out["c"] == {"status": "skipped", "reason": "unsloth not importable: not installed", "wall_s": out["c"]["wall_s"]}
    late = mod.run_phases([("a", fine)], "ctx", budget_s=10.0, min_s={"a": 30.0})
    assert late["a"]["status"] == "skipped" and late["a"]["reason"].startswith("budget") and len(ran) == 2


def test_out_of_memory_falls_back_to_the_smaller_model(tmp_path):
    mod = _load()
    ctx = mod.Context("cpu", tmp_path, [])
    ctx.s = replace(ctx.s, sizes=("7b", "3b"))

    class OutOfMemoryError(RuntimeError):  # torch.OutOfMemoryError's name, without CUDA
        pass

    def run(size):
        if size == "7b":
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 18.56 GiB")
        return {"tokens_per_s": 2.0}

    out = ctx.with_fallback(run)
    assert out["model"] == "3b" and out["fallback_from"][0]["model"] == "7b"
    assert out["fallback_from"][0]["type"] == "OutOfMemoryError"

    def wrong(size):
        raise TypeError("a dtype bug is not a memory problem")

    with pytest.raises(TypeError):
        ctx.with_fallback(wrong)


def test_paper_configs_have_the_released_parameter_counts():
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForImageTextToText

    _load()  # puts scripts/ on the path
    from gpu_check_sft import arch_config

    # Qwen2.5-VL-7B-Instruct: 8,292,166,656 parameters; 3B: 3,754,622,976 (the released safetensors)
    for size, n in (("7b", 8_292_166_656), ("3b", 3_754_622_976)):
        with torch.device("meta"):
            model = AutoModelForImageTextToText.from_config(arch_config(size))
        assert sum(p.numel() for p in model.parameters()) == n, size
