"""An archive's identity (issue 32): the index folder is named by a key read from the ZIM header
(UUID, stored MD5, size), and the sha256 of the archive's bytes is hashed during the build on a
thread at idle priority, handed over to the caller when the build ends first."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import threading
from pathlib import Path

import libzim.reader
import libzim.writer
import pytest
from conftest import ZimItem

from kit.web.zim import LocalZimWeb, archive_key, archive_sha256, identity
from kit.web.zim.archive import _ZimArchive


def _write(path: Path, n: int = 5) -> Path:
    creator = libzim.writer.Creator(str(path)).config_indexing(False, "eng")
    with creator:
        creator.add_metadata("Language", "eng")
        for i in range(n):
            html = f"<html><head><title>Page {i}</title></head><body><p>Page {i} is about rivers.</p></body></html>"
            creator.add_item(ZimItem(f"A/Page_{i}", f"Page {i}", "text/html", html))
    return path


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def test_key_is_read_from_the_header_and_names_the_folder(tmp_path):
    path = _write(tmp_path / "a.zim")
    z = libzim.reader.Archive(str(path))
    expect = hashlib.sha256(f"zim\nuuid={z.uuid}\nmd5={z.checksum}\nbytes={z.filesize}".encode()).hexdigest()
    arch = _ZimArchive(path, tmp_path / "ix")
    assert arch.key == expect
    assert arch.index_dir.name.startswith(expect[:16] + "-v")
    # opening an archive reads no more than its header: nothing is memoised, no sha256 is known yet
    assert not (tmp_path / "ix" / "_fingerprints").exists()


def test_a_copy_reuses_the_index_and_a_rewrite_does_not(tmp_path, monkeypatch):
    a = _write(tmp_path / "a.zim")
    web = LocalZimWeb([a], index_dir=tmp_path / "ix")
    web.ensure_ready()
    manifest = json.loads((web.archives[0].index_dir / "manifest.json").read_text())
    assert manifest["key"] == web.archives[0].key and manifest["sha256"] == _sha256(a)

    copy = tmp_path / "other" / "a.zim"  # another place, the same bytes: the same index
    copy.parent.mkdir()
    shutil.copy(a, copy)
    builds = []
    monkeypatch.setattr(_ZimArchive, "build", lambda self, out, workers=None: builds.append(out))
    again = LocalZimWeb([copy], index_dir=tmp_path / "ix")
    again.ensure_ready()
    assert builds == [] and again.archives[0].key == web.archives[0].key

    b = _write(tmp_path / "b.zim")  # the same pages written again: the creator draws a new UUID
    assert _ZimArchive(b, tmp_path / "ix").key != web.archives[0].key


def test_an_archive_without_a_checksum_is_keyed_by_its_bytes(tmp_path):
    path = _write(tmp_path / "a.zim")
    memo = tmp_path / "memo"
    assert archive_key("u", None, path.stat().st_size, path, memo) == _sha256(path)
    assert archive_key("u", "", path.stat().st_size, path, memo) == _sha256(path)
    assert identity.memoised_sha256(path, memo) == _sha256(path)  # memoised: a second opening reads nothing


@pytest.mark.parametrize("background", [True, False])
def test_idle_sha256_equals_the_file_digest_whoever_hashes(tmp_path, monkeypatch, background):
    path = tmp_path / "blob"
    path.write_bytes(os.urandom(3 << 20) + b"tail")
    monkeypatch.setattr(identity, "CHUNK", 64 << 10)  # many hand-over points
    h = identity.IdleSha256(path, tmp_path / "memo", background=background)
    assert h.result() == _sha256(path)
    assert identity.memoised_sha256(path, tmp_path / "memo") == _sha256(path)
    assert identity.IdleSha256(path, tmp_path / "memo")._thread is None  # memoised: no thread


def test_the_caller_takes_over_a_thread_that_gets_no_cpu(tmp_path, monkeypatch):
    """A machine with no idle core: the thread stops at its next chunk and the caller hashes the
    rest with the same hash object."""
    path = tmp_path / "blob"
    path.write_bytes(os.urandom(2 << 20))
    monkeypatch.setattr(identity, "CHUNK", 256 << 10)
    gate, started = threading.Event(), threading.Event()
    real_step = identity.IdleSha256._step

    def slow_step(self, f):  # the thread hashes one chunk, then waits for the caller's hand-over
        more = real_step(self, f)
        if threading.current_thread().name == "archive-sha256":
            started.set()
            gate.wait(5)
        return more

    monkeypatch.setattr(identity.IdleSha256, "_step", slow_step)
    h = identity.IdleSha256(path, tmp_path / "memo")
    assert started.wait(5)
    gate.set()
    assert h.result() == _sha256(path)
    assert 0 < h._offset == path.stat().st_size


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SCHED_IDLE is Linux's")
def test_the_thread_runs_at_idle_priority(tmp_path, monkeypatch):
    path = tmp_path / "blob"
    path.write_bytes(b"x" * 1000)
    seen = []
    real = identity._idle_priority

    def record():
        real()
        seen.append((os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))

    monkeypatch.setattr(identity, "_idle_priority", record)
    identity.IdleSha256(path, tmp_path / "memo").result()
    assert seen and (seen[0][0] == os.SCHED_IDLE or seen[0][1] == 19)
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the caller's thread is untouched


def test_a_failed_build_stops_the_thread_and_memoises_nothing(tmp_path, monkeypatch):
    from kit.web.zim import archive as archive_mod

    path = _write(tmp_path / "a.zim")

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(archive_mod, "build_archive", boom)
    arch = _ZimArchive(path, tmp_path / "ix")
    with pytest.raises(Exception, match="No space left"):
        arch.build(tmp_path / "out")
    assert identity.memoised_sha256(path, arch.fingerprints) is None
    assert not any(t.name == "archive-sha256" for t in threading.enumerate())


def test_archive_sha256_is_memoised_by_size_and_mtime(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(b"one")
    memo = tmp_path / "memo"
    assert archive_sha256(path, memo) == hashlib.sha256(b"one").hexdigest()
    path.write_bytes(b"two!")  # another size: hashed again
    assert archive_sha256(path, memo) == hashlib.sha256(b"two!").hexdigest()


def test_members_are_ordered_newest_edition_first_then_by_name(tmp_path):
    """Member order breaks score ties between archives; it no longer depends on the archives' bytes."""
    from kit.web.zim.index import _Collection

    def dated(name: str, date: str | None) -> Path:
        creator = libzim.writer.Creator(str(tmp_path / f"{name}.zim")).config_indexing(False, "eng")
        with creator:
            creator.add_metadata("Language", "eng")
            if date:
                creator.add_metadata("Date", date)
            creator.add_item(ZimItem("A/P", "P", "text/html", "<html><body><p>x</p></body></html>"))
        return tmp_path / f"{name}.zim"

    paths = [dated("b_old", "2015-06-01"), dated("a_undated", None), dated("c_new", "2023-09-01"),
             dated("a_new", "2023-09-01")]
    members = _Collection([_ZimArchive(p, tmp_path / "ix") for p in paths], tmp_path / "ix").members
    assert [m.stem for m in members] == ["a_new", "c_new", "b_old", "a_undated"]
