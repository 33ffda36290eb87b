"""Recordings written behind the caller in durable batches (docs/design.md §4).

Each file goes through a temp file (under `.hashreplay/tmp`, see `core/atomic.py`) that is
written and fsynced, then renamed over its target; once every file of the batch is in
place, each directory that received one is fsynced once, so its new entries survive a
crash too. A file counts as written only after all of that.

Writing one file after another costs one full fsync wait each (0.1 to 5 ms here: a
2,500-file flush took seconds). So a batch goes in phases, up to `GROUP` files at a time:
every temp file created and written (on the calling thread: creates in one directory wait
on its lock, and threads contending for it only burn CPU), then all of them fsynced by a
small pool of threads (fsync releases the GIL; the file system commits concurrent fsyncs
together, and with every new entry already made, one journal commit carries them all),
then each renamed over its target; then the directories, from the pool again. A batch of
one file is written on the calling thread alone (a few fsyncs one after another on the
writer thread let it fall behind a run on a loaded disk, where one fsync waits 2 to 10 ms).

Write-behind: an fsynced atomic write costs 0.3 to 5 ms, serialising a recording 40 to 90
µs; so the engine submits finished bytes or a `Stage` (a function that returns them), and
one writer thread runs the stages and writes in batches: what was queued meanwhile, each
path at its latest version (first in, first out; a version replaced before it was written
is never serialised). Having taken a first job, the writer lingers `LINGER` seconds for more
(a flush or a close cuts that short; a writer with jobs waiting already does not wait): a
call every few milliseconds then costs one wake-up, pool hand-off and directory fsync per
batch of ~10 files, not per file or two. The queue holds at most `MAX_QUEUED` jobs: a
caller that outruns the disk waits in `submit`, so what memory holds until written stays
bounded however many files a run records.

Until a file is on disk, `pending` has its content, so reads see it at once: a read of a
version not staged yet runs its stage on the reading thread (once; the writer then reuses
the bytes). `flush()` waits for everything and reports every failure, a stage that raised
as much as a write that failed; the pytest plugin flushes at the end of the session.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import queue
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from hashreplay.core.atomic import create_temp
from hashreplay.core.errors import HashReplayError, RecordingError, RecordingWriteError

if TYPE_CHECKING:  # the pool is made on the first batch of two files, not at import
    from concurrent.futures import ThreadPoolExecutor

__all__ = [
    "DEFAULT_THREADS",
    "GROUP",
    "LINGER",
    "MAX_BATCH",
    "MAX_QUEUED",
    "BackgroundWriter",
    "Content",
    "DurableWrites",
    "Stage",
]


#: Threads that fsync at once: fsync waits on the disk, not on the cores (2,500 files on
#: the machine of docs/benchmarks.md: 16 threads 125-143 ms of fsyncs, 32 to 128 no better).
DEFAULT_THREADS = 16


#: Files whose temp files are open at once (file descriptors are a limited resource).
GROUP = 256


#: Directories can be opened (to fsync them) on POSIX systems only.
_SYNC_DIRECTORIES = os.name == "posix"


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


_T = TypeVar("_T")


class _Temp:
    """A file on its way: its temp file, open until it is synced."""

    __slots__ = ("content", "error", "fd", "path", "tmp")

    def __init__(self, path: Path, content: bytes) -> None:
        self.path = path
        self.content = content
        self.tmp: Path | None = None
        self.fd = -1
        self.error: OSError | None = None


class DurableWrites:
    """Writes batches of files; one instance per writer thread (it keeps a pool)."""

    def __init__(self, temp_dir: Path | None = None, threads: int = DEFAULT_THREADS) -> None:
        #: where temp files go; None: beside each target (also after a rename across file
        #: systems failed once)
        self.temp_dir = temp_dir
        self.threads = max(1, threads)
        self._pool: ThreadPoolExecutor | None = None
        #: directories known to exist, so the batch makes no `mkdir` call per file
        self._made: set[Path] = set()

    def write(self, files: Sequence[tuple[Path, bytes]]) -> dict[Path, OSError]:
        """Write every `(path, content)` (paths distinct); returns the failures by path.
        A file that failed keeps its previous content, and leaves no temp file behind."""
        failures: dict[Path, OSError] = {}
        directories: dict[Path, list[Path]] = {}
        for start in range(0, len(files), GROUP):
            for item in self._write_group(files[start : start + GROUP]):
                if item.error is not None:
                    failures[item.path] = item.error
                else:
                    directories.setdefault(item.path.parent, []).append(item.path)
        for directory, error in self._sync_directories(list(directories)).items():
            for path in directories[directory]:
                failures[path] = error
        return failures

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    # --- the phases ----------------------------------------------------------------------

    def _write_group(self, files: Sequence[tuple[Path, bytes]]) -> list[_Temp]:
        items = [_Temp(path, content) for path, content in files]
        for item in items:  # on this thread: creates in one directory queue on its lock
            self._open_and_write(item)
        self._each(_sync, [item for item in items if item.error is None])
        for item in items:
            self._put_in_place(item)
        return items

    def _open_and_write(self, item: _Temp) -> None:
        parent = item.path.parent
        try:
            if parent not in self._made:
                parent.mkdir(parents=True, exist_ok=True)
                self._made.add(parent)
            item.fd, item.tmp = create_temp(self.temp_dir or parent, item.path)
            view = memoryview(item.content)
            while view:
                view = view[os.write(item.fd, view) :]
        except OSError as exc:
            item.error = exc

    def _put_in_place(self, item: _Temp) -> None:
        """Close the temp file and rename it over the target (or remove it: failed)."""
        if item.fd >= 0:
            os.close(item.fd)
            item.fd = -1
        tmp = item.tmp
        if tmp is None:
            return
        if item.error is None:
            try:
                tmp.replace(item.path)
                return
            except OSError as exc:
                item.error = exc
        with contextlib.suppress(OSError):
            tmp.unlink()
        if item.error is not None and self._recoverable(item.error, item.path.parent):
            try:
                _synced_temp(self.temp_dir or item.path.parent, item.path, item.content).replace(
                    item.path
                )
                item.error = None
            except OSError as exc:
                item.error = exc

    def _recoverable(self, error: OSError, parent: Path) -> bool:
        """A rename that fails because the temp directory is on another file system (temp
        files go beside the targets from then on) or the target directory was removed
        since (made again); the file is then written once more, on its own."""
        if error.errno == errno.EXDEV and self.temp_dir is not None:
            self.temp_dir = None
            return True
        if error.errno == errno.ENOENT and not parent.is_dir():
            self._made.discard(parent)
            with contextlib.suppress(OSError):
                parent.mkdir(parents=True, exist_ok=True)
                self._made.add(parent)
            return True
        return False

    def _sync_directories(self, directories: list[Path]) -> dict[Path, OSError]:
        if not _SYNC_DIRECTORIES:
            return {}
        errors: dict[Path, OSError] = {}

        def sync(directory: Path) -> None:
            error = _sync_directory(directory)
            if error is not None:
                errors[directory] = error

        self._each(sync, directories)
        return errors

    def _each(self, work: Callable[[_T], None], items: Sequence[_T]) -> None:
        """`work` on every item: on this thread for one item, else split over the pool
        (one chunk per thread, so `threads` calls are under way at once)."""
        if len(items) <= 1:
            for item in items:
                work(item)
            return
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="hashreplay-fsync")
        chunks = [items[i :: self.threads] for i in range(min(self.threads, len(items)))]
        for _ in self._pool.map(functools.partial(_each_of, work), chunks):
            pass


def _each_of(work: Callable[[_T], None], chunk: Sequence[_T]) -> None:
    for item in chunk:
        work(item)


def _sync(item: _Temp) -> None:
    try:
        os.fsync(item.fd)
    except OSError as exc:
        item.error = exc


def _synced_temp(directory: Path, target: Path, content: bytes) -> Path:
    """A temp file for `target` in `directory` holding `content`, on disk (fsynced)."""
    fd, tmp = create_temp(directory, target)
    try:
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return tmp


def _sync_directory(directory: Path) -> OSError | None:
    try:
        fd = os.open(directory, _DIR_FLAGS)
    except OSError as exc:
        return exc
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # a file system that cannot sync directories
            return exc
    finally:
        os.close(fd)
    return None


#: Serialises one file: called once, on the writer thread or by the first read of it.
Stage = Callable[[], bytes]


#: What a write is handed: the bytes, or the stage that makes them.
Content = bytes | Stage


#: Jobs taken off the queue at once (what one batch of parallel fsyncs holds at most).
MAX_BATCH = 1024


#: Jobs queued at most: `submit` waits for room beyond that (bounded memory).
MAX_QUEUED = 1024


#: Seconds the writer waits for more jobs after the first of a batch.
LINGER = 0.02


class _Job:
    """One version of one file: its bytes, made at most once."""

    __slots__ = ("_content", "_error", "_lock", "_stage", "path")

    def __init__(self, path: Path, content: Content) -> None:
        self.path = path
        self._stage: Stage | None = None if isinstance(content, bytes) else content
        self._content: bytes | None = content if isinstance(content, bytes) else None
        self._error: RecordingError | None = None
        self._lock = threading.Lock()

    def content(self) -> bytes:
        """The file's bytes; a RecordingError naming the file when its stage failed."""
        content = self._content
        if content is not None:
            return content
        with self._lock:
            stage, self._stage = self._stage, None
            if stage is not None:
                self._content, self._error = _run(stage, self.path)
            if self._content is None:
                raise self._error or RecordingError(self.path, "cannot stage the recording")
            return self._content


