"""The content-addressed store (docs/design.md §4, contract).

One request = one `<hash>.json` beside the test that made it (`tests/a/b/recordings/`), with
the common directory as fallback. Reads fail closed with a `RecordingError` naming the file
and the problem; writes are atomic and deterministic, and never leave a partial file.
Large values live in `<common dir>/blobs/` (`core.blobs`): a `Store` writes them before the
recording that refers to them and puts them back on every read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from hashreplay.core.atomic import (
    TEMP_DIRNAME,
    state_temp_dir,
    sweep_temp_files,
    write_bytes_atomic,
)
from hashreplay.core.blobs import (
    BlobRef,
    binary_size,
    body_sizes,
    holds_blob,
    join_blobs,
    read_blob,
    read_blob_text,
    split_blobs,
)
from hashreplay.core.bodies import deep_recording_field, may_nest_deeper, too_deep_problem
from hashreplay.core.constants import (
    BLOB_REF_KEY,
    BLOBS_DIRNAME,
    DEFAULT_BLOB_THRESHOLD,
    DEFAULT_MAX_BODY_BYTES,
    FORMAT_VERSION,
    STATE_DIRNAME,
)
from hashreplay.core.errors import BodyTooLarge, RecordingError
from hashreplay.core.format import FormatError, Recording, check_bodies, recording_from_json
from hashreplay.core.names import model_list_glob, recording_name
from hashreplay.core.paths import read_bytes, read_contained, recordings_dir_for

if TYPE_CHECKING:
    from hashreplay.core.config import Config

#: Reads the value one blob stands for, for the recording at a path (or raises
#: RecordingError).
BlobReader = Callable[[BlobRef, "Path | str | None"], str]
_REF_MARK = f'"{BLOB_REF_KEY}"'.encode()

_DUMP = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
_DIR_CACHE_MAX = 4096


def dumps(data: Any) -> bytes:
    """Deterministic bytes: sorted keys, 2-space indent, trailing newline."""
    return orjson.dumps(data, option=_DUMP) + b"\n"


def parse_recording(
    content: bytes, path: Path | str | None, blobs: BlobReader | None = None
) -> Recording:
    """Validate the bytes of a recording file; every problem names the file. Blob
    references are resolved through `blobs` (a `RecordingError` when there is none).

    A file is never refused for its size (docs/design.md, "A file it wrote is a file it
    reads"): `max_body_bytes` limits each body as it is written, and the file that holds
    them (indented, with headers and a sequence of responses) has no size that follows
    from it, so any ceiling here could refuse a file this version wrote."""
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError as exc:
        if not content.strip():  # looked for only here: it copies the whole file
            msg = "the file is empty (an interrupted write?); re-record it"
            raise RecordingError(path, msg) from None
        if "depth" in exc.msg or "recursion" in exc.msg.lower():  # orjson: past 1,024 levels
            msg = f"{too_deep_problem()} (at line {exc.lineno} column {exc.colno}); re-record it"
            raise RecordingError(path, msg) from None
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
    if _REF_MARK in content:
        if blobs is None:
            msg = "it refers to blobs, and no blob directory was given to read them from"
            raise RecordingError(path, msg)
        data = join_blobs(data, lambda ref: blobs(ref, path))
    if may_nest_deeper(content):
        deep = deep_recording_field(data)
        if deep is not None:
            raise RecordingError(path, f"{deep}: {too_deep_problem()}; re-record it")
    try:
        recording = recording_from_json(data)
    except FormatError as exc:
        raise RecordingError(path, f"invalid recording: {exc}") from None
    check_bodies(recording, path)
    return recording


class Found(NamedTuple):
    """A recording found by its hash."""

    path: Path
    recording: Recording


def read_file(path: Path) -> bytes:
    """A recording file's bytes, whatever its size (FileNotFoundError passes through; other
    problems are a RecordingError naming the file)."""
    try:
        return read_bytes(path)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise RecordingError(path, f"cannot read the file: {exc.strerror or exc}") from None


#: the most bytes of recordings a run holds read ahead (`ReadAhead`)
READ_AHEAD_BYTES = 32 << 20


class ReadAhead:
    """Recording files read before a replay asks for them: a pytest run's file index reads
    every file of a test directory once, for the unconsumed check, and offers the bytes
    here; each file's replay takes them instead of reading the file a second time
    (docs/design.md §11, "The replay path"). At most `budget` bytes are held; a file
    is taken once; a file the run writes is never read ahead again."""

    __slots__ = ("_files", "_lock", "_written", "budget", "held")

    def __init__(self, budget: int = READ_AHEAD_BYTES) -> None:
        self._files: dict[str, bytes] = {}
        self._written: set[str] = set()
        self._lock = threading.Lock()
        self.budget = budget
        self.held = 0

    def __bool__(self) -> bool:
        return bool(self._files)

    def offer(self, path: str, content: bytes) -> None:
        with self._lock:
            if (
                path not in self._files
                and path not in self._written
                and self.held + len(content) <= self.budget
            ):
                self._files[path] = content
                self.held += len(content)

    def written(self, path: str) -> None:
        """The run writes `path`: what was read of it before is out of date (and an index
        read while the write waits in the queue must not offer the old bytes)."""
        with self._lock:
            self._written.add(path)  # no offer of it after this
        self.take(path)

    def take(self, path: str) -> bytes | None:
        """The bytes offered for `path`, once (None: read the file)."""
        with self._lock:
            content = self._files.pop(path, None)
            if content is not None:
                self.held -= len(content)
        return content


class Store:
    """Where a test's recordings live, and reading/writing them (blobs included)."""

    def __init__(
        self,
        root: Path,
        common_dir: Path,
        *,
        blob_threshold: int = DEFAULT_BLOB_THRESHOLD,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self.root = root.resolve()
        self.common_dir = common_dir.resolve()
        self.blobs_dir = self.common_dir / BLOBS_DIRNAME
        self.blob_threshold = blob_threshold
        self.max_body_bytes = max_body_bytes
        #: test file -> where its recordings are looked for
        self._dirs: dict[str | None, tuple[Path, ...]] = {}
        self._temp_dir: Path | None = None
        self._temp_checked = False
        #: files read ahead of their replay (a pytest run's; None: each is read when asked)
        self.ahead: ReadAhead | None = None

    @classmethod
    def from_config(cls, config: Config) -> Store:
        return cls(
            config.root,
            config.common_dir,
            blob_threshold=config.blob_threshold,
            max_body_bytes=config.max_body_bytes,
        )

    # --- blobs ------------------------------------------------------------------------------

    def blob_path(self, digest: str) -> Path:
        return self.blobs_dir / digest

    def read_blob(self, ref: BlobRef, source: Path | str | None = None) -> bytes:
        return read_blob(self.blobs_dir, ref, source, self.max_body_bytes)

    def read_blob_text(self, ref: BlobRef, source: Path | str | None = None) -> str:
        return read_blob_text(self.blobs_dir, ref, source, self.max_body_bytes)

    def dump_data(self, data: dict[str, Any]) -> bytes:
        """The bytes of a recording's JSON as stored: bodies over `max_body_bytes` refused,
        large values written to blobs first (atomically, once), references in their place."""
        content = dumps(data)
        if len(content) > self.max_body_bytes:  # no body is larger than the whole file
            self._check_sizes(data)
        if len(content) <= self.blob_threshold:
            return content  # no single string can be over the threshold
        stored, blobs = split_blobs(data, self.blob_threshold)
        for digest, raw in sorted(blobs.items()):
            path = self.blob_path(digest)
            if not holds_blob(path, len(raw)):
                # through a temp file in `.hashreplay/tmp/` like recordings: a writer killed
                # midway leaves nothing `git add -A` would stage (docs/design.md §4)
                write_bytes_atomic(path, raw, self.temp_dir)
        return dumps(stored) if blobs else content

    def _check_sizes(self, data: dict[str, Any]) -> None:
        for where, size in body_sizes(data):
            if size > self.max_body_bytes:
                request = data.get("request")
                url = request.get("url", "?") if isinstance(request, dict) else "?"
                raise BodyTooLarge(
                    test_id=data.get("test_id"),
                    url=str(url),
                    where=where,
                    size=size,
                    limit=self.max_body_bytes,
                    binary=binary_size(data, where),
                )

    def dump(self, recording: Recording) -> bytes:
        return self.dump_data(recording.model_dump(mode="json"))

    def parse(self, content: bytes, path: Path | str | None) -> Recording:
        return parse_recording(content, path, self.read_blob_text)

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
        """Remove temp files that killed writers left (in the temp, common and blob
        directories: beside their targets when `.hashreplay/tmp/` could not be used, or
        written by a version that put them there)."""
        return sweep_temp_files(
            [self.root / STATE_DIRNAME / TEMP_DIRNAME, self.common_dir, self.blobs_dir]
        )

    def dir_for(self, test_id: str | None) -> Path:
        """`tests/a/b/test_x.py::test_y[p]` → `<root>/tests/a/b/recordings`.

        Requests outside any test, and node ids that would resolve outside the project root
        (`..`, absolute paths), go to the common directory.
        """
        return self.search_dirs(test_id)[0]

    def search_dirs(self, test_id: str | None) -> tuple[Path, ...]:
        """Where a test's recordings are looked for: its own directory, then the common one."""
        # cached by the test's file, not its id: every test of a module shares one entry,
        # so a suite pays one `Path.resolve` per test file, not per test
        file_part = test_id.split("::", 1)[0] if test_id else None
        found = self._dirs.get(file_part)
        if found is None:
            if len(self._dirs) >= _DIR_CACHE_MAX:  # a proxy sees unbounded test ids
                self._dirs.clear()
            own = recordings_dir_for(self.root, self.common_dir, file_part)
            found = (own,) if own == self.common_dir else (own, self.common_dir)
            self._dirs[file_part] = found
        return found

    def path_for(self, test_id: str | None, hash_hex: str) -> Path:
        return self.dir_for(test_id) / recording_name(hash_hex)

    def read_first(self, test_id: str | None, hash_hex: str) -> Found | None:
        """The recording of this hash in the first search directory that has it: read
        directly, without a `stat` first (one system call less on the replay path)."""
        name = recording_name(hash_hex)
        ahead = self.ahead
        for directory in self.search_dirs(test_id):
            path = directory / name
            content = ahead.take(str(path)) if ahead else None
            if content is None:
                try:
                    content = read_contained(path, self.root)
                except FileNotFoundError:
                    continue
            return Found(path, self.parse(content, path))
        return None

    def model_list_paths(self, hash_hex: str, test_id: str | None = None) -> list[Path]:
        """Every `models-<hash>-*.json` in the search directories, sorted by name."""
        found: dict[str, Path] = {}
        for directory in reversed(self.search_dirs(test_id)):
            for path in directory.glob(model_list_glob(hash_hex)):
                found[path.name] = path
        return [found[name] for name in sorted(found)]

    def read(self, path: Path) -> Recording:
        return self.parse(read_file(path), path)
