"""Which recordings each test used in a run: the usage log `.hashreplay/usage.json`, its
file, its version and a test's outcome.

The pytest plugin feeds a `UsageCollector` per process (the outcome of each test phase and
the files each test replayed or wrote); pytest-xdist workers hand theirs to the controller as
a plain dict, and the controller (or the only process) writes one `RunUsage` at the project
root, in a folder whose own `.gitignore` keeps it out of `git status`. `engine/prune.py`
decides from it which recordings are unused. This module holds the log's pydantic models: the one
definition a run writes (`UsageCollector`, below, fills them) and reads back.

One process's view of a pytest run for the usage log, collected into its pydantic models.

Every run feeds a `UsageCollector` and writes `.hashreplay/usage.json` at its end. The
collector fills the log's own models (this module's `UsagePiece`,
`TestUsage`, `RunUsage`), so the log has one definition; a test's entry is made with
`model_construct` (its values come from pytest's hooks, not from a file), which keeps the
per-test cost to setting a few attributes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, computed_field

from hashreplay.core.atomic import write_bytes_atomic
from hashreplay.core.constants import STATE_DIRNAME
from hashreplay.core.errors import UsageError
from hashreplay.core.modes import Mode
from hashreplay.core.secret_values import NO_SECRETS, SecretValues
from hashreplay.core.store import dumps

USAGE_VERSION = 1


USAGE_FILENAME = "usage.json"


#: `.hashreplay/.gitignore`: nothing hashreplay writes for itself ever shows in `git status`.
GITIGNORE_CONTENT = b"*\n"


INTERCEPTING = frozenset(m.value for m in Mode if m.intercepts)


PHASES = ("setup", "call", "teardown")


def completed(setup: str | None, call: str | None, teardown: str | None) -> bool:
    """Setup and call passed and teardown did not fail."""
    return setup == "passed" and call == "passed" and teardown in ("passed", "skipped")


def outcome(setup: str | None, call: str | None, teardown: str | None) -> str:
    if "failed" in (setup, call, teardown):
        return "failed" if call == "failed" else "error"
    if "skipped" in (setup, call):
        return "skipped"
    return "passed" if completed(setup, call, teardown) else "incomplete"


def relative(path: Path, root: Path) -> str:
    """`path` relative to the project root in POSIX form (absolute when outside it)."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix()


def usage_path(root: Path) -> Path:
    return root / STATE_DIRNAME / USAGE_FILENAME


def ensure_state_dir(root: Path) -> Path:
    """`.hashreplay/` with its own `.gitignore` (`*`), so git never shows what is in it."""
    state = root / STATE_DIRNAME
    gitignore = state / ".gitignore"
    try:
        current = gitignore.read_bytes()
    except OSError:
        current = None
    if current != GITIGNORE_CONTENT:
        write_bytes_atomic(gitignore, GITIGNORE_CONTENT)
    return state


def scrubbed_json(
    data: dict[str, Any], secrets: SecretValues, redact: Callable[[str], str] | None
) -> dict[str, Any]:
    """The usage log's JSON form with secrets removed from its test ids: `secrets`
    (credential values seen in requests) scrubbed, and `redact` (`Redactor.text`) applied to
    every id and name, so the ids are the ones recordings store (docs/design.md §7, "Test
    ids"), which `prune` compares them with."""
    scrubbed: dict[str, Any] = secrets.value(data)
    return scrubbed if redact is None else _texts(scrubbed, redact)


