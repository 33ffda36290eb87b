"""How the engine sees HTTP, with no client imported: the request an adapter hands in
(`IncomingRequest`), the live body it collects while passing it on (`LiveBody`) and the
finished exchange it hands back for recording (`LiveExchange`), and the plan it answers a
client with (`ReplayPlan`, made from a stored response by `plan_for`).

What a client receives on a replay miss (docs/design.md §6): a prompt error
response that carries the report and that no SDK retries (`x-should-retry: false`, a 4xx that
plain clients do not retry either).
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Sequence
from enum import Enum
from pathlib import Path
from typing import NamedTuple, Protocol

from hashreplay.core.bodies import decode_body, decoder_for
from hashreplay.core.constants import MISS_HEADER, MISS_STATUS, MISSES_HEADER
from hashreplay.core.errors import BodyTooLarge, RecordingError, ReplayMiss, error_body
from hashreplay.core.format import EndState, RecordedResponse, Timing
from hashreplay.core.streams import render_stream, stream_finished, stream_format_for


class Hanging(Protocol):
    """A plan's hang (`engine.faults.Hang`): the adapter waits on it with its client's read
    timeout (docs/design.md §11, "Scenarios: what an adapter does with a plan")."""

    def wait(self, timeout: float | None) -> None: ...

    async def await_(self, timeout: float | None) -> None: ...


class IncomingRequest:
    """What an adapter knows of a request, before any redaction."""

    # no __slots__: `_by_name` is cached in the instance dict
    def __init__(
        self, method: str, url: str, headers: Sequence[tuple[str, str]], content: bytes
    ) -> None:
        self.method = method
        self.url = url
        self.headers = headers
        self.content = content

    def header(self, name: str) -> str | None:
        """The first value of a header, by case-insensitive name."""
        return self._by_name.get(name.lower())

    @functools.cached_property
    def _by_name(self) -> dict[str, str]:
        # reversed: where a name repeats, the first value wins
        return {key.lower(): value for key, value in reversed(self.headers)}


class LiveExchange:
    """A finished live exchange as the client saw it (body already content-decoded)."""

    __slots__ = (
        "abandoned",
        "chunk_at",
        "chunked",
        "chunks",
        "exception",
        "head_at",
        "headers",
        "recorded_on",
        "started",
        "status",
    )

    def __init__(
        self,
        status: int | None,
        headers: Sequence[tuple[str, str]],
        chunks: list[bytes],
        chunked: bool = False,
        exception: BaseException | None = None,
        *,
        abandoned: bool = False,
        started: float | None = None,
        head_at: float | None = None,
        chunk_at: list[float] | None = None,
        recorded_on: str | None = None,
    ) -> None:
        self.status = status
        self.headers = headers
        self.chunks = chunks
        self.chunked = chunked
        self.exception = exception
        #: the client stopped reading before the body ended (closed early, disconnected)
        self.abandoned = abandoned
        #: `time.monotonic()` when the request was sent, the head arrived, each chunk arrived
        self.started = started
        self.head_at = head_at
        self.chunk_at: list[float] = [] if chunk_at is None else chunk_at
        #: the UTC day it was recorded when it was not just now (an imported exchange's,
        #: docs/recordings.md "Age"); None: the recorder's today
        self.recorded_on = recorded_on

    @property
    def answered(self) -> bool:
        """Whether a response head arrived: an exchange without one (refused, DNS, TLS, a
        timeout before the status line) is no answer (docs/design.md, "Only answers are
        recorded"); an adapter reports it with `status` None."""
        return self.status is not None


class BreakKind(str, Enum):
    """Generic failures an adapter raises with its own client's exception class
    (docs/design.md §11): the plan's `error_kind`. A closed set: every adapter maps each
    member to its client's exception and mypy checks that none is missed (`assert_never`)."""

    READ_TIMEOUT = "read_timeout"
    CONNECT_ERROR = "connect_error"
    DISCONNECT = "disconnect"
    #: the recording ends where its client stopped reading; reading further is an error
    ABANDONED = "abandoned"

    def __str__(self) -> str:
        return self.value


ABANDONED_MESSAGE = (
    "hashreplay: the recording ends where the client stopped reading when it was recorded, "
    "after {after} chunk(s); re-record it (INFERENCE_MODE=record-if-missing replaces it){where}"
)


class ReplayPlan(NamedTuple):
    """How an adapter answers a request from a recording (what each field asks of an
    adapter: docs/design.md §11)."""

    #: None: the recorded exchange failed before any response; raise the exception at once.
    status: int | None
    headers: list[tuple[str, str]]
    chunks: list[bytes]
    is_streaming: bool
    exception_type: str | None = None
    exception_message: str = ""
    path: Path | None = None
    #: after `chunks` (or instead of any response when `status` is None) raise the client's
    #: own exception of this kind (a `BreakKind`), with `exception_message`; wins over
    #: `exception_type`
    error_kind: BreakKind | None = None
    #: seconds to wait before the head (`[0]`) and before chunk i (`[i + 1]`); empty: none.
    #: Async adapters await (`engine.scenarios.asleep`), sync ones sleep (`scenarios.sleep`).
    delays: tuple[float, ...] = ()
    #: never answer: wait on it until the client's timeout or cancellation fires
    hang: Hanging | None = None

    @property
    def broken(self) -> bool:
        """Whether the body ends in an error rather than a clean end."""
        return self.error_kind is not None or self.exception_type is not None


def plan_for(response: RecordedResponse, path: Path | None = None) -> ReplayPlan:
    """Bytes and headers that reproduce a recorded response for a client; a body that
    cannot be decoded is a `RecordingError` naming the file."""
    try:
        return _plan_for(response, path)
    except (ValueError, TypeError, KeyError, AttributeError, UnicodeError) as exc:
        msg = f"cannot decode the recorded response body: {type(exc).__name__}: {exc}; re-record it"
        raise RecordingError(path, msg) from None


def _plan_for(response: RecordedResponse, path: Path | None) -> ReplayPlan:
    headers = [(k, v) for k, v in response.headers.items() if k != "content-length"]
    exc = response.exception if response.is_exception else None
    exc_type = exc.type if exc else None
    exc_message = exc.message if exc else ""
    kind = None
    if response.end_state is EndState.ABANDONED:
        after = response.ended.after_chunks if response.ended is not None else 0
        kind = BreakKind.ABANDONED
        exc_message = ABANDONED_MESSAGE.format(
            after=after, where=f" (file: {path})" if path is not None else ""
        )
    if response.is_streaming and response.stream_format is not None:
        chunks = render_stream(response.stream_format, response.body or [])
        return ReplayPlan(response.status, headers, chunks, True, exc_type, exc_message, path, kind)
    body = decode_body(response.body, response.body_encoding)
    if kind is None and exc_type is None:
        # a body that ended in an error promises no length: a client must not take the
        # bytes that arrived for the whole
        headers.append(("content-length", str(len(body))))
    return ReplayPlan(
        response.status,
        headers,
        [body] if body else [],
        False,
        exc_type,
        exc_message,
        path,
        kind,
    )


def header_value(headers: Sequence[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def run_stopping(exc: BaseException | None = None) -> bool:
    """Whether the user's process is stopping the run while a live call ends (docs/design.md,
    "Only answers are recorded"): `exc` is a BaseException that is not an Exception
    (KeyboardInterrupt, SystemExit, a task's cancellation, pytest's Exit/Skipped/Failed), or
    a KeyboardInterrupt or SystemExit is being handled right now. That is no answer of the
    upstream: nothing is recorded for the call. A GeneratorExit being handled is a consumer
    closing a stream (recorded as abandoned) unless it arrived while one of those was being
    handled; one handed in as `exc` interrupted a read. The one rule, for every adapter."""
    if exc is not None and not isinstance(exc, Exception):
        return True
    handled = sys.exc_info()[1]
    while isinstance(handled, GeneratorExit):
        handled = handled.__context__
    # Being handled when the body closes, only the user stopping the run counts: a body can
    # close at any time (a response collected while an event loop's tasks are cancelled at
    # teardown), and a cancellation or pytest outcome that interrupted a read is handed in.
    return isinstance(handled, (KeyboardInterrupt, SystemExit))


#: decoded bytes a compressed chunk inflates to per step (the bound past `max_body_bytes`)
_PIECE = 64 * 1024


class BodyLimit(NamedTuple):
    """`max_body_bytes` for one live body being recorded, and whom to tell when it is passed
    (the test fails even when its client swallows the error)."""

    max_bytes: int
    test_id: str | None
    url: str
    passed: Callable[[BodyTooLarge], None]


class LiveBody:
    """A live response body as it passes to its client, kept decoded for the recording.

    With a `limit`, the kept bytes are bounded while they arrive (docs/design.md, "Bodies
    are limited as they arrive"): the first chunk that takes them past `max_body_bytes`
    drops what was kept, raises `BodyTooLarge` into the client's read (the call fails), and
    nothing is recorded for the exchange. A stream that never ends costs at most the limit.

    Files store decoded bodies so they stay readable; a content-encoding this process cannot
    decode is kept as it came, bytes and header, so replay hands a client what it can decode.
    Shared by every front end that sees live responses (the httpx adapter, the proxy).
    """

    def __init__(
        self,
        status: int,
        headers: Sequence[tuple[str, str]],
        *,
        keep: bool = True,
        started: float | None = None,
        limit: BodyLimit | None = None,
        push: bool = False,
    ) -> None:
        self.started = started
        #: a session's server-push stream (`core.streams.opens_server_push`): its client
        #: closing it, or cancelling the read as it closes the session, ends it completely
        self.push = push
        self.limit = limit
        #: decoded bytes kept so far
        self.size = 0
        #: the body passed `limit`: nothing is kept or recorded any more
        self.too_large = False
        self.head_at = time.monotonic()
        self.chunk_at: list[float] = []
        coding = (header_value(headers, "content-encoding") or "").strip().lower()
        self.status = status
        self.decoder = decoder_for(coding)
        #: the bytes differ from the wire's: a client must not see the original coding
        self.decodes = self.decoder is not None and coding not in ("", "identity")
        self.headers: list[tuple[str, str]] = (
            list(headers)
            if self.decoder is None
            else [(k, v) for k, v in headers if k.lower() != "content-encoding"]
        )
        self.chunked = header_value(headers, "content-length") is None
        self.keep = keep
        self.chunks: list[bytes] = []
        self._done = False

    def feed(self, raw: bytes) -> bytes:
        """The decoded bytes of one raw chunk (kept for the recording); a ValueError naming
        the coding when the upstream's bytes do not decode. A compressed chunk is inflated
        piece by piece and counted against the limit as it inflates, so a small chunk that
        inflates hugely (a "zip bomb") fails at the limit, never held whole."""
        if self.decoder is None:
            data = raw
        else:
            pieces = self.decoder.pieces(raw, _PIECE)
            out: list[bytes] = []
            while True:
                try:
                    piece = next(pieces, None)
                except Exception as exc:  # zlib.error, brotli.error, ...
                    msg = f"cannot decode the response's content-encoding: {exc}"
                    raise ValueError(msg) from exc
                if piece is None:
                    break
                if piece and self.keep:
                    self._count(len(piece))  # BodyTooLarge before the next piece inflates
                out.append(piece)
            data = b"".join(out)
        if data and self.keep:
            if self.decoder is None:
                self._count(len(data))
            self.chunks.append(data)  # one chunk per raw chunk, as it arrived
            self.chunk_at.append(time.monotonic())
        return data

    def _count(self, size: int) -> None:
        """Count `size` more kept bytes; past the limit, `BodyTooLarge` (nothing kept)."""
        self.size += size
        limit = self.limit
        if limit is not None and self.size > limit.max_bytes:
            self.keep = False
            self.too_large = True
            self.chunks.clear()
            self.chunk_at.clear()
            error = BodyTooLarge(
                test_id=limit.test_id,
                url=limit.url,
                where="response body",
                size=self.size,
                limit=limit.max_bytes,
                arriving=True,
            )
            limit.passed(error)
            raise error

    def tail(self) -> bytes:
        """What the decoder still holds at the end; a ValueError for a truncated body."""
        if self.decoder is None or self.too_large:
            return b""  # past the limit: what zlib still holds is never inflated
        try:
            data = self.decoder.flush()
        except Exception as exc:
            msg = f"the compressed response body is truncated: {exc}"
            raise ValueError(msg) from exc
        if data and self.keep:
            self._count(len(data))
            self.chunks.append(data)
            self.chunk_at.append(time.monotonic())
        return data

    def exchange(
        self, exc: BaseException | None, *, abandoned: bool = False
    ) -> LiveExchange | None:
        """The finished exchange, once (None when it was taken already). `abandoned`: the
        client stopped reading before the end (it is stored as such, never as complete)."""
        if self._done:
            return None
        self._done = True
        if self.too_large:
            return None  # the call failed with BodyTooLarge: nothing to record
        # Ctrl-C while it closes still records nothing
        if self.push and (exc is None or _cancelled(exc)) and not run_stopping():
            exc, abandoned = None, False
        if run_stopping(exc):
            return None  # the user stopped the run (Ctrl-C, ...): no answer to record
        if abandoned:
            fmt = stream_format_for(header_value(self.headers, "content-type"), chunked=True)
            abandoned = fmt is None or not stream_finished(fmt, self.chunks)
        return LiveExchange(
            self.status,
            self.headers,
            self.chunks,
            self.chunked,
            exc,
            abandoned=abandoned and exc is None,
            started=self.started,
            head_at=self.head_at,
            chunk_at=self.chunk_at,
        )


def _cancelled(exc: BaseException) -> bool:
    """Whether `exc` is an asyncio task's cancellation (asyncio is never imported for it:
    a process that has not imported it has no such exception)."""
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and isinstance(exc, asyncio.CancelledError)


def miss_plan(
    miss: ReplayMiss,
    *,
    hint: str | None = None,
    code: str = "hashreplay_miss",
    headers: Sequence[tuple[str, str]] = (),
) -> ReplayPlan:
    """The error response of a miss; `hint` adds the next step for a caller with no pytest
    (the proxy's clients). A recording refused for its age (`stale = "fail"` where no test
    end would fail the test) has the same shape, with `code` "hashreplay_stale" and its
    age in `headers`."""
    extra: dict[str, str | None] = {"hash": miss.request_hash, "test_id": miss.test_id}
    if hint is not None:
        extra["hint"] = hint
    body = error_body(miss.report, code, code, **extra)
    return ReplayPlan(
        MISS_STATUS,
        [
            ("content-type", "application/json"),
            ("x-should-retry", "false"),
            (MISS_HEADER, "1"),
            *headers,
            ("content-length", str(len(body))),
        ],
        [body],
        False,
    )


def server_misses(header: Callable[[str], str | None]) -> int:
    """How many misses a server under test reports in its answer to a `passthrough` request
    (`header` looks up the answer's headers): the in-process middleware's
    `X-HashReplay-Server-Misses` count, else one for a miss answer itself (`miss_plan`'s
    `X-HashReplay-Miss`: `hashreplay serve`'s, or one the app passed on as it got it)."""
    counted = header(MISSES_HEADER)
    if counted is not None:
        return int(counted) if counted.strip().isdigit() else 1
    return 1 if header(MISS_HEADER) is not None else 0


def timing_of(exchange: LiveExchange) -> Timing | None:
    """Offsets (µs) of the head and each chunk from the request's start."""
    if exchange.started is None:
        return None
    start = exchange.started
    head = exchange.head_at if exchange.head_at is not None else start
    return Timing(
        head_us=max(0, round((head - start) * 1e6)),
        chunks_us=[max(0, round((at - start) * 1e6)) for at in exchange.chunk_at],
    )
