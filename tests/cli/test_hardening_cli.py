"""The CLI under hostile recordings: `verify` decodes every body, `verify` and `status` report
symlinks and temp files, `show` escapes control characters."""

from __future__ import annotations

import json

from tests.cli.conftest import CHAT, Cli, Project


def test_verify_decodes_every_body(project: Project, cli: Cli) -> None:
    path = project.one(CHAT)
    data = json.loads(path.read_text())
    data["response"].update(body_encoding="base64", body="!!not base64!!")
    path.write_text(json.dumps(data))
    result = cli("verify")
    assert result.code == 1
    assert f"tests/recordings/{path.name}: unreadable: response.body: invalid base64 data" in (
        result.out
    )


def test_verify_and_status_report_symlinks_and_temp_files(project: Project, cli: Cli) -> None:
    """Symlinks out of the project and temp files of interrupted writes are reported."""
    path = project.one(CHAT)
    outside = project.root.parent / "outside.json"
    outside.write_bytes(path.read_bytes())
    link = path.parent / "linked.json"
    link.symlink_to(outside)
    temp = path.parent / f".{path.name}.4242.abcd1234.tmp"
    temp.write_bytes(b"{")
    result = cli("verify")
    assert result.code == 1
    assert f"tests/recordings/linked.json: symlink to {outside} (outside the project root" in (
        result.out
    )
    assert f"tests/recordings/{temp.name}: temp file left by an interrupted write" in result.out
    assert result.lines[-1] == "Also: 2 symlinks or temp files in recordings directories"
    status = cli("status")
    assert f"stray: tests/recordings/{temp.name}: temp file" in status.out


HOSTILE = "hi\x1b]0;pwned\x07 \x1b[2J\x9b31m \u202etxt.exe"


def test_show_escapes_control_characters(project: Project, cli: Cli) -> None:
    """Recorded text never drives the terminal."""
    path = project.one(CHAT)
    data = json.loads(path.read_text())
    data["response"]["body"]["choices"][0]["message"]["content"] = HOSTILE
    data["request"]["body"]["messages"][0]["content"] = HOSTILE
    data["response"]["headers"]["content-type"] = "application/json\x1b[8m"
    path.write_text(json.dumps(data))
    for args in (("show", str(path)), ("show", "--raw", str(path))):
        result = cli(*args)
        assert result.code == 0, result.err
        assert not any(c in result.out for c in "\x1b\x07\x9b\u202e"), args
        assert "\\x1b]0;pwned\\x07" in result.out or "\\u001b]0;pwned" in result.out
