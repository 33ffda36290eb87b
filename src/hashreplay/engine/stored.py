"""The stored form of what is recorded (docs/design.md §4, §5, §7): every response on its way
to a file is redacted, reduced and normalised here, whatever a front end hands in, and the
file's bytes are made now or, on a write-behind session, on the writer thread.
"""

from __future__ import annotations

from typing import Any

import orjson

from hashreplay.core.bodies import BodyEncoding, encode_body
from hashreplay.core.constants import SECRET_PLACEHOLDER
from hashreplay.core.format import (
    Ended,
    EndState,
    RecordedException,
    RecordedResponse,
    new_recording,
)
from hashreplay.core.nesting import TooDeep, deep_field
from hashreplay.core.normalise import filter_headers
from hashreplay.core.redact import Redactor, merge_spans
from hashreplay.core.secret_values import NO_SECRETS, SecretValues, redact_across
from hashreplay.core.store import Store
from hashreplay.core.streams import parse_stream, stream_format_for
from hashreplay.core.templates import escape
from hashreplay.core.writer import Content
from hashreplay.engine.http import LiveExchange, header_value, timing_of
from hashreplay.engine.keys import Finish, Prepared


def content_of(
    store: Store,
    prep: Prepared,
    responses: list[RecordedResponse],
    facts: dict[str, str],
    *,
    later: bool,
    match: dict[str, Any] | None = None,
    finish: Finish | None = None,
) -> Content:
    """The bytes of the file holding `responses` for `prep`'s request (`facts`: the id
    registry's facts, a copy; `match`: the file's matching rule, docs/design.md §14;
    `finish`: the user's record hooks and scrub patterns, a `HookError` when a hook fails),
    or with `later` the `Stage` that makes them on the writer thread, overlapped with the
    caller's next call (the writer runs it, or the first read of the file does). That is
    only when no body can be over `max_body_bytes`: the caller must learn of `BodyTooLarge`
    at once, with nothing changed."""

    def stage() -> bytes:
        test = None if prep.shared else prep.shown_test_id  # a shared model list: none
        recording = new_recording(
            test_id=test, request=prep.request, responses=responses, id_mapping=facts, match=match
        )
        data = recording.model_dump(mode="json")
        # the request's own credential values, scrubbed from every string: only walked when
        # one occurs (most recordings never echo a key), and again after the user's hooks
        secrets = prep.secrets
        if secrets and secrets.mentioned_in(orjson.dumps(data)):
            data = secrets.value(data)
        if finish is not None:
            data = secrets.value(finish(data)) if secrets else finish(data)
        return store.dump_data(data)

    if later and _surely_within_limit(store, prep, responses):
        return stage
    return stage()


def _surely_within_limit(store: Store, prep: Prepared, responses: list[RecordedResponse]) -> bool:
    """Whether no body of the file can be over `max_body_bytes` once scrubbed: each is at
    most half the limit, as compact JSON (scrubbing a credential value of 8 or more
    characters for the 16-character placeholder at most doubles a body)."""
    half = store.max_body_bytes // 2
    for body in (prep.request.body, *(response.body for response in responses)):
        if body is None:
            continue
        try:
            size = len(body.encode("utf-8")) if isinstance(body, str) else len(orjson.dumps(body))
        except (TypeError, UnicodeError):  # not plain JSON: measured as before, at once
            return False
        if size > half:
            return False
    return True


#: What a front end hands in to be recorded.
Outcome = LiveExchange | RecordedResponse


def stored_response(
    outcome: Outcome,
    redactor: Redactor,
    kept_headers: frozenset[str],
    *,
    timed: bool = False,
    secrets: SecretValues = NO_SECRETS,
) -> RecordedResponse:
    """An outcome as it will be stored: redacted, headers reduced, streams parsed; with its
    end state, and (`timed`) the offsets of its head and chunks. A secret split between a
    stream's events or chunks is removed too (by shape, or as one of `secrets`, the
    request's own credential values). A `RecordedResponse` built by the call layer is
    redacted again, so no caller can write a secret by passing an unredacted value."""
    if isinstance(outcome, RecordedResponse):
        return _stored_text(_redacted(outcome, redactor, kept_headers), redactor, secrets)
    response = _stored_text(_from_exchange(outcome, redactor, kept_headers), redactor, secrets)
    update: dict[str, Any] = {}
    if outcome.exception is not None or outcome.abandoned:
        state = EndState.ERROR if outcome.exception is not None else EndState.ABANDONED
        update["ended"] = Ended(state=state, after_chunks=_chunk_count(response))
    if timed:
        update["timing"] = timing_of(outcome)
    return response.replace(**update) if update else response


