"""Per-test state: each test's mode, run id, identical-request sequences, the ids it received,
its misses, and the files it used; and the run's counters.

One lock guards all of it: adapters call in from threads and event loops at once.

The store as the engine sees it: files on disk plus writes still queued behind.

A write-behind session (the pytest plugin's) hands each file's content to a writer thread,
as bytes or as the stage that serialises them; until they are on disk, every read here sees
them, through the writer's own interface (a read of a version not serialised yet serialises
it on the reading thread).

The recorded sequence of one request hash within one test: read once on first use (from the
store view, so queued writes count), then consumed call by call.

Unconsumed recordings (docs/scenarios.md): recorded responses a replayed test did not use,
either fewer identical calls than recorded or a recorded request it never made.

The second needs every file a test recorded, so each recordings directory is read once per
session (lazily, only when a test of it ends and `unconsumed` is not "ignore").
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from hashreplay.core.atomic import awrite_bytes_atomic, write_bytes_atomic
from hashreplay.core.errors import ReplayFailure
from hashreplay.core.format import RecordedRequest, RecordedResponse, Recording
from hashreplay.core.matching import MatchRule, RuleIndex
from hashreplay.core.modes import MaxAge, Mode, Stale
from hashreplay.core.names import model_list_name_prefix, recording_name
from hashreplay.core.normalise import IdRegistry, new_id_registry
from hashreplay.core.store import Found, Store
from hashreplay.core.writer import BackgroundWriter, Content
from hashreplay.engine.faults import TestOptions
from hashreplay.engine.keys import Prepared, check_name

#: `Keyer.key_of`: a request's hash under a matching rule (None: the default)
KeyOf = Callable[[RecordedRequest, "str | None", "MatchRule | None"], tuple[str, bool]]


class Stats:
    __slots__ = ("missed", "not_recorded", "passed_through", "recorded", "replayed")

    def __init__(
        self,
        replayed: int = 0,
        recorded: int = 0,
        missed: int = 0,
        passed_through: int = 0,
        not_recorded: int = 0,
    ) -> None:
        self.replayed = replayed
        self.recorded = recorded
        self.missed = missed
        self.passed_through = passed_through
        #: calls of a recording mode that got no HTTP response, so wrote nothing
        #: (docs/design.md, "Only answers are recorded")
        self.not_recorded = not_recorded

    def merge(self, other: Stats) -> None:
        self.replayed += other.replayed
        self.recorded += other.recorded
        self.missed += other.missed
        self.passed_through += other.passed_through
        self.not_recorded += other.not_recorded

    def as_dict(self) -> dict[str, int]:
        return {
            "replayed": self.replayed,
            "recorded": self.recorded,
            "missed": self.missed,
            "passed_through": self.passed_through,
            "not_recorded": self.not_recorded,
        }


class RecordedSequence:
    """The responses of one hash within one test run, and their id registry."""

    __slots__ = ("calls", "ids", "match", "path", "previous", "responses")

    def __init__(
        self,
        responses: list[RecordedResponse],
        ids: IdRegistry,
        path: Path,
        match: dict[str, Any] | None = None,
    ) -> None:
        self.responses = responses
        self.ids = ids
        self.path = path
        self.calls = 0
        #: record mode: the responses the file held before (their days), read on first use
        self.previous: list[RecordedResponse] | None = None
        #: the file's matching rule (docs/design.md §14), written with it; None: the default
        self.match = match


class StaleUse(NamedTuple):
    """A recorded response older than `max_age` that a test used (docs/recordings.md, "Age")."""

    path: Path
    recorded_on: str
    #: days since `recorded_on`
    age: int
    max_age: MaxAge
    #: what the test's `stale` setting does with it (the marker's, else the config's)
    policy: Stale = Stale.WARN

    def describe(self, root: Path) -> str:
        """`<file>: recorded on <day>, <n> days ago (max_age <age>)`, the file relative to
        `root` when inside it."""
        try:
            shown: Path | str = self.path.relative_to(root)
        except ValueError:
            shown = self.path
        age = f"{self.age} days ago (max_age {self.max_age})"
        return f"{shown}: recorded on {self.recorded_on}, {age}"

    def refusal(self, root: Path) -> str:
        """Why `stale = "fail"` refuses it where no test end would fail the test (the
        proxy, `install()`): the failure its request gets."""
        return (
            f"its recording is older than max_age: {self.describe(root)}, and "
            'stale = "fail" refuses it; to renew it, make this request in record-if-missing '
            'mode with stale = "refresh" (or record it again in record mode)'
        )


class Call(NamedTuple):
    """One exchange of a test, as the `hashreplay` fixture's `calls` lists it."""

    method: str
    endpoint: str
    #: the request body as keyed: parsed JSON when JSON, redacted and normalised
    body: object
    #: None: no HTTP status (a call-layer target, no response)
    status: int | None
    #: "replayed", "recorded" or "live"
    source: str


