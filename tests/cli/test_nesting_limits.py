"""A recording nested deeper than MAX_NESTING is a named error in every command that reads
it (verify, rehash, normalize, list, show, textconv, diff) and in replay: the file and the
field path, never a RecursionError or a crash (docs/design.md §13)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import openai
import pytest

from hashreplay import Mode, test_context
from hashreplay.adapters import httpx as httpx_adapter
from hashreplay.core.bodies import MAX_NESTING
from hashreplay.core.errors import ReplayMiss
from tests.cli.conftest import CHAT, Cli, Project
from tests.conftest import Recorder


def deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


def write_deep(path: Path, field: str, levels: int) -> str:
    """Nest the chat recording's `field` `levels` deep; the field path errors name."""
    data = json.loads(path.read_text())
    if field == "request":
        data["request"]["body"]["messages"][0]["content"] = deep(levels)
        where = "request.body.messages[0].content"
    elif field == "response":
        data["response"]["body"]["choices"][0]["message"]["content"] = deep(levels)
        where = "response.body.choices[0].message"
    else:
        data["response"]["exception"] = {"type": "httpx.ReadError", "message": "m"}
        data["response"]["exception"]["args"] = [deep(levels)]
        data["response"]["is_exception"] = True
        where = "response.exception.args[0]"
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 3 * levels))
    try:
        path.write_text(json.dumps(data))
    finally:
        sys.setrecursionlimit(limit)
    return where


COMMANDS = [("verify",), ("rehash", "--dry-run"), ("normalize", "--dry-run"), ("list",)]


@pytest.mark.parametrize("field", ["request", "response", "exception"])
@pytest.mark.parametrize("levels", [MAX_NESTING + 1, 300, 900, 5000])
def test_every_command_names_the_file_and_field(
    project: Project, cli: Cli, field: str, levels: int
) -> None:
    path = project.one(CHAT)
    where = write_deep(path, field, levels)
    shown = f"tests/recordings/{path.name}"
    problem = f"nested more than {MAX_NESTING} levels deep, deeper than hashreplay stores or reads"
    for args in [*COMMANDS, ("show", str(path))]:
        result = cli(*args)
        assert result.code == 1, (args, result.out, result.err)
        text = result.out + result.err
        assert f"{shown}: unreadable: " in text, (args, text)
        assert problem in text, (args, text)
        if levels < 1000:  # past orjson's 1,024 levels the file does not even parse
            assert f"{where}" in text, (args, text)
    # review commands never fail a diff: the file is shown as it is
    assert cli("textconv", str(path)).code == 0
    assert cli("diff", str(path), str(path)).code == 0


def test_just_inside_the_limit_every_command_works(project: Project, cli: Cli) -> None:
    path = project.one(CHAT)
    data = json.loads(path.read_text())
    # the body itself is one level, `messages` two, a message three, so 125 more
    data["request"]["body"]["messages"][0]["content"] = deep(MAX_NESTING - 3)
    path.write_text(json.dumps(data))
    for args in [("rehash",), ("verify",), ("normalize", "--dry-run"), ("list",)]:
        result = cli(*args)
        assert result.code == 0, (args, result.out, result.err)


def test_replay_of_a_too_deep_recording_is_a_miss_naming_it(
    project: Project, recorder: Recorder
) -> None:
    path = project.one(CHAT)
    data = json.loads(path.read_text())
    body = data["request"]["body"]
    where = write_deep(path, "response", 300)
    recorder.root = project.root
    recorder.start(Mode.REPLAY)
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-x", max_retries=0)
    try:
        with test_context(CHAT), pytest.raises(openai.NotFoundError) as info:
            client.chat.completions.create(**body)
    finally:
        httpx_adapter.uninstall()
    message = str(info.value)
    assert f"tests/recordings/{path.name}" in message and where in message
    assert f"nested more than {MAX_NESTING} levels deep" in message
    assert recorder.session is not None
    misses = recorder.session.owners.owner(CHAT).misses
    assert misses and isinstance(misses[0], ReplayMiss)
