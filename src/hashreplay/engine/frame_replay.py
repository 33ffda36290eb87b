"""Replaying a recorded WebSocket connection with no socket (docs/design.md §17,
"WebSockets"): `FrameReplay` holds one connection's recorded frames and answers, sans-I/O,
what the client's next receive gets (`next_step`) and whether a frame it sends is the
recorded one (`send`). The adapter does the waiting and raises its library's exceptions.

- The causal gate: a received frame is delivered only once the client has sent as many
  frames as it had when the frame arrived live (`after_sent`), so an agent that waits for a
  reply sees the order it saw live. Until then `next_step` is a `Wait` saying what it waits
  for; the adapter waits (for a `send`, or its bound) and, past its bound, calls
  `waited_too_long`, which fails the test naming the frame it waited for: never a hang.
- Pacing (docs/design.md §12): each `Deliver` carries the delay before it (`recorded`: the
  offsets between frames; `fixed:<ms>`: that per received frame; `instant`: none).
- Each sent frame is normalised as recording stores it and compared with the recorded one
  at its place, under the test's `ignore` paths (`frames[3].session.instructions`); the
  first difference, or a frame past the recording's end, is a miss (docs/design.md §6)
  naming the file, the frame index and the field, noted on the test's owner so the test
  fails even if the code swallows it. After a miss the connection ends (`Failed`).
- The end: a recorded close (code, reason) is reproduced (`Closed`); a cut as a cut
  (`Cut`); a connection the client closes early is fine; past the end of a connection the
  client abandoned, a receive waits (bounded) as it would live.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hashreplay.core.constants import RERECORD_COMMAND
from hashreplay.core.errors import ReplayFailure, ReplayMiss
from hashreplay.core.format import EndState, Frame, FrameDirection, FrameType, RecordedResponse
from hashreplay.core.frames import (
    Payload,
    frame_difference,
    frame_paths,
    normalised_sent,
    payload_of,
    stored_data,
)
from hashreplay.core.matching import Step as PathStep
from hashreplay.core.modes import Pace
from hashreplay.core.normalise import RequestRules
from hashreplay.core.redact import Redactor

#: How long (s) a receive waits for the client to send the frames a recorded one waits for,
#: or past the end of an abandoned connection, before the test fails naming it. Adapters
#: use it when the caller gave no timeout of its own.
WAIT_LIMIT_S = 10.0

#: The close code a cut connection reports (no close frame was received: RFC 6455 §7.1.5).
ABNORMAL_CLOSURE = 1006


@dataclass(frozen=True)
class Deliver:
    """Hand the client this received frame after `delay` seconds."""

    index: int
    frame: Frame
    payload: Payload
    delay: float = 0.0


@dataclass(frozen=True)
class Wait:
    """Nothing to deliver until the client sends more (or, `final`, ever): `why` names
    what the receive waits for."""

    why: str
    final: bool = False


@dataclass(frozen=True)
class Closed:
    """The connection closed with a close frame: the server's recorded one, or the
    client's own (`by_client`)."""

    code: int | None
    reason: str
    by_client: bool = False
    delay: float = 0.0


@dataclass(frozen=True)
class Cut:
    """The connection broke with no close frame, as it did live."""

    message: str
    delay: float = 0.0


@dataclass(frozen=True)
class Failed:
    """The test failed on this connection (a miss, a wait past its bound): it is over."""

    failure: ReplayFailure


#: What a receive gets (`FrameReplay.next_step`).
ReplayStep = Deliver | Wait | Closed | Cut | Failed


