"""A recording file's bytes from its staged parts, now or on the writer thread.

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
whatever a front end hands in (docs/design.md §7, §5). A live HTTP exchange
(`LiveExchange`) is turned into its stored form; a response built by the call layer
(`RecordedResponse`) is redacted again here, so no caller can write a secret by passing an
unredacted value. The sequence of the request's hash then gets the normalised response
appended (record mode first drops what it re-records), and the whole file's new content is
returned for the store view to write. All of that happens on the caller's thread, in call
order; on a write-behind session, building the file's JSON, the scrub of credential values
and the dump are left to the writer thread (`recording_bytes`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import orjson

from hashreplay.core.bodies import BodyEncoding, encode_body
from hashreplay.core.constants import SECRET_PLACEHOLDER
from hashreplay.core.errors import ReplayFailure
from hashreplay.core.format import (
    Ended,
    EndState,
    RecordedException,
    RecordedResponse,
    Timing,
    new_recording,
)
from hashreplay.core.modes import Mode
from hashreplay.core.nesting import TooDeep, deep_field
from hashreplay.core.normalise import filter_headers, new_id_registry
from hashreplay.core.normalise_response import normalise_response
from hashreplay.core.redact import Redactor, merge_spans
from hashreplay.core.secret_values import NO_SECRETS, SecretValues, redact_across
from hashreplay.core.store import Store
from hashreplay.core.streams import parse_stream, stream_format_for
from hashreplay.core.templates import escape
from hashreplay.core.writer import Content, Stage
from hashreplay.engine.hooks import Finish, HookError, Hooks, hook_problem
from hashreplay.engine.http import LiveExchange, header_value
from hashreplay.engine.keys import Prepared, model_list_path
from hashreplay.engine.state import StoreView, Tests, sequence_for

__all__ = ["content_of", "model_list_content"]


def content_of(
    store: Store,
    prep: Prepared,
    responses: list[RecordedResponse],
    facts: dict[str, str],
    *,
    later: bool,
    finish: Finish | None = None,
) -> Content:
    """The bytes of the file holding `responses` for `prep`'s request (`facts`: the id
    registry's facts, a copy), or with `later` when no body can be too large, the stage
    that makes them. A body over `max_body_bytes` raises BodyTooLarge here; `finish`: the
    user's record hooks and scrub patterns (a `HookError` when a hook fails)."""
    stage = functools.partial(
        _file_bytes, store, prep, prep.shown_test_id, responses, facts, finish=finish
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
    and every file written can be read back (docs/design.md §4)."""
    deep = deep_field(value, where)
    if deep is not None:
        raise TooDeep(deep, _NOT_RECORDED)


_NOT_RECORDED = "not recorded; run this test in live mode (INFERENCE_MODE=live)"


class Recorder:
    """Turns outcomes into file contents under the session's per-test state."""

    def __init__(
        self,
        tests: Tests,
        view: StoreView,
        redactor: Redactor,
        kept_headers: frozenset[str],
        *,
        record_timing: bool = False,
        answers_only: bool = True,
        hooks: Hooks | None = None,
    ) -> None:
        self.record_timing = record_timing
        #: the user's record hooks and scrub patterns (docs/design.md §14)
        self.hooks = hooks or Hooks()
        #: `record_failures = "responses"`: a call that got no response is never written
        self.answers_only = answers_only
        self.tests = tests
        self.view = view
        self.redactor = redactor
        self.kept_headers = kept_headers

    def stage(self, prep: Prepared, outcome: Outcome) -> tuple[Path, Content | None]:
        """The file this outcome goes to and its new content (None: nothing to write): the
        bytes, or on a write-behind session the stage that serialises them on the writer
        thread (`recording_bytes`)."""
        tests = self.tests
        finish = self.hooks.finish(self.redactor.value)
        # a record hook runs now, in the test's thread, never later on the writer's
        later = self.view.writer is not None and finish is None
        with tests.lock:
            state = tests.state(prep.test_id)
            timed = state.options.timing
        timed = self.record_timing if timed is None else timed
        response = stored_response(
            outcome, self.redactor, self.kept_headers, timed=timed, secrets=prep.secrets
        )
        if prep.shared:
            return self._stage_model_list(prep, response, later=later, finish=finish)
        with tests.lock:
            seq = sequence_for(tests, self.view, prep)
            index = min(seq.calls, len(seq.responses))
            replaces = prep.mode is Mode.RECORD_IF_MISSING and index < len(seq.responses)
            if not replaces:
                # record mode re-records from the first call; record-if-missing reaches
                # here past the end of the sequence, or for a response cut off when it was
                # recorded, which is replaced in place
                del seq.responses[index:]
            where = "response.body" if index == 0 else f"later_responses[{index - 1}].body"
            # the test's next request is hashed with the ids this registers: in call order
            normalised = normalise_response(response, seq.ids, where=where, known_ids=state.id_map)
            responses = list(seq.responses)
            if replaces:
                responses[index] = normalised
            else:
                responses.append(normalised)
            # a body over max_body_bytes raises BodyTooLarge here, the sequence unchanged
            content = content_of(
                self.view.store, prep, responses, dict(seq.ids.facts), later=later, finish=finish
            )
            seq.responses[:] = responses
            seq.calls += 1
            state.id_map.update(seq.ids.stable)
            tests.stats.recorded += 1
            tests.use(prep.test_id, seq.path)
            return seq.path, content

    def _stage_model_list(
        self, prep: Prepared, response: RecordedResponse, *, later: bool, finish: Finish | None
    ) -> tuple[Path, Content | None]:
        path = model_list_path(self.view.store, prep.hash, response)
        with self.tests.lock:
            self.tests.stats.recorded += 1
            self.tests.use(prep.test_id, path)
        if self.view.exists(path):
            return path, None  # the same model set is stored already
        return path, model_list_content(self.view.store, prep, response, later=later, finish=finish)

    def record(self, prep: Prepared, outcome: Outcome) -> Path | None:
        """Stage (redact, normalise) and write one outcome; returns its file, or None for an
        outcome that is no answer and is not recorded (`unanswered`)."""
        if self.unanswered(prep, outcome):
            return None
        staged = self._staged(prep, outcome)
        if staged is None:
            return None
        path, content = staged
        if content is not None:
            try:
                self.view.write(path, content)
            except BaseException:
                self._not_written()
                raise
        return path

    async def arecord(self, prep: Prepared, outcome: Outcome) -> Path | None:
        """`record` for event loops: the write never blocks the loop."""
        if self.unanswered(prep, outcome):
            return None
        staged = self._staged(prep, outcome)
        if staged is None:
            return None
        path, content = staged
        if content is not None:
            try:
                await self.view.awrite(path, content)
            except BaseException:
                self._not_written()
                raise
        return path

    def _staged(self, prep: Prepared, outcome: Outcome) -> tuple[Path, Content | None] | None:
        """`stage`; None when a record hook failed: nothing is written, the test fails."""
        try:
            return self.stage(prep, outcome)
        except HookError as exc:
            problem = f"hashreplay: {prep.shown_test_id}: {hook_problem(exc, sent=True)}"
            with self.tests.lock:
                failure = ReplayFailure(problem, test_id=prep.test_id)
                self.tests.state(prep.test_id).misses.append(failure)
            return None

    def _not_written(self) -> None:
        """The stats count files written: a staged recording whose write failed is not."""
        with self.tests.lock:
            self.tests.stats.recorded = max(0, self.tests.stats.recorded - 1)

    def unanswered(self, prep: Prepared, outcome: Outcome) -> bool:
        """Whether `outcome` is a live call that got no HTTP response and so is not recorded
        (docs/design.md, "Only answers are recorded"): the one place that decides it, for
        every adapter. It is counted for the summary; a recording it would have replaced
        stays byte for byte and counts as used (prune keeps it); the caller raises the real
        error. `record_failures = "all"` records it as an exception."""
        if not self.answers_only or not isinstance(outcome, LiveExchange) or outcome.answered:
            return False
        if prep.shared:
            kept = self.view.model_list_paths(prep.hash, prep.test_id)
        else:
            with self.tests.lock:
                state = self.tests.get(prep.test_id)
                seq = state.sequences.get(prep.hash) if state is not None else None
            path = (
                seq.path if seq is not None else self.view.store.path_for(prep.test_id, prep.hash)
            )
            kept = [path] if self.view.exists(path) else []
        with self.tests.lock:
            self.tests.stats.not_recorded += 1
            self.tests.use(prep.test_id, *kept)
        return True
