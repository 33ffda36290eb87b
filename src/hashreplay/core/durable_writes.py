"""Many files written at once, each atomically and durably (issue 17 item 3).

Each file goes through a temp file (under `.hashreplay/tmp`, see `temp_files`) that is
written and fsynced, then renamed over its target; once every file of the batch is in
place, each directory that received one is fsynced once, so its new entries survive a
crash too. A file counts as written only after all of that.

Writing one file after another costs one full fsync wait each (0.1 to 5 ms here: a
2,500-file flush took a second). The system calls release the GIL, so the batch is split
over a small pool of threads, whose fsyncs the file system commits together; the Python
between the calls is all that holds the GIL. A batch of one file is written on the
calling thread.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hashreplay.core.temp_files import create_temp

__all__ = ["DEFAULT_THREADS", "DurableWrites"]

#: Threads that write and fsync at once: fsync waits on the disk, not on the cores (2,500
#: files: 8 threads 226-307 ms of fsyncs and renames, 16 threads 167-221 ms, 32 no better).
DEFAULT_THREADS = 16
#: Directories can be opened (to fsync them) on POSIX systems only.
_SYNC_DIRECTORIES = os.name == "posix"
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


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
        chunks = [files[i :: self.threads] for i in range(min(self.threads, len(files)))]
        if len(chunks) <= 1:
            results = [self._write_chunk(chunk) for chunk in chunks]
        else:
            results = list(self._executor().map(self._write_chunk, chunks))
        for failed in results:
            failures.update(failed)
        directories: dict[Path, list[Path]] = {}
        for path, _content in files:
            if path not in failures:
                directories.setdefault(path.parent, []).append(path)
        for directory, error in self._sync_directories(list(directories)).items():
            for path in directories[directory]:
                failures[path] = error
        return failures

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    # --- one file ------------------------------------------------------------------------

    def _write_chunk(self, chunk: Sequence[tuple[Path, bytes]]) -> dict[Path, OSError]:
        failures: dict[Path, OSError] = {}
        for path, content in chunk:
            try:
                self._write_one(path, content)
            except OSError as exc:
                failures[path] = exc
        return failures

    def _write_one(self, path: Path, content: bytes) -> None:
        parent = path.parent
        if parent not in self._made:
            parent.mkdir(parents=True, exist_ok=True)
            self._made.add(parent)
        temp_dir = self.temp_dir
        tmp = _synced_temp(temp_dir or parent, path, content)
        try:
            tmp.replace(path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            if exc.errno == errno.EXDEV and temp_dir is not None:
                self.temp_dir = None  # another file system: temp files beside the targets
            elif exc.errno == errno.ENOENT and not parent.is_dir():
                self._made.discard(parent)  # the directory was removed since
                parent.mkdir(parents=True, exist_ok=True)
            else:
                raise
            _synced_temp(self.temp_dir or parent, path, content).replace(path)

    # --- directories ---------------------------------------------------------------------

    def _sync_directories(self, directories: list[Path]) -> dict[Path, OSError]:
        if not _SYNC_DIRECTORIES or not directories:
            return {}
        if len(directories) == 1:
            results = [_sync_directory(directories[0])]
        else:
            results = list(self._executor().map(_sync_directory, directories))
        pairs = zip(directories, results, strict=True)
        return {directory: error for directory, error in pairs if error is not None}

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="hashreplay-fsync")
        return self._pool


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
