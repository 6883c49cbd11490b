"""An archive's identity (issue 32): the index folder is named by a key read from the ZIM header
(UUID, stored MD5, size), and the sha256 of the archive's bytes is hashed during the build by a
child process at idle priority, raised to normal priority when the build ends first."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import libzim.reader
import libzim.writer
import psutil
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
def test_idle_sha256_equals_the_file_digest_whoever_hashes(tmp_path, background):
    path = tmp_path / "blob"
    path.write_bytes(os.urandom(3 << 20) + b"tail")
    h = identity.IdleSha256(path, tmp_path / "memo", background=background)
    assert (h._child is not None) == background
    assert h.result() == _sha256(path)
    assert identity.memoised_sha256(path, tmp_path / "memo") == _sha256(path)
    assert identity.IdleSha256(path, tmp_path / "memo")._child is None  # memoised: no process
    assert identity.IdleSha256(path, tmp_path / "memo").after == "memoised"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SCHED_IDLE is Linux's")
def test_the_child_hashes_at_idle_priority_and_is_raised_when_the_build_ends(tmp_path):
    """A FIFO holds the child reading while its policy is looked at; result() finds it running."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    h = identity.IdleSha256(fifo, tmp_path / "memo")
    deadline = time.monotonic() + 20
    while os.sched_getscheduler(h._child.pid) != os.SCHED_IDLE and time.monotonic() < deadline:
        time.sleep(0.01)
    assert os.sched_getscheduler(h._child.pid) == os.SCHED_IDLE
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # this process is untouched
    data = os.urandom(1 << 20)
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(h.result()))
    with open(fifo, "wb") as w:  # opens once the child has opened it for reading
        reader.start()
        time.sleep(0.2)  # result() raises the child while it still waits for bytes
        w.write(data)
    reader.join(20)
    assert result == [hashlib.sha256(data).hexdigest()]
    assert h.after in ("raised to normal priority", "finished in the background")


def test_where_the_child_cannot_be_raised_this_process_hashes(tmp_path, monkeypatch):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    h = identity.IdleSha256(fifo, tmp_path / "memo")  # blocked until a writer opens the FIFO

    def refuse(*_a):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(identity.os, "sched_setscheduler", refuse)
    monkeypatch.setattr(identity, "_file_sha256", lambda p: "f" * 64)  # the FIFO has no bytes to hash again
    assert h.result() == "f" * 64
    assert h.after.startswith("hashed here") and h._child is None


def test_a_child_that_cannot_read_the_file_raises(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(b"x")
    h = identity.IdleSha256(path, tmp_path / "memo")
    h._child.communicate()  # finished: now make its answer a failure
    h._child = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit('Permission denied: blob')"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with pytest.raises(OSError, match="Permission denied"):
        h.result()


def test_a_failed_build_stops_the_child_and_memoises_nothing(tmp_path, monkeypatch):
    from kit.web.zim import archive as archive_mod

    path = _write(tmp_path / "a.zim")

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(archive_mod, "build_archive", boom)
    arch = _ZimArchive(path, tmp_path / "ix")
    with pytest.raises(Exception, match="No space left"):
        arch.build(tmp_path / "out")
    assert identity.memoised_sha256(path, arch.fingerprints) is None
    assert not [c for c in psutil.Process().children() if "hashlib" in " ".join(c.cmdline())]


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
