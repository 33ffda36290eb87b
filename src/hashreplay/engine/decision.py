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
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from hashreplay.core.errors import ReplayMiss
from hashreplay.core.recording import RecordedResponse
from hashreplay.engine.http import ReplayPlan, plan_for
from hashreplay.engine.keying import Prepared
from hashreplay.engine.miss import miss_plan
from hashreplay.engine.scenario import Scenario


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
