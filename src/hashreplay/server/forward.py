"""One proxied request: answered from a recording, or relayed live (and recorded).

The proxy calls the engine directly (it never patches HTTP clients): `Session.decide` makes the
decision for the request under its test id, replays and misses are answered from the decision's
plan, and live answers are relayed to the client chunk by chunk *as they arrive* while a copy is
collected for `arecord`. Bodies reach the client decoded (no `content-encoding`), exactly as replay
hands them back, unless the encoding is one this process cannot decode: then the bytes and the
header pass as they came, in both modes.

A recording is written before the client sees the end of its response, so a client that has read a
whole response may rely on the file being there, and a graceful shutdown (which waits for in-flight
responses) never loses a write.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.cookiejar import CookieJar, DefaultCookiePolicy

import httpx2

from hashreplay.core.constants import CONVERSATION_HEADER, FAULT_HEADER, STALE_HEADER
from hashreplay.core.errors import BodyTooLarge, ProxyError
from hashreplay.core.secret_values import SecretValues
from hashreplay.engine import scenarios as pacing
from hashreplay.engine.http import BodyLimit, BreakKind, IncomingRequest, LiveBody, ReplayPlan
from hashreplay.engine.keys import Prepared
from hashreplay.engine.replay import Miss, Record, Replay
from hashreplay.engine.session import Session
from hashreplay.server.cli import ServeSettings, Upstream, with_serve_next_step
from hashreplay.server.wire import Receive, Relay, Responder, end_to_end, record_exchange

logger = logging.getLogger("hashreplay.serve")

#: Request headers meant for hashreplay (docs/server.md): the engine reads them, the
#: upstream never sees them.
_ENGINE_ONLY = frozenset(h.lower() for h in (CONVERSATION_HEADER, FAULT_HEADER))

MISS_HINT = (
    "hashreplay serve answered from its recordings only ({mode} mode). To record this "
    "request, run the client against hashreplay serve --mode record-if-missing with the "
    "same --upstream options. Identical requests of one test replay in recorded order: "
    "send a new X-HashReplay-Run value to replay a test from its first call again."
)

STALE_HINT = (
    'hashreplay serve refuses recordings older than max_age (stale = "fail"). To renew '
    "this one, run the client against hashreplay serve --mode record-if-missing with "
    'stale = "refresh" in [tool.hashreplay], or set stale = "warn" to replay it with a '
    "warning."
)


@dataclass(frozen=True)
class ProxyRequest:
    """A request as the proxy forwards it: end-to-end headers only, body read in full."""

    method: str
    url: str
    #: What the client asked for (with any upstream prefix), for messages.
    target: str
    headers: list[tuple[str, str]]
    body: bytes
    test_id: str | None
    upstream: Upstream | None
    #: The URL the client used (the proxy's host:port and the path it sent), for messages.
    asked: str | None = None


@dataclass
class Counters:
    """What the proxy did besides what `Session.stats` counts (errors by kind)."""

    requests: int = 0
    in_flight: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def error(self, code: str) -> None:
        self.errors[code] = self.errors.get(code, 0) + 1


class Forwarder:
    def __init__(self, session: Session, settings: ServeSettings, counters: Counters) -> None:
        self.session = session
        self.settings = settings
        self.counters = counters
        self._client: httpx2.AsyncClient | None = None
        #: each upstream's URL credentials, scrubbed from what its answers record
        #: (docs/design.md §7: an upstream may echo its `Authorization: Basic` header)
        self._userinfo = {
            u.name: SecretValues(u.userinfo_values) for u in settings.upstreams if u.userinfo_values
        }

    def client(self) -> httpx2.AsyncClient:
        """The upstream client: no environment proxies, redirects, cookies or defaults."""
        if self._client is None:
            self._client = httpx2.AsyncClient(
                timeout=httpx2.Timeout(self.settings.upstream_timeout),
                limits=httpx2.Limits(max_connections=None, max_keepalive_connections=64),
                trust_env=False,
                follow_redirects=False,
                cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
            )
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def handle(self, request: ProxyRequest, reply: Responder, receive: Receive) -> None:
        session = self.session
        incoming = IncomingRequest(request.method, request.url, request.headers, request.body)
        decision = session.decide(incoming, test_id=request.test_id)
        if isinstance(decision, Replay):
            plan = decision.plan() if decision.stale is None else _stale(session, decision)
            if plan.hang is not None:
                await _hang(plan, receive)  # no answer: the client gives up (or the run ends)
                return
            await self._answer(request, plan, reply)
        elif isinstance(decision, Miss) and decision.too_large:
            session.take_misses(decision.prep.test_id)  # the client gets the 413 instead
            _check_request_size(session.config.max_body_bytes, request)
        elif isinstance(decision, Miss):
            # the report's next step is this proxy's, not pytest's
            error = with_serve_next_step(
                decision.error,
                self.settings,
                stored_url=decision.prep.request.url,
                sent_url=session.redactor.url(request.url),
                asked=request.asked,
                forwarded=_shown_url(request),
                shown_test_id=decision.prep.shown_test_id,
            )
            decision = decision._replace(error=error)
            # The client gets the report now; nothing (no pytest) would collect it later.
            session.take_misses(decision.prep.test_id)
            logger.warning("%s", decision.error.report)
            hint = MISS_HINT.format(mode=decision.prep.mode.value)
            if decision.stale is not None:
                hint = STALE_HINT
                self.counters.error("stale")
            await self._answer(request, decision.plan(hint), reply)
        elif isinstance(decision, Record):
            prep = decision.prep
            userinfo = self._userinfo.get(request.upstream.name) if request.upstream else None
            if userinfo is not None:
                prep = prep._replace(secrets=prep.secrets | userinfo)
            _check_request_size(self.session.config.max_body_bytes, request)
            await self._relay(request, reply, receive, prep)
        else:
            await self._relay(request, reply, receive, None)

    async def _answer(self, request: ProxyRequest, plan: ReplayPlan, reply: Responder) -> None:
        delays = plan.delays
        if delays:
            await pacing.asleep(delays[0])
        if plan.status is None and plan.error_kind is not None:
            status = 504 if plan.error_kind == BreakKind.READ_TIMEOUT else 502
            raise ProxyError(status, "fault", plan.exception_message)
        if plan.status is None:
            kind = plan.exception_type or "an unknown error"
            status = 504 if "timeout" in kind.lower() else 502
            message = (
                f"the recorded exchange of {request.method} {request.target} failed before any "
                f"response ({kind}: {plan.exception_message}), and replay repeats that; if "
                f"the upstream works now, re-record it with --mode record (file: {plan.path})"
            )
            raise ProxyError(status, "recorded_failure", message)
        await reply.start(plan.status, plan.headers)
        if plan.broken:
            for i, chunk in enumerate(plan.chunks):
                if i + 1 < len(delays):
                    await pacing.asleep(delays[i + 1])
                await reply.body(chunk, more=True)
            self.counters.error("broken_stream")
            logger.warning(
                "replaying a broken response of %s %s: closing the connection as the upstream "
                "did (%s: %s)",
                request.method,
                request.target,
                plan.error_kind or plan.exception_type,
                plan.exception_message,
            )
            return  # incomplete on purpose: the server closes the connection
        if not plan.is_streaming and len(plan.chunks) <= 1 and len(delays) <= 1:
            await reply.body(plan.chunks[0] if plan.chunks else b"", more=False)
            return
        for i, chunk in enumerate(plan.chunks):
            if i + 1 < len(delays):
                await pacing.asleep(delays[i + 1])
            await reply.body(chunk, more=True)
        await reply.body(b"", more=False)

    # --- live --------------------------------------------------------------------------------

    async def _relay(
        self, request: ProxyRequest, reply: Responder, receive: Receive, prep: Prepared | None
    ) -> None:
        upstream = request.upstream
        if upstream is None:
            message = (
                f"{request.method} {request.target} must go to an upstream, but hashreplay "
                "serve was started without --upstream; restart it with --upstream URL"
            )
            raise ProxyError(502, "no_upstream", message)
        headers = [(k, v) for k, v in request.headers if k.lower() not in _ENGINE_ONLY]
        outgoing = httpx2.Request(
            request.method, request.url, headers=headers, content=request.body or None
        )
        started = time.monotonic()
        try:
            response = await self.client().send(outgoing, stream=True)
        except httpx2.TimeoutException as exc:
            message = (
                f"{upstream.label} did not answer {request.method} {request.target} within "
                f"{self.settings.upstream_timeout:g} s ({type(exc).__name__}); nothing was "
                "recorded. Is it overloaded or stuck? --upstream-timeout sets the limit"
            )
            raise ProxyError(504, "upstream_timeout", message, retry=True) from None
        except httpx2.HTTPError as exc:
            unreachable = isinstance(exc, httpx2.ConnectError)
            what = "is unreachable" if unreachable else "failed"
            message = (
                f"{upstream.label} {what} for {request.method} {request.target} "
                f"({type(exc).__name__}: {exc or 'no detail'}); nothing was recorded. Check "
                "that the upstream is running and that --upstream is right"
            )
            code = "upstream_unreachable" if unreachable else "upstream_error"
            raise ProxyError(502, code, message, retry=True) from None
        try:
            await self._stream(request, response, reply, receive, prep, started=started)
        finally:
            await response.aclose()

    async def _stream(
        self,
        request: ProxyRequest,
        response: httpx2.Response,
        reply: Responder,
        receive: Receive,
        prep: Prepared | None,
        *,
        started: float,
    ) -> None:
        raw_headers = response.headers.multi_items()
        limit = self.session.config.max_body_bytes if prep is not None else None
        # decoded for the file and the client alike; undecodable bytes pass as they came; a
        # compressed chunk counts against the limit as it inflates, never inflated whole
        bounded = (
            None if limit is None else BodyLimit(limit, request.test_id, request.target, _ignore)
        )
        live = LiveBody(
            response.status_code,
            raw_headers,
            keep=prep is not None,
            started=started,
            limit=bounded,
            push=prep is not None and prep.push,
        )
        dropped = ("content-encoding", "content-length") if live.decodes else ()
        client_headers = end_to_end(raw_headers, dropped)
        # While recording, a content-length response is held until its file is written, so
        # a failed write is a 5xx, never a 200 (see `Relay` in server/wire.py).
        hold = prep is not None and any(k.lower() == "content-length" for k, _ in client_headers)
        # Memory stays bounded (docs/design.md §15): what a recording keeps of the body stops
        # at max_body_bytes, checked as it arrives, so a stream that never ends cannot grow
        # the proxy; such a response is not recorded.
        declared = _content_length(raw_headers)
        if limit is not None and declared is not None and declared > limit:
            message = _too_large(limit, request, "response.body (its content-length)", declared)
            raise ProxyError(502, "response_too_large", message)
        relay = Relay(reply, hold, response.status_code, client_headers)
        await relay.begin()
        gone = asyncio.Event()
        watcher = asyncio.ensure_future(_watch_disconnect(receive, gone))
        try:
            failure, kept = await _pump(response, live, relay, gone, limit)
        finally:
            watcher.cancel()
        sent = relay.sent
        if limit is not None and kept > limit:
            message = _too_large(limit, request, "response.body (so far)", kept)
            if not reply.started:  # held whole: the client gets the error instead
                raise ProxyError(502, "response_too_large", message)
            self.counters.error("response_too_large")
            logger.error(
                "%s; closing the client's connection after %d bytes of the stream, so it "
                "sees a broken stream",
                message,
                sent,
            )
            return  # incomplete on purpose: the server closes the connection
        # a client that left before the end leaves a response marked abandoned, never one
        # that replays as complete
        exchange = live.exchange(failure, abandoned=gone.is_set())
        if prep is not None and exchange is not None:
            what = f"{request.method} {request.target}"
            await record_exchange(self.session, prep, exchange, what)  # a failed write is a 5xx
            if exchange.abandoned:  # cut off: the client's next try records it again
                self.session.uncount_cut_off(prep)
        if failure is not None:
            await relay.abort()
            self.counters.error("broken_stream")
            logger.warning(
                "%s broke off the response to %s %s after %d bytes (%s: %s); %s",
                request.upstream.label if request.upstream else "the upstream",
                request.method,
                request.target,
                sent,
                type(failure).__name__,
                failure,
                "recorded as it happened; closing the client's connection the same way"
                if prep is not None
                else "closing the client's connection the same way",
            )
            return  # incomplete on purpose: the server closes the connection
        if gone.is_set():
            logger.info(
                "the client left during %s %s after %d bytes; stopped reading the upstream",
                request.method,
                request.target,
                sent,
            )
            return
        await relay.end()


async def _pump(
    response: httpx2.Response, live: LiveBody, relay: Relay, gone: asyncio.Event, limit: int | None
) -> tuple[httpx2.HTTPError | None, int]:
    """Relay the upstream's body until it ends, breaks off (the error), the client leaves
    or, while recording, it passes `limit` (what is kept of it is dropped at once); returns
    the failure and the decoded bytes that came."""
    kept = 0
    try:
        async for raw in response.aiter_raw():
            try:
                data = _decoded(live.feed, raw)
            except BodyTooLarge:  # inflating one chunk passed the limit: nothing is kept
                relay.held.clear()
                return None, live.size
            kept += len(data)
            if limit is not None and kept > limit:
                live.chunks.clear()  # nothing of it is recorded: let it go now
                live.chunk_at.clear()
                relay.held.clear()
                return None, kept
            if data:
                await relay.send(data)
            if gone.is_set():
                return None, kept
        tail = _decoded(lambda _: live.tail(), b"")
        if tail:
            await relay.send(tail)
    except httpx2.HTTPError as exc:
        return exc, kept
    return None, kept


def _check_request_size(limit: int, request: ProxyRequest) -> None:
    """A request body the recording could not hold is refused before it goes upstream."""
    size = len(request.body)
    if size > limit:
        too_large = _too_large(limit, request, "request.body", size)
        raise ProxyError(413, "body_too_large", f"{too_large}; it was not sent upstream")


def _too_large(limit: int, request: ProxyRequest, where: str, size: int) -> str:
    """The message of a body over max_body_bytes (the most a recording holds)."""
    return str(
        BodyTooLarge(
            test_id=request.test_id,
            url=f"{request.method} {request.target}",
            where=where,
            size=size,
            limit=limit,
        )
    )


def _ignore(_: BodyTooLarge) -> None:
    """The proxy reports a body over the limit itself, once `_pump` returns."""


def _shown_url(request: ProxyRequest) -> str | None:
    """The upstream URL a request maps to, as messages may show it (no credentials)."""
    upstream = request.upstream
    return None if upstream is None else upstream.shown + request.url[len(upstream.url) :]


def _content_length(headers: list[tuple[str, str]]) -> int | None:
    value = next((v for k, v in headers if k.lower() == "content-length"), None)
    return int(value) if value is not None and value.strip().isdigit() else None


def _decoded(step: Callable[[bytes], bytes], raw: bytes) -> bytes:
    """One decoding step of the live body; bytes that do not decode are the upstream's
    failure, reported to the client as an httpx2.DecodingError."""
    try:
        data: bytes = step(raw)
    except ValueError as exc:
        raise httpx2.DecodingError(f"upstream: {exc}") from exc
    return data


async def _hang(plan: ReplayPlan, receive: Receive) -> None:
    """Answer nothing until the client disconnects or the hang is released."""
    assert plan.hang is not None
    gone = asyncio.Event()
    watcher = asyncio.ensure_future(_watch_disconnect(receive, gone))
    hang = asyncio.ensure_future(plan.hang.await_(None))
    try:
        await asyncio.wait([watcher, hang], return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        hang.cancel()


async def _watch_disconnect(receive: Receive, gone: asyncio.Event) -> None:
    """Sets `gone` when the client disconnects (the request body was read already)."""
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            gone.set()
            return


def _stale(session: Session, decision: Replay) -> ReplayPlan:
    """The plan of a replay whose recording is older than `max_age` under `stale = "warn"`
    (the engine's decision, docs/server.md "Stale recordings"): a log line, and the age in
    the `x-hashreplay-stale` header."""
    assert decision.stale is not None
    root = session.config.root
    logger.warning(
        "hashreplay: %s: replayed a recording older than max_age: %s",
        decision.prep.shown_test_id,
        decision.stale.describe(root),
    )
    plan = decision.plan()
    return plan._replace(headers=[*plan.headers, (STALE_HEADER, f"{decision.stale.age}d")])