class FrameReplay:
    """One recorded connection replayed (see the module docstring). Thread-safe; `changed`
    is set (and a fresh event made) whenever the client sends, so a waiting receive wakes."""

    def __init__(
        self,
        response: RecordedResponse,
        path: Path,
        *,
        test_id: str | None,
        shown_test_id: str | None,
        request_hash: str,
        connection: str,
        pace: Pace,
        ignore: Sequence[str],
        rules: RequestRules,
        redactor: Redactor,
        ids: Callable[[], Mapping[str, str] | None],
        fail: Callable[[ReplayFailure], None],
        root: Path | None = None,
    ) -> None:
        self.response = response
        self.frames: list[Frame] = list(response.frames or [])
        self.path = path
        self.test_id = test_id
        self.shown_test_id = shown_test_id
        self.request_hash = request_hash
        #: `GET <url>` as stored (redacted), for messages
        self.connection = connection
        self.pace = pace
        self.paths: list[tuple[PathStep, tuple[PathStep, ...]]] = frame_paths(ignore)
        self.rules = rules
        self.redactor = redactor
        self._ids = ids
        self._fail = fail
        self.root = root
        self._lock = threading.Lock()
        #: the next recorded frame to deliver (received) / to compare (sent)
        self._next_received = 0
        self._next_sent = 0
        self.sent_count = 0
        #: the client closed the connection (code, reason)
        self.client_close: tuple[int | None, str] | None = None
        self.failure: ReplayFailure | None = None
        self._last_at_us = 0
        self._waiters: list[Callable[[], None]] = []
        self.changed = threading.Event()

    # --- the client sends ------------------------------------------------------------

    def send(self, kind: FrameType, payload: Payload | None) -> ReplayFailure | None:
        """Compare a frame the client sends with the recorded one at its place; a miss is
        noted on the test (and returned); the connection is then over."""
        data, encoding = stored_data(kind, payload)
        frame = Frame(direction=FrameDirection.SENT, type=kind, data=data, data_encoding=encoding)
        frame = normalised_sent(frame, self.rules, self.redactor, self._ids())
        with self._lock:
            if self.failure is not None:
                return self.failure
            if self.client_close is not None:
                return None  # the library raises ConnectionClosed itself
            index = self._find(FrameDirection.SENT, self._next_sent)
            self.sent_count += 1
            miss: ReplayMiss | None
            if index is None:
                miss = self._miss(len(self.frames), frame, self._past_end())
            else:
                recorded = self.frames[index]
                self._next_sent = index + 1
                diff = frame_difference(recorded, frame, index, self.paths)
                miss = None if diff is None else self._miss(index, frame, diff.describe())
        self._wake()
        return miss

    def close(self, code: int | None = 1000, reason: str = "") -> None:
        """The client closes the connection (early or where the recording did): fine."""
        with self._lock:
            if self.client_close is None:
                self.client_close = (code, reason)
        self._wake()

    # --- the client receives ------------------------------------------------------------

    def next_step(self) -> ReplayStep:
        """What the client's next receive gets: a frame to deliver (consumed), a wait, or
        how the connection ended."""
        with self._lock:
            if self.failure is not None:
                return Failed(self.failure)
            if self.client_close is not None:
                code, reason = self.client_close
                return Closed(code, reason, by_client=True)
            index = self._find(FrameDirection.RECEIVED, self._next_received)
            if index is None:
                return self._end()
            frame = self.frames[index]
            gate = frame.after_sent or 0
            if self.sent_count < gate:
                return Wait(self._waiting_for(index, frame, gate))
            self._next_received = index + 1
            delay = self._delay(frame)
            if frame.type is FrameType.CLOSE:
                self._next_received = len(self.frames)
                return Closed(frame.code, frame.reason or "", delay=delay)
            return Deliver(index, frame, payload_of(frame), delay)

    def waited_too_long(self, step: Wait, seconds: float) -> ReplayFailure:
        """A receive waited `seconds` for what `step` names: the test fails with it (noted
        on its owner) and the connection is over."""
        text = (
            f"hashreplay: {self.shown_test_id or '(no test)'}: a receive on the WebSocket "
            f"{self.connection} waited {seconds:g}s for {step.why}; recording: {self._file()}"
        )
        failure = ReplayFailure(self.redactor.text(text), test_id=self.test_id)
        with self._lock:
            if self.failure is None:
                self.failure = failure
                self._fail(failure)
            failure = self.failure
        self._wake()
        return failure

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call `callback` (from the sender's thread) whenever the client sends or closes:
        an async adapter sets its loop's event with it (`call_soon_threadsafe`)."""
        with self._lock:
            self._waiters.append(callback)

    # --- internals --------------------------------------------------------------------

    def _wake(self) -> None:
        with self._lock:
            waiters = list(self._waiters)
            event, self.changed = self.changed, threading.Event()
        event.set()
        for callback in waiters:
            callback()

    def _find(self, direction: FrameDirection, start: int) -> int | None:
        for index in range(start, len(self.frames)):
            frame = self.frames[index]
            if frame.direction is direction:
                if direction is FrameDirection.SENT and frame.type is FrameType.CLOSE:
                    continue  # the client's close is never compared
                return index
        return None

    def _end(self) -> ReplayStep:
        """No received frame is left: how the recorded connection ended."""
        state = self.response.end_state
        if state is EndState.ERROR:
            sent = self._recorded_sent()
            if self.sent_count < sent:  # the cut came after the client's last frame
                return Wait(
                    f"the client's frame {sent} (the recorded connection was cut after the "
                    f"client had sent {sent} frame(s)); the client has sent {self.sent_count}"
                )
            return Cut(
                f"hashreplay: the WebSocket {self.connection} was cut with no close frame when "
                f"it was recorded, after {len(self.frames)} frame(s) (recording: {self._file()})"
            )
        closes = [f for f in self.frames if f.type is FrameType.CLOSE]
        if state is EndState.COMPLETE and closes:
            # only the client's close was recorded: the server answers it once it comes
            return Wait(f"the client's close (frame {self.frames.index(closes[-1])})")
        return Wait(
            f"a frame after the last one recorded (frame {len(self.frames) - 1}): the client "
            "stopped reading there when it was recorded; re-record it "
            "(INFERENCE_MODE=record-if-missing replaces it)",
            final=True,
        )

    def _waiting_for(self, index: int, frame: Frame, gate: int) -> str:
        return (
            f"recorded frame {index} ({frame.direction} {frame.type}), which arrived after "
            f"the client had sent {gate} frame(s); the client has sent {self.sent_count}"
        )

    def _delay(self, frame: Frame) -> float:
        pace = self.pace
        if pace.instant:
            return 0.0
        if pace.kind == "fixed":
            return pace.fixed_ms / 1000
        if frame.at_us is None:
            return 0.0
        delay = max(0, frame.at_us - self._last_at_us) / 1e6
        self._last_at_us = max(self._last_at_us, frame.at_us)
        return delay

    def _file(self) -> str:
        path = self.path
        if self.root is not None:
            try:
                return str(path.relative_to(self.root))
            except ValueError:
                pass
        return str(path)

    def _recorded_sent(self) -> int:
        """How many frames (a close not counted) the client sent in the recording."""
        return sum(
            1
            for f in self.frames
            if f.direction is FrameDirection.SENT and f.type is not FrameType.CLOSE
        )

    def _past_end(self) -> str:
        sent = self._recorded_sent()
        return (
            f"past the recording's end: it holds {sent} frame(s) the client sent, this is "
            f"the client's frame {self.sent_count}"
        )

    def _miss(self, index: int, frame: Frame, detail: str) -> ReplayMiss:
        """The miss report of a frame the client sent (lock held); noted on the test."""
        from hashreplay.engine.miss import record_target  # only a miss needs it

        test = self.shown_test_id or "(no test: a connection outside any test)"
        lines = [
            f"hashreplay: the WebSocket {self.connection} sent a frame that differs from "
            "the recording (replay mode)",
            f"  test:      {test}",
            f"  recording: {self._file()}",
            f"  frame:     frames[{index}] ({frame.direction} {frame.type})",
            f"  first difference: {detail}",
        ]
        if self.test_id:
            target = record_target(self.test_id, self.shown_test_id)
            lines.append(f"  to record it again: {RERECORD_COMMAND.format(nodeid=target)}")
        report = self.redactor.text("\n".join(lines))
        miss = ReplayMiss(report, test_id=self.test_id, request_hash=self.request_hash)
        self.failure = miss
        self._fail(miss)
        return miss
