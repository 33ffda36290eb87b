"""The replay miss report (docs/design.md §6, contract).

Built only on a miss, so the common path pays nothing: the nearest recording is searched
lazily among the files of the test's directory and the common directory. A recording of
exactly this request under a test id that no longer exists (a renamed or moved test,
docs/design.md §14) is named with the `hashreplay mv` command that keeps it.

In a server under test (`hashreplay.install()` and its middleware, docs/design.md §8) the
mode comes from the server's environment, so the report says to restart the server in a
recording mode; the middleware marks the request (`ServerRequest`) and reads how many
misses its upstream calls had.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hashreplay.core.constants import (
    FIXTURE_MARK,
    RECORD_COMMAND,
    RECORDINGS_DIRNAME,
    SERVER_RECORD_STEP,
)
from hashreplay.core.diff import count_differences, request_difference
from hashreplay.core.errors import HashReplayError, RecordingError, unreadable_fix
from hashreplay.core.matching import MatchRule, file_rule
from hashreplay.core.names import is_model_list_name, recording_name
from hashreplay.core.paths import SKIP_DIRS

if TYPE_CHECKING:
    from hashreplay.core.format import Recording
    from hashreplay.core.store import Store
    from hashreplay.engine.keys import Prepared
    from hashreplay.engine.state import KeyOf


@dataclass(frozen=True)
class _Candidate:
    path: Path
    recording: Recording
    tier: int  # 0 same test+endpoint, 1 same test, 2 same endpoint (other test)
    distance: int


_TIERS = {
    0: "same test and endpoint",
    1: "same test, other endpoint",
    2: "same endpoint, other test",
}


class ServerRequest:
    """A request a server under test serves for a test (`hashreplay.install()`'s session):
    the misses its upstream calls had, counted as their reports are made (the tasks it
    starts share it through their copied context)."""

    __slots__ = ("misses",)

    def __init__(self) -> None:
        self.misses = 0


_SERVING: ContextVar[ServerRequest | None] = ContextVar("hashreplay_serving", default=None)


@contextmanager
def serving(request: ServerRequest) -> Iterator[ServerRequest]:
    """Run a server's handling of one request as `request` (the middlewares do)."""
    token = _SERVING.set(request)
    try:
        yield request
    finally:
        _SERVING.reset(token)


def _comparable(method: str, endpoint: str, body: Any) -> dict[str, Any]:
    return {"method": method, "endpoint": endpoint, "body": body}


def _read(store: Store, directories: Iterable[Path]) -> Iterator[tuple[Path, Recording]]:
    """The readable recordings of `directories` (model lists and unreadable files left out)."""
    seen: set[Path] = set()
    for directory in directories:
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.json")):
            if path in seen or is_model_list_name(path.name):
                continue
            seen.add(path)
            try:
                yield path, store.read(path)
            except (RecordingError, OSError):
                continue


def _candidates(
    prep: Prepared, files: Iterable[tuple[Path, Recording]]
) -> tuple[list[_Candidate], int]:
    """The recordings of `files` near this request, and how many of them are the test's."""
    found: list[_Candidate] = []
    own = 0
    incoming = _comparable(prep.request.method, prep.request.endpoint, prep.request.body)
    for path, recording in files:
        same_test = recording.test_id == prep.shown_test_id
        own += same_test
        req = recording.request
        same_endpoint = req.endpoint == prep.request.endpoint and req.method == prep.request.method
        if same_test and same_endpoint:
            tier = 0
        elif same_test:
            tier = 1
        elif same_endpoint:
            tier = 2
        else:
            continue
        distance = count_differences(_comparable(req.method, req.endpoint, req.body), incoming)
        found.append(_Candidate(path, recording, tier, distance))
    found.sort(key=lambda c: (c.tier, c.distance, c.path.name))
    return found, own


def _rel(root: Path, path: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def miss_report(
    store: Store,
    root: Path,
    prep: Prepared,
    *,
    problem: RecordingError | None = None,
    recorded_count: int = 0,
    url: str | None = None,
    key_of: KeyOf | None = None,
    known: Collection[str] | None = None,
) -> str:
    """The text that fails the test: what was asked, where we looked, what is nearest, and
    the command that records it. `url` is where the request really went (redacted), with
    its host and port, rather than the stored form (a loopback host without its port).
    `known`: the test ids of this pytest run (as recordings store them); None outside
    pytest, where any other test id holding this request may be a renamed test's. In a
    server under test (`serving`), the miss is counted for its request."""
    server = _SERVING.get()
    if server is not None:
        server.misses += 1
    req = prep.request
    test = prep.shown_test_id or "(no test: a request outside any test)"
    lines = [
        f"hashreplay: no recording for {req.method} {url or req.url} ({prep.mode.value} mode)",
        f"  test:      {test}",
        f"  hash:      {prep.hash}",
    ]
    searched = [_rel(root, d / recording_name(prep.hash)) for d in store.search_dirs(prep.test_id)]
    lines.append(f"  looked in: {', '.join(searched)}")
    if problem is not None:
        where = "" if problem.path is None else f"{_rel(root, problem.path)}: "
        lines.append(f"  unreadable recording: {where}{problem.problem}")
        lines.append("  the file was left untouched")
    elif recorded_count:
        times = "once" if recorded_count == 1 else f"{recorded_count} times"
        lines.append(
            f"  this request was recorded {times} in this test; call {recorded_count + 1} "
            "has no recording (the code now makes more identical calls than when recorded)"
        )
    else:
        lines.extend(_nearest_lines(store, root, prep, key_of, known))
    if problem is not None and problem.path is not None and problem.path.suffix == ".json":
        # record-if-missing would meet the same file again: name what replaces it
        # a server under test records in its own mode: no pytest command re-records it
        rerun = None
        if prep.test_id and server is None:
            rerun = record_target(prep.test_id, prep.shown_test_id)
        lines.append(f"  to fix it: {unreadable_fix(_rel(root, problem.path), rerun)}")
    elif problem is not None:
        lines.append("  to fix it: do what the problem above says, then re-record the test")
    elif prep.test_id:
        target = record_target(prep.test_id, prep.shown_test_id)
        step = SERVER_RECORD_STEP if server is not None else RECORD_COMMAND
        lines.append(f"  to record it: {step.format(nodeid=target)}")
    else:
        lines.append("  to record it: run the same code with INFERENCE_MODE=record-if-missing")
    return "\n".join(lines)


def _nearest_lines(
    store: Store,
    root: Path,
    prep: Prepared,
    key_of: KeyOf | None = None,
    known: Collection[str] | None = None,
) -> list[str]:
    candidates, own = _candidates(prep, _read(store, store.search_dirs(prep.test_id)))
    lines: list[str] = []
    if own == 0 and prep.test_id:
        lines.append("  this test has no recordings yet (a new test, or one renamed or moved)")
    gone = _Gone(root, known)
    orphan = _orphan(candidates, prep, own, key_of, gone)
    if orphan is None and own == 0 and known is not None and prep.test_id:
        # a moved test file: the old test's recordings lie in another recordings directory
        skip = set(store.search_dirs(prep.test_id))
        elsewhere = [(p, r) for p, r in _gone_elsewhere(store, root, gone) if p.parent not in skip]
        far, _ = _candidates(prep, elsewhere)
        orphan = _orphan(far, prep, own, key_of, gone)
    if orphan is not None:
        old = orphan.recording.test_id
        assert old is not None and prep.shown_test_id is not None  # as `_orphan` found it
        if known is None:
            why = "recorded under another test id"
        elif old.split("::", 1)[0] in gone.modules:
            why = "which its test file, collected by this run, no longer has"
        else:
            why = "whose test file no longer exists"
        if orphan.distance == 0:
            what = "holds exactly this request"
        else:
            rule = _file_rule(orphan.recording)
            assert rule is not None  # as `_same_request` found it
            what = f"holds this request under the rule it was recorded with ({rule.describe()})"
        lines.append(
            f"  {_rel(root, orphan.path)} {what}, recorded by test {old}, {why}: if that test "
            "was renamed or moved, keep its recordings with"
        )
        lines.append(f"    {mv_command(old, prep.shown_test_id)}")
        return lines
    if not candidates:
        if own:
            lines.append(f"  no recording of this test or suite calls {req_line(prep)}")
        return lines
    best = candidates[0]
    diff = request_difference(best.recording.request, prep.request)
    lines.append(f"  nearest:   {_rel(root, best.path)} ({_TIERS[best.tier]})")
    if diff is not None:
        lines.append(f"  differs:   {diff.describe()}")
    if key_of is not None and best.tier <= 1:  # of this test
        renamed = key_of(best.recording.request, prep.shown_test_id, prep.rule)[0]
        earlier = _earlier_project_rule(best.recording, prep.rule)
        if renamed == prep.hash:  # the same request under today's rules: named by others
            lines.append(
                "  it matches this request under the current matching rules but was named by "
                "other rules (or an older key_version): run `hashreplay rehash`"
            )
        elif earlier is not None and _same_key(key_of, best.recording, prep, earlier):
            now = "the default" if prep.rule is None else prep.rule.describe()
            lines.append(
                f"  it matches this request under the project rule it was recorded with "
                f"({earlier.describe()}), but the rule for this test is now {now}: run "
                "`hashreplay rehash` to re-key the store to the current rule, then record "
                "what differs"
            )
    return lines


class _Gone:
    """Whether a test id no longer exists, as far as a pytest run can tell: not collected
    (nor deselected), and its test file either collected without it or gone from disk. A
    test of a file the run did not collect (`pytest tests/test_a.py`) may still exist, so it
    is never taken for gone. Outside pytest (`known` None) nothing is known."""

    def __init__(self, root: Path, known: Collection[str] | None) -> None:
        self.root = root
        self.known = known
        self.modules = frozenset(t.split("::", 1)[0] for t in known or ())

    def __call__(self, test_id: str) -> bool:
        if self.known is None:
            return True
        if test_id in self.known:
            return False
        module = test_id.split("::", 1)[0]
        if module in self.modules:
            return True
        try:
            return not (self.root / module).exists()
        except (OSError, ValueError):  # a name the file system cannot hold: not a file here
            return True


def _orphan(
    candidates: list[_Candidate],
    prep: Prepared,
    own: int,
    key_of: KeyOf | None,
    gone: _Gone,
) -> _Candidate | None:
    """The recording of this request under a test id that no longer exists (in a pytest
    run: see `_Gone`; elsewhere, when this test has none: any other)."""
    if not prep.test_id or prep.shown_test_id is None or FIXTURE_MARK in prep.shown_test_id:
        return None
    if gone.known is None and own:
        return None
    for candidate in candidates:
        old = candidate.recording.test_id
        if candidate.tier != 2 or old is None or FIXTURE_MARK in old:
            continue
        if not gone(old):
            continue  # another test that may still exist makes the same request
        if _same_request(candidate, prep, key_of):
            return candidate
    return None


#: The recordings of gone tests across the project's recordings directories, for one run's
#: `known` ids: read on the first miss of a test with no recordings, then kept (a replay run
#: does not change its store), so a suite of new tests reads the project once, not per miss.
_elsewhere: list[tuple[Collection[str], Path, list[tuple[Path, Recording]]]] = []


def _gone_elsewhere(store: Store, root: Path, gone: _Gone) -> list[tuple[Path, Recording]]:
    """The recordings, anywhere in the project, of test ids that no longer exist: where a
    test file moved to another directory left its recordings (the old directory may still
    serve other test files)."""
    known = gone.known
    assert known is not None  # only a pytest run knows which tests exist
    if _elsewhere and _elsewhere[0][0] is known and _elsewhere[0][1] == root:
        return _elsewhere[0][2]
    try:
        found = [
            (path, recording)
            for path, recording in _read(store, _recordings_dirs(root))
            if recording.test_id is not None
            and FIXTURE_MARK not in recording.test_id
            and gone(recording.test_id)
        ]
    except (HashReplayError, OSError):  # a directory that cannot be searched: no hint
        found = []
    _elsewhere[:] = [(known, root, found)]
    return found


def _recordings_dirs(root: Path) -> Iterator[Path]:
    """Every recordings directory of the project (symlinked directories are not followed)."""
    for current, dirs, _files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        if RECORDINGS_DIRNAME in dirs:
            dirs.remove(RECORDINGS_DIRNAME)  # a recordings directory holds files, not more
            yield Path(current, RECORDINGS_DIRNAME).resolve()


def _same_request(candidate: _Candidate, prep: Prepared, key_of: KeyOf | None) -> bool:
    """Whether the recording, moved to this test id, would answer this request: the same
    method, endpoint and body, or the same key under the narrower rule it keeps as its own
    (a marker's, an import's; a project rule only while the project still has it)."""
    if candidate.distance == 0:
        return True
    rule = _file_rule(candidate.recording)
    if key_of is None or rule is None:
        return False
    if rule.follows_project and rule != prep.rule:
        return False  # a rule the configuration no longer gives: not how it is matched now
    return _same_key(key_of, candidate.recording, prep, rule)


def _same_key(key_of: KeyOf, recording: Recording, prep: Prepared, rule: MatchRule) -> bool:
    test_id = prep.shown_test_id
    return key_of(recording.request, test_id, rule)[0] == key_of(prep.request, test_id, rule)[0]


def _file_rule(recording: Recording) -> MatchRule | None:
    """The narrower rule a file was keyed by (its `match`); None: the default, or unreadable."""
    rule = file_rule(recording.match)
    return None if rule is None or rule.is_default else rule


def _earlier_project_rule(recording: Recording, now: MatchRule | None) -> MatchRule | None:
    """The project rule a file was keyed by when the rule for the request is now another."""
    rule = _file_rule(recording)
    if rule is None or not rule.follows_project or rule == now:
        return None
    return rule


def mv_command(old: str, new: str) -> str:
    """`hashreplay mv 'OLD' 'NEW'`: a parametrised case that kept its parameters names the
    whole test, so one command moves every case."""
    head_old, _, params_old = old.partition("[")
    head_new, _, params_new = new.partition("[")
    if params_old and params_old == params_new and head_old != head_new:
        old, new = head_old, head_new
    return f"hashreplay mv {_quoted(old)} {_quoted(new)}"


def _quoted(text: str) -> str:
    """For a POSIX shell: in single quotes, always (node ids hold `[`, `*`, spaces)."""
    return "'" + text.replace("'", "'\\''") + "'"


def record_target(test_id: str, shown: str | None = None) -> str:
    """What to give pytest to re-run a test id: the node id itself, or, for a wide-scoped
    fixture's id (`tests/conftest.py::[fixture]client`), the directory or module that holds
    the tests using it. A node id whose parameters held a secret (`shown` differs) is never
    printed: the test function without its parameters is, which runs every case."""
    if shown is not None and shown != test_id:
        test_id = shown
        if FIXTURE_MARK not in shown:
            head, sep, name = shown.rpartition("::")
            return f"{head}{sep}{name.split('[', 1)[0]}"
    if FIXTURE_MARK not in test_id:
        return test_id
    where = test_id.split("::", 1)[0]
    return where.rsplit("/", 1)[0] if where.endswith("conftest.py") and "/" in where else where


def req_line(prep: Prepared) -> str:
    return f"{prep.request.method} {prep.request.endpoint}"
