"""Atomic writes (docs/design.md §4): a temp file, fsynced, renamed over its target; temp files
live in `.hashreplay/tmp/` (or beside a target on another file system) and carry the writer's
pid, so a sweep removes only those of dead writers (or older than `STALE_AFTER`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import re
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from hashreplay.core.constants import STATE_DIRNAME

#: Sub-directory of `.hashreplay/` that holds temp files.
TEMP_DIRNAME = "tmp"

#: A temp file older than this (seconds) is stale even if its writer's pid is alive again.
STALE_AFTER = 3600.0

#: `.<target>.<pid>.<random>.tmp` (and `.<target>.<random>.tmp`, the pattern before pids);
#: compiled on first use (the `re` module's cache), not at import: start-up time
_TEMP = r"^\.(?P<target>.+?)\.(?:(?P<pid>\d+)\.)?[a-z0-9_]{8}\.tmp$"

_GRACE = 10.0

_OLD_PATTERN_AGE = 60.0

_NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"

_names = random.Random()

_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def create_temp(directory: Path, target: Path) -> tuple[int, Path]:
    """A new temp file for `target` in `directory`, open for writing, named by our pattern, with
    the permissions `open()` gives or the existing target's (`tempfile.mkstemp` makes files
    0600, unreadable to a team's tooling, and costs a `fchmod` more per file: a batch of
    thousands notices)."""
    prefix = f".{target.name}.{os.getpid()}."
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
    temp = root / STATE_DIRNAME / TEMP_DIRNAME
    if not temp.is_dir():
        temp.mkdir(parents=True, exist_ok=True)
    ignore = temp.parent / ".gitignore"
    if not ignore.exists():
        with contextlib.suppress(OSError):
            ignore.write_bytes(b"*\n")
    return temp


def _alive(pid: int) -> bool:
    """Whether a temp file's writer may still run. Windows has no probe: `os.kill(pid, 0)`
    sends CTRL_C_EVENT there, so every writer counts as alive and its file goes only once
    it is older than `STALE_AFTER`."""
    if pid == os.getpid() or sys.platform == "win32":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # exists, owned by someone else
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


def _discard(tmp: Path, exc: BaseException, temp_dir: Path | None) -> bool:
    """Delete `tmp`; whether to write again beside the target (`temp_dir` on another device)."""
    with contextlib.suppress(OSError):
        tmp.unlink()
    return temp_dir is not None and isinstance(exc, OSError) and exc.errno == errno.EXDEV


def write_bytes_atomic(path: Path, content: bytes, temp_dir: Path | None = None) -> None:
    """Write via a temp file (in `temp_dir`, else beside `path`), flush + fsync, then
    `os.replace`. A `temp_dir` on another file system falls back to beside `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_temp(temp_dir or path.parent, path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except BaseException as exc:
        if not _discard(tmp, exc, temp_dir):
            raise
        write_bytes_atomic(path, content)


async def awrite_bytes_atomic(path: Path, content: bytes, temp_dir: Path | None = None) -> None:
    import asyncio  # only event-loop front ends write this way: neither is loaded at start-up

    import aiofiles
    import aiofiles.os

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_temp(temp_dir or path.parent, path)
    os.close(fd)
    try:
        async with aiofiles.open(tmp, "wb") as f:
            await f.write(content)
            await f.flush()
            await asyncio.to_thread(os.fsync, f.fileno())
        await aiofiles.os.replace(tmp, path)
    except BaseException as exc:
        if not _discard(tmp, exc, temp_dir):
            raise
        await awrite_bytes_atomic(path, content)
