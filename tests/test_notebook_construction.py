"""Construction the notebooks repeated, now in the kit (issue 15 part 4): the local web from the shared data,
the tool cache from a cache mode, and the Figure-7 recovery table of notebook 05."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kit.web import local_zim_paths, open_local_web, open_tool_cache


def _data(tmp_path: Path, *stems: str) -> Path:
    (tmp_path / "zim").mkdir(parents=True)
    for s in stems:
        (tmp_path / "zim" / f"{s}.zim").write_bytes(b"")
    return tmp_path


def test_local_zim_paths_finds_filters_and_refuses(tmp_path, monkeypatch):
    d = _data(tmp_path / "d", "b_wiki", "a_wiki")
    assert [p.name for p in local_zim_paths(data_dir=d)] == ["a_wiki.zim", "b_wiki.zim"]  # sorted
    assert [p.stem for p in local_zim_paths(data_dir=d, names=["b_wiki"])] == ["b_wiki"]
    with pytest.raises(FileNotFoundError, match="'c_wiki'.*a_wiki"):  # a wrong name is not silently dropped
        local_zim_paths(data_dir=d, names=["b_wiki", "c_wiki"])
    with pytest.raises(FileNotFoundError, match="no ZIM archive under"):
        local_zim_paths(data_dir=_data(tmp_path / "empty"))
    assert local_zim_paths(["x/one.zim", Path("two.zim")]) == [Path("x/one.zim"), Path("two.zim")]
    with pytest.raises(ValueError, match="not both"):
        local_zim_paths(["one.zim"], names=["one"])
    # no data folder at all (and no downloaded archive): the notebooks' "no shared data folder" error
    import kit.paths

    monkeypatch.delenv("MMSEARCH_KIT_DATA", raising=False)
    monkeypatch.setattr(kit.paths, "PROJECT_ROOT", tmp_path / "checkout")  # no ../shared/data beside it
    monkeypatch.setenv("MMSEARCH_KIT_CACHE", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError, match="no shared data folder.*MMSEARCH_KIT_DATA"):
        local_zim_paths()
    # a variable pointing nowhere is an error naming it, not silently "no data" or the default folder
    monkeypatch.setenv("MMSEARCH_KIT_DATA", str(tmp_path / "misspelt"))
    with pytest.raises(FileNotFoundError, match="MMSEARCH_KIT_DATA=.*misspelt is not a folder"):
        local_zim_paths()
    from kit.doctor import check_zims

    (check,) = check_zims()
    assert check.status == "FAIL" and "misspelt is not a folder" in check.detail


def test_open_local_web_over_the_shared_archives(data_dir):
    from kit.web.zim import LocalZimWeb

    web = open_local_web(names=["wikipedia_en_ray_charles_maxi_2023-09"])
    assert isinstance(web, LocalZimWeb) and [a.stem for a in web.archives] == ["wikipedia_en_ray_charles_maxi_2023-09"]
    assert [a.stem for a in open_local_web(data_dir=data_dir).archives] == [p.stem for p in sorted((data_dir / "zim").glob("*.zim"))]


def test_web_package_stays_import_light():
    code = "import sys, kit.web; print(any(m.startswith(('kit.web.zim', 'libzim', 'bm25s')) for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_open_tool_cache_modes(tmp_path):
    rw = open_tool_cache(tmp_path / "c.sqlite", "readwrite")
    assert rw.mode == "readwrite" and (tmp_path / "c.sqlite").exists()
    rw.close()
    off = open_tool_cache(tmp_path / "never.sqlite", "off")  # off ignores the path: nothing is written
    assert off.mode == "off" and off.path is None and not (tmp_path / "never.sqlite").exists()
    assert open_tool_cache(tmp_path / "c.sqlite", "readonly").mode == "readonly"
    with pytest.raises(FileNotFoundError):
        open_tool_cache(tmp_path / "absent.sqlite", "readonly")
    with pytest.raises(ValueError, match="unknown cache mode"):
        open_tool_cache(tmp_path / "c.sqlite", "sometimes")


# ---------------------------------------------------------------- Figure 7 (notebook 05's recovery.csv)

def _step(n, **rows):
    from kit.rl.rollout import EXCLUDED_MECHANISMS, MECHANISMS

    out = []
    for k in MECHANISMS:
        trig, kept = rows.get(k, (0, 0))
        out.append({"mechanism": k, "triggered": trig, "trigger_rate": trig / n,
                    "retained": None if k in EXCLUDED_MECHANISMS else kept, "retention_rate": None})
    return {"rollout_trajectories": n, "recovery": out}


def test_recovery_table_sums_steps_into_figure_7_rates():
    from kit.rl.rollout import MECHANISMS, recovery_table

    hist = [_step(8, overlong_retry=(2, 1), invalid_tool_call=(1, 1), context_limit=(1, 0)),
            _step(8, overlong_retry=(2, 2), forced_final_answer=(3, 0))]
    rows = {r["mechanism"]: r for r in recovery_table(hist)}
    assert list(rows) == list(MECHANISMS)
    assert rows["overlong_retry"] == {"mechanism": "overlong_retry", "triggered": 4, "trigger_rate": 4 / 16,
                                      "retention_rate": 3 / 4}
    assert rows["forced_final_answer"]["retention_rate"] == 0.0 and rows["invalid_tool_call"]["retention_rate"] == 1.0
    assert rows["wall_clock"] == {"mechanism": "wall_clock", "triggered": 0, "trigger_rate": 0.0,
                                  "retention_rate": "N/A (excluded)"}  # excluded by definition, not "0 kept"
    assert rows["context_limit"]["trigger_rate"] == 1 / 16
    assert recovery_table(hist, excluded="n/a")[3]["retention_rate"] == "n/a"
    empty = recovery_table([])
    assert all(r["triggered"] == 0 and r["trigger_rate"] is None for r in empty)  # 0/0 is no rate
    assert {r["mechanism"]: r["retention_rate"] for r in empty}["overlong_retry"] is None  # never fired


def test_recovery_table_refuses_malformed_steps():
    from kit.rl.rollout import recovery_table

    with pytest.raises(ValueError, match="step 0.*recovery"):
        recovery_table([{"rollout_trajectories": 2}])
    bad = _step(2)
    bad["recovery"][0]["mechanism"] = "teleport"
    with pytest.raises(ValueError, match="unknown mechanism 'teleport'"):
        recovery_table([bad])


def test_recovery_table_reads_what_recovery_stats_writes():
    """The per-step rows the trainer stores come from recovery_stats(); an empty step sums to zeros."""
    from kit.rl.rollout import recovery_stats, recovery_table

    rows = recovery_table([{"rollout_trajectories": 0, "recovery": recovery_stats([])}])
    assert [r["triggered"] for r in rows] == [0] * len(rows)