def _run(stage: Stage, path: Path) -> tuple[bytes | None, RecordingError | None]:
    try:
        return stage(), None
    except RecordingError as exc:
        return None, exc
    except HashReplayError as exc:
        return None, RecordingError(path, f"cannot stage the recording: {exc}")
    except Exception as exc:  # a bug must not stop the writer: reported at flush
        return None, RecordingError(
            path, f"cannot stage the recording: {type(exc).__name__}: {exc}"
        )


class BackgroundWriter:
    def __init__(self, temp_dir: Path | None = None, *, threads: int = DEFAULT_THREADS) -> None:
        self._files = DurableWrites(temp_dir, threads)
        self._queue: queue.Queue[_Job | None] = queue.Queue(MAX_QUEUED)
        #: set by `flush` and `close`: the writer stops lingering and writes what it has
        self._hurry = threading.Event()
        self._lock = threading.Lock()
        #: path → latest version queued for it and not yet on disk
        self._pending: dict[Path, _Job] = {}
        self._errors: list[RecordingError] = []
        self._thread: threading.Thread | None = None

    def submit(self, path: Path, content: Content) -> None:
        """Queue a version of `path`: its bytes, or the stage that makes them."""
        job = _Job(path, content)
        with self._lock:
            self._pending[path] = job
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="hashreplay-writer", daemon=True
                )
                self._thread.start()
        self._queue.put(job)

    def pending(self, path: Path) -> bytes | None:
        """The bytes queued for `path` and not yet on disk, or None (a RecordingError when
        they could not be made: the reader sees why, and the flush reports it too)."""
        job = self._pending.get(path)
        return None if job is None else job.content()

    def has_pending(self) -> bool:
        """Whether any write is queued (none, in a run that only replays)."""
        return bool(self._pending)

    def is_pending(self, path: Path) -> bool:
        """Whether a version of `path` is queued (without making its bytes)."""
        return path in self._pending

    def pending_paths(self) -> list[Path]:
        """Every path with a write still queued (a snapshot)."""
        with self._lock:
            return list(self._pending)

    def flush(self) -> None:
        """Wait until every queued write is on disk; raise a `RecordingWriteError` that
        holds every write that failed since the last flush."""
        self._hurry.set()
        self._queue.join()
        with self._lock:
            errors, self._errors = self._errors, []
        if errors:
            raise RecordingWriteError(errors)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            with self._lock:
                thread = self._thread
                self._thread = None
            if thread is not None and thread.is_alive():
                self._queue.put(None)
                thread.join()
            self._files.close()

    # --- the writer thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            if batch[0] is not None and self._queue.empty():
                # caught up: more jobs join the batch meanwhile; a flush or close ends the
                # wait (a flush after the clear finds its jobs queued). Behind, no wait: a
                # writer that paused anyway fell seconds behind a run on a loaded machine
                self._hurry.wait(LINGER)
                self._hurry.clear()
            while len(batch) < MAX_BATCH and batch[-1] is not None:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            jobs = [job for job in batch if job is not None]
            try:
                self._write(jobs)
            except Exception as exc:  # never lose a write silently: the flush reports it
                problem = f"cannot write the recording: {exc!r}"
                self._done(jobs, [RecordingError(job.path, problem) for job in jobs])
            finally:
                for _ in batch:
                    self._queue.task_done()
            if len(jobs) < len(batch):
                return  # `close()` queued the end

    def _write(self, jobs: list[_Job]) -> None:
        latest = {job.path: job for job in jobs}  # a later version replaces an earlier one
        errors: list[RecordingError] = []
        files: list[tuple[Path, bytes]] = []
        for path, job in latest.items():
            try:
                files.append((path, job.content()))
            except RecordingError as exc:
                errors.append(exc)
        for path, failure in self._files.write(files).items():
            errors.append(RecordingError(path, f"cannot write the recording: {failure}"))
        self._done(jobs, errors)

    def _done(self, jobs: list[_Job], errors: list[RecordingError]) -> None:
        with self._lock:
            self._errors.extend(errors)
            for job in jobs:
                if self._pending.get(job.path) is job:
                    del self._pending[job.path]