def _texts(value: Any, redact: Callable[[str], str]) -> Any:
    """`value` with `redact` applied to every string, dict keys included."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {
            (redact(k) if isinstance(k, str) else k): _texts(v, redact) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_texts(v, redact) for v in value]
    return value


__all__ = [
    "GITIGNORE_CONTENT",
    "USAGE_FILENAME",
    "USAGE_VERSION",
    "RunUsage",
    "TestUsage",
    "UsagePiece",
    "ensure_state_dir",
    "read_usage",
    "read_usage_file",
    "relative",
    "usage_json",
    "usage_path",
    "write_usage",
    "write_usage_json",
]


# Mutable defaults are plain `[]`/`{}` (pydantic copies them per instance) and the one
# factory is a Python function: pydantic reads a default factory's signature, and for a
# builtin (`list`, `time.time`) that parses its text signature, ~5 ms on a run's first model.
def _now() -> float:
    return time.time()


class TestUsage(BaseModel):
    """One test of a run: the outcome of each phase and the recordings it used."""

    __test__ = False  # not a pytest test class
    model_config = ConfigDict(extra="ignore", defer_build=True)

    setup: str | None = None
    call: str | None = None
    teardown: str | None = None
    #: The mode the test ran in (a marker may differ from the run's mode).
    mode: str | None = None
    #: The test sent requests through `passthrough` or `live`: a server under test or the
    #: real API may have used recordings that this process cannot see.
    passthrough: bool = False
    #: Recording files it replayed or wrote, relative to the project root.
    files: list[str] = []

    @computed_field  # type: ignore[prop-decorator]
    @property
    def completed(self) -> bool:
        """Setup and call passed and teardown did not fail."""
        return completed(self.setup, self.call, self.teardown)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def outcome(self) -> str:
        return outcome(self.setup, self.call, self.teardown)

    def copied(self) -> TestUsage:
        """An independent copy: its only mutable field is the list of files (a deep copy
        of 500 tests cost a run ~30 ms)."""
        return self.model_copy(update={"files": [*self.files]})

    @property
    def prunable(self) -> bool:
        """Whether the files it did not use can be called unused."""
        return self.completed and self.mode in INTERCEPTING and not self.passthrough


class UsagePiece(BaseModel):
    """What one process saw; xdist workers send theirs to the controller."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    started: float = Field(default_factory=_now)
    #: Tests selected to run (a `RunUsage` adds the deselected ones: every test that exists).
    collected: list[str] = []
    deselected: list[str] = []
    collection_errors: int = 0
    tests: dict[str, TestUsage] = {}
    #: Files used by requests made outside any test (session start-up, threads).
    outside_tests: list[str] = []
    #: Why this run may not be the full suite, beyond what the options say.
    notes: list[str] = []

    def merge(self, other: UsagePiece) -> None:
        self.started = min(self.started, other.started)
        self.collected = sorted({*self.collected, *other.collected})
        self.deselected = sorted({*self.deselected, *other.deselected})
        self.collection_errors += other.collection_errors
        for test_id, theirs in other.tests.items():
            mine = self.tests.get(test_id)
            if mine is None:
                self.tests[test_id] = theirs.copied()
                continue
            # The same test reported by two processes (a re-run): keep the worse outcome.
            for phase in ("setup", "call", "teardown"):
                values = {getattr(mine, phase), getattr(theirs, phase)}
                worst = next((v for v in ("failed", "skipped", "passed") if v in values), None)
                setattr(mine, phase, worst)
            mine.passthrough = mine.passthrough or theirs.passthrough
            mine.files = sorted({*mine.files, *theirs.files})
            if mine.mode is None or (theirs.mode is not None and theirs.mode not in INTERCEPTING):
                mine.mode = theirs.mode
        self.outside_tests = sorted({*self.outside_tests, *other.outside_tests})
        self.notes = [*self.notes, *(n for n in other.notes if n not in self.notes)]


class RunUsage(UsagePiece):
    """`.hashreplay/usage.json`: the last pytest run of the project."""

    version: int = USAGE_VERSION
    root: str = ""
    finished: float = 0.0
    mode: str = Mode.REPLAY.value
    #: No selection, no deselection, nothing stopped early: every test of the project ran.
    full_suite: bool = False
    #: Why it was not the full suite (empty when it was).
    partial_reasons: list[str] = []

    def used_files(self) -> set[str]:
        used = set(self.outside_tests)
        for test in self.tests.values():
            used.update(test.files)
        return used

    @property
    def every_test_completed(self) -> bool:
        return bool(self.tests) and all(
            self.tests.get(t) is not None and self.tests[t].prunable for t in self.collected
        )


