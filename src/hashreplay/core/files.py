"""Atomic writes and their temp files (docs/design.md §4): writing through a temp file,
where it goes, and sweeping stale ones.

A recording is written to a temp file, fsynced, then renamed over its target. A writer
killed in between leaves the temp file behind. So temp files go to `.hashreplay/tmp/` at the
project root (ignored by git through `.hashreplay/.gitignore`), or beside the target only
when that is on another file system (a common directory elsewhere); their names carry the
writer's process id, so a sweep at start removes those of dead writers (and any older than
`STALE_AFTER`) and never touches a live writer's file or any file not named by our pattern.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import random
import re
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from hashreplay.core.constants import STATE_DIRNAME

__all__ = [
    "STALE_AFTER",
    "TEMP_DIRNAME",
    "create_temp",
    "is_temp_name",
    "state_temp_dir",
    "sweep_temp_files",
    "temp_prefix",
]


#: Sub-directory of `.hashreplay/` that holds temp files.
TEMP_DIRNAME = "tmp"


#: A temp file older than this (seconds) is stale even if its writer's pid is alive again.
STALE_AFTER = 3600.0


#: `.<target>.<pid>.<random>.tmp` (and `.<target>.<random>.tmp`, the pattern before pids);
#: compiled on first use (the `re` module's cache), not at import: start-up time
_TEMP = r"^\.(?P<target>.+?)\.(?:(?P<pid>\d+)\.)?[a-z0-9_]{8}\.tmp$"


_GITIGNORE = b"*\n"


_GRACE = 10.0


_OLD_PATTERN_AGE = 60.0


def temp_prefix(target: Path) -> str:
    return f".{target.name}.{os.getpid()}."


_NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"


_names = random.Random()


_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def create_temp(directory: Path, target: Path) -> tuple[int, Path]:
    """A new temp file for `target` in `directory`, open for writing: named by our pattern,
    with the permissions `open()` gives a new file or, when `target` exists, the target's.
    One `open` (plus a `stat`, and an `fchmod` for a file that exists): `tempfile.mkstemp`
    costs a `fchmod` more for every file, which a batch of thousands of files notices."""
    prefix = temp_prefix(target)
    for _attempt in range(100):
        suffix = "".join(_names.choices(_NAME_CHARS, k=8))
        tmp = directory / f"{prefix}{suffix}.tmp"
        try:
            fd = os.open(tmp, _OPEN_FLAGS, 0o666)
        except FileExistsError:
            continue  # another writer's name: draw again
        try:
            mode = target.stat().st_mode & 0o777  # an existing file keeps its permissions
        except OSError:
            return fd, tmp
        try:
            os.fchmod(fd, mode)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        return fd, tmp
    raise FileExistsError(f"no unused temp file name in {directory} for {target.name}")


def is_temp_name(name: str) -> bool:
    return re.match(_TEMP, name) is not None


def state_temp_dir(root: Path) -> Path:
    """`<root>/.hashreplay/tmp`, created with the `.gitignore` that hides `.hashreplay/`."""
    state = root / STATE_DIRNAME
    temp = state / TEMP_DIRNAME
    if not temp.is_dir():
        temp.mkdir(parents=True, exist_ok=True)
    ignore = state / ".gitignore"
    if not ignore.exists():
        with contextlib.suppress(OSError):
            ignore.write_bytes(_GITIGNORE)
    return temp


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists, owned by someone else
    return True


def _stale(path: Path, now: float) -> bool:
    match = re.match(_TEMP, path.name)
    if match is None:
        return False
    try:
        age = now - path.lstat().st_mtime
    except OSError:
        return False
    pid = match.group("pid")
    if pid is None:
        return age > _OLD_PATTERN_AGE  # the old pattern: no pid to ask
    # a live write takes milliseconds: a young file may belong to a writer in another pid
    # namespace (a container sharing the directory), so a dead pid counts only after a while
    return age > STALE_AFTER or (age > _GRACE and not _alive(int(pid)))


def sweep_temp_files(directories: Iterable[Path]) -> list[Path]:
    """Delete the stale temp files (our pattern only) in `directories`; returns them."""
    now = time.time()
    removed: list[Path] = []
    for directory in directories:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            path = Path(entry.path)
            if entry.is_file(follow_symlinks=False) and _stale(path, now):
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed.append(path)
    return removed


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: Permissions of a new recording: what `open()` would give (mkstemp makes files 0600,
#: which would make every recording unreadable to the rest of a team's tooling).
_FILE_MODE = 0o666 & ~_current_umask()


def _temp_in(directory: Path, path: Path) -> tuple[int, str]:
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=temp_prefix(path), suffix=".tmp")
    try:
        mode = path.stat().st_mode & 0o777  # an existing file keeps its permissions
    except OSError:
        mode = _FILE_MODE
    os.fchmod(fd, mode)
    return fd, tmp


def _write_temp(directory: Path, path: Path, content: bytes) -> str:
    fd, tmp = _temp_in(directory, path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            Path(tmp).unlink()
        raise
    return tmp


def write_bytes_atomic(path: Path, content: bytes, temp_dir: Path | None = None) -> None:
    """Write via a temp file (in `temp_dir`, else beside `path`), flush + fsync, then
    `os.replace`. A `temp_dir` on another file system falls back to beside `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _write_temp(temp_dir or path.parent, path, content)
    try:
        Path(tmp).replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            Path(tmp).unlink()
        if temp_dir is None or exc.errno != errno.EXDEV:
            raise
        write_bytes_atomic(path, content)
    except BaseException:
        with contextlib.suppress(OSError):
            Path(tmp).unlink()
        raise


async def awrite_bytes_atomic(path: Path, content: bytes, temp_dir: Path | None = None) -> None:
    import aiofiles  # only event-loop front ends write this way: not loaded at start-up
    import aiofiles.os

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _temp_in(temp_dir or path.parent, path)
    os.close(fd)
    try:
        async with aiofiles.open(tmp, "wb") as f:
            await f.write(content)
            await f.flush()
            await asyncio.to_thread(os.fsync, f.fileno())
        await aiofiles.os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            Path(tmp).unlink()
        if temp_dir is None or exc.errno != errno.EXDEV:
            raise
        await awrite_bytes_atomic(path, content)
    except BaseException:
        with contextlib.suppress(OSError):
            Path(tmp).unlink()
        raise
