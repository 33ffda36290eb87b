"""Unconsumed recordings (docs/scenarios.md): recorded responses a replayed test did not use,
either fewer identical calls than recorded or a recorded request it never made.

The second needs every file a test recorded, so each recordings directory is read once per
session (lazily, only when a test of it ends and `unconsumed` is not "ignore").
"""

from __future__ import annotations

import threading
from pathlib import Path

import orjson

from hashreplay.core.constants import FORMAT_VERSION, MODEL_LIST_PREFIX
from hashreplay.core.errors import RecordingError
from hashreplay.core.store import Store, read_file
from hashreplay.engine.state import TestState


class Unused:
    # not a NamedTuple: its `count` would be tuple.count
    __slots__ = ("count", "path", "recorded")

    def __init__(self, path: Path, count: int, recorded: int) -> None:
        self.path = path
        #: responses of the file the test did not use
        self.count = count
        #: how many the file holds
        self.recorded = recorded

    def describe(self, root: Path) -> str:
        try:
            name = self.path.relative_to(root)
        except ValueError:
            name = self.path
        if self.count == self.recorded:
            return f"{name}: never requested ({self.recorded} recorded response(s))"
        used = self.recorded - self.count
        return f"{name}: {used} of {self.recorded} recorded response(s) used, {self.count} not"


class FileIndex:
    """The recordings of each test id, by directory, read once."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._dirs: dict[Path, dict[str | None, list[tuple[Path, int]]]] = {}

    def files_of(self, test_id: str | None) -> list[tuple[Path, int]]:
        directory = self.store.dir_for(test_id)
        with self._lock:
            index = self._dirs.get(directory)
            if index is None:
                index = self._dirs[directory] = self._read(directory)
        return index.get(test_id, [])

    def _read(self, directory: Path) -> dict[str | None, list[tuple[Path, int]]]:
        index: dict[str | None, list[tuple[Path, int]]] = {}
        if not directory.is_dir():
            return index
        for path in sorted(directory.glob("*.json")):
            if path.name.startswith(MODEL_LIST_PREFIX):
                continue
            found = self._summary(path)
            if found is not None:
                index.setdefault(found[0], []).append((path, found[1]))
        return index

    def _summary(self, path: Path) -> tuple[str | None, int] | None:
        """A file's test id and how many responses it holds, or None for a file that is not
        a readable recording (`hashreplay verify` names it; a test that asks for it gets the
        full check). Only parsed, not validated: the suite's first test of a directory reads
        every file of it here."""
        try:
            content = read_file(path)
            canonical = _canonical_summary(content)
            if canonical is not None:
                return canonical
            data = orjson.loads(content)
        except (OSError, RecordingError, orjson.JSONDecodeError):
            return None
        if not isinstance(data, dict) or data.get("format_version") != FORMAT_VERSION:
            return None
        test_id = data.get("test_id")
        later = data.get("later_responses", [])
        if "response" not in data or not isinstance(test_id, (str, type(None))):
            return None
        return test_id, 1 + (len(later) if isinstance(later, list) else 0)


_CANONICAL_START = b'{\n  "format_version": %d,\n' % FORMAT_VERSION
_TEST_ID_FIELD = b'\n  "test_id": '


def _canonical_summary(content: bytes) -> tuple[str | None, int] | None:
    """`_summary` of a file as hashreplay writes it, without parsing its bodies (a streamed
    answer's file is ~30 KB); None for any other shape (then it is parsed).

    Written files have sorted keys and a two-space indent, so `format_version` is the first
    field and `test_id` the last, and a line that starts with exactly two spaces and a quote
    is a top-level field: a JSON string holds no raw newline.
    """
    if not content.startswith(_CANONICAL_START) or b'\n  "later_responses": ' in content:
        return None
    at = content.rfind(_TEST_ID_FIELD)
    if at < 0 or b'\n  "response": ' not in content:
        return None
    try:
        test_id = orjson.loads(content[at + len(_TEST_ID_FIELD) :].rstrip().removesuffix(b"}"))
    except orjson.JSONDecodeError:  # another field after it: parse the whole file
        return None
    if test_id is None or type(test_id) is str:
        return test_id, 1
    return None


def unused(state: TestState, files: list[tuple[Path, int]]) -> list[Unused]:
    """What a replayed test left unused, given the files recorded for it (callers hold the
    tests lock). A test that passed requests through to a server under test gets no `files`:
    the server replays those itself."""
    found: list[Unused] = []
    # both kinds of path are the store's own (a resolved directory joined with a file
    # name), so they compare as they are: no `resolve()`, two system calls a component
    seen: set[Path] = set()
    for seq in state.sequences.values():
        seen.add(seq.path)
        if seq.calls < len(seq.responses):
            found.append(Unused(seq.path, len(seq.responses) - seq.calls, len(seq.responses)))
    for path, count in files:
        if path not in seen:
            found.append(Unused(path, count, count))
    return found
