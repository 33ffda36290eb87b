"""WebSocket frames as a recording holds them (docs/design.md §17, "WebSockets"): a live
frame's payload in the stored form and back (a file's frames are checked with its bodies,
`core.format.check_bodies`), `ignore` paths over frames (`frames[3].session.instructions`),
the first difference between a frame a client sends and the recorded one, and the
redaction and normalisation of a connection's frames. Pure: no I/O, no WebSocket library.

The stored form of a payload: a text frame whose text parses as a JSON object or array is
kept as that JSON (readable, normalised as bodies are); any other text as text
(`data_encoding: "text"`); a binary frame as base64 (`data_encoding: "base64"`).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.constants import FIXED_EPOCH
from hashreplay.core.diff import Difference, first_difference
from hashreplay.core.format import Frame, FrameDirection, FrameType
from hashreplay.core.matching import STAR, Step, parse_path, without
from hashreplay.core.normalise import IdRegistry, RequestRules, map_ids, normalise_request_body
from hashreplay.core.normalise_response import normalise_response_values, strings_at
from hashreplay.core.redact import Redactor
from hashreplay.core.split_secrets import redact_binary

#: What an adapter hands in and gets back: text for a text frame, bytes for a binary one.
Payload = str | bytes

#: The root of an `ignore` path over a connection's frames.
FRAMES_ROOT = "frames"


def stored_data(kind: FrameType, payload: Payload | None) -> tuple[Any, BodyEncoding | None]:
    """A live frame's payload as a file keeps it, and its `data_encoding` (None: JSON)."""
    if kind is FrameType.CLOSE or payload is None:
        return None, None
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(payload)).decode("ascii"), BodyEncoding.BASE64
    stripped = payload.lstrip()
    if stripped[:1] in ("{", "["):
        try:
            return orjson.loads(payload), None
        except orjson.JSONDecodeError:
            pass
    return payload, BodyEncoding.TEXT


def payload_of(frame: Frame) -> Payload:
    """What a replayed frame hands its client: text for text frames, bytes for binary
    ones. A frame that cannot be decoded raises ValueError (`check_frames` finds those when
    the file is read)."""
    data, encoding = frame.data, frame.data_encoding
    if encoding is BodyEncoding.BASE64:
        raw = base64.b64decode(data if isinstance(data, str) else "", validate=True)
        return raw if frame.type is FrameType.BINARY else raw.decode("utf-8")
    if encoding is BodyEncoding.TEXT:
        if not isinstance(data, str):
            msg = f"a text frame's data must be a string, found {type(data).__name__}"
            raise ValueError(msg)
        return data if frame.type is FrameType.TEXT else data.encode("utf-8")
    text = "" if data is None else orjson.dumps(data).decode("utf-8")
    return text if frame.type is not FrameType.BINARY else text.encode("utf-8")


def payload_size(payload: Payload | None) -> int:
    """Bytes a payload takes (what `max_body_bytes` counts while frames arrive)."""
    if payload is None:
        return 0
    if isinstance(payload, str):
        return len(payload.encode("utf-8", "surrogatepass"))
    return len(payload)


# --- ignore paths over frames, and the comparison of a sent frame -------------------------


def frame_paths(ignore: Iterable[str]) -> list[tuple[Step, tuple[Step, ...]]]:
    """The `ignore` paths that name frames (`frames[3].session.instructions`,
    `frames[*].event_id`): the frame index (or `STAR`) and the steps into its data."""
    found = []
    for text in ignore:
        root, steps = parse_path(text)
        if root == FRAMES_ROOT:
            found.append((steps[0], steps[1:]))
    return found


def comparable(data: Any, index: int, paths: Sequence[tuple[Step, tuple[Step, ...]]]) -> Any:
    """A frame's data with what the `ignore` paths for frame `index` name left out."""
    for which, steps in paths:
        if which in (STAR, index):
            data = None if not steps else without(data, steps)
    return data


def frame_difference(
    recorded: Frame,
    sent: Frame,
    index: int,
    paths: Sequence[tuple[Step, tuple[Step, ...]]] = (),
) -> Difference | None:
    """The first field in which a frame the client sends differs from the recorded one at
    `index` (both stored form, normalised), named `frames[3].session.instructions`; the
    frame's `type` first, then its data (a close frame's code and reason)."""
    where = f"{FRAMES_ROOT}[{index}]"
    if recorded.type is not sent.type:
        return Difference(f"{where}.type", recorded.type.value, sent.type.value, "value")
    if recorded.type is FrameType.CLOSE:
        return first_difference(
            {"code": recorded.code, "reason": recorded.reason},
            {"code": sent.code, "reason": sent.reason},
            where,
        )
    shown = (recorded.data_encoding or BodyEncoding.JSON).value
    now = (sent.data_encoding or BodyEncoding.JSON).value
    if shown != now:
        return Difference(f"{where}.data_encoding", shown, now, "value")
    return first_difference(
        comparable(recorded.data, index, paths), comparable(sent.data, index, paths), where
    )


