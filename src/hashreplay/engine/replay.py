"""The one record/replay decision per request (docs/design.md §11).

Adapters and the proxy hand the engine a request and get one of these values back; they only
carry it out (I/O):

- `Passthrough`: the URL is under `passthrough` (a server under test): send it on with
  `headers` added (the test id and run id).
- `Live`: the test runs in `live` mode (or inside a call-layer target that records the whole
  call): send it on.
- `Replay`: a recording (or a fault) answers it: answer from `response` (the call layer) or
  `plan()`, whose scenario fields (`error_kind`, `delays`, `hang`) the adapter carries out.
- `Miss`: replay mode and no usable recording; the test fails already: answer `plan()`, or
  raise `error` (the call layer).
- `Record`: record mode, or record-if-missing with nothing recorded: send it on and hand the
  outcome to `Session.record(prep, ...)`.

Replay: the next recorded response to a request (in recorded order, model lists merged),
with templates filled and the test's pace applied; and the failures a replay notes for its
test (a miss with its report, or a scenario that cannot be replayed).

The replay miss report (docs/design.md §6, contract).

Built only on a miss, so the common path pays nothing: the nearest recording is searched
lazily among the files of the test's directory and the common directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from hashreplay.core.bodies import encode_request_body
from hashreplay.core.constants import FIXTURE_MARK, RECORD_COMMAND
from hashreplay.core.errors import RecordingError, ReplayMiss, unreadable_fix
from hashreplay.core.format import EndState, RecordedResponse, is_no_response
from hashreplay.core.keys import is_model_list_name, recording_name
from hashreplay.core.matching import Repeat
from hashreplay.core.modes import Mode, Pace
from hashreplay.core.redact import Redactor
from hashreplay.core.store import Store
from hashreplay.core.templates import TemplateError
from hashreplay.engine.faults import FaultSpec
from hashreplay.engine.http import IncomingRequest, ReplayPlan, miss_plan, plan_for
from hashreplay.engine.keys import Prepared, count_differences, request_difference
from hashreplay.engine.scenarios import Scenario, check_pace, templated
from hashreplay.engine.state import KeyOf, StoreView, Tests, sequence_for

if TYPE_CHECKING:
    from hashreplay.core.format import Recording
    from hashreplay.core.store import Store
    from hashreplay.engine.keys import Prepared


class Passthrough(NamedTuple):
    """Not intercepted: a `passthrough` URL. `headers` carry the test id to the server."""

    headers: tuple[tuple[str, str], ...] = ()


class Live:
    """Not intercepted: the test runs in `live` mode."""

    __slots__ = ()  # not an empty NamedTuple: that would be false


class Replay(NamedTuple):
    prep: Prepared
    response: RecordedResponse
    path: Path
    #: faults, hangs and pacing on top of the response (docs/scenarios.md); None: none
    scenario: Scenario | None = None

    def plan(self) -> ReplayPlan:
        """Bytes and headers that reproduce the recorded response for an HTTP client."""
        plan = plan_for(self.response, self.path)
        return plan if self.scenario is None else self.scenario.shape(plan, self.response)


class Miss(NamedTuple):
    """The test will fail with `error` (noted already); the client gets `plan()`."""

    prep: Prepared
    error: ReplayMiss

    def plan(self, hint: str | None = None) -> ReplayPlan:
        return miss_plan(self.error, hint=hint)


class Record(NamedTuple):
    """Go to the network; hand the outcome to `Session.record(prep, ...)`."""

    prep: Prepared


Decision = Passthrough | Live | Replay | Miss | Record


class Recorded(NamedTuple):
    """The next recorded response to a request."""

    response: RecordedResponse
    path: Path


class Replayer:
    def __init__(
        self,
        view: StoreView,
        tests: Tests,
        redactor: Redactor,
        root: Path,
        pace: Pace,
        *,
        answers_only: bool = True,
        repeat: Repeat = Repeat.STRICT,
    ) -> None:
        #: what answers a call past the end of a recorded sequence (docs/design.md §14)
        self.repeat = repeat
        #: record-if-missing records again a stored call that got no response
        #: (`record_failures = "responses"`)
        self.answers_only = answers_only
        self.view = view
        self.store: Store = view.store
        self.tests = tests
        self.stats = tests.stats
        self.redactor = redactor
        self.root = root
        self.pace = pace

    def recorded(self, prep: Prepared) -> Recorded | None:
        """The next recorded response to this request and its file, or None. Identical
        requests within a test are answered in recorded order; a file that exists but cannot
        be used raises its RecordingError."""
        if prep.shared:
            return self._recorded_model_list(prep)
        tests = self.tests
        with tests.lock:
            seq = sequence_for(tests, self.view, prep)
            index = seq.calls
            if index >= len(seq.responses):
                if not seq.responses or self._repeat(prep) is not Repeat.LAST:
                    return None
                index = len(seq.responses) - 1  # a polling loop: the last answer again
            if prep.mode is Mode.RECORD_IF_MISSING and self._record_again(
                prep, seq.responses[index]
            ):
                return None
            seq.calls += 1
            tests.stats.replayed += 1
            tests.use(prep.test_id, seq.path)
        return Recorded(seq.responses[index], seq.path)

    def _repeat(self, prep: Prepared) -> Repeat:
        state = self.tests.get(prep.test_id)
        repeat = state.options.repeat if state is not None else None
        return self.repeat if repeat is None else repeat

    def _record_again(self, prep: Prepared, response: RecordedResponse) -> bool:
        """Whether record-if-missing treats a stored response as missing: one cut off when it
        was recorded, and (answers only) a call that got no response, which an older version
        stored (docs/design.md, "Only answers are recorded")."""
        if response.end_state is EndState.ABANDONED:
            return True
        return self.answers_only and is_no_response(prep.request, response)

    def _recorded_model_list(self, prep: Prepared) -> Recorded | None:
        paths = self.view.model_list_paths(prep.hash, prep.test_id)
        if not paths:
            return None
        from hashreplay.engine.keys import merge_model_lists  # only model lists

        merged = merge_model_lists([self.view.read(p).response for p in paths])
        with self.tests.lock:
            self.stats.replayed += 1
            self.tests.use(prep.test_id, *paths)
        return Recorded(merged, paths[0])

    def miss(
        self,
        prep: Prepared,
        problem: RecordingError | None = None,
        request: IncomingRequest | None = None,
    ) -> ReplayMiss:
        """Note a replay miss (the test will fail) and return it; never raises it. With the
        `request`, the report shows the URL it was sent to, host and port as given."""

        recorded = self.tests.recorded_count(prep.test_id, prep.hash)
        url = None if request is None else self.redactor.url(request.url)
        report = miss_report(
            self.store,
            self.root,
            prep,
            problem=problem,
            recorded_count=recorded,
            url=url,
            key_of=self.view.key_of,
        )
        report = prep.secrets.text(self.redactor.text(report))
        miss = ReplayMiss(report, test_id=prep.test_id, request_hash=prep.hash)
        with self.tests.lock:
            self.stats.missed += 1
            self.tests.state(prep.test_id).misses.append(miss)
        return miss

    def replay(
        self,
        prep: Prepared,
        found: Recorded,
        request: IncomingRequest | None,
        fault: FaultSpec | None,
    ) -> Replay | Miss:
        """A recorded response with templates filled, and the test's pace and fault."""
        response, path = found
        try:
            response = templated(response, lambda: self._layout(prep, request), path)
        except RecordingError as problem:
            return Miss(prep, self.miss(prep, problem, request))
        except TemplateError as exc:
            return Miss(prep, self.failure(prep, f"{exc} (recording {path})"))
        with self.tests.lock:
            state = self.tests.get(prep.test_id)
            pace = (state.options.pace if state else None) or self.pace
        unpaced = check_pace(pace, response, path)
        if unpaced is not None:
            return Miss(prep, self.failure(prep, unpaced))
        if pace.instant and fault is None:
            return Replay(prep, response, path)
        return Replay(prep, response, path, Scenario(pace=pace, fault=fault))

    def _layout(self, prep: Prepared, request: IncomingRequest | None) -> dict[str, Any]:
        """The live request in the stored layout, redacted but not normalised: what
        `{{request:<path>}}` templates are filled from."""
        if request is None:  # the call layer
            return prep.request.model_dump(mode="json")
        raw, _ = encode_request_body(request.content, request.header("content-type"))
        return {
            "method": prep.request.method,
            "url": prep.request.url,
            "endpoint": prep.request.endpoint,
            "headers": {k.lower(): self.redactor.header(k, v) for k, v in request.headers},
            "body": self.redactor.value(raw),
        }

    def failure(self, prep: Prepared, problem: str) -> ReplayMiss:
        """Note a failure of this test that is not a missing recording (a scenario that
        cannot be replayed); the test fails with `problem`."""
        miss = ReplayMiss(
            self.redactor.text(f"hashreplay: {prep.shown_test_id}: {problem}"),
            test_id=prep.test_id,
            request_hash=prep.hash,
        )
        with self.tests.lock:
            self.stats.missed += 1
            self.tests.state(prep.test_id).misses.append(miss)
        return miss


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