class TestState:
    __slots__ = (
        "calls",
        "id_map",
        "misses",
        "mode",
        "options",
        "passed_through",
        "run_id",
        "sequences",
        "stale",
    )

    def __init__(self, mode: Mode | None = None, run_id: str | None = None) -> None:
        self.mode = mode
        #: identifies this execution of the test (sent to servers under test)
        self.run_id = run_id  # made on first use: most tests never call a server
        self.sequences: dict[str, RecordedSequence] = {}
        #: original → stable ids this test received while recording (never written).
        self.id_map: dict[str, str] = {}
        self.misses: list[ReplayFailure] = []
        #: scenario options of this test (markers, fault headers)
        self.options = TestOptions()
        #: it sent requests to a server under test, which replays this test's files itself
        self.passed_through = False
        #: stale recorded responses it used, by file (the oldest of each)
        self.stale: dict[Path, StaleUse] = {}
        self.calls: list[Call] = []  # its exchanges in order (the fixture's `calls`)


class Tests:
    """Every test's state, by test id (None: requests outside any test)."""

    def __init__(self, default_mode: Mode) -> None:
        self.default_mode = default_mode
        self.lock = threading.RLock()
        self.stats = Stats()
        #: recording files each test id used (replayed or wrote), for `hashreplay prune`;
        #: kept as path strings for the whole run: a `Path` would keep two objects per file
        #: in every full garbage collection of the process
        self.usage: dict[str | None, set[str]] = {}
        self._tests: dict[str | None, TestState] = {}

    def begin(self, test_id: str | None, mode: Mode | None = None) -> None:
        with self.lock:
            self._tests[test_id] = TestState(mode=mode)

    def set_mode(self, test_id: str | None, mode: Mode) -> None:
        with self.lock:
            self.state(test_id).mode = mode

    def mode_for(self, test_id: str | None) -> Mode:
        state = self._tests.get(test_id)
        if state is not None and state.mode is not None:
            return state.mode
        return self.default_mode

    def run_id_for(self, test_id: str | None) -> str:
        with self.lock:
            state = self.state(test_id)
            if state.run_id is None:
                state.run_id = uuid.uuid4().hex
            return state.run_id

    def enter_run(self, test_id: str | None, run_id: str | None) -> None:
        """A new run id of a test starts it afresh (its identical-request counters and id
        mappings), as `begin` does in-process."""
        if run_id is None:
            return
        with self.lock:
            state = self._tests.get(test_id)
            if state is None or state.run_id != run_id:
                self._tests[test_id] = TestState(run_id=run_id)

    def get(self, test_id: str | None) -> TestState | None:
        return self._tests.get(test_id)

    def end(self, test_id: str | None) -> list[ReplayFailure]:
        """Forget a test's state; returns the misses it had."""
        with self.lock:
            state = self._tests.pop(test_id, None)
        return state.misses if state else []

    def take_misses(self, test_id: str | None) -> list[ReplayFailure]:
        with self.lock:
            state = self._tests.get(test_id)
            if state is None or not state.misses:
                return []
            misses, state.misses = state.misses, []
            return misses

    def state(self, test_id: str | None) -> TestState:
        """The state of a test, made on first use (callers hold the lock)."""
        state = self._tests.get(test_id)
        if state is None:
            state = self._tests[test_id] = TestState()
        return state

    def id_map(self, test_id: str | None) -> dict[str, str] | None:
        """A copy of the ids this test received while recording, or None."""
        state = self._tests.get(test_id)
        return dict(state.id_map) if state is not None and state.id_map else None

    def recorded_count(self, test_id: str | None, hash_hex: str) -> int:
        with self.lock:
            state = self._tests.get(test_id)
            seq = state.sequences.get(hash_hex) if state else None
            return len(seq.responses) if seq else 0

    def use(self, test_id: str | None, *paths: Path) -> None:
        """Note files a test used (callers hold the lock)."""
        self.usage.setdefault(test_id, set()).update(map(os.fspath, paths))

    def touch(self, test_id: str | None, limit: int) -> int:
        """For long-lived servers, which never see a test end: mark `test_id` as just used
        and forget the least recently used test states beyond `limit` (with the files noted
        for them); returns how many were forgotten. A test that comes back after that starts
        again from its first recorded response, as a new run does."""
        evicted = 0
        with self.lock:
            tests = self._tests
            state = tests.pop(test_id, None)
            if state is not None:
                tests[test_id] = state  # dicts keep insertion order: the end is the newest
            while len(tests) > limit:
                oldest = next(iter(tests))
                if oldest == test_id:
                    break
                del tests[oldest]
                self.usage.pop(oldest, None)
                evicted += 1
            if len(self.usage) > limit:  # files of tests that never had a state
                excess = len(self.usage) - limit
                for stale in [t for t in self.usage if t not in tests][:excess]:
                    del self.usage[stale]
        return evicted