# --- redaction and normalisation (docs/design.md §5, §7, §17) -----------------------------


def redacted_frames(frames: Sequence[Frame], redactor: Redactor) -> list[Frame]:
    """Frames with secrets removed from their data (by key and shape, as bodies are; inside
    binary data as `redact_binary` finds them) and from close reasons."""
    out = []
    for frame in frames:
        data, encoding = frame.data, frame.data_encoding
        if encoding is BodyEncoding.BASE64:
            data = redact_binary(data, encoding, redactor.text)
        elif encoding is BodyEncoding.TEXT and isinstance(data, str):
            data = redactor.text(data)
        elif data is not None:
            data = redactor.value(data)
        reason = None if frame.reason is None else redactor.text(frame.reason)
        changed = data is not frame.data or reason != frame.reason
        out.append(frame.replace(data=data, reason=reason) if changed else frame)
    return out


def normalised_sent(
    frame: Frame,
    rules: RequestRules,
    redactor: Redactor,
    id_map: Mapping[str, str] | None,
) -> Frame:
    """A frame the client sent as it is stored and compared: its JSON data redacted and
    normalised as a request body is (ids the test received mapped to their stable form,
    volatile values and client-made ids numbered), text redacted with ids mapped. The one
    form both recording and replay use, so an unchanged client compares equal."""
    data, encoding = frame.data, frame.data_encoding
    if data is None:
        return frame
    if encoding is None:
        data = normalise_request_body(data, rules, id_map, redactor)
    elif encoding is BodyEncoding.TEXT and isinstance(data, str):
        data = redactor.text(data)
        data = map_ids(data, id_map) if id_map else data
    else:
        data = redact_binary(data, BodyEncoding.BASE64, redactor.text)
    return frame.replace(data=data)


def normalised_frames(
    frames: Sequence[Frame],
    ids: IdRegistry,
    *,
    where: str,
    known_ids: Mapping[str, str] | None,
    rules: RequestRules,
    redactor: Redactor,
) -> list[Frame]:
    """A recorded connection's frames as written: the server-made ids in received JSON
    frames (`event_id`, `item_id`, `response.id`, ...) replaced by stable `rec-` ids
    registered in `ids` (the file's registry, facts named `<where>[3].data.event_id`) and
    times fixed, as a streamed body's events are; then the sent frames normalised
    (`normalised_sent`) with those ids and the test's `known_ids` mapped, so a client that
    echoes an id it received stores the stable id, which is what it sends in replay. A
    value the client sent before a received frame holds it is the client's, not the
    server's: it is kept (replay could not map it back)."""
    sent_strings: set[str] = set()
    received: dict[int, Any] = {}
    for index, frame in enumerate(frames):
        if frame.direction is FrameDirection.SENT:
            sent_strings.update(text for _, text in strings_at(frame.data))
        elif frame.data_encoding is None and frame.data is not None:
            named = frozenset(sent_strings - ids.stable.keys())
            received[index] = _fixed_times(
                normalise_response_values(
                    [frame.data],
                    ids,
                    where=f"{where}[{index}].data",
                    known_ids=known_ids,
                    named=named,
                )[0]
            )
    id_map = {**(known_ids or {}), **ids.stable}
    out = []
    for index, frame in enumerate(frames):
        if frame.direction is FrameDirection.SENT:
            out.append(normalised_sent(frame, rules, redactor, id_map))
        elif index in received:
            out.append(frame.replace(data=received[index]))
        else:
            out.append(frame)
    return out


#: Keys whose values are times in realtime events only (a Realtime session's `expires_at`):
#: fixed in received frames as the response normaliser fixes `created_at` in bodies. Not
#: added to the body rules, which would change recorded HTTP answers on their next record.
FRAME_TIME_KEYS: frozenset[str] = frozenset({"expires_at"})


def _fixed_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: (FIXED_EPOCH if isinstance(item, str) else 0)
            if key in FRAME_TIME_KEYS
            and isinstance(item, (str, int, float))
            and not isinstance(item, bool)
            else _fixed_times(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_fixed_times(item) for item in value]
    return value
