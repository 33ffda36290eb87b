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

Replay: the next recorded response to a request, as its test's owner answers it
(`engine/owner.py`; model lists merged here), with templates filled and the test's pace
applied; and the failures a replay notes for its test (a miss with its report, or a
scenario that cannot be replayed).

The miss report is `engine/miss.py`, loaded on the first miss.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from hashreplay.core.age import StaleUse, today
from hashreplay.core.bodies import encode_request_body
from hashreplay.core.constants import STALE_HEADER
from hashreplay.core.errors import RecordingError, ReplayMiss
from hashreplay.core.format import RecordedResponse
from hashreplay.core.redact import Redactor
from hashreplay.core.store import Store
from hashreplay.core.templates import TemplateError
from hashreplay.engine.faults import FaultSpec
from hashreplay.engine.http import IncomingRequest, ReplayPlan, miss_plan, plan_for
from hashreplay.engine.keys import Prepared
from hashreplay.engine.owner import Call, Owners, Recorded, TestRecordings
from hashreplay.engine.scenarios import Scenario, check_pace, templated
from hashreplay.engine.state import StoreView

if TYPE_CHECKING:
    from hashreplay.core.store import Store
    from hashreplay.engine.keys import Prepared


class Passthrough(NamedTuple):
    """Not intercepted: a `passthrough` URL. `headers` carry the test id to the server."""

    headers: tuple[tuple[str, str], ...] = ()


class Live:
    """Not intercepted: the test runs in `live` mode. `call`: its entry in the test's
    `calls`, whose status the adapter reports once the answer's head arrives
    (`Session.live_status`)."""

    __slots__ = ("call", "test_id")  # not an empty NamedTuple: that would be false

    def __init__(self, call: Call | None = None, test_id: str | None = None) -> None:
        self.call = call
        self.test_id = test_id


class Replay(NamedTuple):
    prep: Prepared
    response: RecordedResponse
    path: Path
    #: faults, hangs and pacing on top of the response (docs/scenarios.md); None: none
    scenario: Scenario | None = None
    #: the response is older than the test's `max_age` (docs/recordings.md, "Age")
    stale: StaleUse | None = None

    def plan(self) -> ReplayPlan:
        """Bytes and headers that reproduce the recorded response for an HTTP client."""
        plan = plan_for(self.response, self.path)
        return plan if self.scenario is None else self.scenario.shape(plan, self.response)


class Miss(NamedTuple):
    """The test will fail with `error` (noted already); the client gets `plan()`."""

    prep: Prepared
    error: ReplayMiss
    #: refused for its age (`stale = "fail"` in a front end with no test end), not missing
    stale: StaleUse | None = None
    #: refused before it was sent: its request body is over `max_body_bytes`
    too_large: bool = False

    def plan(self, hint: str | None = None) -> ReplayPlan:
        if self.stale is None:
            return miss_plan(self.error, hint=hint)
        age = ((STALE_HEADER, f"{self.stale.age}d"),)
        return miss_plan(self.error, hint=hint, code="hashreplay_stale", headers=age)


class Record(NamedTuple):
    """Go to the network; hand the outcome to `Session.record(prep, ...)`."""

    prep: Prepared


Decision = Passthrough | Live | Replay | Miss | Record


