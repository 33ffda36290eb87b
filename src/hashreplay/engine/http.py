"""How the engine sees HTTP, with no client imported: the request an adapter hands in
(`IncomingRequest`), the live body it collects while passing it on (`LiveBody`) and the
finished exchange it hands back for recording (`LiveExchange`), and the plan it answers a
client with (`ReplayPlan`, made from a stored response by `plan_for`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hashreplay.core.bodies import decode_body
from hashreplay.core.content_coding import decoder_for
from hashreplay.core.errors import RecordingError
from hashreplay.core.recording import RecordedResponse
from hashreplay.core.streams import render_stream


@dataclass(frozen=True)
class IncomingRequest:
    """What an adapter knows of a request, before any redaction."""

    method: str
    url: str
    headers: Sequence[tuple[str, str]]
    content: bytes

    def header(self, name: str) -> str | None:
        lname = name.lower()
        for key, value in self.headers:
            if key.lower() == lname:
                return value
        return None


@dataclass
class LiveExchange:
    """A finished live exchange as the client saw it (body already content-decoded)."""

    status: int | None
    headers: Sequence[tuple[str, str]]
    chunks: list[bytes]
    chunked: bool = False
    exception: BaseException | None = None


@dataclass(frozen=True)
class ReplayPlan:
    """How an adapter answers a request from a recording."""

    #: None: the recorded exchange failed before any response; raise the exception at once.
    status: int | None
    headers: list[tuple[str, str]]
    chunks: list[bytes]
    is_streaming: bool
    exception_type: str | None = None
    exception_message: str = ""
    path: Path | None = None


def plan_for(response: RecordedResponse, path: Path | None = None) -> ReplayPlan:
    """Bytes and headers that reproduce a recorded response for a client; a body that
    cannot be decoded is a `RecordingError` naming the file (issue 13 item 7)."""
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
    if response.is_streaming and response.stream_format is not None:
        chunks = render_stream(response.stream_format, response.body or [])
        return ReplayPlan(response.status, headers, chunks, True, exc_type, exc_message, path)
    body = decode_body(response.body, response.body_encoding)
    headers.append(("content-length", str(len(body))))
    return ReplayPlan(
        response.status,
        headers,
        [body] if body else [],
        False,
        exc_type,
        exc_message,
        path,
    )


def header_value(headers: Sequence[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


class LiveBody:
    """A live response body as it passes to its client, kept decoded for the recording.

    Files store decoded bodies so they stay readable; a content-encoding this process cannot
    decode is kept as it came, bytes and header, so replay hands a client what it can decode.
    Shared by every front end that sees live responses (the httpx adapter, the proxy).
    """

    def __init__(
        self, status: int, headers: Sequence[tuple[str, str]], *, keep: bool = True
    ) -> None:
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
        the coding when the upstream's bytes do not decode."""
        data = raw
        if self.decoder is not None:
            try:
                data = self.decoder.decode(raw)
            except Exception as exc:  # zlib.error, brotli.error, ...
                msg = f"cannot decode the response's content-encoding: {exc}"
                raise ValueError(msg) from exc
        if data and self.keep:
            self.chunks.append(data)
        return data

    def tail(self) -> bytes:
        """What the decoder still holds at the end; a ValueError for a truncated body."""
        if self.decoder is None:
            return b""
        try:
            data = self.decoder.flush()
        except Exception as exc:
            msg = f"the compressed response body is truncated: {exc}"
            raise ValueError(msg) from exc
        if data and self.keep:
            self.chunks.append(data)
        return data

    def exchange(self, exc: BaseException | None) -> LiveExchange | None:
        """The finished exchange, once (None when it was taken already)."""
        if self._done:
            return None
        self._done = True
        return LiveExchange(self.status, self.headers, self.chunks, self.chunked, exc)
