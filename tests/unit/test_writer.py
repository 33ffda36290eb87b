"""The write-behind writer (docs/design.md §4): batches written with parallel fsyncs and each
directory synced once, a failure among many named at the flush, stages run once (on the
writer thread or by the first read), and a version replaced before it was written never
serialised."""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hashreplay.core import writer as durable_writes
from hashreplay.core.atomic import create_temp, is_temp_name
from hashreplay.core.errors import BodyTooLarge, RecordingError, RecordingWriteError
from hashreplay.core.writer import BackgroundWriter, DurableWrites


class Fsyncs:
    """Records every fsync (file or directory, and from which thread); fails the files
    named in `fail`, holds each file's fsync until `release` is set (if `hold`)."""

    def __init__(self) -> None:
        self.real = os.fsync
        self.lock = threading.Lock()
        self.files: list[str] = []
        self.directories: list[str] = []
        self.threads: set[str] = set()
        self.fail: set[str] = set()
        self.fail_directories = False
        self.hold = False
        self.release = threading.Event()
        self.waiting = 0

    def __call__(self, fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
        with self.lock:
            (self.directories if is_dir else self.files).append(name)
            self.threads.add(threading.current_thread().name)
            self.waiting += not is_dir
        if is_dir and self.fail_directories:
            raise OSError(errno.EIO, "Input/output error")
        if not is_dir and any(part in name for part in self.fail):
            raise OSError(errno.ENOSPC, "No space left on device")
        if self.hold and not is_dir:
            assert self.release.wait(10)
        self.real(fd)


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fsyncs]:
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("the fsync spy names each file through /proc/self/fd (Linux only)")
    spy = Fsyncs()
    monkeypatch.setattr(os, "fsync", spy)
    yield spy
    spy.release.set()


def hold_writer(writer: BackgroundWriter, root: Path) -> threading.Event:
    """Keep the writer thread busy on a first file until the returned event is set, so what
    is submitted next waits in the queue (and forms the next batch)."""
    inside, gate = threading.Event(), threading.Event()

    def first() -> bytes:
        inside.set()
        assert gate.wait(10)
        return b"first\n"

    writer.submit(root / "first.json", first)
    assert inside.wait(10)
    return gate


def files_in(root: Path, count: int, directories: int = 3) -> list[tuple[Path, bytes]]:
    return [
        (root / f"d{i % directories}" / f"{i:032x}.json", f'{{"n": {i}}}\n'.encode())
        for i in range(count)
    ]


