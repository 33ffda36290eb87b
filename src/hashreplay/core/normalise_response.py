"""The response normaliser (docs/design.md §5): volatile ids, times and
durations in a body or in stream payloads replaced by stable values before writing.

AWS event streams are raw chunks of binary frames: each frame's JSON payload is normalised
like an SSE event's data, and the frame re-encoded with its lengths and CRCs computed afresh
(docs/recordings.md, "AWS event streams")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.normalise import (
    EVENTSTREAM_CLEARED_KEYS,
    IdRegistry,
    normalise_response_values,
)
from hashreplay.core.recording import RecordedResponse
from hashreplay.core.streams import (
    EventStreamFrames,
    StreamFormat,
    data_values,
    is_eventstream,
    with_data_values,
)


def normalise_response(
    response: RecordedResponse,
    ids: IdRegistry,
    *,
    model_list: bool = False,
    where: str = "response.body",
    known_ids: Mapping[str, str] | None = None,
) -> RecordedResponse:
    """Apply the response normaliser (docs/design.md §5) to a body or to stream payloads."""
    rewrite = not model_list
    if response.is_streaming and response.stream_format is not None:
        fmt = StreamFormat(response.stream_format)
        items = list(response.body or [])
        if fmt is StreamFormat.CHUNKS and is_eventstream(_content_type(response)):
            return _normalise_eventstream(
                response, items, ids, rewrite=rewrite, where=where, known_ids=known_ids
            )
        values = normalise_response_values(
            data_values(fmt, items),
            ids,
            rewrite_ids=rewrite,
            rewrite_times=rewrite,
            where=where,
            item_suffix=".data" if fmt is StreamFormat.SSE else "",
            known_ids=known_ids,
        )
        body = with_data_values(fmt, items, values)
    elif response.body_encoding is BodyEncoding.JSON:
        body = normalise_response_values(
            [response.body],
            ids,
            rewrite_ids=rewrite,
            rewrite_times=rewrite,
            where=where,
            known_ids=known_ids,
        )[0]
    else:
        body = response.body
    return response.replace(body=body)


def _normalise_eventstream(
    response: RecordedResponse,
    items: list[Any],
    ids: IdRegistry,
    *,
    rewrite: bool,
    where: str,
    known_ids: Mapping[str, str] | None,
) -> RecordedResponse:
    """Each frame's JSON payload normalised, its padding cleared, the frame re-encoded; stored
    one chunk per frame, so the file does not depend on how the frames arrived."""
    frames = EventStreamFrames.parse(items)
    values = normalise_response_values(
        frames.payload_values(),
        ids,
        rewrite_ids=rewrite,
        rewrite_times=rewrite,
        where=where,
        item_suffix=".payload",
        known_ids=known_ids,
    )
    if rewrite:
        values = [_without_padding(value) for value in values]
    body = frames.items_with(values)
    ended = response.ended
    if ended is not None and ended.after_chunks == len(items) != len(body):
        ended = ended.replace(after_chunks=len(body))  # it counted every chunk stored
    return response.replace(body=body, ended=ended)


def _content_type(response: RecordedResponse) -> str | None:
    for name, value in response.headers.items():
        if name.lower() == "content-type":
            return value
    return None


def _without_padding(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    return {
        key: EVENTSTREAM_CLEARED_KEYS[key]
        if key in EVENTSTREAM_CLEARED_KEYS and isinstance(item, str)
        else item
        for key, item in value.items()
    }