def usage_json(
    run: RunUsage, secrets: SecretValues = NO_SECRETS, redact: Callable[[str], str] | None = None
) -> dict[str, Any]:
    """The run as it is written, secrets removed from its test ids (`scrubbed_json`): what a
    pruning run must compare with the ids recordings store (docs/design.md §7, "Test ids").
    Not validated here: the run was built from our own values, and the log is validated
    where it is read (`read_usage_file`; a pruning run validates this form before pruning)."""
    return scrubbed_json(run.model_dump(mode="json"), secrets, redact)


def write_usage_json(data: Mapping[str, Any], root: Path) -> Path:
    """Write `usage_json`'s form of a run as the project's usage log."""
    ensure_state_dir(root)
    path = usage_path(root)
    write_bytes_atomic(path, dumps(data))
    return path


def write_usage(run: RunUsage, root: Path, secrets: SecretValues = NO_SECRETS) -> Path:
    """Write the usage log; `secrets` (credential values seen in requests) are scrubbed
    from every test id in it."""
    return write_usage_json(usage_json(run, secrets), root)


def read_usage(root: Path) -> RunUsage:
    """The project's own usage log, `.hashreplay/usage.json` under `root`."""
    return read_usage_file(usage_path(root), root)


def read_usage_file(path: Path, root: Path | None = None) -> RunUsage:
    """One usage log; with `root`, refused when it was written for another project (a log
    copied from another machine is read with `root` None)."""
    try:
        content = path.read_bytes()
    except FileNotFoundError:
        msg = (
            f"no usage log at {path}: run the test suite first (pytest, ideally the whole "
            "suite), then prune"
        )
        raise UsageError(msg) from None
    except OSError as exc:
        msg = f"cannot read the usage log {path}: {exc.strerror or exc}"
        raise UsageError(msg) from None
    try:
        run = RunUsage.model_validate(orjson.loads(content))
    except (orjson.JSONDecodeError, ValidationError) as exc:
        msg = f"the usage log {path} is unreadable ({exc}); run the test suite again"
        raise UsageError(msg) from None
    if run.version != USAGE_VERSION:
        msg = (
            f"the usage log {path} has version {run.version}, this hashreplay reads "
            f"{USAGE_VERSION}; run the test suite again"
        )
        raise UsageError(msg)
    if root is not None and run.root and Path(run.root).resolve() != root.resolve():
        msg = (
            f"the usage log {path} was written for the project at {run.root}, not {root}; "
            "run the test suite again from this project"
        )
        raise UsageError(msg)
    return run


