"""The stored form of what is recorded (docs/design.md §4, §5, §7): a response on its way to
a file, redacted, reduced and normalised whatever a front end hands in, and the bytes of the
file that holds it, made now or on the writer thread.

A recording file's bytes from its staged parts, now or on the writer thread.

Staging decides, in call order and on the caller's thread, everything later calls depend on:
the file, the index in the sequence, the normalised response and the ids it registered (the
test's next request is hashed with them). What is left is pure: build the file's JSON,
scrub the request's own credential values from it, and dump it canonically (large values to
blobs). A write-behind session hands that to the writer thread as a `Stage`, overlapped with
the caller's next call; the writer runs it, or the first read of the file does.

One thing the caller must still learn at once is a body over `max_body_bytes`: the call
fails with `BodyTooLarge` and nothing changes. So the step is deferred only when every body
is at most half the limit, compact JSON as the check measures it (scrubbing a credential
value of 8 or more characters for the 16-character placeholder at most doubles a body);
any other recording is serialised on the caller's thread, exactly as before; so is one
the user's record hooks see (docs/design.md §14), in the test's own thread.

Staging: every response on its way to a file is redacted, reduced and normalised here,
whatever a front end hands in (docs/design.md §7, §5). A live HTTP exchange (`LiveExchange`)
is turned into its stored form; a response built by the call layer (`RecordedResponse`) is
redacted again here, so no caller can write a secret by passing an unredacted value. The
sequence of the request's hash then gets the normalised response appended (record mode
first drops what it re-records), and the whole file's new content is returned for the store
view to write.
"""

from __future__ import annotations

import functools
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
from hashreplay.core.normalise import filter_headers, new_id_registry
from hashreplay.core.normalise_response import normalise_response
from hashreplay.core.redact import Redactor, merge_spans
from hashreplay.core.secret_values import NO_SECRETS, SecretValues, redact_across
from hashreplay.core.store import Store
from hashreplay.core.streams import parse_stream, stream_format_for
from hashreplay.core.templates import escape
from hashreplay.core.writer import Content, Stage
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
    registry's facts, a copy; `match`: the file's matching rule, docs/design.md §14), or
    with `later` when no body can be too large, the stage that makes them. A body over
    `max_body_bytes` raises BodyTooLarge here; `finish`: the user's record hooks and scrub
    patterns (a `HookError` when a hook fails)."""
    stage = functools.partial(
        _file_bytes,
        store,
        prep,
        prep.shown_test_id,
        responses,
        facts,
        match=match,
        finish=finish,
    )
    return _now_or_later(stage, store, prep, responses, later=later)


def model_list_content(
    store: Store,
    prep: Prepared,
    response: RecordedResponse,
    *,
    later: bool,
    finish: Finish | None = None,
) -> Content:
    """`content_of` for a shared model list: normalised on its own (no test state)."""
    stage = functools.partial(_model_list_bytes, store, prep, response, finish)
    return _now_or_later(stage, store, prep, [response], later=later)


def _now_or_later(
    stage: Stage, store: Store, prep: Prepared, responses: list[RecordedResponse], *, later: bool
) -> Content:
    """The stage itself when it may run later (no body can be too large), else its bytes."""
    if later and _surely_within_limit(store, prep, responses):
        return stage
    return stage()


def _model_list_bytes(
    store: Store, prep: Prepared, response: RecordedResponse, finish: Finish | None
) -> bytes:
    normalised = normalise_response(response, new_id_registry(prep.hash), model_list=True)
    return _file_bytes(store, prep, None, [normalised], {}, finish=finish)  # shared: no test


def _file_bytes(
    store: Store,
    prep: Prepared,
    test_id: str | None,
    responses: list[RecordedResponse],
    facts: dict[str, str],
    *,
    match: dict[str, Any] | None = None,
    finish: Finish | None = None,
) -> bytes:
    """The file's bytes, with the request's own credential values scrubbed from every
    string (only walked when one occurs: most recordings never echo a key), and what the
    user's hooks and scrub patterns make of them (`finish`)."""
    recording = new_recording(
        test_id=test_id,
        request=prep.request,
        responses=responses,
        id_mapping=facts,
        match=match,
    )
    data = recording.model_dump(mode="json")
    secrets = prep.secrets
    if secrets and secrets.mentioned_in(orjson.dumps(data)):
        data = secrets.value(data)
    if finish is not None:
        data = secrets.value(finish(data)) if secrets else finish(data)
    return store.dump_data(data)


def _surely_within_limit(store: Store, prep: Prepared, responses: list[RecordedResponse]) -> bool:
    """Whether no body of the file can be over `max_body_bytes` once scrubbed."""
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
    request's own credential values)."""
    if isinstance(outcome, RecordedResponse):
        return _stored_text(
            _across_pieces(_redacted(outcome, redactor, kept_headers), redactor, secrets)
        )
    response = _stored_text(
        _across_pieces(_from_exchange(outcome, redactor, kept_headers), redactor, secrets)
    )
    update: dict[str, Any] = {}
    if outcome.exception is not None or outcome.abandoned:
        state = EndState.ERROR if outcome.exception is not None else EndState.ABANDONED
        update["ended"] = Ended(state=state, after_chunks=_chunk_count(response))
    if timed:
        update["timing"] = timing_of(outcome)
    return response.replace(**update) if update else response


def _stored_text(response: RecordedResponse) -> RecordedResponse:
    """The response with `{{` in its text escaped: what an upstream said is never a
    `{{request:…}}` template on replay, which gives the exact text back
    (`core.templates.escape`, docs/scenarios.md)."""
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
    exception = None
    if exchange.exception is not None:
        exc = exchange.exception
        exception = RecordedException(
            type=f"{type(exc).__module__}.{type(exc).__qualname__}",
            message=redactor.text(str(exc)),
        )
    try:
        if fmt is not None:
            body: Any = parse_stream(fmt, exchange.chunks)
            encoding = BodyEncoding.JSON
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
