"""Recording a live WebSocket connection (docs/design.md §17, "WebSockets"): the per-connection
log an adapter feeds as frames pass — `answered` (the handshake's answer), `sent`,
`received`, `closed`, `cut`, `abandoned` — and that becomes the connection's one recorded
exchange (`response()`), written through the test's owner like any answer
(`Session.record_connection`).

The log counts, for each received frame, the frames the client had sent before it took
the frame (`after_sent`: replay's causal gate), and places the frame in the file where the
client took it. A server's greeting that races the client's first frames (the openai SDK
sends `session.update` without waiting for `session.created`) would otherwise land before
or after them by the network's timing, so recording the same client twice would differ;
counted where the client reads it, the order is the client's own, which replay reproduces.
A frame the client never read keeps its place and count as it arrived, after the rest.
The adapter reports each message it hands the client (`delivered`). The log stamps offsets
(as frames arrive) when timing is on, and keeps the
frames within `max_body_bytes` as they arrive (docs/design.md, "Bodies are limited as they
arrive"): the frame that passes the limit drops every frame kept, raises `BodyTooLarge`
into the adapter's send or receive (the test fails through `BodyLimit.passed` even if the
client swallows it) and nothing is recorded, so a server that streams forever costs at
most the limit. A handshake that got no answer records nothing either ("Only answers are
recorded"). No WebSocket library is imported here: the adapter does the I/O.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from hashreplay.core.bodies import encode_body
from hashreplay.core.errors import BodyTooLarge
from hashreplay.core.format import (
    Ended,
    EndState,
    Frame,
    FrameDirection,
    FrameType,
    RecordedResponse,
    Timing,
)
from hashreplay.core.frames import Payload, payload_size, stored_data
from hashreplay.engine.http import BodyLimit, header_value
from hashreplay.engine.keys import Prepared

#: The status of a handshake's answer that opens a connection.
SWITCHING_PROTOCOLS = 101


class FrameLog:
    """One live connection being recorded, fed by its adapter (thread-safe: a reader task
    and a writer task may feed it at once). `prep` is the handshake as keyed."""

    def __init__(
        self,
        prep: Prepared,
        url: str,
        *,
        timed: bool,
        limit: BodyLimit,
        started: float | None = None,
    ) -> None:
        self.prep = prep
        #: the handshake's URL as the adapter dialled it (for messages; never written)
        self.url = url
        self.timed = timed
        self.limit = limit
        self._lock = threading.Lock()
        self.started = time.monotonic() if started is None else started
        self.status: int | None = None
        self.headers: list[tuple[str, str]] = []
        self._body = b""
        self._opened_at = self.started
        self._head_us = 0
        self.frames: list[Frame] = []
        #: received frames the client has not taken yet, in arrival order
        self._pending: list[Frame] = []
        #: client frames sent so far (a close frame included)
        self.sent_count = 0
        self.size = 0
        #: the frames passed `max_body_bytes`: nothing is kept or recorded any more
        self.too_large = False
        self._error: BodyTooLarge | None = None
        self.end: EndState | None = None
        self._taken = False

    # --- what the adapter reports -------------------------------------------------------

    def answered(self, status: int, headers: Sequence[tuple[str, str]], body: bytes = b"") -> None:
        """The handshake's answer arrived: 101 opens the connection; any other status (a
        401, a 404) is the whole answer, recorded with its body."""
        now = time.monotonic()
        with self._lock:
            self.status = status
            self.headers = list(headers)
            self._body = body
            self._opened_at = now
            self._head_us = max(0, int((now - self.started) * 1e6))

    def sent(self, kind: FrameType, payload: Payload | None) -> None:
        """The client sent a text or binary frame (a close: `closed(..., sent=True)`)."""
        self._add(FrameDirection.SENT, kind, payload)

    def received(self, kind: FrameType, payload: Payload | None) -> None:
        """A text or binary frame arrived from the server; `BodyTooLarge` once the frames
        kept pass `max_body_bytes` (and on every frame after: the adapter closes)."""
        self._add(FrameDirection.RECEIVED, kind, payload)

    def delivered(self) -> None:
        """The client took the next received message (a `recv`, a step of iteration): it
        takes its place in the file here, counted against the frames sent so far."""
        with self._lock:
            for index, frame in enumerate(self._pending):
                if frame.type is not FrameType.CLOSE:
                    del self._pending[index]
                    self.frames.append(frame.replace(after_sent=self.sent_count))
                    return

    def closed(self, code: int | None, reason: str = "", *, sent: bool = False) -> None:
        """A close frame: the server's (`sent=False`), or the client's own (`sent=True`).
        A connection with a close frame ended complete."""
        direction = FrameDirection.SENT if sent else FrameDirection.RECEIVED
        self._add(direction, FrameType.CLOSE, None, code=code, reason=reason)
        with self._lock:
            if self.end is None:
                self.end = EndState.COMPLETE

    def cut(self, error: BaseException | None = None) -> None:
        """The connection broke with no close frame (a reset, the server gone): it replays
        as cut, never as closed. After a close frame it stays complete."""
        with self._lock:
            if self.end is None:
                self.end = EndState.ERROR

    def abandoned(self) -> None:
        """The client left without closing (the test stopped reading): replay ends the
        connection where this one ended, and a read past it waits (bounded) and fails."""
        with self._lock:
            if self.end is None:
                self.end = EndState.ABANDONED

    def completed(self) -> None:
        """The exchange ended as a whole with no close frame of its own (an MCP stdio
        session the client closed): complete, unless a cut or an abandon came first."""
        with self._lock:
            if self.end is None:
                self.end = EndState.COMPLETE

    # --- the recorded exchange -----------------------------------------------------------

    def take(self) -> bool:
        """Whether this is the first time the log is handed in to be written (an adapter
        may report an end twice, or after the test's end wrote it as abandoned)."""
        with self._lock:
            first, self._taken = not self._taken, True
            return first

    @property
    def answered_at_all(self) -> bool:
        return self.status is not None

    def response(self) -> RecordedResponse | None:
        """The connection as one recorded exchange (not yet redacted or normalised: the
        recorder does both), or None: nothing to record (no answer to the handshake, or
        frames over `max_body_bytes`)."""
        with self._lock:
            if self.status is None or self.too_large:
                return None
            headers = {k.lower(): v for k, v in self.headers}
            timing = Timing(head_us=self._head_us) if self.timed else None
            if self.status != SWITCHING_PROTOCOLS:
                content_type = header_value(self.headers, "content-type")
                body, encoding = encode_body(self._body, content_type)
                return RecordedResponse(
                    status=self.status,
                    headers=headers,
                    body=body,
                    body_encoding=encoding,
                    timing=timing,
                )
            frames = [*self.frames, *self._pending]
            end = self.end or EndState.ABANDONED
            ended = None if end is EndState.COMPLETE else Ended(state=end, after_chunks=len(frames))
            return RecordedResponse(
                status=self.status, headers=headers, frames=frames, ended=ended, timing=timing
            )

    def _add(
        self,
        direction: FrameDirection,
        kind: FrameType,
        payload: Payload | None,
        *,
        code: int | None = None,
        reason: str | None = None,
    ) -> None:
        now = time.monotonic()
        with self._lock:
            if self.too_large:
                assert self._error is not None
                raise self._error
            self.size += payload_size(payload) + (len(reason or "") if code is not None else 0)
            if self.size > self.limit.max_bytes:
                self._passed_limit()
            data, encoding = stored_data(kind, payload)
            frame = Frame(
                direction=direction,
                type=kind,
                data=data,
                data_encoding=encoding,
                at_us=max(0, int((now - self._opened_at) * 1e6)) if self.timed else None,
                after_sent=self.sent_count if direction is FrameDirection.RECEIVED else None,
                code=code,
                reason=reason if kind is FrameType.CLOSE else None,
            )
            if direction is FrameDirection.SENT:
                self.frames.append(frame)
                self.sent_count += 1
            else:
                self._pending.append(frame)

    def _passed_limit(self) -> None:
        """Drop every frame kept, fail the test, raise `BodyTooLarge` (lock held)."""
        self.too_large = True
        self.frames.clear()
        self._pending.clear()
        limit = self.limit
        error = BodyTooLarge(
            test_id=limit.test_id,
            url=limit.url,
            where="frames",
            size=self.size,
            limit=limit.max_bytes,
            arriving=True,
        )
        self._error = error
        limit.passed(error)
        raise error
