"""The replay fast path (docs/design.md §11, "The replay path") keeps every check: a file with a wrong format version, one
that holds another request than its name says, and a truncated one are still refused or
warned about, naming the file; and each shortcut gives exactly what the general path gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hashreplay.adapters.httpx import _header_items
from hashreplay.core.config import load_config
from hashreplay.core.constants import FORMAT_VERSION, SECRET_PLACEHOLDER
from hashreplay.core.errors import HashReplayWarning
from hashreplay.core.normalise import RequestRules, compile_patterns, normalise_request_body
from hashreplay.core.redact import Redactor
from hashreplay.core.streams import render_sse_event
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.replay import Miss, Record, Replay
from hashreplay.engine.session import Session

TEST = "tests/suite/test_chat.py::test_one"
URL = "http://127.0.0.1:9/v1/chat/completions"
JSON = [("content-type", "application/json"), ("authorization", "Bearer sk-test-1234567890abcdef")]


def chat(text: str) -> IncomingRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    return IncomingRequest("POST", URL, JSON, json.dumps(body).encode())


def recorded(root: Path, text: str, answer: Any) -> Path:
    s = Session(load_config(root, env={}, mode="record"))
    s.begin_test(TEST)
    decision = s.decide(chat(text), test_id=TEST)
    assert isinstance(decision, Record)
    body = json.dumps(answer).encode()
    return s.record(
        decision.prep, LiveExchange(200, [("content-type", "application/json")], [body])
    )


def replay(root: Path, text: str) -> Replay | Miss:
    s = Session(load_config(root, env={}, mode="replay"))
    s.begin_test(TEST)
    decision = s.decide(chat(text), test_id=TEST)
    assert isinstance(decision, (Replay, Miss))
    return decision


def test_a_wrong_format_version_is_a_miss_naming_the_file(tmp_path: Path) -> None:
    path = recorded(tmp_path, "hi", {"answer": "one"})
    data = json.loads(path.read_text())
    data["format_version"] = FORMAT_VERSION + 1
    path.write_text(json.dumps(data))
    decision = replay(tmp_path, "hi")
    assert isinstance(decision, Miss)
    assert str(path.name) in str(decision.error)
    assert f"format_version {FORMAT_VERSION + 1}" in str(decision.error)


def test_a_truncated_file_is_a_miss_naming_the_file(tmp_path: Path) -> None:
    path = recorded(tmp_path, "hi", {"answer": "one"})
    content = path.read_bytes()
    path.write_bytes(content[: len(content) // 2])
    decision = replay(tmp_path, "hi")
    assert isinstance(decision, Miss)
    assert str(path.name) in str(decision.error)
    assert "truncated" in str(decision.error)


def test_a_file_holding_another_request_than_its_name_is_replayed_with_a_warning(
    tmp_path: Path,
) -> None:
    path = recorded(tmp_path, "hi", {"answer": "one"})
    other = recorded(tmp_path, "bye", {"answer": "two"})
    path.write_bytes(other.read_bytes())  # the file of "bye" under the name of "hi"
    with pytest.warns(HashReplayWarning, match="no longer matches its name") as caught:
        decision = replay(tmp_path, "hi")
    assert isinstance(decision, Replay)
    assert str(path) in str(caught[0].message)
    assert b"two" in b"".join(decision.plan().chunks)


def test_an_invalid_response_is_a_miss_naming_the_field(tmp_path: Path) -> None:
    path = recorded(tmp_path, "hi", {"answer": "one"})
    data = json.loads(path.read_text())
    data["response"]["status"] = "two hundred"
    path.write_text(json.dumps(data))
    decision = replay(tmp_path, "hi")
    assert isinstance(decision, Miss)
    assert "response.status" in str(decision.error)


def test_a_marker_written_as_json_escapes_is_still_filled(tmp_path: Path) -> None:
    path = recorded(tmp_path, "hi", {"answer": "one"})
    content = path.read_text()
    # a hand edit that writes the braces as JSON escapes
    path.write_text(content.replace('"one"', '"\\u007b\\u007brequest:body.model}}"'))
    decision = replay(tmp_path, "hi")
    assert isinstance(decision, Replay)
    assert json.loads(b"".join(decision.plan().chunks)) == {"answer": "m"}


# --- each shortcut equals the general path -------------------------------------------------

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.sampled_from(["sk-abcdefghijklmnop0123", "1.234567", "caf\u0065\u0301", "a.b"]),
)
keys = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["api_key", "token", "logprob", "password", "max_tokens", "a.b", "trace"]),
)
json_tree = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(tree=json_tree, ids=st.booleans(), volatile=st.booleans())
def test_one_walk_redacts_and_normalises_as_two_walks_did(
    tree: Any, ids: bool, volatile: bool
) -> None:
    redactor = Redactor(["trace"])
    rules = RequestRules(
        ignore_body_keys=("max_tokens", "a.b"),
        volatile=compile_patterns(["uuid"] if volatile else []),
    )
    id_map = {"abcdefghij": "rec-1"} if ids else None
    two_walks = normalise_request_body(redactor.value(tree), rules, id_map)
    assert normalise_request_body(tree, rules, id_map, redactor) == two_walks


def test_a_secret_beside_its_qualifier_is_kept_in_one_walk() -> None:
    redactor = Redactor()
    body = {"token": "Hi", "logprob": -0.1, "nested": {"token": "abc", "x": 1}}
    assert normalise_request_body(body, None, None, redactor) == {
        "token": "Hi",
        "logprob": -0.1,
        "nested": {"token": SECRET_PLACEHOLDER, "x": 1},
    }


def _general_sse(event: dict[str, Any]) -> bytes:
    lines = [f"event: {event['event']}"] if "event" in event else []
    data = event["data"]
    lines.append(f"data: {data if isinstance(data, str) else orjson.dumps(data).decode()}")
    return ("\n".join(lines) + "\n\n").encode("utf-8", errors="surrogateescape")


@settings(max_examples=200, deadline=None)
@given(
    data=st.one_of(st.dictionaries(st.text(max_size=5), json_tree), st.lists(json_tree)),
    name=st.none() | st.text(max_size=10),
)
def test_a_plain_sse_event_renders_as_the_general_path_does(data: Any, name: str | None) -> None:
    try:
        orjson.dumps(data)
    except orjson.JSONEncodeError:
        return  # not storable: integers past 64 bits are never in a recorded stream
    event: dict[str, Any] = {"data": data} if name is None else {"event": name, "data": data}
    assert render_sse_event(event) == _general_sse(event)


@pytest.mark.parametrize(
    "headers",
    [
        [("Content-Type", "application/json"), ("X-A", "1"), ("x-a", "2")],
        [("X-Name", "caf\u00e9".encode())],
        [("X-Latin", "caf\u00e9".encode("latin-1"))],
    ],
)
def test_headers_decoded_once_equal_multi_items(headers: list[tuple[str, Any]]) -> None:
    h = httpx2.Headers(headers)
    assert _header_items(h) == h.multi_items()


def _redacted_as_before(redactor: Redactor, value: Any) -> Any:
    """The redaction walk as it was written before the fast path (isinstance at every node)."""
    if isinstance(value, str):
        return redactor.text(value)
    if isinstance(value, dict):
        return {
            key: SECRET_PLACEHOLDER
            if redactor.hides(key, item, value)
            else _redacted_as_before(redactor, item)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_redacted_as_before(redactor, item) for item in value]
    return value


@settings(max_examples=300, deadline=None)
@given(tree=json_tree)
def test_the_typed_redaction_walk_equals_the_general_one(tree: Any) -> None:
    redactor = Redactor(["trace"])
    assert redactor.value(tree) == _redacted_as_before(redactor, tree)
    assert redactor.value((tree, [tree])) == _redacted_as_before(redactor, (tree, [tree]))


#: texts that look like the layout the index relies on (escaped in JSON, so they never are)
_tricky_text = st.one_of(
    st.text(max_size=12),
    st.sampled_from(['\n  "test_id": "x"\n}', '\n  "later_responses": [', "}\n", '"']),
)
_plain_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | _tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_tricky_text, inner, max_size=3),
    max_leaves=12,
)
_test_ids = st.one_of(st.none(), _tricky_text, st.text(max_size=40))
_extra_fields = st.dictionaries(
    st.sampled_from(["annotation", "zz_note", "notes", "test_id_old"]), _plain_json, max_size=2
)


@settings(max_examples=300, deadline=None)
@given(
    test_id=_test_ids,
    body=_plain_json,
    later=st.integers(min_value=0, max_value=2),
    extra=_extra_fields,
    layout=st.sampled_from(["canonical", "compact", "unsorted"]),
)
def test_the_unconsumed_index_reads_a_file_as_a_full_parse_does(
    tmp_path_factory: pytest.TempPathFactory,
    test_id: str | None,
    body: Any,
    later: int,
    extra: dict[str, Any],
    layout: str,
) -> None:
    from hashreplay.core.format import RecordedRequest, RecordedResponse, new_recording
    from hashreplay.core.store import Store
    from hashreplay.engine.unconsumed import FileIndex, _canonical_summary

    answer = RecordedResponse(status=200, body=body)
    request = RecordedRequest(method="POST", url=URL, endpoint="/v1/x", body=body)
    recording = new_recording(test_id=test_id, request=request, responses=[answer] * (1 + later))
    data = {**recording.model_dump(mode="json"), **extra}
    if layout == "canonical":
        content = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    elif layout == "compact":
        content = orjson.dumps(data)
    else:
        content = orjson.dumps(dict(reversed(data.items())), option=orjson.OPT_INDENT_2)
    root = tmp_path_factory.mktemp("index")
    path = root / "recordings" / "0123.json"
    path.parent.mkdir()
    path.write_bytes(content)
    summary = FileIndex(Store(root, root / "recordings"))._summary(str(path), None)
    assert summary == (test_id, 1 + later)
    fast = _canonical_summary(content)
    if layout == "canonical" and not later and not extra:
        assert fast == (test_id, 1)  # the files hashreplay writes take the short way
    elif fast is not None:
        assert fast == summary


def test_a_body_with_a_lone_surrogate_escape_is_keyed_as_text_and_replays(tmp_path: Path) -> None:
    # json.dumps writes half an emoji as `"\ud83d"`: valid JSON that no UTF-8 text holds,
    # so the body is kept byte for byte as text, not parsed into a key that cannot be hashed
    half = "half an emoji \ud83d"
    path = recorded(tmp_path, half, {"answer": "one"})
    stored = json.loads(path.read_text())["request"]
    assert stored["body_encoding"] == "text"
    assert "\\ud83d" in stored["body"]
    decision = replay(tmp_path, half)
    assert isinstance(decision, Replay)
    assert json.loads(b"".join(decision.plan().chunks)) == {"answer": "one"}