def test_a_batch_is_written_with_parallel_fsyncs_and_each_directory_synced_once(
    tmp_path: Path, fsyncs: Fsyncs
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    writes = DurableWrites(temp, threads=4)
    files = files_in(tmp_path / "rec", 40)
    assert writes.write(files) == {}
    writes.close()
    for path, content in files:
        assert path.read_bytes() == content
    assert list(temp.iterdir()) == []
    assert len(fsyncs.files) == 40
    assert all(is_temp_name(Path(name).name) for name in fsyncs.files)  # synced before the rename
    assert sorted(fsyncs.directories) == sorted(str(tmp_path / "rec" / f"d{k}") for k in range(3))
    assert len([t for t in fsyncs.threads if t.startswith("hashreplay-fsync")]) > 1


def test_the_fsyncs_of_a_batch_wait_on_the_disk_together(tmp_path: Path, fsyncs: Fsyncs) -> None:
    fsyncs.hold = True
    writes = DurableWrites(tmp_path / "tmp", threads=4)
    (tmp_path / "tmp").mkdir()
    done = threading.Thread(target=writes.write, args=(files_in(tmp_path / "rec", 8),))
    done.start()
    for _ in range(1000):  # every thread of the pool reaches its fsync before any returns
        with fsyncs.lock:
            if fsyncs.waiting >= 4:
                break
        threading.Event().wait(0.01)
    assert fsyncs.waiting == 4
    fsyncs.release.set()
    done.join(10)
    writes.close()
    assert len(fsyncs.files) == 8


def test_one_failed_file_among_many_fails_the_flush_and_is_named(
    tmp_path: Path, fsyncs: Fsyncs
) -> None:
    files = files_in(tmp_path / "rec", 30)
    bad = files[17][0]
    fsyncs.fail = {bad.name}
    previous = b'{"previous": true}\n'
    bad.parent.mkdir(parents=True)
    bad.write_bytes(previous)
    writer = BackgroundWriter(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    for path, content in files:
        writer.submit(path, content)
    with pytest.raises(RecordingWriteError) as info:
        writer.flush()
    writer.close()
    assert [f.path for f in info.value.failures] == [bad]
    assert str(info.value).startswith(f"recording {bad}: 1 recording could not be written")
    assert f"recording {bad}: cannot write the recording: [Errno 28] No space left" in str(
        info.value
    )
    assert bad.read_bytes() == previous  # the old content, no half-written file
    for path, content in files:
        if path != bad:
            assert path.read_bytes() == content
    assert list((tmp_path / "tmp").iterdir()) == []  # its temp file removed


def test_a_directory_that_cannot_be_synced_fails_its_files(tmp_path: Path, fsyncs: Fsyncs) -> None:
    fsyncs.fail_directories = True
    writer = BackgroundWriter(None)
    files = files_in(tmp_path, 4, directories=2)
    for path, content in files:
        writer.submit(path, content)
    with pytest.raises(RecordingWriteError) as info:
        writer.flush()
    writer.close()
    assert sorted(f.path for f in info.value.failures) == sorted(p for p, _ in files)


def test_reads_see_a_staged_write_and_the_stage_runs_once(tmp_path: Path) -> None:
    path = tmp_path / "rec" / "a.json"
    calls: list[str] = []

    def stage() -> bytes:
        calls.append(threading.current_thread().name)
        return b"staged\n"

    writer = BackgroundWriter(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    gate = hold_writer(writer, tmp_path)  # the stage below is still queued when read
    writer.submit(path, stage)
    assert writer.is_pending(path)
    assert calls == []  # submitting never serialises
    assert writer.pending(path) == b"staged\n"  # the read serialises it, on this thread
    assert calls == [threading.current_thread().name]
    gate.set()
    writer.flush()
    assert path.read_bytes() == b"staged\n"
    assert calls == [threading.current_thread().name]  # the writer reused the bytes
    assert not writer.is_pending(path)
    assert writer.pending(path) is None
    writer.close()


def test_stages_run_on_the_writer_thread(tmp_path: Path) -> None:
    names: list[str] = []

    def stage() -> bytes:
        names.append(threading.current_thread().name)
        return b"x\n"

    writer = BackgroundWriter(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    writer.submit(tmp_path / "a.json", stage)
    writer.close()
    assert names == ["hashreplay-writer"]
    assert (tmp_path / "a.json").read_bytes() == b"x\n"


def test_a_version_replaced_before_it_was_written_is_never_serialised(tmp_path: Path) -> None:
    staged: list[int] = []
    path = tmp_path / "seq.json"

    def version(n: int) -> bytes:
        staged.append(n)
        return f"{n}\n".encode()

    writer = BackgroundWriter(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    gate = hold_writer(writer, tmp_path)
    for n in range(1, 5):
        writer.submit(path, lambda n=n: version(n))  # type: ignore[misc]
    gate.set()
    writer.close()
    assert staged == [4]
    assert path.read_bytes() == b"4\n"


def test_a_failed_stage_fails_the_flush_and_the_read_names_it(tmp_path: Path) -> None:
    path = tmp_path / "rec" / "a.json"

    def too_large() -> bytes:
        raise BodyTooLarge(test_id="t", url="http://x/v1", where="response body", size=9, limit=8)

    def broken() -> bytes:
        raise TypeError("Type is not JSON serializable: set")

    writer = BackgroundWriter(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    gate = hold_writer(writer, tmp_path)
    writer.submit(path, too_large)
    writer.submit(tmp_path / "rec" / "b.json", broken)
    with pytest.raises(RecordingError) as read:
        writer.pending(path)
    assert read.value.path == path
    assert "cannot stage the recording: hashreplay: not recorded" in str(read.value)
    gate.set()
    with pytest.raises(RecordingWriteError) as info:
        writer.flush()
    assert [f.path for f in info.value.failures] == [path, tmp_path / "rec" / "b.json"]
    assert "cannot stage the recording: TypeError: Type is not JSON serializable" in str(info.value)
    assert not path.exists()
    assert writer.pending(path) is None
    writer.flush()  # reported once
    writer.close()


def test_the_writer_keeps_writing_after_a_failure(tmp_path: Path) -> None:
    writer = BackgroundWriter(None)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a directory must go")
    writer.submit(blocker / "a.json", b"a\n")
    with pytest.raises(RecordingWriteError):
        writer.flush()
    writer.submit(tmp_path / "b.json", b"b\n")
    writer.close()
    assert (tmp_path / "b.json").read_bytes() == b"b\n"


def test_a_temp_dir_on_another_file_system_falls_back_beside_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = Path.replace
    crossed: list[Path] = []

    def replace(self: Path, target: Path) -> Path:
        if self.parent.name == "tmp":
            crossed.append(self)
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real(self, target)

    monkeypatch.setattr(Path, "replace", replace)
    (tmp_path / "tmp").mkdir()
    writes = DurableWrites(tmp_path / "tmp", threads=1)
    target = tmp_path / "rec" / "a.json"
    assert writes.write([(target, b"a\n")]) == {}
    assert target.read_bytes() == b"a\n"
    assert writes.temp_dir is None  # later files go beside their targets at once
    assert writes.write([(tmp_path / "rec" / "b.json", b"b\n")]) == {}
    assert len(crossed) == 1
    assert list((tmp_path / "tmp").iterdir()) == []
    assert sorted(p.name for p in (tmp_path / "rec").iterdir()) == ["a.json", "b.json"]


def test_a_recordings_directory_removed_between_batches_is_made_again(tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    writes = DurableWrites(tmp_path / "tmp", threads=1)
    directory = tmp_path / "rec"
    assert writes.write([(directory / "a.json", b"a\n")]) == {}
    (directory / "a.json").unlink()
    directory.rmdir()
    assert writes.write([(directory / "b.json", b"b\n")]) == {}
    assert (directory / "b.json").read_bytes() == b"b\n"


def test_temp_files_keep_the_targets_permissions(tmp_path: Path) -> None:
    target = tmp_path / "a.json"
    target.write_bytes(b"old")
    target.chmod(0o640)
    fd, tmp = create_temp(tmp_path, target)
    os.close(fd)
    assert is_temp_name(tmp.name)
    assert stat.S_IMODE(tmp.stat().st_mode) == 0o640
    new_fd, new_tmp = create_temp(tmp_path, tmp_path / "new.json")
    os.close(new_fd)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(new_tmp.stat().st_mode) == 0o666 & ~umask


def test_one_file_is_written_on_the_calling_thread(tmp_path: Path, fsyncs: Fsyncs) -> None:
    writes = DurableWrites(None, threads=4)
    assert writes.write([(tmp_path / "a.json", b"a\n")]) == {}
    assert fsyncs.threads == {threading.current_thread().name}
    assert durable_writes.DEFAULT_THREADS > 1


def test_a_caller_that_outruns_the_disk_waits_for_room_in_the_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(durable_writes, "MAX_QUEUED", 3)
    writer = BackgroundWriter(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    gate = hold_writer(writer, tmp_path)
    for n in range(3):
        writer.submit(tmp_path / f"{n}.json", b"queued\n")
    fourth = threading.Thread(target=writer.submit, args=(tmp_path / "3.json", b"waits\n"))
    fourth.start()
    fourth.join(0.2)
    assert fourth.is_alive()  # the queue is full: what memory holds stays bounded
    gate.set()
    fourth.join(10)
    assert not fourth.is_alive()
    writer.close()
    assert [(tmp_path / f"{n}.json").read_bytes() for n in range(4)] == [b"queued\n"] * 3 + [
        b"waits\n"
    ]


def test_a_flush_does_not_wait_for_the_writer_to_linger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(durable_writes, "LINGER", 3600.0)  # only a flush ends the wait
    writer = BackgroundWriter(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    writer.submit(tmp_path / "a.json", b"a\n")
    flushing = threading.Thread(target=writer.flush)
    flushing.start()
    flushing.join(30)
    assert not flushing.is_alive()
    assert (tmp_path / "a.json").read_bytes() == b"a\n"
    writer.submit(tmp_path / "b.json", b"b\n")
    writer.close()
    assert (tmp_path / "b.json").read_bytes() == b"b\n"
