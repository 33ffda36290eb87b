"""The response normaliser (docs/design.md §5): volatile ids, times and durations in a body
or in stream payloads replaced by stable values before writing, by rules that are data (the
tables below), not code paths.

AWS event streams are raw chunks of binary frames: each frame's JSON payload is normalised
like an SSE event's data (InvokeModel's `{"bytes": <base64 JSON>}` payloads through the
event they carry), and the frame re-encoded with its lengths and CRCs computed afresh
(docs/recordings.md, "AWS event streams")."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import orjson

from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.constants import FIXED_EPOCH, STABLE_ID_PREFIX
from hashreplay.core.format import RecordedRequest, RecordedResponse
from hashreplay.core.normalise import ID_HEADERS, MIN_EMBEDDED_ID, IdRegistry, map_ids
from hashreplay.core.streams import (
    EventStreamFrames,
    StreamFormat,
    data_values,
    is_eventstream,
    with_data_values,
)

# --- response rules (data, not code) -------------------------------------------------------

#: Keys whose non-null string values are per-call ids, replaced by stable `rec-…` ids when
#: they look like one (`is_generated_id`) and the request did not name them (`named_values`).
RESPONSE_ID_KEYS: frozenset[str] = frozenset(
    {"id", "call_id", "tool_call_id", "item_id", "event_id", "response_id", "responseId"}
)
#: Keys whose non-null values are creation/completion times: numbers → 0, strings → epoch.
RESPONSE_TIME_KEYS: frozenset[str] = frozenset(
    {"created", "created_at", "completed_at", "createTime", "updateTime"}
)
#: Keys whose non-null values are measured durations (Ollama reports nanoseconds, Bedrock's
#: Converse API `metrics.latencyMs`, InvokeModel's `amazon-bedrock-invocationMetrics`) → 0.
RESPONSE_DURATION_KEYS: frozenset[str] = frozenset(
    {
        "total_duration",
        "load_duration",
        "prompt_eval_duration",
        "eval_duration",
        "processing_ms",
        "latencyMs",
        "invocationLatency",
        "firstByteLatency",
    }
)
#: Keys whose non-null values vary per call or per backend without meaning for the caller
#: (random stream padding, the serving configuration's fingerprint) → a fixed value.
RESPONSE_CLEARED_KEYS: Mapping[str, Any] = {
    "obfuscation": "",
    "system_fingerprint": "fp_recorded",
}

#: Top-level keys of an AWS event stream payload whose string values are random padding
#: (Bedrock pads every event with `"p": "abcdef…"` of random length) → a fixed value.
EVENTSTREAM_CLEARED_KEYS: Mapping[str, str] = {"p": ""}


# --- what is an id (docs/design.md §5, "What is an id") ----------------------------------------

#: A short value that still has the shape of a generated id: a prefix, an underscore and a
#: token holding a digit (`call_1`, `msg_7a`), or a run of letters and digits mixing both
#: (`a1b2c3`). Plain numbers (`"0"`), words and model names (`gpt-4o`) shorter than
#: `MIN_EMBEDDED_ID` are not ids.
_SHORT_GENERATED = re.compile(
    r"[A-Za-z][A-Za-z0-9]*_(?=[A-Za-z]*[0-9])[A-Za-z0-9]+"
    r"|(?=[A-Za-z]*[0-9])(?=[0-9]*[A-Za-z])[A-Za-z0-9]{6,}"
)


def is_generated_id(value: str) -> bool:
    """Whether the value of an id key is a per-call id: at least `MIN_EMBEDDED_ID` characters
    (uuids, `chatcmpl-…`, `msg_…`, long hex or base62 runs), or a shorter value of a generated
    shape (`_SHORT_GENERATED`)."""
    return len(value) >= MIN_EMBEDDED_ID or _SHORT_GENERATED.fullmatch(value) is not None


#: A single model object's endpoint (`GET /v1/models/gpt-4o`, Gemini's
#: `GET /v1beta/models/gemini-2.0-flash`): its answer describes the model the URL names.
_MODEL_OBJECT = re.compile(r"(?:^|/)models/[^/:]+/?$")


def is_model_object(request: RecordedRequest) -> bool:
    """Whether `request` asks for one model object: its id and times are facts, kept as a
    model list's are."""
    return request.method.upper() == "GET" and _MODEL_OBJECT.search(request.endpoint) is not None


def named_values(request: RecordedRequest) -> frozenset[str]:
    """The strings the request itself named (its URL's path segments and query values, the
    string values of its JSON body): an id key holding one of them keeps it (a model id asked
    for, an id the test sent), unless it is an id the test received earlier (`known_ids`)."""
    parts = urlsplit(request.url)
    named = {unquote(segment) for segment in parts.path.split("/") if segment}
    named.update(value for _, value in parse_qsl(parts.query) if value)
    if request.body_encoding is BodyEncoding.JSON:
        named.update(text for _, text in strings_at(request.body))
    return frozenset(named)


