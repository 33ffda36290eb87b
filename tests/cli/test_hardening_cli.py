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
