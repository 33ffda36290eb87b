"""Scenarios on replay (docs/scenarios.md); first, pacing: the waits before head and chunks.

`delays_for` turns a pace and a response into the plan's `delays`; adapters wait through
`sleep` (sync clients) or `asleep` (event loops: awaited, the loop stays responsive). The
clock is injectable (`set_clock`), so tests can see the waits requested without waiting.

Scenarios on replay (docs/scenarios.md): what the engine adds to a plan besides the
recorded bytes, namely faults, hangs, pacing and request templates.

`Session.decide` asks `fault_for` first (a matching fault answers before any recorded
response is consumed), and passes every recorded response it replays through `replayed`.
The result is an ordinary `Replay` (or `Miss`) whose plan carries the instructions
(`error_kind`, `delays`, `hang`) every adapter carries out (docs/design.md §11).

At a test's end, `unmatched_faults` lists the faults that matched nothing (the recordings
it did not use are `engine/unconsumed.py`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol
from urllib.parse import urlsplit

import orjson

from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.constants import FAULT_HEADER
from hashreplay.core.errors import RecordingError, error_body
from hashreplay.core.format import RecordedResponse
from hashreplay.core.modes import Pace
from hashreplay.core.templates import TemplateError, fill, fill_stream
from hashreplay.engine.faults import ActiveFault, FaultSpec, Hang, TestOptions
from hashreplay.engine.http import BreakKind, IncomingRequest, ReplayPlan


class Clock(Protocol):
    def sleep(self, seconds: float) -> None: ...

    async def asleep(self, seconds: float) -> None: ...


class RealClock:
    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        import asyncio  # loaded already: a coroutine runs in its loop

        await asyncio.sleep(seconds)


_clock: list[Clock] = [RealClock()]


def set_clock(clock: Clock) -> Clock:
    """Use `clock` for every pacing wait; returns the previous one (to restore)."""
    previous, _clock[0] = _clock[0], clock
    return previous


def sleep(seconds: float) -> None:
    if seconds > 0:
        _clock[0].sleep(seconds)


async def asleep(seconds: float) -> None:
    if seconds > 0:
        await _clock[0].asleep(seconds)


class NoTiming(Exception):
    """`pace = "recorded"` for a response recorded without timing."""


def delays_for(response: RecordedResponse, pace: Pace, chunks: int) -> tuple[float, ...]:
    """Seconds before the head and before each of `chunks` chunks (empty: no waiting).

    Recorded offsets are per chunk as it arrived; when the replayed chunks (one per stream
    event) are more or fewer, the offsets are spread over them so the whole still takes the
    recorded time. Raises NoTiming for `recorded` without stored timing.
    """
    if pace.instant:
        return ()
    if pace.kind == "fixed":
        return (0.0, *([pace.fixed_ms / 1000] * chunks))
    timing = response.timing
    if timing is None:
        raise NoTiming
    head = timing.head_us / 1e6
    offsets = [us / 1e6 for us in timing.chunks_us]
    delays = [max(head, 0.0)]
    previous = head
    for i in range(chunks):
        if not offsets:
            delays.append(0.0)
            continue
        j = len(offsets) - 1 if chunks == 1 else round(i * (len(offsets) - 1) / (chunks - 1))
        at = max(offsets[j], previous)
        delays.append(at - previous)
        previous = at
    return tuple(delays)


#: Distinct fault header values whose counters one test keeps; a value beyond that forgets the
#: oldest one (which starts afresh if it comes back), so a long-lived proxy stays bounded.
MAX_HEADER_FAULTS = 64


HANG_MESSAGE = "hashreplay: hang fault: no answer until the client's timeout"


FAULT_MESSAGE = "hashreplay: fault {kind} injected by {spec}"


NO_TIMING = (
    'pace = "recorded" needs the recording\'s timing, and {path} has none: re-record the test '
    "with timing (record_timing = true in [tool.hashreplay], or "
    "@pytest.mark.hashreplay(record_timing=True)), e.g. INFERENCE_MODE=record pytest <the test>"
)


class Scenario(NamedTuple):
    """What replay adds to a recorded response's plan."""

    pace: Pace | None = None
    fault: FaultSpec | None = None
    hang: Hang | None = None

    def shape(self, plan: ReplayPlan, response: RecordedResponse) -> ReplayPlan:
        fault = self.fault
        if self.hang is not None:
            return plan._replace(
                status=None,
                error_kind=BreakKind.READ_TIMEOUT,
                exception_message=HANG_MESSAGE,
                hang=self.hang,
            )
        if fault is not None and fault.error is not None:
            message = FAULT_MESSAGE.format(kind=fault.error, spec=fault.describe())
            if fault.after_chunks is None:
                return plan._replace(status=None, error_kind=fault.error, exception_message=message)
            chunks = plan.chunks[: fault.after_chunks]
            plan = plan._replace(chunks=chunks, error_kind=fault.error, exception_message=message)
            if not plan.is_streaming:  # a whole body cut short: no length to promise
                headers = [(k, v) for k, v in plan.headers if k.lower() != "content-length"]
                plan = plan._replace(headers=headers, is_streaming=True)
        if self.pace is not None and not self.pace.instant:
            plan = plan._replace(delays=delays_for(response, self.pace, len(plan.chunks)))
        return plan


