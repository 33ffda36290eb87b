"""The adapter for `urllib3` (1.26 and 2.x), and so for `requests`, botocore/boto3 and every
other client built on it.

The seam is `HTTPConnectionPool.urlopen`: every urllib3 request goes through it (a
`PoolManager` hands each hop to a pool; `requests` and botocore call it on their pools,
botocore's `AWSHTTP(S)ConnectionPool` subclasses inherit it; HTTPS pools inherit it too). One
call is one decision. A replayed answer is a real `urllib3.HTTPResponse` over a real
`http.client.HTTPResponse` reading the recorded bytes (see `_shared`), so buffered reads,
`read(amt)`, `stream()`, `read_chunked()` and requests' `iter_content`/`iter_lines` behave as
they do live, and a recorded failure is raised as urllib3's own exception (requests and
botocore map it to theirs unchanged). A recorded live response stays urllib3's own object: its
raw bytes are collected as the caller reads them (urllib3 reads every raw byte through
`_fp_read` or `_handle_chunk`) and recorded when the body ends, fails or is released.

The retries and same-host redirects `urlopen` makes by itself belong to the one call: in
record mode the outcome the caller saw is recorded, in replay it is answered at once.

Scenarios (docs/design.md §11): a hang waits for the call's read timeout, then fails as a
read timeout; a plan's `error_kind` before any response is urllib3's own exception
(`ReadTimeoutError`, `NewConnectionError`, `ProtocolError`) passed through the call's
`Retry` as `urlopen` would (so `requests` sees its `ReadTimeout` / `ConnectionError`); in a
body it is the socket's or `http.client`'s exception, which urllib3 turns into its own.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import importlib.metadata
import inspect
import io
import socket
import time
import warnings
from collections.abc import Callable, Generator, Iterator
from contextvars import ContextVar
from typing import Any

from urllib3 import exceptions as u3exc
from urllib3._collections import HTTPHeaderDict  # public as urllib3.HTTPHeaderDict in 2.x
from urllib3.connectionpool import HTTPConnectionPool
from urllib3.response import HTTPResponse
from urllib3.util.retry import Retry
from urllib3.util.timeout import Timeout

from hashreplay.adapters import _shared as _state
from hashreplay.adapters._shared import (
    AbandonedRead,
    Patches,
    body_bytes,
    caused_by,
    find_exception_class,
    httplib_response,
    reason_phrase,
    rebuild_exception,
    seconds,
)
from hashreplay.core.constants import TEST_ID_HEADER
from hashreplay.core.context import adapter_io
from hashreplay.core.errors import HashReplayWarning, assert_never
from hashreplay.engine.http import (
    BreakKind,
    IncomingRequest,
    LiveExchange,
    ReplayPlan,
)
from hashreplay.engine.keys import Prepared
from hashreplay.engine.replay import Miss, Passthrough, Record, Replay
from hashreplay.engine.session import Session

_patches = Patches("urllib3")
#: True while `urlopen` runs on the engine's behalf: its own retries and redirects call
#: `urlopen` again and are part of the same call.
_busy: ContextVar[bool] = ContextVar("hashreplay_urllib3_busy", default=False)
_DEFAULT_PORTS = {"http": 80, "https": 443}
#: What the adapter relies on: the request seam and where a live body's raw bytes pass.
_SEAM: tuple[tuple[str, type], ...] = (
    ("urlopen", HTTPConnectionPool),
    ("_fp_read", HTTPResponse),
    ("_handle_chunk", HTTPResponse),
    ("read_chunked", HTTPResponse),
)


def install(session: Session) -> None:
    """Route every urllib3 request through `session`. Idempotent: a second call only swaps
    the session. A urllib3 without the seam gets a warning, and is left alone."""
    with _patches.lock:
        if not _patches.attach(session):
            return
        original = getattr(HTTPConnectionPool, "urlopen", None)
        missing = [name for name, where in _SEAM if not callable(getattr(where, name, None))]
        if original is None or missing:
            version = importlib.metadata.version("urllib3")
            warnings.warn(
                f"hashreplay: urllib3 {version} has no {', '.join(missing)}; requests made "
                "through urllib3 (requests, boto3, ...) are not recorded or replayed",
                HashReplayWarning,
                stacklevel=3,
            )
            return
        _patches.replace(HTTPConnectionPool, "urlopen", _patched(original))


def uninstall() -> None:
    """Restore `HTTPConnectionPool.urlopen`."""
    _patches.restore()


def is_installed() -> bool:
    return _patches.patched


def _patched(original: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def urlopen(self: HTTPConnectionPool, *args: Any, **kwargs: Any) -> Any:
        session = _state.active_session()
        if session is None or _busy.get():
            return original(self, *args, **kwargs)
        call = _Call(self, signature.bind(self, *args, **kwargs).arguments)
        return _handle(session, original, call)

    return urlopen


class _Call:
    """One `urlopen` call's arguments, by name (the 1.26 and 2.x signatures differ)."""

    def __init__(self, pool: HTTPConnectionPool, arguments: dict[str, Any]) -> None:
        self.pool = pool
        self.kwargs = {k: v for k, v in arguments.items() if k not in ("self", "response_kw")}
        self.kwargs.update(arguments.get("response_kw") or {})

    def get(self, name: str, default: Any = None) -> Any:
        return self.kwargs.get(name, default)

    @property
    def method(self) -> str:
        return str(self.kwargs["method"]).upper()

    @property
    def path(self) -> str:
        return str(self.kwargs["url"])

    def full_url(self) -> str:
        url = self.path
        if url.startswith(("http://", "https://")):
            return url  # a request through a plain HTTP proxy names its whole URL
        pool = self.pool
        scheme = str(pool.scheme or "http")
        host = str(pool.host)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        port = "" if pool.port in (None, _DEFAULT_PORTS.get(scheme)) else f":{pool.port}"
        return f"{scheme}://{host}{port}{url}"

    def headers(self) -> list[tuple[str, str]]:
        headers = self.get("headers")
        if headers is None:
            headers = self.pool.headers
        items = headers.items() if hasattr(headers, "items") else headers
        return [(_text(k), _text(v)) for k, v in items]

    def call(self, original: Callable[..., Any]) -> Any:
        """Run the real `urlopen` on the engine's behalf."""
        token = _busy.set(True)
        try:
            with adapter_io():
                return original(self.pool, **self.kwargs)
        finally:
            _busy.reset(token)


