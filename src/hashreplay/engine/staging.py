"""Staging: every response on its way to a file is redacted, reduced and normalised here,
whatever a front end hands in (docs/design.md §7, §5).

A live HTTP exchange (`LiveExchange`) is turned into its stored form; a response built by the
call layer (`RecordedResponse`) is redacted again here, so no caller can write a secret by
passing an unredacted value. The sequence of the request's hash then gets the normalised
response appended (record mode first drops what it re-records), and the whole file's new
content is returned for the store view to write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hashreplay.core.bodies import BodyEncoding, encode_body
from hashreplay.core.normalise import filter_headers, new_id_registry
from hashreplay.core.normalise_response import normalise_response
from hashreplay.core.recording import RecordedException, RecordedResponse, new_recording
from hashreplay.core.redact import Redactor
from hashreplay.core.secret_values import scrub_recording
from hashreplay.core.streams import parse_stream, stream_format_for
from hashreplay.engine.http import LiveExchange, header_value
from hashreplay.engine.keying import Prepared
from hashreplay.engine.model_lists import model_list_path
from hashreplay.engine.sequences import sequence_for
from hashreplay.engine.state import Tests
from hashreplay.engine.view import StoreView

#: What a front end hands in to be recorded.
Outcome = LiveExchange | RecordedResponse


def stored_response(
    outcome: Outcome, redactor: Redactor, kept_headers: frozenset[str]
) -> RecordedResponse:
    """An outcome as it will be stored: redacted, headers reduced, streams parsed."""
    if isinstance(outcome, RecordedResponse):
        return _redacted(outcome, redactor, kept_headers)
    return _from_exchange(outcome, redactor, kept_headers)


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
    if fmt is not None:
        body: Any = parse_stream(fmt, exchange.chunks)
        encoding = BodyEncoding.JSON
    else:
        body, encoding = encode_body(b"".join(exchange.chunks), content_type)
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
    exc = response.exception
    if exc is not None:
        exc = exc.model_copy(
            update={"message": redactor.text(exc.message), "args": redactor.value(exc.args)}
        )
    return response.model_copy(
        update={
            "headers": filter_headers(response.headers.items(), kept_headers, redactor.header),
            "body": redactor.value(response.body),
            "exception": exc,
        }
    )


class Recorder:
    """Turns outcomes into file contents under the session's per-test state."""

    def __init__(
        self, tests: Tests, view: StoreView, redactor: Redactor, kept_headers: frozenset[str]
    ) -> None:
        self.tests = tests
        self.view = view
        self.redactor = redactor
        self.kept_headers = kept_headers

    def stage(self, prep: Prepared, outcome: Outcome) -> tuple[Path, bytes | None]:
        """The file this outcome goes to and its new bytes (None: nothing to write)."""
        response = stored_response(outcome, self.redactor, self.kept_headers)
        if prep.shared:
            return self._stage_model_list(prep, response)
        tests = self.tests
        with tests.lock:
            seq = sequence_for(tests, self.view, prep)
            if seq.calls < len(seq.responses):
                # record mode re-records from the first call; record-if-missing only
                # reaches here past the end of the recorded sequence.
                del seq.responses[seq.calls :]
            index = len(seq.responses)
            where = "response.body" if index == 0 else f"later_responses[{index - 1}].body"
            state = tests.state(prep.test_id)
            normalised = normalise_response(response, seq.ids, where=where, known_ids=state.id_map)
            recording = new_recording(
                test_id=prep.test_id,
                request=prep.request,
                responses=[*seq.responses, normalised],
                id_mapping=seq.ids.facts,
            )
            # the request's own credential values leave every string; large values go to
            # blobs; a body over max_body_bytes raises BodyTooLarge, the sequence unchanged
            content = self.view.store.dump(scrub_recording(recording, prep.secrets))
            seq.responses.append(normalised)
            seq.calls += 1
            state.id_map.update(seq.ids.stable)
            tests.stats.recorded += 1
            tests.use(prep.test_id, seq.path)
            return seq.path, content

    def _stage_model_list(
        self, prep: Prepared, response: RecordedResponse
    ) -> tuple[Path, bytes | None]:
        path = model_list_path(self.view.store, prep.hash, response)
        with self.tests.lock:
            self.tests.stats.recorded += 1
            self.tests.use(prep.test_id, path)
        if self.view.exists(path):
            return path, None  # the same model set is stored already
        normalised = normalise_response(response, new_id_registry(prep.hash), model_list=True)
        recording = new_recording(test_id=None, request=prep.request, responses=[normalised])
        return path, self.view.store.dump(scrub_recording(recording, prep.secrets))