def fault_for(options: TestOptions | None, request: IncomingRequest) -> FaultSpec | None:
    """The fault this request gets, if any (counted); the proxy's header fault first. A
    WebSocket fault (`after_frames`) is for handshakes only, an HTTP one for requests only."""
    parts = urlsplit(request.url)
    path = parts.path
    connection = parts.scheme in ("ws", "wss")
    header = request.header(FAULT_HEADER)
    if header is not None and options is not None:
        active = options.header_faults.get(header)
        if active is None:
            spec = FaultSpec.from_header(header, source=f"header {FAULT_HEADER}")
            while len(options.header_faults) >= MAX_HEADER_FAULTS:  # bounded: oldest out
                del options.header_faults[next(iter(options.header_faults))]
            active = options.header_faults[header] = ActiveFault(spec)
        if active.spec.for_connections == connection and active.take(path):
            return active.spec
    if options is None:
        return None
    for active in options.faults:
        if active.spec.for_connections == connection and active.take(path):
            return active.spec
    return None


def fault_response(spec: FaultSpec) -> RecordedResponse:
    """The response a `status=` fault answers with (status None for errors and hangs)."""
    if spec.status is None:
        return RecordedResponse(status=None)
    headers = dict(spec.headers)
    body: Any = spec.body
    if body is None and spec.status >= 400:
        message = f"hashreplay fault: status {spec.status} injected by {spec.describe()}"
        body = orjson.loads(error_body(message, "hashreplay_fault", str(spec.status)))
    if isinstance(body, str):
        headers.setdefault("content-type", "text/plain; charset=utf-8")
        return RecordedResponse(
            status=spec.status, headers=headers, body=body, body_encoding=BodyEncoding.TEXT
        )
    if body is not None:
        headers.setdefault("content-type", "application/json")
    return RecordedResponse(status=spec.status, headers=headers, body=body)


def templated(
    response: RecordedResponse, layout: Callable[[], Mapping[str, Any]], path: Any
) -> RecordedResponse:
    """The response with `{{request:…}}` markers filled; a RecordingError for a marker that
    does not parse, a TemplateError (a miss) for a path this request lacks."""
    if not response.has_templates():
        return response
    try:
        if response.is_streaming:
            fmt = None if response.stream_format is None else response.stream_format.value
            body = fill_stream(fmt, response.body, layout())
        else:
            body = fill(response.body, layout())
    except TemplateError as exc:
        if exc.syntax:
            raise RecordingError(path, str(exc)) from None
        raise
    return response.replace(body=body)


def check_pace(pace: Pace | None, response: RecordedResponse, path: Any) -> str | None:
    """Why this response cannot be paced as asked, or None."""
    if pace is None or pace.kind != "recorded" or response.timing is not None:
        return None
    try:
        delays_for(response, pace, 0)
    except NoTiming:
        return NO_TIMING.format(path=path)
    return None


def unmatched_faults(options: TestOptions | None) -> list[str]:
    if options is None:
        return []
    return [
        f"{active.spec.describe()} matched no request of this test"
        for active in options.faults
        if active.applied == 0
    ]


def faulted_connection(response: RecordedResponse, fault: FaultSpec) -> RecordedResponse:
    """A recorded connection broken by a WebSocket fault (docs/scenarios.md, "WebSocket
    faults"): its frames up to the `after_frames`-th frame from the server, then a drop
    (`error="disconnect"`: no close frame, replayed as a cut) or the server's close
    (`close=<code>`, `reason`). The recording itself is never changed."""
    from hashreplay.core.format import Ended, EndState, Frame, FrameDirection, FrameType

    frames = list(response.frames or [])
    wanted = fault.after_frames or 0
    kept: list[Frame] = []
    delivered = 0
    for frame in frames:
        if frame.direction is FrameDirection.RECEIVED:
            if delivered == wanted:
                break
            delivered += 1
        kept.append(frame)
    if fault.close is None:
        return response.replace(
            frames=kept, ended=Ended(state=EndState.ERROR, after_chunks=len(kept))
        )
    sent = sum(1 for f in kept if f.direction is FrameDirection.SENT)
    close = Frame(
        direction=FrameDirection.RECEIVED,
        type=FrameType.CLOSE,
        data=None,
        after_sent=sent,
        code=fault.close,
        reason=fault.reason or "",
    )
    return response.replace(frames=[*kept, close], ended=None)