class UsageCollector:
    """Collects one process's view of a run; fed by the pytest plugin's hooks."""

    def __init__(self) -> None:
        #: This process's view; `collected` holds the tests selected to run (the finished
        #: log adds the deselected ones). Its values come from pytest's hooks, not a file, so
        #: it is made unchecked: a run builds the log's schema once, to write it.
        self.piece = UsagePiece.model_construct()
        self._passthrough_at_start: dict[str, int] = {}

    @property
    def tests(self) -> dict[str, TestUsage]:
        return self.piece.tests

    def piece_json(self) -> dict[str, Any]:
        """An xdist worker's report: its piece as JSON."""
        return self.piece.model_dump(mode="json")

    def note_collected(self, test_ids: Iterable[str]) -> None:
        self.piece.collected = sorted({*self.piece.collected, *test_ids})

    def note_deselected(self, test_ids: Iterable[str]) -> None:
        self.piece.deselected = sorted({*self.piece.deselected, *test_ids})

    def note_collection_errors(self, count: int) -> None:
        self.piece.collection_errors += count

    def note(self, reason: str) -> None:
        if reason not in self.piece.notes:
            self.piece.notes.append(reason)

    def _test(self, test_id: str) -> TestUsage:
        found = self.piece.tests.get(test_id)
        if found is None:
            found = self.piece.tests[test_id] = TestUsage.model_construct(files=[])
        return found

    def note_start(self, test_id: str, passed_through: int) -> None:
        self._passthrough_at_start[test_id] = passed_through

    def note_report(self, test_id: str, when: str, outcome: str) -> None:
        if when in PHASES:
            setattr(self._test(test_id), when, outcome)

    def note_finish(self, test_id: str, passed_through: int, mode: Mode) -> None:
        test = self._test(test_id)
        test.mode = mode.value
        start = self._passthrough_at_start.pop(test_id, passed_through)
        test.passthrough = test.passthrough or passed_through > start or not mode.intercepts

    def add_files(self, usage: Mapping[str | None, Iterable[str | Path]], root: Path) -> None:
        """Take the engine's `Session.usage` (test id → files it used, as path strings). The
        engine's paths are resolved already (the store resolves its directories once), so
        names come from string operations against the resolved root, not a `resolve` per
        file."""
        prefix = str(root.resolve()) + os.sep
        cut = len(prefix)

        def name(path: str | Path) -> str:
            text = os.fspath(path)
            if text.startswith(prefix):
                return text[cut:].replace(os.sep, "/")
            return relative(Path(text), root)

        for test_id, paths in usage.items():
            names = {name(p) for p in paths}
            if test_id is None or test_id not in self.tests:
                # Outside any test, or a test id a server received that pytest did not run
                # here: nobody's unused files, so always counted as used.
                self.piece.outside_tests = sorted({*self.piece.outside_tests, *names})
            else:
                test = self.tests[test_id]
                test.files = sorted({*test.files, *names})

    def merge_worker(self, data: Any) -> None:
        """Add what a pytest-xdist worker sent (`piece_json()`)."""
        try:
            other = UsagePiece.model_validate(data)
        except ValidationError:
            self.note("a worker sent an unreadable usage report")
            return
        self.piece.merge(other)

    def finish(self, *, root: Path, mode: Mode, reasons: Iterable[str]) -> RunUsage:
        """The run as a whole; `reasons` are what the plugin found partial in the options.

        `collected` of the result holds every test that exists (selected or deselected).
        """
        piece = self.piece
        why = [*reasons, *piece.notes]
        if piece.deselected:
            why.append(f"deselected: {_tests(len(piece.deselected))}")
        if piece.collection_errors:
            why.append(f"collection errors: {piece.collection_errors}")
        if not piece.collected:
            why.append("no tests collected")
        not_run = [t for t in piece.collected if not self._ran(t)]
        if not_run:
            why.append(f"did not run: {_tests(len(not_run))} (stopped early, or a worker crashed)")
        # the run shares no state with the collector (a later `finish` starts afresh)
        fields: dict[str, Any] = {name: getattr(piece, name) for name in UsagePiece.model_fields}
        fields.update(
            collected=sorted({*piece.collected, *piece.deselected}),
            deselected=[*piece.deselected],
            tests={test_id: test.copied() for test_id, test in piece.tests.items()},
            outside_tests=[*piece.outside_tests],
            notes=[*piece.notes],
        )
        return RunUsage.model_construct(  # our own values, as the piece's (no schema build)
            **fields,
            root=str(root),
            finished=time.time(),
            mode=mode.value,
            full_suite=not why,
            partial_reasons=why,
        )

    def _ran(self, test_id: str) -> bool:
        test = self.piece.tests.get(test_id)
        return test is not None and test.setup is not None


def _tests(count: int) -> str:
    return f"{count} test" if count == 1 else f"{count} tests"
