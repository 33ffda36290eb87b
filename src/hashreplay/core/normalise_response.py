"""The response normaliser (docs/design.md §5): volatile ids, times and
durations in a body or in stream payloads replaced by stable values before writing."""

from __future__ import annotations

from collections.abc import Mapping

from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.normalise import IdRegistry, normalise_response_values
from hashreplay.core.recording import RecordedResponse
from hashreplay.core.streams import StreamFormat, data_values, with_data_values


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
