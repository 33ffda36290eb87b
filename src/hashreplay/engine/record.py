"""Recording (docs/design.md §4, §15): the `Recorder` stages each outcome in call order on the
caller's thread — the file it goes to, its place in the request's sequence, its day — and
decides what is never written (a call that got no answer). The stored form (§4, §5, §7): every
response on its way to a file is redacted, reduced and normalised here, whatever a front end
hands in, and the file's bytes are made now or, on a write-behind session, on the writer thread.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from hashreplay.core.age import today
from hashreplay.core.bodies import BodyEncoding, TooDeep, deep_field, encode_body
from hashreplay.core.constants import MCP_STDIO_METHOD, SECRET_PLACEHOLDER
from hashreplay.core.errors import BodyTooLarge, RecordingError, ReplayFailure
from hashreplay.core.format import (
    Ended,
    EndState,
    RecordedException,
    RecordedResponse,
    new_recording,
)
from hashreplay.core.model_lists import model_list_path
from hashreplay.core.modes import Mode
from hashreplay.core.normalise import RequestRules, filter_headers, new_id_registry
from hashreplay.core.normalise_response import normalise_response
from hashreplay.core.redact import Redactor, merge_spans
from hashreplay.core.secret_values import NO_SECRETS, SecretValues
from hashreplay.core.split_secrets import (
    SpanFinder,
    redact_across,
    redact_binary,
    redact_raw_chunks,
)
from hashreplay.core.store import Store
from hashreplay.core.streams import StreamFormat, parse_stream, stream_format_for
from hashreplay.core.templates import escape
from hashreplay.core.writer import Content
from hashreplay.engine.hooks import Finish, HookError, Hooks, hook_problem
from hashreplay.engine.http import (
    IncomingRequest,
    LiveExchange,
    header_value,
    run_stopping,
    timing_of,
)
from hashreplay.engine.keys import Prepared
from hashreplay.engine.owner import (
    Call,
    Owners,
    RecordedSequence,
    frames_field,
    response_field,
)
from hashreplay.engine.state import StoreView


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
    response = _stored_text(
        _from_exchange(outcome, redactor, kept_headers, secrets), redactor, secrets
    )
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
    (`core.streams.escape`, docs/scenarios.md)."""
    response = _across_pieces(response, redactor, secrets)
    if not response.has_templates():
        return response
    return response.replace(body=escape(response.body))


def _across_pieces(
    response: RecordedResponse, redactor: Redactor, secrets: SecretValues
) -> RecordedResponse:
    """The response with secrets split between its stream's pieces removed
    (`core.split_secrets.redact_across`: pieces keep their count)."""
    body = response.body
    if not response.is_streaming or not isinstance(body, list) or len(body) < 2:
        return response
    spans = _spans_of(redactor, secrets)
    scrubbed = redact_across(response.stream_format, body, spans, SECRET_PLACEHOLDER)
    return response if scrubbed is body else response.replace(body=scrubbed)


def _spans_of(redactor: Redactor, secrets: SecretValues) -> SpanFinder:
    """Where secrets are in a text: their shapes, and the request's own credential values."""

    def spans(text: str) -> list[tuple[int, int]]:
        found = redactor.spans(text)
        return merge_spans([*found, *secrets.spans(text)]) if secrets else found

    return spans


def _chunk_count(response: RecordedResponse) -> int:
    if response.is_streaming and isinstance(response.body, list):
        return len(response.body)
    return 1 if response.body not in (None, "", b"") else 0


