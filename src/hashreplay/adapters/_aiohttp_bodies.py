"""Response bodies for the aiohttp adapter: `StreamReader`s whose `_wait` (where every read
waits on an empty buffer) feeds the buffer itself, one piece per wait. All else (`read`,
`readline`, `iter_*`, `at_eof`, exceptions after `release()`) is aiohttp's own code."""

from __future__ import annotations

import contextlib
from asyncio import AbstractEventLoop
from collections import deque
from typing import Any

from aiohttp import ClientPayloadError, StreamReader

from hashreplay.core.errors import BodyTooLarge
from hashreplay.engine import scenarios as pacing
from hashreplay.engine.http import LiveBody, LiveExchange, ReplayPlan
from hashreplay.engine.keys import Prepared
from hashreplay.engine.session import Session

#: aiohttp's default read buffer (`read_bufsize`): it only tunes pause/resume thresholds.
DEFAULT_LIMIT = 2**16


class _NoTransport:
    """The protocol a fed reader reports to: nothing to pause, always connected."""

    connected = True
    upgraded = False
    _reading_paused = False  # read by the StreamReader of aiohttp 3.12

    def pause_reading(self) -> None:
        pass

    def resume_reading(self, resume_parser: bool = True) -> None:
        pass


class ReplayReader(StreamReader):
    """A plan's chunks, one per wait after its pacing delay (never blocking the loop), then
    `exc` or the end: `iter_any()` yields the recorded chunks one for one, and a recorded
    mid-stream failure comes after the bytes before it (a live reader would raise it at once)."""

    def __init__(
        self, plan: ReplayPlan, exc: BaseException | None, loop: AbstractEventLoop
    ) -> None:
        super().__init__(_NoTransport(), DEFAULT_LIMIT, loop=loop)  # type: ignore[arg-type]
        pending = 0.0  # the delay of an empty chunk is waited before the next one
        self._chunks: deque[tuple[bytes, float]] = deque()
        for i, chunk in enumerate(plan.chunks, 1):  # `delays[0]` is the head's
            pending += plan.delays[i] if i < len(plan.delays) else 0.0
            if chunk:
                self._chunks.append((chunk, pending))
                pending = 0.0
        self._failure = exc
        self._http_chunks = plan.is_streaming
        if self._http_chunks:  # `readchunk()` / `iter_chunks()` report each chunk's end, as live
            self.begin_http_chunk_receiving()

    async def _wait(self, func_name: str) -> None:
        if self._chunks:
            chunk, delay = self._chunks.popleft()
            await pacing.asleep(delay)
            self.feed_data(chunk)
            if self._http_chunks:
                self.end_http_chunk_receiving()
            return
        if self._failure is not None:
            StreamReader.set_exception(self, self._failure)
            raise self._failure
        self.feed_eof()


class Tee:
    """A live body on its way to the caller, recorded once it ends."""

    def __init__(self, session: Session, prep: Prepared, body: LiveBody) -> None:
        self.session = session
        self.prep = prep
        self.body = body

    def feed(self, data: bytes) -> None:
        try:
            self.body.feed(data)
        except ValueError as exc:  # the bytes do not decode: as aiohttp itself would say
            raise ClientPayloadError(str(exc)) from exc

    def exchange(self, exc: BaseException | None, abandoned: bool = False) -> LiveExchange | None:
        with contextlib.suppress(ValueError):  # a truncated compressed body: keep what decoded
            self.body.tail()
        return self.body.exchange(exc, abandoned=abandoned)

    async def finish(self, exc: BaseException | None) -> None:
        if (exchange := self.exchange(exc)) is not None:
            await self.session.arecord(self.prep, exchange)

    def finish_now(self, exc: BaseException | None, *, abandoned: bool = False) -> None:
        if (exchange := self.exchange(exc, abandoned)) is not None:
            self.session.record(self.prep, exchange)


class TeeReader(StreamReader):
    """A live response's `content`: each wait hands the live reader's next piece to the caller
    and the recording, written at the end, at a failure or at an early release (`set_exception`)."""

    def __init__(self, inner: StreamReader, tee: Tee, *, loop: AbstractEventLoop) -> None:
        limit = DEFAULT_LIMIT
        with contextlib.suppress(AttributeError):  # the shared empty reader has no limits
            limit = inner.get_read_buffer_limits()[0] or DEFAULT_LIMIT
        super().__init__(_NoTransport(), limit, loop=loop)  # type: ignore[arg-type]
        self._inner = inner
        self._tee = tee
        self.begin_http_chunk_receiving()

    async def _wait(self, func_name: str) -> None:
        while True:
            try:
                data, end_of_chunk = await self._inner.readchunk()
                if data:
                    self._tee.feed(data)
            except Exception as exc:  # ClientPayloadError, ServerTimeoutError, ...
                await self._tee.finish(exc)
                StreamReader.set_exception(self, exc)
                raise
            except BaseException as exc:  # the task cancelled (Ctrl-C under asyncio.run)
                self._tee.finish_now(exc)  # handed in: nothing is recorded
                raise
            if data:
                self.feed_data(data)
                if end_of_chunk:
                    self.end_http_chunk_receiving()
                return
            if not end_of_chunk:  # (b"", False): the end of the body
                await self._tee.finish(None)
                self.feed_eof()
                return

    def set_exception(self, exc: BaseException, *args: Any) -> None:
        """aiohttp calls this when the response is released or closed: record what the caller
        read plus what of the body had arrived already, abandoned unless that was all of it."""
        if self._exception is None:
            inner, ended = self._inner, False
            if inner.exception() is None:
                # BodyTooLarge: the test is failed with it already, and a release must not raise
                with contextlib.suppress(
                    RuntimeError, ValueError, ClientPayloadError, BodyTooLarge
                ):
                    if rest := inner.read_nowait():
                        self._tee.feed(rest)
                ended = inner.at_eof()
            self._tee.finish_now(None, abandoned=not ended)
        super().set_exception(exc, *args)
