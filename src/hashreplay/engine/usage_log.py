"""Which recordings each test used in a run: the usage log `.hashreplay/usage.json`.

The pytest plugin feeds a `UsageCollector` per process (the outcome of each test phase and
the files each test replayed or wrote); pytest-xdist workers hand theirs to the controller as
a plain dict, and the controller (or the only process) writes one `RunUsage` at the project
root, in a folder whose own `.gitignore` keeps it out of `git status`. `_prune` decides from
it which recordings are unused. This module holds the log's pydantic models: the one
definition a run writes (`hashreplay.engine.usage_collector` fills them) and reads back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, computed_field

from hashreplay.core.errors import UsageError
from hashreplay.core.mode import Mode
from hashreplay.core.secret_values import NO_SECRETS, SecretValues
from hashreplay.core.store import dumps
from hashreplay.core.temp_files import write_bytes_atomic
from hashreplay.engine.usage_format import (
    GITIGNORE_CONTENT,
    INTERCEPTING,
    USAGE_FILENAME,
    USAGE_VERSION,
    ensure_state_dir,
    relative,
    scrubbed_json,
    usage_path,
)
from hashreplay.engine.usage_format import completed as _completed
from hashreplay.engine.usage_format import outcome as _outcome

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
    "usage_path",
    "write_usage",
]


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
    files: list[str] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def completed(self) -> bool:
        """Setup and call passed and teardown did not fail."""
        return _completed(self.setup, self.call, self.teardown)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def outcome(self) -> str:
        return _outcome(self.setup, self.call, self.teardown)

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

    started: float = Field(default_factory=time.time)
    #: Tests selected to run (a `RunUsage` adds the deselected ones: every test that exists).
    collected: list[str] = Field(default_factory=list)
    deselected: list[str] = Field(default_factory=list)
    collection_errors: int = 0
    tests: dict[str, TestUsage] = Field(default_factory=dict)
    #: Files used by requests made outside any test (session start-up, threads).
    outside_tests: list[str] = Field(default_factory=list)
    #: Why this run may not be the full suite, beyond what the options say.
    notes: list[str] = Field(default_factory=list)

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
    partial_reasons: list[str] = Field(default_factory=list)

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


# --- the log file ---------------------------------------------------------------------------


def scrubbed_usage(
    run: RunUsage, secrets: SecretValues, redact: Callable[[str], str] | None = None
) -> RunUsage:
    """The run with secrets removed from its test ids, as it is written: what a pruning run
    must compare with the ids recordings store (docs/design.md §7, "Test ids")."""
    return RunUsage.model_validate(scrubbed_json(run.model_dump(mode="json"), secrets, redact))


def write_usage(run: RunUsage, root: Path, secrets: SecretValues = NO_SECRETS) -> Path:
    """Write the usage log; `secrets` (credential values seen in requests) are scrubbed
    from every test id in it."""
    ensure_state_dir(root)
    path = usage_path(root)
    write_bytes_atomic(path, dumps(scrubbed_json(run.model_dump(mode="json"), secrets, None)))
    return path


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