def _text(value: Any) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


def _handle(session: Session, original: Callable[..., Any], call: _Call) -> Any:
    content, send = body_bytes(call.get("body"))
    call.kwargs["body"] = send
    incoming = IncomingRequest(call.method, call.full_url(), call.headers(), content)
    decision = session.decide(incoming)
    if isinstance(decision, (Replay, Miss)):
        return _replayed(call, decision.plan())
    if isinstance(decision, Passthrough):
        _add_headers(call, decision)
    if not isinstance(decision, Record):
        passed = call.call(original)
        session.live_status(decision, passed.status, passed.headers.get)
        return passed
    preload = bool(call.get("preload_content", True))
    if preload:  # read below, once the body is watched
        call.kwargs["preload_content"] = False
        call.kwargs["release_conn"] = False
    started = time.monotonic()
    try:
        response = call.call(original)
    except u3exc.HTTPError as exc:
        session.record(decision.prep, LiveExchange(None, [], [], exception=exc))
        raise
    _Watch(session, decision.prep, response, started).attach()
    if preload:
        response.read(decode_content=call.get("decode_content", True), cache_content=True)
    return response


def _add_headers(call: _Call, decision: Passthrough) -> None:
    if not decision.headers:
        return
    headers = dict(call.headers())
    if any(k.lower() == TEST_ID_HEADER.lower() for k in headers):
        return
    headers.update(decision.headers)
    call.kwargs["headers"] = headers


# --- replay --------------------------------------------------------------------------------


def _retries(call: _Call) -> Retry:
    retries = call.get("retries")
    if not isinstance(retries, Retry):
        retries = Retry.from_int(
            retries, redirect=call.get("redirect", True), default=call.pool.retries
        )
    return retries