class StoreView:
    def __init__(
        self, store: Store, writer: BackgroundWriter | None, key_of: KeyOf | None = None
    ) -> None:
        self.store = store
        self.writer = writer
        self.key_of = key_of
        self.rules = RuleIndex()
        #: a write-behind run's recording names per directory, listed on first use
        self._listed: dict[Path, frozenset[str] | None] = {}

    def read_other_rule(self, prep: Prepared) -> tuple[str, MatchRule | None, Found] | None:
        """After `prep.hash` missed: its recording under another matching rule that the
        test's directories hold (docs/design.md §14), as its hash, rule and file. Only a miss
        pays for this; each directory's rules are read once (callers hold the tests lock)."""
        if self.key_of is None:
            return None
        for rule in self.rules.after_miss(self.store.search_dirs(prep.test_id), prep.rule):
            hash_hex = self.key_of(prep.request, prep.shown_test_id, rule)[0]
            found = self.read_first(prep.test_id, hash_hex)
            if found is not None:
                return hash_hex, rule, found
        return None

    def read_first(self, test_id: str | None, hash_hex: str) -> Found | None:
        """Like `Store.read_first`, but sees writes still queued."""
        writer = self.writer
        if writer is not None and writer.has_pending():
            for directory in self.store.search_dirs(test_id):
                path = directory / recording_name(hash_hex)
                content = writer.pending(path)
                if content is not None:
                    return Found(path, self.store.parse(content, path))
        return self.store.read_first(test_id, hash_hex)

    def read_previous(self, test_id: str | None, hash_hex: str) -> Found | None:
        """What record mode re-records held before (its days, docs/recordings.md "Age"):
        `read_first`, except that a write-behind run (the pytest plugin's, whose directories
        change only through its own writes and its workers' other tests) lists each
        directory once, on first use, and opens only a name that was there: a new
        recording costs no failed `open` per search directory. A file this run made since
        holds today's day anyway."""
        if self.writer is not None:
            name = recording_name(hash_hex)
            for directory in self.store.search_dirs(test_id):
                names = self._names(directory)
                if names is None or name in names:
                    break
            else:
                return None
        return self.read_first(test_id, hash_hex)

    def _names(self, directory: Path) -> frozenset[str] | None:
        """The `.json` names `directory` held when first asked (None: it cannot be listed,
        so every name is looked for)."""
        if directory in self._listed:
            return self._listed[directory]
        try:
            with os.scandir(directory) as entries:
                names: frozenset[str] | None = frozenset(
                    e.name for e in entries if e.name.endswith(".json")
                )
        except FileNotFoundError:
            names = frozenset()
        except OSError:
            names = None
        self._listed[directory] = names
        return names

    def model_list_paths(self, hash_hex: str, test_id: str | None) -> list[Path]:
        paths = set(self.store.model_list_paths(hash_hex, test_id))
        if self.writer is not None:
            prefix = model_list_name_prefix(hash_hex)
            paths.update(p for p in self.writer.pending_paths() if p.name.startswith(prefix))
        return sorted(paths, key=lambda p: p.name)

    def read(self, path: Path) -> Recording:
        content = self.writer.pending(path) if self.writer is not None else None
        return self.store.parse(content, path) if content is not None else self.store.read(path)

    def exists(self, path: Path) -> bool:
        return (self.writer is not None and self.writer.is_pending(path)) or path.exists()

    def write(self, path: Path, content: Content) -> None:
        self._drop_read_ahead(path)
        if self.writer is not None:
            self.writer.submit(path, content)
        else:
            write_bytes_atomic(path, _bytes(content), self.store.temp_dir)

    async def awrite(self, path: Path, content: Content) -> None:
        self._drop_read_ahead(path)
        if self.writer is not None:
            self.writer.submit(path, content)
        else:
            await awrite_bytes_atomic(path, _bytes(content), self.store.temp_dir)

    def _drop_read_ahead(self, path: Path) -> None:
        """A file this run writes is read from disk (or the queue) from now on."""
        ahead = self.store.ahead
        if ahead is not None:
            ahead.written(str(path))

    def flush(self) -> None:
        """Wait until every queued write is on disk; a RecordingError for one that failed."""
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _bytes(content: Content) -> bytes:
    return content if isinstance(content, bytes) else content()


