"""Reading OGX (formerly Llama Stack) `api_recorder` files for `hashreplay import ogx`.

An OGX file holds one request and its response, with SDK objects stored typed
(`{"__type__": "openai.types.chat.ChatCompletion", "__data__": {...}}`). Each becomes the
exchange the SDK saw on the wire: a typed object its JSON body, a list of chunks an SSE
stream ending in `[DONE]` (OpenAI) or NDJSON lines (Ollama), a model list the provider's
list response (requested with `GET`, as the SDK does), a recorded provider error the HTTP
error response it came from. Tool calls (`provider`, `tool_name`, `kwargs`) become
call-layer recordings (docs/design.md §2). Three request shapes are known: inference
(`method`, `url`, `body`), raw httpx (`url`, `method`, `payload`) and tool (`tool_name`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from hashreplay.core.bodies import MAX_NESTING, deep_field, too_deep_problem
from hashreplay.core.format import RecordedResponse
from hashreplay.core.keys import MODEL_LIST_SUFFIXES
from hashreplay.core.typed import refused_exception
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.importing import CallEntry, Entry, Read, UnreadableSource

JSON_TYPE = "application/json"


#: call-layer name of an imported OGX tool call: `ogx.tools:<provider>.<tool_name>`
TOOL_CALL_PREFIX = "ogx.tools:"


def read_ogx(path: Path) -> Read:
    """The one entry of an OGX recording file; an UnreadableSource naming what is wrong."""
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        if "depth" in exc.msg:  # orjson stops at 1,024 levels
            msg = f"line {exc.lineno} column {exc.colno}: {too_deep_problem()}; not imported"
            raise UnreadableSource(msg) from None
        msg = f"not JSON: {exc}"
        raise UnreadableSource(msg) from None
    if not isinstance(data, dict):
        msg = f"unknown shape: expected a JSON object, found {type(data).__name__}"
        raise UnreadableSource(msg)
    request, response = data.get("request"), data.get("response")
    if not isinstance(request, dict) or not isinstance(response, dict):
        msg = "unknown shape: no `request` and `response` objects (not an OGX recording?)"
        raise UnreadableSource(msg)
    _check_nesting(request, response)
    test_id = data.get("test_id", request.get("test_id"))
    if test_id is not None and not isinstance(test_id, str):
        msg = f"unknown shape: test_id is {type(test_id).__name__}, not a string"
        raise UnreadableSource(msg)
    try:
        return Read(entries=[_entry(request, response, test_id, str(path))])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        msg = f"unknown shape: {type(exc).__name__}: {exc}"
        raise UnreadableSource(msg) from None


def _check_nesting(request: dict[str, Any], response: dict[str, Any]) -> None:
    """Refuse a body nested deeper than hashreplay stores (docs/design.md §13), by its field
    path, before any walk recurses into it. OGX's typed wrappers (`__type__`, `__data__`)
    add a level to each object, so twice the limit is allowed here; the wire body they
    stand for is held to the limit itself when it is staged."""
    fields = [(request, "request"), (response, "response")]
    for value, where in fields:
        deep = deep_field(value, where, 2 * MAX_NESTING)
        if deep is not None:
            msg = f"{deep}: {too_deep_problem()}; not imported"
            raise UnreadableSource(msg)


def _entry(
    request: dict[str, Any], response: dict[str, Any], test_id: str | None, source: str
) -> Entry:
    if "tool_name" in request:
        call = CallEntry(
            name=f"{TOOL_CALL_PREFIX}{request['provider']}.{request['tool_name']}",
            kwargs=dict(request.get("kwargs") or {}),
            response=RecordedResponse(status=None, body=response.get("body")),
        )
        return Entry(test_id, source, call=call)
    url = sent_url(str(request["url"]))
    method = str(request["method"]).upper()
    body = request["payload"] if "payload" in request else request.get("body")
    path = urlsplit(url).path
    model_list = path.endswith(MODEL_LIST_SUFFIXES)
    if model_list:
        method, body = "GET", None  # OGX wrote POST with `{}`; the SDKs send a plain GET
    headers = [("content-type", JSON_TYPE)] if body is not None else []
    content = b"" if body is None else orjson.dumps(body)
    incoming = IncomingRequest(method, url, headers, content)
    return Entry(test_id, source, incoming, _exchange(response, path, model_list=model_list))


def sent_url(url: str) -> str:
    """The URL the SDK really sent. OGX stores its client's base URL (ending `/v1`) joined
    with the endpoint it calls (`/v1/chat/completions`), so `…/v1/v1/chat/completions`;
    the SDK under that base URL sent `…/v1/chat/completions`, and the recording must hold
    that path to be found again (docs/design.md §13)."""
    parts = urlsplit(url)
    if "/v1/v1/" not in parts.path:
        return url
    return urlunsplit(parts._replace(path=parts.path.replace("/v1/v1/", "/v1/", 1)))


def untyped(value: Any) -> Any:
    """A stored value with every `{"__type__", "__data__"}` wrapper replaced by its data:
    what the SDK object was built from, i.e. the wire JSON."""
    if isinstance(value, dict):
        if "__type__" in value and "__data__" in value:
            return untyped(value["__data__"])
        return {k: untyped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [untyped(v) for v in value]
    return value


def _type_of(value: Any) -> str:
    if isinstance(value, list) and value:
        value = value[0]
    return str(value.get("__type__", "")) if isinstance(value, dict) else ""


def _is_ollama(path: str, body: Any) -> bool:
    return path.startswith("/api/") or _type_of(body).startswith("ollama.")


def _json(status: int, value: Any) -> LiveExchange:
    return LiveExchange(status, [("content-type", JSON_TYPE)], [orjson.dumps(value)])


def _exchange(response: dict[str, Any], path: str, *, model_list: bool) -> LiveExchange:
    if response.get("is_exception"):
        return _error(response)
    body = response.get("body")
    status = int(response.get("status") or 200)
    if model_list:
        items = untyped(body)
        if isinstance(items, list):
            items = (
                {"models": items} if _is_ollama(path, body) else {"object": "list", "data": items}
            )
        return _json(status, items)
    if response.get("is_streaming"):
        if not isinstance(body, list):
            msg = f"a streamed response whose body is {type(body).__name__}, not a list of chunks"
            raise ValueError(msg)
        return _stream(status, body, path)
    wire = untyped(body)
    if isinstance(wire, str):
        return LiveExchange(status, [("content-type", "text/plain")], [wire.encode()])
    return _json(status, wire)


def _stream(status: int, chunks: list[Any], path: str) -> LiveExchange:
    events = [untyped(c) for c in chunks]
    if _is_ollama(path, chunks):
        lines = [orjson.dumps(e) + b"\n" for e in events]
        return LiveExchange(status, [("content-type", "application/x-ndjson")], lines, True)
    frames: list[bytes] = []
    named = path.endswith("/messages")  # Anthropic: `event: <type>` lines, no [DONE]
    for event in events:
        head = f"event: {event['type']}\n".encode() if named and isinstance(event, dict) else b""
        frames.append(head + b"data: " + orjson.dumps(event) + b"\n\n")
    if not named:
        frames.append(b"data: [DONE]\n\n")
    return LiveExchange(status, [("content-type", "text/event-stream")], frames, True)


def _error(response: dict[str, Any]) -> LiveExchange:
    """A recorded provider error as the HTTP error response it came from; without a status,
    a failed exchange (no response) with the recorded exception type and message."""
    info = response.get("exception_data") or {}
    message = str(info.get("message") or response.get("exception_message") or "")
    status = info.get("status_code")
    if isinstance(status, int):
        body = info.get("body")
        if info.get("provider") == "ollama" or not isinstance(body, dict):
            wire: Any = {"error": message if body is None else body}
        else:
            wire = {"error": body}
        return _json(status, wire)
    name = str(info.get("type") or "Exception")
    provider = str(info.get("provider") or "ogx")
    for dotted in (f"{provider}.{name}", f"builtins.{name}"):
        refused = refused_exception(dotted)
        if refused is not None:  # replay would refuse it: never write it (docs/design.md §2)
            msg = f"exception_data.type {name!r} (provider {provider!r}): {refused}; not imported"
            raise UnreadableSource(msg)
    error_class = type(name, (Exception,), {"__module__": provider})
    return LiveExchange(None, [], [], exception=error_class(message))
