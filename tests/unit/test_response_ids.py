"""What the response normaliser takes for an id (docs/design.md §5, "What is an id"): the
value of an id key that looks generated and that the request did not name; a model object
keeps its id; other occurrences are mapped only when the id is long enough."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hashreplay.cli import main
from hashreplay.core.config import load_config
from hashreplay.core.normalise import new_id_registry
from hashreplay.core.normalise_response import is_generated_id, normalise_response_values
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.session import Session

TEST_ID = "tests/test_ids.py::test_it"
JSON = [("content-type", "application/json")]


def record(root: Path, method: str, url: str, body: Any, answer: LiveExchange) -> dict[str, Any]:
    session = Session(load_config(root, env={}, mode="record"))
    content = b"" if body is None else json.dumps(body).encode()
    prep = session.prepare(IncomingRequest(method, url, JSON, content), test_id=TEST_ID)
    path = session.record(prep, answer)
    assert path is not None
    data: dict[str, Any] = json.loads(path.read_text())
    data["path"] = str(path)
    return data


def sse(*events: dict[str, Any]) -> list[bytes]:
    return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


def chunk(delta: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-B9x7Qk2LmN",
        "object": "chat.completion.chunk",
        "created": 1733212345,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
    }


def test_a_tool_call_id_0_leaves_the_stream_deltas_0_as_they_are(tmp_path: Path) -> None:
    stream = sse(
        chunk({"role": "assistant", "content": "version "}),
        chunk({"content": "0"}),
        chunk({"content": ".fixed-version"}),
        chunk({"tool_calls": [{"index": 0, "id": "0", "type": "function"}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"v": "0"}'}}]}),
    )
    answer = LiveExchange(200, [("content-type", "text/event-stream")], stream, chunked=True)
    data = record(
        tmp_path, "POST", "http://127.0.0.1:9/v1/chat/completions", {"stream": True}, answer
    )
    events = [e["data"] for e in data["response"]["body"] if isinstance(e.get("data"), dict)]
    deltas = [e["choices"][0]["delta"] for e in events]
    assert "".join(d.get("content", "") for d in deltas) == "version 0.fixed-version"
    assert deltas[3]["tool_calls"][0]["id"] == "0"  # a plain number is no generated id
    assert deltas[4]["tool_calls"][0]["function"]["arguments"] == '{"v": "0"}'
    stable = events[0]["id"]
    assert stable.startswith("rec-") and {e["id"] for e in events} == {stable}
    assert data["id_normalization_mapping"] == {stable: "response.body[0].data.id"}
    assert "rec-" not in json.dumps(deltas)


def test_a_model_object_keeps_its_id_and_its_times(tmp_path: Path) -> None:
    model = {"id": "gpt-4o", "object": "model", "created": 1715367049, "owned_by": "system"}
    answer = LiveExchange(200, JSON, [json.dumps(model).encode()])
    data = record(tmp_path, "GET", "http://127.0.0.1:9/v1/models/gpt-4o", None, answer)
    assert data["response"]["body"] == model
    assert data["id_normalization_mapping"] == {}


def test_a_long_model_object_id_is_kept_too(tmp_path: Path) -> None:
    # at least 8 characters, and yet the model the URL names, not a per-call id
    model = {"id": "ft:gpt-4o-mini:acme::9Xyz12Ab", "object": "model", "created": 1}
    answer = LiveExchange(200, JSON, [json.dumps(model).encode()])
    url = "http://127.0.0.1:9/v1/models/ft%3Agpt-4o-mini%3Aacme%3A%3A9Xyz12Ab"
    assert record(tmp_path, "GET", url, None, answer)["response"]["body"] == model


def test_an_id_the_request_sent_is_kept_and_a_new_one_replaced(tmp_path: Path) -> None:
    sent = {"metadata": {"run": "run_2024_demo_7"}, "input": "hi"}
    body = {"id": "resp_67ccd2bed1ec8190", "run": {"id": "run_2024_demo_7"}, "output": []}
    answer = LiveExchange(200, JSON, [json.dumps(body).encode()])
    data = record(tmp_path, "POST", "http://127.0.0.1:9/v1/responses", sent, answer)
    out = data["response"]["body"]
    assert out["run"]["id"] == "run_2024_demo_7"  # named by the request: not a per-call id
    assert out["id"].startswith("rec-")


def test_a_retrieved_id_the_test_received_earlier_is_still_mapped() -> None:
    ids = new_id_registry("ab" * 16)
    known = {"resp_67ccd2bed1ec8190": "rec-abababababab"}
    [out] = normalise_response_values(
        [{"id": "resp_67ccd2bed1ec8190"}],
        ids,
        known_ids=known,
        named={"v1", "responses", "resp_67ccd2bed1ec8190"},
    )
    assert out == {"id": "rec-abababababab"}


def test_a_short_generated_id_is_replaced_at_id_keys_only() -> None:
    values = [
        {"id": "call_1", "type": "function"},
        {"tool_call_id": "call_1", "content": "call_1"},
    ]
    out = normalise_response_values(values, new_id_registry("cd" * 16))
    assert out[0]["id"] == out[1]["tool_call_id"] == "rec-cdcdcdcdcdcd"
    assert out[1]["content"] == "call_1"  # shorter than 8: not mapped outside an id key


def test_a_long_id_is_mapped_wherever_it_appears() -> None:
    values = [{"id": "msg_01XFDUDYJgAACzvnptvVoYEL"}, {"text": "see msg_01XFDUDYJgAACzvnptvVoYEL"}]
    out = normalise_response_values(values, new_id_registry("ef" * 16))
    assert out == [{"id": "rec-efefefefefef"}, {"text": "see rec-efefefefefef"}]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", False),
        ("1", False),
        ("42", False),
        ("gpt-4o", False),
        ("tool", False),
        ("default", False),
        ("call_1", True),
        ("msg_7a", True),
        ("o1-mini", False),
        ("a1b2c3", True),
        ("chatcmpl-B9x7Qk2LmN", True),
        ("msg_01XFDUDYJgAACzvnptvVoYEL", True),
        ("123e4567-e89b-12d3-a456-426614174000", True),
        ("0123456789abcdef", True),
        ("assistant", True),  # 8 characters or more: the rule's plain length bound
    ],
)
def test_what_is_a_generated_id(value: str, expected: bool) -> None:
    assert is_generated_id(value) is expected


def test_normalize_gives_an_old_model_object_its_id_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.hashreplay]\n")
    model = {"id": "gpt-4o", "object": "model", "created": 1715367049, "owned_by": "system"}
    answer = LiveExchange(200, JSON, [json.dumps(model).encode()])
    data = record(tmp_path, "GET", "http://127.0.0.1:9/v1/models/gpt-4o", None, answer)
    path = Path(data.pop("path"))
    # as the earlier rules wrote it: the model's name replaced by a stable id
    stable = f"rec-{path.stem[:12]}"
    data["response"]["body"]["id"] = stable
    data["id_normalization_mapping"] = {stable: "response.body.id"}
    path.write_text(json.dumps(data))
    request = json.dumps(json.loads(path.read_text())["request"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NO_COLOR", "1")
    assert main(["normalize", str(path)]) == 0
    assert "Summary: 1/1 files modified" in capsys.readouterr().out
    migrated = json.loads(path.read_text())
    assert migrated["response"]["body"]["id"] == "gpt-4o"
    assert migrated["id_normalization_mapping"] == {}
    assert json.dumps(migrated["request"]) == request
    assert main(["normalize", str(path)]) == 0
    assert "Summary: 0/1 files modified" in capsys.readouterr().out
