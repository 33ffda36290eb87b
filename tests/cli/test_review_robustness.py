"""`textconv` never fails a diff whatever a recording holds (odd body shapes, odd stream
events, blobs shown by reference), and `textconv`, `diff`, `list` and `verify` show every
terminal control code a recording holds as an escape (docs/design.md §13)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import CHAT, STREAM, Cli, Project

#: ESC sequences (OSC title, CSI clear screen), a bare CR that would overwrite the line,
#: BEL, a C1 CSI, a bidi override, NUL.
HOSTILE = "hi\x1b]0;pwned\x07 \x1b[2J\rgone \x9b31m \u202etxt.exe \x00"
RAW_CONTROLS = "\x1b\x07\x9b\u202e\x00\r"


def edit(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def assert_escaped(text: str) -> None:
    assert not any(c in text for c in RAW_CONTROLS), repr(text)
    assert "\\x1b]0;pwned\\x07" in text
    assert "\\x1b[2J\\x0dgone" in text


def hostile(data: dict[str, Any]) -> None:
    data["test_id"] = f"tests/test_app.py::test_chat[{HOSTILE}]"
    data["request"]["model"] = HOSTILE
    data["request"]["body"]["messages"][0]["content"] = HOSTILE
    data["response"]["body"]["choices"][0]["message"]["content"] = HOSTILE
    data["response"]["headers"]["content-type"] = f"application/json{HOSTILE}"


def test_textconv_diff_list_and_verify_escape_control_codes(project: Project, cli: Cli) -> None:
    path = project.one(CHAT)
    before = path.read_bytes()
    edit(path, hostile)
    converted = cli("textconv", str(path))
    assert converted.code == 0
    assert_escaped(converted.out)
    assert "user: hi\\x1b]0;pwned" in converted.out

    old = path.with_name("old.json")
    old.write_bytes(before)
    diffed = cli("diff", str(old), str(path))
    assert diffed.code == 1
    assert_escaped(diffed.out)

    listed = cli("list")
    assert_escaped(listed.out)

    verified = cli("verify")  # the test id changed, so the name no longer matches
    assert verified.code == 1
    assert_escaped(verified.out + verified.err)

    # a corrupt recording is shown raw after the error: escaped too
    path.write_text(path.read_text()[:-40] + '"\u009b\u202e')
    corrupt = cli("textconv", str(path))
    assert corrupt.code == 0
    assert corrupt.out.startswith("hashreplay: this recording cannot be read: ")
    assert not any(c in corrupt.out for c in RAW_CONTROLS)


ODD_BODIES: list[Any] = [
    [1, "two", None],
    42,
    None,
    "not JSON at all {",
    {"choices": [None, 1, {"message": None}, {"message": {"content": [1]}}]},
    {"messages": "x", "usage": "none", "data": [None]},
]


@pytest.mark.parametrize("body", ODD_BODIES, ids=lambda b: type(b).__name__)
@pytest.mark.parametrize("field", ["request", "response"])
def test_textconv_shows_any_body_shape(project: Project, cli: Cli, field: str, body: Any) -> None:
    path = project.one(CHAT)
    edit(path, lambda data: data[field].update(body=body))
    result = cli("textconv", str(path))
    assert result.code == 0, result.err
    assert result.out.startswith("POST /v1/chat/completions\n")
    assert "cannot be read" not in result.out  # a JSON body of any shape is a recording
    if isinstance(body, (int, str)) and body is not None:
        assert str(body) in result.out


ODD_EVENTS: list[Any] = [
    [{"choices": [None, 1]}],
    [{"choices": "x"}, {"delta": 3}],
    [{}, {"type": None, "usage": [1]}],
    [{"choices": [{"delta": {"content": [1], "tool_calls": [None, {"function": 3}]}}]}],
]


@pytest.mark.parametrize("events", ODD_EVENTS, ids=repr)
def test_textconv_shows_odd_stream_events(project: Project, cli: Cli, events: Any) -> None:
    path = project.one(STREAM)
    edit(path, lambda data: data["response"].update(body=events))
    result = cli("textconv", str(path))
    assert result.code == 0, result.err
    assert result.out.startswith("POST /v1/chat/completions\n")
    assert f"(stream: sse, {len(events)} events)" in result.out


@pytest.mark.parametrize("events", [[None], [1, "x"], [[1]], "x", 3], ids=repr)
def test_textconv_shows_an_unreplayable_stream_as_stored(
    project: Project, cli: Cli, events: Any
) -> None:
    path = project.one(STREAM)
    edit(path, lambda data: data["response"].update(body=events))
    result = cli("textconv", str(path))
    assert result.code == 0, result.err
    assert result.out.startswith("hashreplay: this recording cannot be read: response.body")
    assert '"stream_format": "sse"' in result.out


def test_textconv_shows_a_blob_by_its_reference(project: Project, cli: Cli) -> None:
    path = project.one(CHAT)
    digest = "0123456789abcdef" * 2
    ref = {"__blob__": digest, "size": 123456, "type": "image/png"}

    def with_blob(data: dict[str, Any]) -> None:
        data["request"]["body"]["messages"][0]["content"] = ref

    edit(path, with_blob)
    result = cli("textconv", str(path))  # no blob directory is read: git has only the file
    assert result.code == 0, result.err
    assert "user: <blob 0123456789ab…, 123456 bytes, image/png>" in result.out

    # a whole base64 body held as a blob: shown as stored, reference and all
    def binary(data: dict[str, Any]) -> None:
        data["response"].update(body=ref, body_encoding="base64")

    edit(path, binary)
    result = cli("textconv", str(path))
    assert result.code == 0, result.err
    assert f'"__blob__": "{digest}"' in result.out