def sequence_for(tests: Tests, view: StoreView, prep: Prepared) -> RecordedSequence:
    """The sequence of `prep`'s hash in its test (callers hold `tests.lock`). Record mode
    starts empty; a file that exists but cannot be used raises its RecordingError. After a
    miss, a recording under another matching rule of the test's directories answers, and
    identical requests under that rule share its sequence (docs/design.md §14)."""
    state = tests.state(prep.test_id)
    seq = state.sequences.get(prep.hash)
    if seq is not None:
        return seq
    found = None if prep.mode is Mode.RECORD else view.read_first(prep.test_id, prep.hash)
    hash_hex, rule = prep.hash, prep.rule
    if found is None and prep.mode is not Mode.RECORD:
        other = view.read_other_rule(prep)
        if other is not None:
            hash_hex, rule, found = other
            seq = state.sequences.get(hash_hex)
    own = rule.as_json() if rule is not None else None
    if seq is None and found is None:
        path = view.store.path_for(prep.test_id, prep.hash)
        seq = RecordedSequence([], new_id_registry(prep.hash), path, own)
    elif seq is None and found is not None:
        path, recording = found
        check_name(path, recording, prep, rule)
        registry = new_id_registry(hash_hex, recording.id_normalization_mapping)
        seq = state.sequences[hash_hex] = RecordedSequence(recording.responses, registry, path, own)
    assert seq is not None
    state.sequences[prep.hash] = seq
    return seq