def _from_exchange(
    exchange: LiveExchange,
    redactor: Redactor,
    kept_headers: frozenset[str],
    secrets: SecretValues = NO_SECRETS,
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
    # the joined pieces first: redacting one piece first would remove the part of a key it
    # holds and leave the rest, which no longer has the key's shape, in the next
    if fmt is StreamFormat.CHUNKS and isinstance(body, list) and len(body) > 1:
        body = redact_raw_chunks(body, _spans_of(redactor, secrets), SECRET_PLACEHOLDER)
    else:
        body = redact_binary(body, encoding, redactor.text)
    if fmt is not StreamFormat.CHUNKS and isinstance(body, list) and len(body) > 1:
        body = redact_across(fmt, body, _spans_of(redactor, secrets), SECRET_PLACEHOLDER)
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
    frames = response.frames
    if frames is not None:  # a WebSocket connection (docs/design.md §17)
        from hashreplay.core.frames import redacted_frames

        for i, frame in enumerate(frames):
            _check_nesting(frame.data, f"response.frames[{i}].data")
        frames = redacted_frames(frames, redactor)
    return response.replace(
        headers=filter_headers(response.headers.items(), kept_headers, redactor.header),
        body=redactor.value(response.body),
        exception=exc,
        frames=frames,
    )


def _check_nesting(value: Any, where: str = "response.body") -> None:
    """Nothing nested deeper than `MAX_NESTING` is stored: no walk below recurses into it,
    and every file written can be read back (docs/design.md §13)."""
    deep = deep_field(value, where)
    if deep is not None:
        raise TooDeep(deep, _NOT_RECORDED)


_NOT_RECORDED = "not recorded; run this test in live mode (INFERENCE_MODE=live)"


@dataclasses.dataclass(eq=False)
class Recorder:
    """Turns outcomes into file contents; each test's owner places them in its sequences."""

    owners: Owners
    view: StoreView
    redactor: Redactor
    kept_headers: frozenset[str]
    _: dataclasses.KW_ONLY
    record_timing: bool = False
    #: `record_failures = "responses"`: a call that got no response is never written
    answers_only: bool = True
    #: the UTC day new responses are stamped with (injectable: no test reads the clock;
    #: imports stamp none but the source's own)
    today: Callable[[], datetime.date | None] = today
    #: the user's record hooks and scrub patterns (docs/design.md §14)
    hooks: Hooks = dataclasses.field(default_factory=Hooks)
    #: how request bodies are normalised: a WebSocket client's frames are stored so
    #: (docs/design.md §17)
    rules: RequestRules = dataclasses.field(default_factory=RequestRules)

    def stage(self, prep: Prepared, outcome: Outcome) -> tuple[Path, Content | None]:
        """The file this outcome goes to and its new content (None: nothing to write): the
        bytes, or on a write-behind session the stage that makes them (`content_of`)."""
        owner = self.owners.owner(prep.test_id)
        finish = self.hooks.finish(self.redactor.value)
        # a record hook runs now, in the test's thread, never later on the writer's
        later = self.view.writer is not None and finish is None
        timed = owner.options.timing
        timed = self.record_timing if timed is None else timed
        response = stored_response(
            outcome, self.redactor, self.kept_headers, timed=timed, secrets=prep.secrets
        )
        day = outcome.recorded_on or self._today()
        if prep.shared:
            response = response.replace(recorded_on=day)
            return self._stage_model_list(prep, response, later=later, finish=finish)

        def staged(
            seq: RecordedSequence, index: int, replaces: bool, id_map: dict[str, str]
        ) -> tuple[Path, Content | None]:
            # the test's next request is hashed with the ids this registers: in call order
            where = response_field(index)
            normalised = normalise_response(
                response, seq.ids, where=where, known_ids=id_map, request=prep.request
            )
            if normalised.frames is not None:
                mcp = prep.request.method == MCP_STDIO_METHOD
                normalised = self._normalised_frames(normalised, seq, index, id_map, mcp=mcp)
            normalised = self._dated(prep, seq, index, normalised, day)
            # in place of the one it replaces, or appended
            responses = [*seq.responses[:index], normalised, *seq.responses[index + 1 :]]
            # a body over max_body_bytes raises BodyTooLarge here, the sequence unchanged
            facts, store = dict(seq.ids.facts), self.view.store
            content = content_of(
                store, prep, responses, facts, later=later, match=seq.match, finish=finish
            )
            seq.responses[:] = responses
            return seq.path, content

        path, content = owner.record_next(self.view, prep, staged)
        req = prep.request
        owner.note_call(Call(req.method, req.endpoint, req.body, response.status, "recorded"))
        self.owners.tally.recorded(prep.test_id, path)
        return path, content

    def _normalised_frames(
        self,
        response: RecordedResponse,
        seq: RecordedSequence,
        index: int,
        id_map: dict[str, str],
        *,
        mcp: bool = False,
    ) -> RecordedResponse:
        """A connection's frames as written: server-made ids stable, the client's frames
        normalised as request bodies are (`core.frames.normalised_frames`); an MCP
        session's after what MCP servers put elsewhere (`core.mcp.prepared_frames`)."""
        from hashreplay.core.frames import normalised_frames

        frames = response.frames or []
        if mcp:
            from hashreplay.core.mcp import prepared_frames

            frames = prepared_frames(frames, seq.ids, where=frames_field(index), known_ids=id_map)
        frames = normalised_frames(
            frames,
            seq.ids,
            where=frames_field(index),
            known_ids=id_map,
            rules=self.rules,
            redactor=self.redactor,
        )
        return response.replace(frames=frames)

    def _dated(
        self, prep: Prepared, seq: RecordedSequence, at: int, new: RecordedResponse, day: str | None
    ) -> RecordedResponse:
        """`new` with its day (docs/recordings.md, "Age"): in record mode the old one's when
        the normalised content is the same (the zero diff), else `day`."""
        if prep.mode is Mode.RECORD:
            if seq.previous is None:
                try:
                    found = self.view.read_previous(prep.test_id, prep.hash)
                except RecordingError:  # unreadable: overwritten, nothing to keep
                    found = None
                seq.previous = [] if found is None else found.recording.responses
            old = seq.previous[at] if at < len(seq.previous) else None
            if old is not None and old.recorded_on is not None:
                fresh = new.model_dump(mode="json", exclude={"recorded_on"})
                if prep.secrets:  # the file holds them scrubbed
                    fresh = prep.secrets.value(fresh)
                if fresh == old.model_dump(mode="json", exclude={"recorded_on"}):
                    day = old.recorded_on
        return new.replace(recorded_on=day)

    def _stage_model_list(
        self, prep: Prepared, response: RecordedResponse, *, later: bool, finish: Finish | None
    ) -> tuple[Path, Content | None]:
        path = model_list_path(self.view.store, prep.hash, response)
        self.owners.tally.recorded(prep.test_id, path)
        if self.view.exists(path) and prep.mode is not Mode.RECORD_IF_MISSING:
            return path, None  # the same model set is stored already, with its day
        # record-if-missing records a stored list only to refresh it (`stale = "refresh"`): the
        # same set again with today's day, the one intended change (normalised alone: no test)
        normalised = normalise_response(response, new_id_registry(prep.hash), model_list=True)
        return path, content_of(self.view.store, prep, [normalised], {}, later=later, finish=finish)

    def _today(self) -> str | None:
        day = self.today()
        return None if day is None else day.isoformat()

    def record(self, prep: Prepared, outcome: Outcome) -> Path | None:
        """Stage (redact, normalise) and write one outcome; returns its file, or None for an
        outcome that is no answer and is not recorded (`unanswered`, `stopped`)."""
        path, content = self._staged(prep, outcome)
        if path is not None and content is not None:
            try:
                self.view.write(path, content)
            except BaseException:
                self._not_written()
                raise
        return path

    async def arecord(self, prep: Prepared, outcome: Outcome) -> Path | None:
        """`record` for event loops: the write never blocks the loop."""
        path, content = self._staged(prep, outcome)
        if path is not None and content is not None:
            try:
                await self.view.awrite(path, content)
            except BaseException:
                self._not_written()
                raise
        return path

    def _staged(self, prep: Prepared, outcome: Outcome) -> tuple[Path | None, Content | None]:
        """`stage`; no file for an outcome that is no answer (`unanswered`, `stopped`), or
        when a record hook failed: nothing is written, the test fails."""
        if self.stopped(outcome) or self.unanswered(prep, outcome):
            return None, None
        try:
            return self.stage(prep, outcome)
        except HookError as exc:
            problem = f"hashreplay: {prep.shown_test_id}: {hook_problem(exc, sent=True)}"
            self.owners.owner(prep.test_id).fail(ReplayFailure(problem, test_id=prep.test_id))
            return None, None

    def _not_written(self) -> None:
        """The stats count files written: a staged recording whose write failed is not."""
        self.owners.tally.not_written()

    @staticmethod
    def stopped(outcome: Outcome) -> bool:
        """Whether the user's process is stopping the run as this outcome ends (Ctrl-C,
        SystemExit, a cancelled task, `run_stopping`): nothing is written for the call, and
        a recording it would have replaced stays byte for byte."""
        return run_stopping(outcome.exception if isinstance(outcome, LiveExchange) else None)

    def too_large(self, prep: Prepared, request: IncomingRequest | None) -> str | None:
        """Why a request whose body is over `max_body_bytes` is not sent to be recorded (the
        file could never hold it, and the upstream would still have seen it), or None."""
        size = len(request.content) if request is not None else 0
        limit = self.view.store.max_body_bytes
        if size <= limit:
            return None
        url = f"{request.method} {request.url}" if request is not None else ""
        error = BodyTooLarge(
            test_id=prep.shown_test_id, url=url, where="request body", size=size, limit=limit
        )
        return f"{str(error).removeprefix('hashreplay: ')}; it was not sent upstream"

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
            owner = self.owners.get(prep.test_id)
            path = None if owner is None else owner.sequence_path(prep.hash)
            if path is None:
                path = self.view.store.path_for(prep.test_id, prep.hash)
            kept = [path] if self.view.exists(path) else []
        self.owners.tally.not_recorded(prep.test_id, *kept)
        req = prep.request
        call = Call(req.method, req.endpoint, req.body, None, "live")
        self.owners.owner(prep.test_id).note_call(call)
        return True
