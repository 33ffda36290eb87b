"""Write-behind for recordings: the caller serialises, one thread writes.

A record-mode call should cost about what the live call costs; an fsynced atomic write costs
0.3 to 5 ms on ordinary disks. So the engine hands the finished bytes to one writer thread
(first in, first out: later versions of a file land after earlier ones) and keeps them in
`pending` until they are on disk, so reads see them at once. `flush()` waits for everything
and reports every failure; the pytest plugin flushes at the end of the session.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path

from hashreplay.core.errors import RecordingError, RecordingWriteError
from hashreplay.core.store import write_bytes_atomic


class BackgroundWriter:
    def __init__(self, temp_dir: Path | None = None) -> None:
        self._temp_dir = temp_dir
        self._queue: queue.Queue[tuple[Path, bytes] | None] = queue.Queue()
        self._lock = threading.Lock()
        #: path → latest bytes queued for it and not yet on disk
        self._pending: dict[Path, bytes] = {}
        self._errors: list[RecordingError] = []
        self._thread: threading.Thread | None = None

    def submit(self, path: Path, content: bytes) -> None:
        with self._lock:
            self._pending[path] = content
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="hashreplay-writer", daemon=True
                )
                self._thread.start()
        self._queue.put((path, content))

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                path, content = job
                try:
                    write_bytes_atomic(path, content, self._temp_dir)
                except OSError as exc:
                    with self._lock:
                        self._errors.append(
                            RecordingError(path, f"cannot write the recording: {exc}")
                        )
                with self._lock:
                    if self._pending.get(path) is content:
                        del self._pending[path]
            finally:
                self._queue.task_done()

    def pending(self, path: Path) -> bytes | None:
        """The bytes queued for `path` and not yet on disk, or None."""
        return self._pending.get(path)

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
        self.flush()
        with self._lock:
            thread = self._thread
            self._thread = None
        if thread is not None and thread.is_alive():
            self._queue.put(None)
            thread.join()
