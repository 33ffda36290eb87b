"""Write-behind for recordings: the caller hands over a file's content, or the step that
serialises it; one thread stages and writes.

A record-mode call should cost about what the live call costs; an fsynced atomic write costs
0.3 to 5 ms on ordinary disks, and serialising a recording (building the file's JSON,
scrubbing the request's credential values, the canonical dump) 40 to 90 µs. So the engine
submits either finished bytes or a `Stage` (a function that returns them), and one writer
thread runs the stages and writes in batches: whatever was queued while it wrote the last
batch, each path at its latest version (first in, first out: a later version of a file
lands after an earlier one, and a version that a later one replaces before it was written
is never serialised), through `DurableWrites` (parallel fsyncs, each directory synced once).

Until a file is on disk, `pending` has its content, so reads see it at once: a read of a
version not staged yet runs its stage on the reading thread (once; the writer then reuses
the bytes). `flush()` waits for everything and reports every failure, a stage that raised
as much as a write that failed; the pytest plugin flushes at the end of the session.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from pathlib import Path

from hashreplay.core.durable_writes import DEFAULT_THREADS, DurableWrites
from hashreplay.core.errors import HashReplayError, RecordingError, RecordingWriteError

__all__ = ["MAX_BATCH", "BackgroundWriter", "Content", "Stage"]

#: Serialises one file: called once, on the writer thread or by the first read of it.
Stage = Callable[[], bytes]
#: What a write is handed: the bytes, or the stage that makes them.
Content = bytes | Stage
#: Jobs taken off the queue at once (what one batch of parallel fsyncs holds at most).
MAX_BATCH = 1024


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
        self._queue: queue.Queue[_Job | None] = queue.Queue()
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
