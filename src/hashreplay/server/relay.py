"""Relaying a live response to the client while it is recorded (issue 13 item 8).

A response framed by `content-length` is held back whole while recording, so a recording
that cannot be written (disk full, permission, a path too long) becomes a 5xx JSON error
naming the problem instead of a 200 whose file is missing. A stream is relayed as it comes;
when its recording fails, its connection is closed without the end of the stream, so the
client sees an incomplete response (an error), never a clean end.
"""

from __future__ import annotations

from hashreplay.core.errors import BodyTooLarge, ProxyError, RecordingError
from hashreplay.engine.http import LiveExchange
from hashreplay.engine.keying import Prepared
from hashreplay.engine.session import Session
from hashreplay.server.responses import Responder

__all__ = ["RecordingNotWritten", "Relay", "record_exchange"]


class RecordingNotWritten(ProxyError):
    """The upstream answered, but its recording could not be written."""

    def __init__(self, what: str, status: int | None, problem: BaseException) -> None:
        detail = problem.problem if isinstance(problem, RecordingError) else str(problem)
        where = getattr(problem, "path", None) or getattr(problem, "filename", None)
        message = (
            f"{what}: the upstream answered {status}, but its recording could not be written "
            f"({type(problem).__name__}: {detail}{f'; file {where}' if where else ''}); "
            "nothing was stored. Free disk space or fix the permissions of the recordings "
            "directory, then retry"
        )
        super().__init__(500, "recording_not_written", message)


async def record_exchange(
    session: Session, prep: Prepared, exchange: LiveExchange, what: str
) -> None:
    """Record one exchange; a failed write is a `RecordingNotWritten` naming it, a body over
    max_body_bytes a `response_too_large` error."""
    try:
        await session.arecord(prep, exchange)
    except BodyTooLarge as exc:  # a body the store refuses: the user raises the limit
        raise ProxyError(502, "response_too_large", f"{what}: {exc}") from None
    except (OSError, RecordingError) as exc:
        raise RecordingNotWritten(what, exchange.status, exc) from None


class Relay:
    """Sends a live body to the client as it arrives, or, with `hold` (a `content-length`
    response being recorded), all of it at `end()`, once it is recorded."""

    def __init__(
        self, reply: Responder, hold: bool, status: int, headers: list[tuple[str, str]]
    ) -> None:
        self.reply = reply
        self.hold = hold
        self.status = status
        self.headers = headers
        self.held = bytearray()
        self.sent = 0

    async def begin(self) -> None:
        if not self.hold:
            await self.reply.start(self.status, self.headers)

    async def send(self, data: bytes) -> None:
        self.sent += len(data)
        if self.hold:
            self.held += data
        elif data:
            await self.reply.body(data, more=True)

    async def end(self) -> None:
        if self.hold:
            await self.reply.start(self.status, self.headers)
        await self.reply.body(bytes(self.held), more=False)
        self.held.clear()

    async def abort(self) -> None:
        """The upstream broke off: the client gets what came, then the connection closes
        (a held `content-length` body arrives short, which every client reports)."""
        if self.hold and not self.reply.started:
            await self.reply.start(self.status, self.headers)
            if self.held:
                await self.reply.body(bytes(self.held), more=True)
            self.held.clear()
