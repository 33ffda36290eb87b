"""Many files written at once, each atomically and durably (docs/design.md §4).

Each file goes through a temp file (under `.hashreplay/tmp`, see `temp_files`) that is
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
one file is written on the calling thread alone.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from hashreplay.core.temp_files import create_temp

__all__ = ["DEFAULT_THREADS", "GROUP", "DurableWrites"]

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