class Replayer:
    """What a session adds to its owners' answers: the next recorded exchange for a request
    (the owner of its test decides; a shared model list is read and merged here), with
    templates filled and the test's pace applied, and the failures a replay notes for its
    test (a miss with its report, or a scenario that cannot be replayed)."""

    def __init__(
        self,
        view: StoreView,
        owners: Owners,
        redactor: Redactor,
        root: Path,
        *,
        today: Callable[[], datetime.date] = today,
    ) -> None:
        self.today = today
        self.view = view
        self.store: Store = view.store
        self.owners = owners
        self.redactor = redactor
        self.root = root
        #: the test ids a pytest run collected or deselected (set by the plugin); None
        #: outside pytest. A miss report names a recording of the same request under an
        #: id not among them: a renamed or moved test's (docs/design.md §14)
        self.known_tests: frozenset[str] | None = None
        self._known_shown: tuple[frozenset[str], frozenset[str]] | None = None

    def _today(self) -> datetime.date:
        return self.today()  # looked up at each call: tests replace `today`

    def recorded(self, owner: TestRecordings, prep: Prepared) -> Recorded | None:
        """The next recorded response to this request and its file, or None. Identical
        requests within a test are answered in recorded order; a file that exists but cannot
        be used raises its RecordingError."""
        tally = self.owners.tally
        if not prep.shared:
            return owner.next_recorded(self.view, prep, self._today, tally)
        paths = self.view.model_list_paths(prep.hash, prep.test_id)
        if not paths:
            return None
        from hashreplay.core.model_lists import merge_model_lists, newest_model_list

        responses = [self.view.read(p).response for p in paths]
        merged = merge_model_lists(responses)
        newest = newest_model_list(list(zip(paths, responses, strict=True)))
        # a shared list ages like a test's own recording, dated by its newest file
        dated = (responses[newest], paths[newest])
        return owner.next_model_list(
            prep, merged=merged, paths=paths, newest=dated, today=self._today, tally=tally
        )

    def miss(
        self,
        prep: Prepared,
        problem: RecordingError | None = None,
        request: IncomingRequest | None = None,
    ) -> ReplayMiss:
        """Note a replay miss (the test will fail) and return it; never raises it. With the
        `request`, the report shows the URL it was sent to, host and port as given."""
        from hashreplay.engine.miss import miss_report  # only a miss needs it

        owner = self.owners.get(prep.test_id)
        recorded = 0 if owner is None else owner.recorded_count(prep.hash)
        url = None if request is None else self.redactor.url(request.url)
        report = miss_report(
            self.store,
            self.root,
            prep,
            problem=problem,
            recorded_count=recorded,
            url=url,
            key_of=self.view.key_of,
            known=self._known_as_stored(),
        )
        report = prep.secrets.text(self.redactor.text(report))
        miss = ReplayMiss(report, test_id=prep.test_id, request_hash=prep.hash)
        self._note(prep, miss)
        return miss

    def _known_as_stored(self) -> frozenset[str] | None:
        """`known_tests` as recordings store test ids (secret shapes removed, docs/design.md
        §7); worked out on the first miss, once."""
        known = self.known_tests
        if known is None:
            return None
        memo = self._known_shown
        if memo is None or memo[0] is not known:
            memo = self._known_shown = (known, frozenset(map(self.redactor.text, known)))
        return memo[1]

    def replay(
        self,
        prep: Prepared,
        found: Recorded,
        request: IncomingRequest | None,
        fault: FaultSpec | None,
    ) -> Replay | Miss:
        """A recorded response with templates filled, and the test's pace and fault."""
        response, path, stale = found
        try:
            response = templated(response, lambda: self._layout(prep, request), path)
        except RecordingError as problem:
            return Miss(prep, self.miss(prep, problem, request))
        except TemplateError as exc:
            return Miss(prep, self.failure(prep, f"{exc} (recording {path})"))
        owner = self.owners.get(prep.test_id)
        pace = self.owners.defaults.pace if owner is None else owner.pace()
        unpaced = check_pace(pace, response, path)
        if unpaced is not None:
            return Miss(prep, self.failure(prep, unpaced))
        if pace.instant and fault is None:
            return Replay(prep, response, path, stale=stale)
        return Replay(prep, response, path, Scenario(pace=pace, fault=fault), stale)

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
        self._note(prep, miss)
        return miss

    def _note(self, prep: Prepared, failure: ReplayMiss) -> None:
        self.owners.tally.missed()
        self.owners.owner(prep.test_id).fail(failure)
