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


def _fifo_with_writer(tmp_path, data: bytes, start: threading.Event):
    """A FIFO and a thread that opens it for writing (so the hasher's open returns) and writes
    ``data`` once ``start`` is set."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def write():
        try:
            with open(fifo, "wb") as w:
                start.wait(20)
                w.write(data)
        except BrokenPipeError:  # the reader was stopped (an interrupted wait)
            pass

    writer = threading.Thread(target=write)
    writer.start()
    return fifo, writer


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SCHED_IDLE is Linux's")
def test_the_child_hashes_at_idle_priority_and_is_raised_when_the_build_ends(tmp_path):
    """The child blocks reading the FIFO while its policy is looked at; result() finds it running."""
    data, start = os.urandom(1 << 20), threading.Event()
    fifo, writer = _fifo_with_writer(tmp_path, data, start)
    h = identity.IdleSha256(fifo, tmp_path / "memo")
    deadline = time.monotonic() + 20
    while os.sched_getscheduler(h._child.pid) != os.SCHED_IDLE and time.monotonic() < deadline:
        time.sleep(0.01)
    assert os.sched_getscheduler(h._child.pid) == os.SCHED_IDLE
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # this process is untouched
    threading.Timer(0.3, start.set).start()  # the bytes come after result() has raised the child
    assert h.result() == hashlib.sha256(data).hexdigest()
    writer.join(20)
    assert h.after == "raised to normal priority"  # root here; an ordinary user: the next test


def test_where_the_child_cannot_be_raised_this_process_hashes(tmp_path, monkeypatch):
    data, start = os.urandom(1 << 20), threading.Event()
    fifo, writer = _fifo_with_writer(tmp_path, data, start)
    h = identity.IdleSha256(fifo, tmp_path / "memo")  # its child waits for bytes

    def refuse(*_a):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(identity.os, "sched_setscheduler", refuse)
    threading.Timer(0.3, start.set).start()  # written once the child is gone: read here, all of it
    assert h.result() == hashlib.sha256(data).hexdigest()
    writer.join(20)
    assert h.after.startswith("hashed here") and h._child is None and h._fh is None


def test_a_child_that_fails_leaves_the_hash_to_this_process(tmp_path, caplog):
    path = tmp_path / "blob"
    path.write_bytes(os.urandom(1 << 16))
    h = identity.IdleSha256(path, tmp_path / "memo")
    h._child.communicate()  # finished: now make its answer a failure
    h._child = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit('Permission denied: blob')"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert h.result() == _sha256(path)
    assert h.after == "hashed here (the child failed)"
    assert any("Permission denied" in r.getMessage() for r in caplog.records)


def test_an_interrupted_wait_leaves_no_child(tmp_path, monkeypatch):
    data, start = b"x" * 1000, threading.Event()
    fifo, writer = _fifo_with_writer(tmp_path, data, start)
    h = identity.IdleSha256(fifo, tmp_path / "memo")
    child = h._child

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(child, "communicate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        h.result()
    assert child.poll() is not None  # killed and reaped
    start.set()
    writer.join(20)


def test_the_child_stops_when_its_parent_is_gone(tmp_path):
    """A killed build leaves no orphan reading the archive: the child checks its parent's pid."""
    path = tmp_path / "blob"
    path.write_bytes(os.urandom(20 << 20))
    with open(path, "rb") as f:
        proc = subprocess.run([sys.executable, "-I", "-c", identity._CHILD, str(f.fileno()), "1"],
                              pass_fds=(f.fileno(),), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3 and proc.stdout == ""  # "1" is not its parent: it stops at once


def test_a_file_replaced_while_hashed_is_not_memoised(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(b"old bytes")
    h = identity.IdleSha256(path, tmp_path / "memo", background=False)
    (tmp_path / "new").write_bytes(b"new bytes!")
    os.replace(tmp_path / "new", path)
    assert h.result() == hashlib.sha256(b"old bytes").hexdigest()  # the file it opened
    assert identity.memoised_sha256(path, tmp_path / "memo") is None


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


def test_an_index_built_from_unreadable_entries_is_rebuilt_once_the_file_changes(tmp_path):
    """A partly downloaded archive has its final key already: its index is not kept for good."""
    path = _write(tmp_path / "a.zim")
    web = LocalZimWeb([path], index_dir=tmp_path / "ix")
    web.ensure_ready()
    arch = web.archives[0]
    manifest_file = arch.index_dir / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    assert manifest["mtime_ns"] == path.stat().st_mtime_ns
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))  # a clean build: kept
    LocalZimWeb([path], index_dir=tmp_path / "ix").archives[0].load()
    manifest["skipped_articles"] = {**manifest["skipped_articles"], "unreadable": 2}  # as a partial file gives
    manifest_file.write_text(json.dumps(manifest))
    again = LocalZimWeb([path], index_dir=tmp_path / "ix")
    with pytest.raises(ValueError, match="could not read 2 of its entries"):
        again.archives[0].load()
    assert again.archives[0].key == arch.key and again.ensure_ready()[0] == "a"  # rebuilt


@pytest.mark.parametrize("memoised", [False, True])
def test_the_manifest_records_the_file_as_it_was_when_the_build_began(tmp_path, monkeypatch, memoised):
    """A file that changes during the build (a download still running) differs from the recorded
    size and mtime afterwards, so :meth:`_ZimArchive.load` can tell."""
    from kit.web.zim import archive as archive_mod

    path = _write(tmp_path / "a.zim")
    before = path.stat()
    arch = _ZimArchive(path, tmp_path / "ix")
    if memoised:
        archive_sha256(path, arch.fingerprints)
    real = archive_mod.build_archive

    def build_while_the_file_changes(*a, **k):
        counts = real(*a, **k)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 5 * 10**9))
        return counts

    monkeypatch.setattr(archive_mod, "build_archive", build_while_the_file_changes)
    (tmp_path / "out").mkdir()
    manifest = arch.build(tmp_path / "out")
    assert (manifest["size"], manifest["mtime_ns"]) == (before.st_size, before.st_mtime_ns)
    assert path.stat().st_mtime_ns != manifest["mtime_ns"]