def _read_timeout(call: _Call) -> float | None:
    """The call's own read timeout (None: it waits forever): its `read` or `total`,
    whichever is shorter; urllib3's default sentinel is the socket module's default."""
    timeout = call.kwargs.get("timeout", call.pool.timeout)
    if isinstance(timeout, Timeout):
        values = [seconds(getattr(timeout, "_read", None)), seconds(timeout.total)]
        found = [v for v in values if v is not None]
        return min(found) if found else None
    if seconds(timeout) is None and timeout is not None:
        return seconds(socket.getdefaulttimeout())
    return seconds(timeout)


def _before_response(call: _Call, plan: ReplayPlan) -> BaseException:
    """What `urlopen` raises for a plan that fails before any response."""
    if plan.error_kind is None:
        return _exception(plan, call.pool, call.path)
    exc = _kind_exception(plan, call)
    retries = _retries(call)
    for _ in range(100):  # `increment` raises once the call's retries are spent
        try:
            retries = retries.increment(call.method, call.path, error=exc, _pool=call.pool)
        except Exception as spent:  # MaxRetryError, or `exc` itself when not retried
            return spent
    return exc


def _kind_exception(plan: ReplayPlan, call: _Call) -> u3exc.HTTPError:
    """urllib3's own exception for a plan's `error_kind`, before any response."""
    message = plan.exception_message
    pool = call.pool
    kind = plan.error_kind
    if kind is None or kind is BreakKind.ABANDONED:
        return u3exc.ProtocolError(f"Connection broken: {AbandonedRead(message)!r}")
    if kind is BreakKind.READ_TIMEOUT:
        return u3exc.ReadTimeoutError(pool, call.path, message)
    if kind is BreakKind.CONNECT_ERROR:
        exc = rebuild_exception(u3exc.NewConnectionError, message, pool=pool, conn=None)
        assert isinstance(exc, u3exc.NewConnectionError)
        return exc
    if kind is BreakKind.DISCONNECT:
        cause = http.client.RemoteDisconnected(message)
        return u3exc.ProtocolError("Connection aborted.", cause)
    assert_never(kind)


def _replayed(call: _Call, plan: ReplayPlan) -> Any:
    pool = call.pool
    if plan.hang is not None:
        plan.hang.wait(_read_timeout(call))
    if plan.status is None:
        raise _before_response(call, plan)
    kwargs: dict[str, Any]
    if plan.is_streaming or plan.broken or plan.delays:
        # a real http.client response over the recorded bytes: chunk for chunk, and the
        # recorded failure where the live stream broke
        raw = httplib_response(
            plan, call.method, call.path, lambda: _exception(plan, pool, call.path)
        )
        headers = HTTPHeaderDict()
        for name, value in raw.msg.items():
            headers.add(name, value)
        kwargs = {"body": raw, "version": raw.version, "reason": raw.reason}
        kwargs.update(original_response=raw, msg=raw.msg)
    else:  # a whole body in hand: no HTTP parsing needed (~1 ms a call)
        headers = HTTPHeaderDict(plan.headers)
        body = b"".join(plan.chunks)
        kwargs = {"body": io.BytesIO(body), "version": 11, "reason": reason_phrase(plan.status)}
    retries = _retries(call)
    response_cls: type[HTTPResponse] = getattr(pool, "ResponseCls", HTTPResponse)
    return response_cls(
        headers=headers,
        status=plan.status,
        preload_content=call.get("preload_content", True),
        decode_content=call.get("decode_content", True),
        pool=pool,
        retries=retries,
        enforce_content_length=call.get("enforce_content_length", True),
        request_method=call.method,
        request_url=call.path,
        **kwargs,
    )


def _exception(plan: ReplayPlan, pool: Any, url: str) -> BaseException:
    """urllib3's own exception for a recorded failure, with the attributes callers read
    (`requests` looks at a MaxRetryError's `reason`)."""
    cls = find_exception_class(plan.exception_type, [u3exc], u3exc.ProtocolError)
    message = plan.exception_message
    attributes: dict[str, Any] = {"pool": pool, "url": url}
    if issubclass(cls, u3exc.MaxRetryError):
        cause = caused_by(message)
        reason: BaseException | None = None
        if cause is not None:
            inner = find_exception_class(f"urllib3.exceptions.{cause[0]}", [u3exc], Exception)
            reason = rebuild_exception(inner, cause[1], pool=pool, url=url, conn=None)
        attributes["reason"] = reason
    return rebuild_exception(cls, message, **attributes)