def _candidates(store: Store, prep: Prepared) -> tuple[list[_Candidate], int]:
    """Readable recordings near this request, and how many recordings the test has."""
    found: list[_Candidate] = []
    own = 0
    incoming = _comparable(prep.request.method, prep.request.endpoint, prep.request.body)
    seen: set[Path] = set()
    for directory in store.search_dirs(prep.test_id):
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
) -> str:
    """The text that fails the test: what was asked, where we looked, what is nearest, and
    the command that records it. `url` is where the request really went (redacted), with
    its host and port, rather than the stored form (a loopback host without its port)."""
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
        lines.extend(_nearest_lines(store, root, prep, key_of))
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
    store: Store, root: Path, prep: Prepared, key_of: KeyOf | None = None
) -> list[str]:
    candidates, own = _candidates(store, prep)
    lines: list[str] = []
    if own == 0 and prep.test_id:
        lines.append("  this test has no recordings yet (a new test, or one renamed or moved)")
        exact = [
            c
            for c in candidates
            if c.tier == 2 and c.distance == 0 and c.recording.test_id is not None
        ]
        if exact:
            old = exact[0]
            lines.append(
                f"  {_rel(root, old.path)} of test {old.recording.test_id} has exactly this "
                "request: was the test renamed or moved? Re-record, and prune the old recordings"
            )
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
