"""Stored responses after the fact: normalising them (DESIGN.md §5), merging model lists,
and checking that a file found by its name still holds that request."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.constants import KEY_VERSION
from hashreplay.core.errors import HashReplayWarning
from hashreplay.core.key import model_id
from hashreplay.core.normalise import IdRegistry, normalise_response_values
from hashreplay.core.recording import RecordedResponse, Recording
from hashreplay.core.streams import StreamFormat, data_values, with_data_values
from hashreplay.engine.miss_report import request_difference

if TYPE_CHECKING:
    from hashreplay.engine.session import Prepared


def check_name(path: Path, recording: Recording, prep: Prepared) -> None:
    """Warn when a file found by its name holds another request (edited by hand, or named by
    other rules): replay still uses it, and `hashreplay verify` lists every such file."""
    stored = recording.request
    if (
        recording.key_version == KEY_VERSION
        and recording.test_id == prep.test_id
        and stored.body == prep.request.body
        and stored.endpoint == prep.request.endpoint
        and stored.method == prep.request.method
    ):
        return  # the common case, at C speed: no field-by-field walk
    if recording.key_version != KEY_VERSION:
        problem = (
            f"it was named by key_version {recording.key_version}, this hashreplay uses "
            f"{KEY_VERSION}; run `hashreplay rehash` to re-key the store"
        )
    elif recording.test_id != prep.test_id:
        problem = f"it stores test id {recording.test_id!r}, not {prep.test_id!r}"
    else:
        diff = request_difference(stored, prep.request)
        if diff is None:
            return
        problem = f"its stored request differs ({diff.describe()}): was it edited by hand?"
    warnings.warn(
        HashReplayWarning(
            f"recording {path} no longer matches its name: {problem}. It is still replayed; "
            "`hashreplay verify` lists every such file"
        ),
        stacklevel=2,
    )


def normalise_response(
    response: RecordedResponse,
    ids: IdRegistry,
    *,
    model_list: bool = False,
    where: str = "response.body",
    known_ids: Mapping[str, str] | None = None,
) -> RecordedResponse:
    """Apply the response normaliser (DESIGN.md §5) to a body or to stream payloads."""
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
    return response.model_copy(update={"body": body})


def merge_model_lists(responses: Sequence[RecordedResponse]) -> RecordedResponse:
    """One model-list response holding every model of all of them (union by model id)."""
    first = responses[0]
    if len(responses) == 1 or not isinstance(first.body, dict):
        return first
    body = dict(first.body)
    for key in ("data", "models"):
        if not isinstance(body.get(key), list):
            continue
        seen: dict[str, Any] = {}
        for response in responses:
            items = response.body.get(key) if isinstance(response.body, dict) else None
            for item in items or []:
                ident = model_id(item)
                if ident is not None and ident not in seen:
                    seen[ident] = item
        body[key] = list(seen.values())
    return first.model_copy(update={"body": body})
