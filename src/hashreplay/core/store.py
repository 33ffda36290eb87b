"""The content-addressed store (DESIGN.md §4, contract).

One request = one `<hash>.json` beside the test that made it (`tests/a/b/recordings/`), with
the common directory as fallback. Reads fail closed with a `RecordingError` naming the file
and the problem; writes are atomic and deterministic, and never leave a partial file.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import tempfile
from pathlib import Path
from typing import Any

import aiofiles
import aiofiles.os
import orjson
from pydantic import ValidationError

from hashreplay.core.body_checks import check_bodies
from hashreplay.core.constants import FORMAT_VERSION, MODEL_LIST_PREFIX, STATE_DIRNAME
from hashreplay.core.errors import RecordingError
from hashreplay.core.recording import Recording
from hashreplay.core.store_paths import read_contained, recordings_dir_for
from hashreplay.core.temp_files import (
    TEMP_DIRNAME,
    state_temp_dir,
    sweep_temp_files,
    temp_prefix,
)

_DUMP = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
_DIR_CACHE_MAX = 4096


def dumps(data: Any) -> bytes:
    """Deterministic bytes: sorted keys, 2-space indent, trailing newline."""
    return orjson.dumps(data, option=_DUMP) + b"\n"


def dump_recording(recording: Recording) -> bytes:
    return dumps(recording.to_json_dict())


def parse_recording(content: bytes, path: Path | str | None) -> Recording:
    """Validate the bytes of a recording file; every problem names the file."""
    if not content.strip():
        raise RecordingError(path, "the file is empty (an interrupted write?); re-record it")
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError as exc:
        hint = (
            "the file looks truncated"
            if exc.pos >= len(content.rstrip())
            else "the file is not valid JSON"
        )
        msg = f"{hint}: {exc.msg} at line {exc.lineno} column {exc.colno} (char {exc.pos})"
        raise RecordingError(path, msg) from None
    if not isinstance(data, dict):
        msg = f"expected a JSON object at the top level, found {type(data).__name__}"
        raise RecordingError(path, msg)
    version = data.get("format_version")
    if type(version) is not int or version != FORMAT_VERSION:
        found = "no format_version" if version is None else f"format_version {version!r}"
        msg = (
            f"{found}, this hashreplay reads format_version {FORMAT_VERSION}; "
            "re-record it or upgrade hashreplay"
        )
        raise RecordingError(path, msg)
    try:
        recording = Recording.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg'].lower()}" for e in exc.errors()
        )
        raise RecordingError(path, f"invalid recording: {problems}") from None
    check_bodies(recording, path)
    return recording


def read_recording(path: Path) -> Recording:
    try:
        content = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise RecordingError(path, f"cannot read the file: {exc.strerror or exc}") from None
    return parse_recording(content, path)


async def aread_recording(path: Path) -> Recording:
    try:
        async with aiofiles.open(path, "rb") as f:
            content = await f.read()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise RecordingError(path, f"cannot read the file: {exc.strerror or exc}") from None
    return parse_recording(content, path)


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


class Store:
    """Where a test's recordings live, and reading/writing them."""

    def __init__(self, root: Path, common_dir: Path) -> None:
        self.root = root.resolve()
        self.common_dir = common_dir.resolve()
        self._dirs: dict[str | None, Path] = {}
        self._temp_dir: Path | None = None
        self._temp_checked = False

    @property
    def temp_dir(self) -> Path | None:
        """Where this store's writes put their temp files: `.hashreplay/tmp/` (git-ignored);
        None (beside each file) when that cannot be created, e.g. a read-only root."""
        if not self._temp_checked:
            self._temp_checked = True
            try:
                self._temp_dir = state_temp_dir(self.root)
            except OSError:
                self._temp_dir = None
        return self._temp_dir

    def sweep_temp_files(self) -> list[Path]:
        """Remove temp files that killed writers left (in the temp and common directories)."""
        return sweep_temp_files([self.root / STATE_DIRNAME / TEMP_DIRNAME, self.common_dir])

    def save(self, path: Path, recording: Recording) -> None:
        """`write`, with the temp file kept where git does not see it."""
        write_bytes_atomic(path, dump_recording(recording), self.temp_dir)

    async def asave(self, path: Path, recording: Recording) -> None:
        await awrite_bytes_atomic(path, dump_recording(recording), self.temp_dir)

    def dir_for(self, test_id: str | None) -> Path:
        """`tests/a/b/test_x.py::test_y[p]` → `<root>/tests/a/b/recordings`.

        Requests outside any test, and node ids that would resolve outside the project root
        (`..`, absolute paths), go to the common directory.
        """
        found = self._dirs.get(test_id)
        if found is None:
            if len(self._dirs) >= _DIR_CACHE_MAX:  # a proxy sees unbounded test ids
                self._dirs.clear()
            found = self._dirs[test_id] = self._resolve_dir(test_id)
        return found

    def _resolve_dir(self, test_id: str | None) -> Path:
        return recordings_dir_for(self.root, self.common_dir, test_id)

    def search_dirs(self, test_id: str | None) -> list[Path]:
        own = self.dir_for(test_id)
        return [own] if own == self.common_dir else [own, self.common_dir]

    def path_for(self, test_id: str | None, hash_hex: str) -> Path:
        return self.dir_for(test_id) / f"{hash_hex}.json"

    def read_first(self, test_id: str | None, hash_hex: str) -> tuple[Path, Recording] | None:
        """The recording of this hash in the first search directory that has it: read
        directly, without a `stat` first (one system call less on the replay path)."""
        name = f"{hash_hex}.json"
        for directory in self.search_dirs(test_id):
            path = directory / name
            try:
                return path, parse_recording(read_contained(path, self.root), path)
            except FileNotFoundError:
                continue
        return None

    def model_list_paths(self, hash_hex: str, test_id: str | None = None) -> list[Path]:
        """Every `models-<hash>-*.json` in the search directories, sorted by name."""
        found: dict[str, Path] = {}
        for directory in reversed(self.search_dirs(test_id)):
            for path in directory.glob(f"{MODEL_LIST_PREFIX}{hash_hex}-*.json"):
                found[path.name] = path
        return [found[name] for name in sorted(found)]

    @staticmethod
    def read(path: Path) -> Recording:
        return read_recording(path)

    @staticmethod
    async def aread(path: Path) -> Recording:
        return await aread_recording(path)

    @staticmethod
    def write(path: Path, recording: Recording) -> None:
        write_bytes_atomic(path, dump_recording(recording))

    @staticmethod
    async def awrite(path: Path, recording: Recording) -> None:
        await awrite_bytes_atomic(path, dump_recording(recording))