# --- record --------------------------------------------------------------------------------


class _Watch:
    """A live urllib3 response's body recorded as its caller reads it.

    urllib3 reads every raw byte of a body (whatever the read method, decoded or not) through
    `_fp_read` (whole bodies) or `_handle_chunk` (chunked ones), once; the body has ended when
    the underlying response is closed after a read; a failure is what a read raised; a
    release or close before the end records what was read, as abandoned (unless the body
    had ended: urllib3 had closed the underlying response).
    """

    def __init__(self, session: Session, prep: Prepared, response: Any, started: float) -> None:
        self.session = session
        self.prep = prep
        self.response = response
        self.body = session.live_body(
            prep, response.status, list(response.headers.items()), started=started
        )
        self.reading = 0
        self.broken: BaseException | None = None

    def attach(self) -> None:
        r = self.response
        fp_read, handle_chunk = r._fp_read, r._handle_chunk

        def _fp_read(*args: Any, **kwargs: Any) -> bytes:
            data: bytes = fp_read(*args, **kwargs)
            self.feed(data)
            return data

        def _handle_chunk(*args: Any, **kwargs: Any) -> bytes:
            data: bytes = handle_chunk(*args, **kwargs)
            self.feed(data)
            return data

        r._fp_read, r._handle_chunk = _fp_read, _handle_chunk
        for name in ("read", "read1"):
            if hasattr(r, name):
                setattr(r, name, self._reader(getattr(r, name)))
        r.read_chunked = self._chunk_reader(r.read_chunked)
        for name in ("release_conn", "close", "drain_conn"):
            if hasattr(r, name):
                setattr(r, name, self._ender(getattr(r, name)))

    def feed(self, data: bytes) -> None:
        if not data or self.broken is not None:
            return
        try:
            self.body.feed(data)
        except ValueError as exc:  # urllib3 says so itself if the caller decodes
            self.broken = u3exc.DecodeError(str(exc))

    def _reader(self, read: Callable[..., bytes]) -> Callable[..., bytes]:
        def reader(*args: Any, **kwargs: Any) -> bytes:
            self.reading += 1
            try:
                data = read(*args, **kwargs)
            except BaseException as exc:  # a Ctrl-C in the read is no answer: not recorded
                self.finish(exc)
                raise
            finally:
                self.reading -= 1
            if self.response.isclosed():
                self.finish(None)
            return data

        return reader

    def _chunk_reader(self, read_chunked: Callable[..., Generator[bytes]]) -> Callable[..., Any]:
        def reader(*args: Any, **kwargs: Any) -> Iterator[bytes]:
            chunks = read_chunked(*args, **kwargs)
            try:
                while True:
                    self.reading += 1  # only while reading: a release between chunks counts
                    try:
                        chunk = next(chunks)
                    except StopIteration:
                        break
                    except BaseException as exc:
                        self.finish(exc)
                        raise
                    finally:
                        self.reading -= 1
                    yield chunk
            except GeneratorExit:  # the caller stopped reading: urllib3 closes the response
                self.finish(None, abandoned=True)
                raise
            finally:
                chunks.close()
            self.finish(None)

        return reader

    def _ender(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def ender(*args: Any, **kwargs: Any) -> Any:
            ended = self.response.isclosed()  # the body was read to its end
            try:
                return method(*args, **kwargs)
            finally:
                if not self.reading:  # a read in progress ends (or fails) by itself
                    self.finish(None, abandoned=not ended)

        return ender

    def finish(self, exc: BaseException | None, *, abandoned: bool = False) -> None:
        with contextlib.suppress(ValueError):  # a truncated compressed body: keep what decoded
            self.body.tail()
        exchange = self.body.exchange(exc if exc is not None else self.broken, abandoned=abandoned)
        if exchange is not None:
            self.session.record(self.prep, exchange)
