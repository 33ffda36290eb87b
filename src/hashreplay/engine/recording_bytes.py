"""A recording file's bytes from its staged parts, now or on the writer thread (issue 17
item 3).

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
any other recording is serialised on the caller's thread, exactly as before.
"""

from __future__ import annotations

import functools

import orjson

from hashreplay.core.normalise import new_id_registry
from hashreplay.core.normalise_response import normalise_response
from hashreplay.core.recording import RecordedResponse, new_recording
from hashreplay.core.store import Store
from hashreplay.core.writer import Content, Stage
from hashreplay.engine.keying import Prepared

__all__ = ["content_of", "model_list_content"]


def content_of(
    store: Store,
    prep: Prepared,
    responses: list[RecordedResponse],
    facts: dict[str, str],
    *,
    later: bool,
) -> Content:
    """The bytes of the file holding `responses` for `prep`'s request (`facts`: the id
    registry's facts, a copy), or with `later` when no body can be too large, the stage
    that makes them. A body over `max_body_bytes` raises BodyTooLarge here."""
    stage = functools.partial(_file_bytes, store, prep, prep.shown_test_id, responses, facts)
    return _now_or_later(stage, store, prep, responses, later=later)


def model_list_content(
    store: Store, prep: Prepared, response: RecordedResponse, *, later: bool
) -> Content:
    """`content_of` for a shared model list: normalised on its own (no test state)."""
    stage = functools.partial(_model_list_bytes, store, prep, response)
    return _now_or_later(stage, store, prep, [response], later=later)


def _now_or_later(
    stage: Stage, store: Store, prep: Prepared, responses: list[RecordedResponse], *, later: bool
) -> Content:
    """The stage itself when it may run later (no body can be too large), else its bytes."""
    if later and _surely_within_limit(store, prep, responses):
        return stage
    return stage()


def _model_list_bytes(store: Store, prep: Prepared, response: RecordedResponse) -> bytes:
    normalised = normalise_response(response, new_id_registry(prep.hash), model_list=True)
    return _file_bytes(store, prep, None, [normalised], {})  # shared: no test id


def _file_bytes(
    store: Store,
    prep: Prepared,
    test_id: str | None,
    responses: list[RecordedResponse],
    facts: dict[str, str],
) -> bytes:
    """The file's bytes, with the request's own credential values scrubbed from every
    string (only walked when one occurs: most recordings never echo a key)."""
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
