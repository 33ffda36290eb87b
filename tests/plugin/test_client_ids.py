"""Ids a client makes up per run (`call_<hex>`, `msg_<uuid>`, a bare uuid) do not change a
request's key (docs/design.md §3, "Client-generated ids"), through whole pytest runs, and
`hashreplay rehash` migrates a store keyed by the rules before them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hashreplay.cli import main
from hashreplay.core.hashing import request_hash
from tests.fakes.upstream import FakeUpstream

pytest_plugins = ["pytester"]

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest -p no:asyncio"

[tool.hashreplay]
"""

APP = """
import os
import uuid

import httpx

URL = os.environ["FAKE_URL"]


def ask(text):
    call = "call_" + uuid.uuid4().hex
    body = {
        "model": "gpt-fake-1",
        "metadata": {"run": str(uuid.uuid4())},
        "messages": [
            {"role": "user", "content": text, "id": "msg_" + str(uuid.uuid4())},
            {"role": "assistant", "tool_calls": [{"id": call, "type": "function"}]},
            {"role": "tool", "tool_call_id": call, "content": "sunny"},
        ],
    }
    return httpx.post(URL + "/v1/chat/completions", json=body)


def test_fresh_ids():
    assert ask("weather?").status_code == 200
"""


@pytest.fixture
def project(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_app=APP)
    return pytester


def _recordings(root: Path) -> list[Path]:
    return sorted(root.glob("recordings/*.json"))


def test_fresh_client_ids_replay_the_recording(project: pytest.Pytester) -> None:
    project.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    (path,) = _recordings(project.path)
    body = json.loads(path.read_text())["request"]["body"]
    assert body["messages"][0]["id"] == "msg_<id:1>"
    assert body["messages"][1]["tool_calls"][0]["id"] == "call_<id:2>"
    assert body["messages"][2]["tool_call_id"] == "call_<id:2>"
    assert body["metadata"] == {"run": "<id:3>"}
    # new ids on every run, the same file
    project.runpytest("--inference-mode=replay").assert_outcomes(passed=1)
    project.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    assert _recordings(project.path) == [path]


def test_rehash_migrates_a_store_keyed_before_client_ids(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    (current,) = _recordings(project.path)
    # the file as key_version 1 wrote it: the ids as sent, named by their hash
    data = json.loads(current.read_text())
    request = data["request"]
    raw = json.dumps(request["body"])
    for n, made_up in enumerate(
        ["0123456789abcdef0123456789abcdef", "8d0ee7e4-7a8e-4c1a-9b7e-3f1b2c3d4e5f",
         "6f9619ff-8b86-d011-b42d-00c04fc964ff"], start=1,
    ):  # fmt: skip
        raw = raw.replace(f"<id:{n}>", made_up)
    request["body"] = json.loads(raw)
    data["key_version"] = 1
    old_name = request_hash("POST", request["endpoint"], request["body"], data["test_id"])
    old = current.with_name(f"{old_name}.json")
    current.unlink()
    old.write_text(json.dumps(data, indent=2))

    monkeypatch.chdir(project.path)
    assert main(["verify"]) == 1
    assert "key_version 1, the current hashing rules are key_version 2" in capsys.readouterr().out
    assert main(["rehash", "--dry-run"]) == 0
    assert old.exists()
    assert main(["rehash"]) == 0
    out = capsys.readouterr().out
    assert f"Renamed: recordings/{old.name} -> {current.name}" in out, out
    assert _recordings(project.path) == [current]
    assert json.loads(current.read_text())["request"]["body"]["metadata"] == {"run": "<id:3>"}
    assert main(["verify"]) == 0
    project.runpytest("--inference-mode=replay").assert_outcomes(passed=1)
    # a store that is current is left byte for byte
    before = current.read_bytes()
    assert main(["rehash"]) == 0
    assert current.read_bytes() == before
