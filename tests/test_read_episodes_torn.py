"""kit.harness.runner.read_episodes: only bytes after the last newline are a torn line (a killed writer
writes a record and its newline at once); a complete line that is not a valid record is an error naming
the file and line, the last line too (it used to be dropped silently as "torn")."""

from __future__ import annotations

import json

import pytest

from kit.harness.episode import EpisodeRecord, Task
from kit.harness.runner import TornLineWarning, read_episodes


def _line(i: str, **extra) -> str:
    rec = EpisodeRecord(id=i, task=Task(id=i, question="q?", answers=["a"]), config_hash="h")
    return json.dumps({**rec.model_dump(mode="json"), **extra})


def test_a_complete_bad_last_line_is_an_error_naming_file_and_line(tmp_path):
    p = tmp_path / "episodes.jsonl"
    p.write_text(_line("a") + "\n" + _line("bad", workspace=123) + "\n")
    with pytest.raises(ValueError, match=r"episodes\.jsonl: line 2 is not a valid episode record"):
        read_episodes(p)
    p.write_text(_line("a") + "\n" + "not json\n")
    with pytest.raises(ValueError, match="line 2"):
        read_episodes(p, repair=True)
    assert p.read_text().endswith("not json\n")  # an error: nothing is cut


def test_only_a_segment_without_newline_is_torn_and_it_is_warned_with_its_line(tmp_path):
    p = tmp_path / "episodes.jsonl"
    p.write_text(_line("a") + "\n" + _line("b") + "\n" + _line("bad", workspace=123)[:40])
    with pytest.warns(TornLineWarning, match=r"line 3 is torn.*ignored"):
        assert [r.id for r in read_episodes(p)] == ["a", "b"]
    with pytest.warns(TornLineWarning, match="line 3 is torn.*cut off"):
        read_episodes(p, repair=True)
    assert p.read_text() == _line("a") + "\n" + _line("b") + "\n"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an intact file reads without a warning
        assert len(read_episodes(p)) == 2
