"""Fuzzing the recording loader and the proxy.

The loader, fed random JSON trees, random bytes and valid recordings with random parts
replaced, returns a recording or raises a `RecordingError`: never another exception. The
proxy, fed random methods, paths, headers and bodies, answers every request (a JSON error,
or the forward), within a time bound: never a crash (`internal`) or a hang.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hashreplay.core.config import load_config
from hashreplay.core.errors import RecordingError
from hashreplay.core.store import dumps, parse_recording
from hashreplay.engine.http import IncomingRequest, LiveExchange, plan_for
from hashreplay.engine.session import Session
from hashreplay.server.app import ProxyApp
from hashreplay.server.cli import ServeSettings

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_trees = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=30,
)


def valid_recording() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        session = Session(load_config(Path(tmp), env={}, mode="record"))
        prep = session.prepare(
            IncomingRequest(
                "POST", "http://h/v1/chat", [("content-type", "application/json")], b'{"a": 1}'
            ),
            test_id="tests/test_x.py::t",
        )
        exchange = LiveExchange(
            200, [("content-type", "text/event-stream")], [b"data: {}\n\n"], chunked=True
        )
        data: dict[str, Any] = json.loads(session.record(prep, exchange).read_text())
        return data


VALID = valid_recording()
FIELDS = ["format_version", "key_version", "test_id", "request", "response", "later_responses",
          "id_normalization_mapping"]  # fmt: skip
SUBFIELDS = ["method", "url", "endpoint", "headers", "body", "body_encoding", "status",
             "is_streaming", "stream_format", "is_exception", "exception", "model"]  # fmt: skip


def loads_or_recording_error(content: bytes) -> None:
    """A recording that loads is usable: it serialises, and every response replays (or is
    a RecordingError naming the file); anything else raised fails the test."""
    try:
        recording = parse_recording(content, "fuzz.json")
    except RecordingError as exc:
        assert "fuzz.json" in str(exc)
        return
    assert parse_recording(dumps(recording.model_dump(mode="json")), "again.json") == recording
    for response in recording.responses:
        try:
            plan = plan_for(response, Path("fuzz.json"))
        except RecordingError as exc:
            assert "fuzz.json" in str(exc)
        else:
            assert all(isinstance(chunk, bytes) for chunk in plan.chunks)


@settings(max_examples=300, deadline=None)
@given(json_trees)
def test_random_json_trees_load_or_are_a_recording_error(tree: Any) -> None:
    loads_or_recording_error(orjson.dumps(tree))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_load_or_are_a_recording_error(content: bytes) -> None:
    loads_or_recording_error(content)


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from(FIELDS),
    st.sampled_from(["request", "response"]),
    st.sampled_from(SUBFIELDS),
    json_trees,
    st.booleans(),
)
def test_valid_recordings_with_a_random_part_load_or_are_a_recording_error(
    field: str, part: str, sub: str, value: Any, deep: bool
) -> None:
    data = json.loads(json.dumps(VALID))
    if deep and isinstance(data.get(part), dict):
        data[part][sub] = value
    else:
        data[field] = value
    loads_or_recording_error(orjson.dumps(data))


# --- the proxy ---------------------------------------------------------------------------------

tokens = st.text(
    alphabet="!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    min_size=1,
    max_size=10,
)
methods = st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]) | tokens
paths = st.lists(st.text(max_size=8), max_size=5).map(
    lambda parts: "/" + "/".join(parts)
) | st.sampled_from(
    [
        "/__hashreplay/stats",
        "/__hashreplay/health",
        "/__hashreplay/x",
        "/v1/chat/completions",
        "/v1/models",
    ]
)
header_names = (
    st.sampled_from(
        [
            "content-type",
            "content-length",
            "x-hashreplay-test-id",
            "x-hashreplay-run",
            "authorization",
            "content-encoding",
            "transfer-encoding",
            "host",
            "expect",
            "connection",
        ]
    )
    | tokens
)
header_values = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=255), max_size=40)
bodies = st.binary(max_size=200) | json_trees.map(orjson.dumps)


async def one_request(
    app: ProxyApp, method: str, path: str, headers: list[tuple[str, str]], body: bytes
) -> list[dict[str, Any]]:
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode("utf-8", "surrogateescape"),
        "query_string": b"",
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers],
    }
    incoming = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop(0)
        await asyncio.sleep(3600)
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(dict(message))

    await asyncio.wait_for(app(scope, receive, send), timeout=30)  # a hang fails here
    return sent


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(methods, paths, st.lists(st.tuples(header_names, header_values), max_size=6), bodies)
def test_the_proxy_answers_any_request_with_json_never_a_crash(
    method: str, path: str, headers: list[tuple[str, str]], body: bytes
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        app = ProxyApp(
            ServeSettings(root=str(root)), session=Session(load_config(root, env={}, mode="replay"))
        )
        sent = asyncio.run(one_request(app, method, path, headers, body))
    start = sent[0]
    assert start["type"] == "http.response.start"
    payload = b"".join(m.get("body", b"") for m in sent[1:])
    assert sent[-1].get("more_body") is False
    if start["status"] >= 400:
        error = json.loads(payload)["error"]
        assert error["code"] != "internal", error["message"]
    assert app.stats()["errors"].get("internal") is None