def _stored_text(
    response: RecordedResponse, redactor: Redactor, secrets: SecretValues
) -> RecordedResponse:
    """The response `_across_pieces`, with `{{` in its text escaped: what an upstream said
    is never a `{{request:…}}` template on replay, which gives the exact text back
    (`core.templates.escape`, docs/scenarios.md)."""
    response = _across_pieces(response, redactor, secrets)
    if not response.has_templates():
        return response
    return response.replace(body=escape(response.body))


def _across_pieces(
    response: RecordedResponse, redactor: Redactor, secrets: SecretValues
) -> RecordedResponse:
    """The response with secrets split between its stream's pieces removed
    (`core.secret_values.redact_across`: pieces keep their count)."""
    body = response.body
    if not response.is_streaming or not isinstance(body, list) or len(body) < 2:
        return response

    def spans(text: str) -> list[tuple[int, int]]:
        found = redactor.spans(text)
        return merge_spans([*found, *secrets.spans(text)]) if secrets else found

    scrubbed = redact_across(response.stream_format, body, spans, SECRET_PLACEHOLDER)
    return response if scrubbed is body else response.replace(body=scrubbed)


def _chunk_count(response: RecordedResponse) -> int:
    if response.is_streaming and isinstance(response.body, list):
        return len(response.body)
    return 1 if response.body not in (None, "", b"") else 0


def _from_exchange(
    exchange: LiveExchange, redactor: Redactor, kept_headers: frozenset[str]
) -> RecordedResponse:
    content_type = header_value(exchange.headers, "content-type")
    kept = filter_headers(exchange.headers, kept_headers, redactor.header)
    fmt = stream_format_for(content_type, chunked=exchange.chunked)
    coding = header_value(exchange.headers, "content-encoding")
    if coding and coding.strip().lower() != "identity":
        # the adapter could not decode it (br without brotli, an unknown coding): keep the
        # bytes and the header as they came, so replay hands the client what it can decode
        kept["content-encoding"] = coding
        fmt, content_type = None, "application/octet-stream"
    exception, exc = None, exchange.exception
    if exc is not None:
        name = f"{type(exc).__module__}.{type(exc).__qualname__}"
        exception = RecordedException(type=name, message=redactor.text(str(exc)))
    try:
        if fmt is not None:
            body, encoding = parse_stream(fmt, exchange.chunks), BodyEncoding.JSON
        else:
            body, encoding = encode_body(b"".join(exchange.chunks), content_type)
    except RecursionError:  # JSON nested past what any parser here goes
        raise TooDeep("response.body", _NOT_RECORDED) from None
    _check_nesting(body)
    return RecordedResponse(
        status=exchange.status,
        headers=kept,
        body=redactor.value(body),
        body_encoding=encoding,
        is_streaming=fmt is not None,
        stream_format=fmt,
        is_exception=exception is not None,
        exception=exception,
    )


def _redacted(
    response: RecordedResponse, redactor: Redactor, kept_headers: frozenset[str]
) -> RecordedResponse:
    _check_nesting(response.body)
    exc = response.exception
    if exc is not None:
        _check_nesting(exc.args, "response.exception.args")
        exc = exc.replace(message=redactor.text(exc.message), args=redactor.value(exc.args))
    return response.replace(
        headers=filter_headers(response.headers.items(), kept_headers, redactor.header),
        body=redactor.value(response.body),
        exception=exc,
    )


def _check_nesting(value: Any, where: str = "response.body") -> None:
    """Nothing nested deeper than `MAX_NESTING` is stored: no walk below recurses into it,
    and every file written can be read back (docs/design.md §13)."""
    deep = deep_field(value, where)
    if deep is not None:
        raise TooDeep(deep, _NOT_RECORDED)


_NOT_RECORDED = "not recorded; run this test in live mode (INFERENCE_MODE=live)"
