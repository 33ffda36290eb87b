"""Issue 13, CLI side: `verify` decodes every body (item 7)."""

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
    """Issue 13 items 10 and 15."""
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