def strings_at(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every string inside a JSON value with its path below `path` (`.a[0].b`)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings_at(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from strings_at(item, f"{path}[{index}]")


# --- values in a body -------------------------------------------------------------------------


def normalise_response_values(
    values: Iterable[Any],
    ids: IdRegistry,
    *,
    rewrite_ids: bool = True,
    rewrite_times: bool = True,
    where: str = "response.body",
    item_suffix: str = "",
    known_ids: Mapping[str, str] | None = None,
    named: Collection[str] = frozenset(),
) -> list[Any]:
    """Normalise the body (or the ordered stream chunks) of one response.

    Ids are collected over all values first (so a chunk that references an id defined by a
    later chunk is still mapped): the values of id keys that are generated ids
    (`is_generated_id`) and not `named` by the request. Then an original id is replaced by its
    stable form wherever an id key holds it, and elsewhere only when it is at least
    `MIN_EMBEDDED_ID` characters long (so a tool call id `"0"` never rewrites a text delta
    `"0"`). `known_ids` are ids the same test received earlier (a response that echoes
    `previous_response_id`): mapped too, not registered again. Model lists pass
    `rewrite_ids=False, rewrite_times=False`: their ids are model names and their times are
    facts.
    """
    values = list(values)
    if rewrite_ids:
        for index, value in enumerate(values):
            label = where if len(values) == 1 else f"{where}[{index}]{item_suffix}"
            _Collector(ids, label, known_ids, named).walk(value)
    ids_map = {**(known_ids or {}), **ids.stable} if rewrite_ids else {}
    ids_map = {k: v for k, v in ids_map.items() if k != v}
    texts = {k: v for k, v in ids_map.items() if len(k) >= MIN_EMBEDDED_ID}
    return [_rewrite(value, _IdMaps(ids_map, texts), rewrite_times) for value in values]


class _IdMaps:
    """Original → stable ids: `keys` at id keys (every id), `texts` everywhere else (the ids
    long enough not to be an ordinary word or number)."""

    __slots__ = ("keys", "texts")

    def __init__(self, keys: Mapping[str, str], texts: Mapping[str, str]) -> None:
        self.keys = keys
        self.texts = texts


class _Collector:
    """One pass registering the ids of a response value; a field's label (`where`) is only
    written out for the fields that hold an id, not for every field walked past."""

    def __init__(
        self,
        ids: IdRegistry,
        where: str,
        known: Mapping[str, str] | None,
        named: Collection[str],
    ) -> None:
        self.ids = ids
        self.where = where
        self.known = known
        self.named = named
        self.path: list[str | int] = []

    def label(self) -> str:
        return self.where + "".join(
            f"[{step}]" if type(step) is int else f".{step}" for step in self.path
        )

    def walk(self, value: Any) -> None:
        path = self.path
        if isinstance(value, dict):
            known = self.known
            for key, item in value.items():
                if (
                    key in RESPONSE_ID_KEYS
                    and isinstance(item, str)
                    and item
                    and not item.startswith(STABLE_ID_PREFIX)
                    and not (known is not None and item in known)
                    and item not in self.named
                    and is_generated_id(item)
                ):
                    path.append(key)
                    self.ids.assign(item, self.label())
                    path.pop()
                elif isinstance(item, (dict, list)):
                    path.append(key)
                    self.walk(item)
                    path.pop()
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, (dict, list)):
                    path.append(index)
                    self.walk(item)
                    path.pop()


def _rewrite(value: Any, ids: _IdMaps, times: bool) -> Any:
    if isinstance(value, str):
        return map_ids(value, ids.texts) if ids.texts else value
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if times and item is not None and key in _FIXED_KEYS:
                replaced = _fixed_value(key, item)
                if replaced is not _KEEP:
                    out[key] = replaced
                    continue
            if key in RESPONSE_ID_KEYS and isinstance(item, str) and item in ids.keys:
                out[key] = ids.keys[item]
                continue
            out[key] = item if type(item) in _PLAIN else _rewrite(item, ids, times)
        return out
    if isinstance(value, list):
        return [item if type(item) in _PLAIN else _rewrite(item, ids, times) for item in value]
    return value


#: Values `_rewrite` returns as they are (exact types).
_PLAIN = frozenset({int, float, bool, type(None)})


_KEEP = object()


def _fixed_value(key: str, value: Any) -> Any:
    if key in RESPONSE_TIME_KEYS and not isinstance(value, (dict, list, bool)):
        return FIXED_EPOCH if isinstance(value, str) else 0
    if key in RESPONSE_DURATION_KEYS and isinstance(value, (int, float)):
        return 0
    if key in RESPONSE_CLEARED_KEYS and not isinstance(value, (dict, list)):
        return RESPONSE_CLEARED_KEYS[key]
    return _KEEP


#: Every key `_fixed_value` may replace: a set lookup spares the call for the others.
_FIXED_KEYS = RESPONSE_TIME_KEYS | RESPONSE_DURATION_KEYS | frozenset(RESPONSE_CLEARED_KEYS)


def normalise_response(
    response: RecordedResponse,
    ids: IdRegistry,
    *,
    model_list: bool = False,
    where: str = "response.body",
    known_ids: Mapping[str, str] | None = None,
    request: RecordedRequest | None = None,
) -> RecordedResponse:
    """Apply the response normaliser (docs/design.md §5) to a body or to stream payloads.

    With the `request` it answers, values the request named are kept, and a model object's
    answer is kept whole (as a model list's)."""
    model_list = model_list or (request is not None and is_model_object(request))
    rewrite = not model_list
    named = named_values(request) if request is not None and rewrite else frozenset()
    if rewrite and not ID_HEADERS.isdisjoint(response.headers):
        response = _header_ids(response, ids, where, known_ids)
    if response.is_streaming and response.stream_format is not None:
        fmt = StreamFormat(response.stream_format)
        items = list(response.body or [])
        if fmt is StreamFormat.CHUNKS and is_eventstream(_content_type(response)):
            return _normalise_eventstream(
                response, items, ids, rewrite=rewrite, where=where, known_ids=known_ids, named=named
            )
        values = normalise_response_values(
            data_values(fmt, items),
            ids,
            rewrite_ids=rewrite,
            rewrite_times=rewrite,
            where=where,
            item_suffix=".data" if fmt is StreamFormat.SSE else "",
            known_ids=known_ids,
            named=named,
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
            named=named,
        )[0]
    else:
        body = response.body
    return response.replace(body=body)


def _header_ids(
    response: RecordedResponse, ids: IdRegistry, where: str, known: Mapping[str, str] | None
) -> RecordedResponse:
    """The ids a response hands out in `ID_HEADERS` (`mcp-session-id`) replaced by stable
    ids: the one the test received earlier (every answer of an MCP session repeats it), else a
    new one registered at `<exchange>.headers.<name>`; body text quoting it is mapped too."""
    exchange = where.removesuffix(".body")
    headers = dict(response.headers)
    for name in ID_HEADERS.intersection(headers):
        value = headers[name]
        if not value or value.startswith(STABLE_ID_PREFIX):
            continue
        stable = (known or {}).get(value) or ids.assign(value, f"{exchange}.headers.{name}")
        headers[name] = stable
    return response.replace(headers=headers)


def _normalise_eventstream(
    response: RecordedResponse,
    items: list[Any],
    ids: IdRegistry,
    *,
    rewrite: bool,
    where: str,
    known_ids: Mapping[str, str] | None,
    named: Collection[str],
) -> RecordedResponse:
    """Each frame's JSON payload normalised, its padding cleared, the frame re-encoded; stored
    one chunk per frame, so the file does not depend on how the frames arrived."""
    frames = EventStreamFrames.parse(items)
    payloads = frames.payload_values()
    wrapped = [_unwrap_bytes(value) for value in payloads]
    values = normalise_response_values(
        [
            payload if inner is None else {**payload, "bytes": inner}
            for payload, inner in zip(payloads, wrapped, strict=True)
        ],
        ids,
        rewrite_ids=rewrite,
        rewrite_times=rewrite,
        where=where,
        item_suffix=".payload",
        known_ids=known_ids,
        named=named,
    )
    values = [
        value if inner is None else _wrap_bytes(value)
        for value, inner in zip(values, wrapped, strict=True)
    ]
    if rewrite:
        values = [_without_padding(value) for value in values]
    body = frames.items_with(values)
    ended = response.ended
    if ended is not None and ended.after_chunks == len(items) != len(body):
        ended = ended.replace(after_chunks=len(body))  # it counted every chunk stored
    return response.replace(body=body, ended=ended)


def _unwrap_bytes(payload: Any) -> Any:
    """The JSON an InvokeModelWithResponseStream `chunk` carries base64-encoded in its
    `{"bytes": …}` payload (the model's own stream event), or None for any other payload."""
    if not isinstance(payload, dict) or not isinstance(encoded := payload.get("bytes"), str):
        return None
    try:
        inner = orjson.loads(base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError):
        return None
    return inner if isinstance(inner, (dict, list)) else None


def _wrap_bytes(payload: Any) -> Any:
    """`_unwrap_bytes` undone on a normalised payload: its event encoded back to base64."""
    if not isinstance(payload, dict):
        return payload
    encoded = base64.b64encode(orjson.dumps(payload["bytes"])).decode("ascii")
    return {**payload, "bytes": encoded}


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
