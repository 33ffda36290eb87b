"""Unconsumed recordings (docs/scenarios.md): recorded responses a replayed test did not use,
either fewer identical calls than recorded (its owner's sequences say so,
`TestRecordings.unused`) or a recorded request it never made.

The second needs every file a test recorded: `FileIndex` reads each recordings directory
once per session (lazily, only when a test of it ends and `unconsumed` is not "ignore"),
as each file's test id and response count, without parsing the bodies of files as
hashreplay writes them.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import Any

import orjson

from hashreplay.core.constants import FORMAT_VERSION, MODEL_LIST_PREFIX
from hashreplay.core.paths import RecordingsDirNested, read_bytes
from hashreplay.core.store import Store


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
    """The recordings of each test id, by directory, read once.

    Kept as names, not paths, in tuples of strings and counts: a run holds one entry per
    file of the store, and tuples of atomic values leave the garbage collector's lists
    (a `Path` would keep two tracked objects per file in every full collection)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._dirs: dict[Path, dict[str | None, tuple[tuple[str, int], ...]]] = {}

    def files_of(self, test_id: str | None, stored_id: str | None = None) -> list[tuple[str, int]]:
        """The files of a test, as path strings: in its directory, under the id its files
        hold (`stored_id`, the id as written: redacted when it held a secret; default
        `test_id`). A test whose recordings directory would nest in another store has
        none: each request it makes fails with the reason, and a test that made none has
        nothing to answer for (a directory leading out of the project fails the test)."""
        try:
            directory = self.store.dir_for(test_id)
        except RecordingsDirNested:
            return []
        key = test_id if stored_id is None else stored_id
        with self._lock:
            index = self._dirs.get(directory)
            if index is None:
                index = self._dirs[directory] = self._read(directory, key)
        prefix = f"{directory}{os.sep}"
        return [(prefix + name, count) for name, count in index.get(key, ())]

    def _read(
        self, directory: Path, asking: str | None
    ) -> dict[str | None, tuple[tuple[str, int], ...]]:
        """The directory's index, read at the end of its first test (`asking`): the bytes of
        the other tests' files are offered to the store's read-ahead, theirs are used."""
        index: dict[str | None, list[tuple[str, int]]] = {}
        try:  # names as `glob("*.json")` gives them, without its Path and pattern per entry
            names = os.listdir(directory)  # noqa: PTH208 (no Path per entry)
        except OSError:  # no directory (nothing recorded there yet), or unreadable
            return {}
        prefix = f"{directory}{os.sep}"
        for name in sorted(names):
            if not name.endswith(".json") or name.startswith((".", MODEL_LIST_PREFIX)):
                continue
            found = self._summary(prefix + name, asking)
            if found is not None:
                index.setdefault(found[0], []).append((name, found[1]))
        return {test_id: tuple(files) for test_id, files in index.items()}

    def _summary(self, path: str, asking: str | None) -> tuple[str | None, int] | None:
        """A file's test id and how many responses it holds, or None for a file that is not
        a readable recording (`hashreplay verify` names it; a test that asks for it gets the
        full check). Only parsed, not validated: the suite's first test of a directory reads
        every file of it here."""
        ahead = self.store.ahead
        try:
            try:
                content = read_bytes(path, follow=False)
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                # a symlink: its replay read checks where it leads, so it is not read ahead
                ahead = None
                content = read_bytes(path)
            found = _canonical_summary(content) or _parsed_summary(orjson.loads(content))
        except (OSError, orjson.JSONDecodeError):
            return None
        if found is not None and ahead is not None and found[0] != asking:
            ahead.offer(path, content)
        return found


def _parsed_summary(data: Any) -> tuple[str | None, int] | None:
    """`FileIndex._summary` of a file's parsed JSON."""
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
