"""The replay miss report (docs/design.md §6, contract).

Built only on a miss, so the common path pays nothing: the nearest recording is searched
lazily among the files of the test's directory and the common directory. A recording of
exactly this request under a test id that no longer exists (a renamed or moved test,
docs/design.md §14) is named with the `hashreplay mv` command that keeps it.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hashreplay.core.constants import FIXTURE_MARK, RECORD_COMMAND, RECORDINGS_DIRNAME
from hashreplay.core.diff import count_differences, request_difference
from hashreplay.core.errors import ConfigError, HashReplayError, RecordingError, unreadable_fix
from hashreplay.core.matching import MatchRule
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


def _comparable(method: str, endpoint: str, body: Any) -> dict[str, Any]:
    return {"method": method, "endpoint": endpoint, "body": body}


def _candidates(
    store: Store, prep: Prepared, directories: Iterable[Path] | None = None
) -> tuple[list[_Candidate], int]:
    """Readable recordings near this request (in the test's search directories, else in
    `directories`), and how many recordings the test has."""
    found: list[_Candidate] = []
    own = 0
    incoming = _comparable(prep.request.method, prep.request.endpoint, prep.request.body)
    seen: set[Path] = set()
    for directory in store.search_dirs(prep.test_id) if directories is None else directories:
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.json")):
            if path in seen or is_model_list_name(path.name):
                continue
            seen.add(path)
            try:
                recording = store.read(path)
            except (RecordingError, OSError):
                continue
            same_test = recording.test_id == prep.shown_test_id
            own += same_test
            req = recording.request
            same_endpoint = (
                req.endpoint == prep.request.endpoint and req.method == prep.request.method
            )
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
    pytest, where any other test id holding this request may be a renamed test's."""
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
        rerun = record_target(prep.test_id, prep.shown_test_id) if prep.test_id else None
        lines.append(f"  to fix it: {unreadable_fix(_rel(root, problem.path), rerun)}")
    elif problem is not None:
        lines.append("  to fix it: do what the problem above says, then re-record the test")
    elif prep.test_id:
        target = record_target(prep.test_id, prep.shown_test_id)
        lines.append(f"  to record it: {RECORD_COMMAND.format(nodeid=target)}")
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
    candidates, own = _candidates(store, prep)
    lines: list[str] = []
    if own == 0 and prep.test_id:
        lines.append("  this test has no recordings yet (a new test, or one renamed or moved)")
    orphan = _orphan(candidates, prep, own, key_of, known)
    if orphan is None and own == 0 and known is not None and prep.test_id:
        # a moved directory: the old test's recordings lie in another recordings directory
        try:
            far, _ = _candidates(store, prep, _other_dirs(store, root, prep, known))
        except (HashReplayError, OSError):  # a directory that cannot be searched: no hint
            far = []
        orphan = _orphan(far, prep, own, key_of, known)
    if orphan is not None:
        old = orphan.recording.test_id
        assert old is not None and prep.shown_test_id is not None  # as `_orphan` found it
        why = (
            "recorded under another test id" if known is None else "which this run did not collect"
        )
        lines.append(
            f"  {_rel(root, orphan.path)} holds exactly this request, recorded by test {old}, "
            f"{why}: if that test was renamed or moved, keep its recordings with"
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
        if renamed == prep.hash:  # the same request under today's rules: named by others
            lines.append(
                "  it matches this request under the current matching rules but was named by "
                "other rules (or an older key_version): run `hashreplay rehash`"
            )
    return lines


def _orphan(
    candidates: list[_Candidate],
    prep: Prepared,
    own: int,
    key_of: KeyOf | None,
    known: Collection[str] | None,
) -> _Candidate | None:
    """The recording of exactly this request under a test id that no longer exists (in a
    pytest run: one it did not collect; elsewhere, when this test has none: any other)."""
    if not prep.test_id or prep.shown_test_id is None or FIXTURE_MARK in prep.shown_test_id:
        return None
    if known is None and own:
        return None
    for candidate in candidates:
        old = candidate.recording.test_id
        if candidate.tier != 2 or old is None or FIXTURE_MARK in old:
            continue
        if known is not None and old in known:
            continue  # another test that exists makes the same request
        if _same_request(candidate, prep, key_of):
            return candidate
    return None


def _other_dirs(store: Store, root: Path, prep: Prepared, known: Collection[str]) -> list[Path]:
    """The project's recordings directories that serve no test file of this run: where the
    recordings of a moved directory's tests are left (searched only on such a miss)."""
    skip = {*store.search_dirs(prep.test_id)}
    skip.update(store.dir_for(test_id) for test_id in {t.split("::", 1)[0] for t in known})
    found: list[Path] = []
    for current, dirs, _files in os.walk(root):  # never follows a symlinked directory
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        if RECORDINGS_DIRNAME in dirs:
            dirs.remove(RECORDINGS_DIRNAME)  # a recordings directory holds files, not more
            directory = Path(current, RECORDINGS_DIRNAME).resolve()
            if directory not in skip:
                found.append(directory)
    return found


def _same_request(candidate: _Candidate, prep: Prepared, key_of: KeyOf | None) -> bool:
    """Whether the recording, moved to this test id, would answer this request: the same
    method, endpoint and body, or the same key under the narrower rule it was made with."""
    if candidate.distance == 0:
        return True
    match = candidate.recording.match
    if key_of is None or match is None:
        return False
    try:
        rule = MatchRule.from_json(match)
    except ConfigError:
        return False
    test_id = prep.shown_test_id
    return (
        key_of(candidate.recording.request, test_id, rule)[0]
        == (key_of(prep.request, test_id, rule)[0])
    )


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
