"""The pytest plugin intercepts requests, urllib3, boto3 and urllib.request in real pytest
sessions: recorded, then replayed with the upstream stopped and no socket opened."""

from __future__ import annotations

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.plugin.test_plugin import GUARD_CONFTEST, PYPROJECT, recordings
from tests.sdks import sdk

# Imported here, in pytester's baseline (see tests/conftest.py); the inner suite drives them.
sdk("boto3")
sdk("requests")
sdk("urllib3")

pytest_plugins = ["pytester"]

APP_TESTS = """
import json, os, urllib.request
import boto3, requests, urllib3

URL = os.environ["FAKE_URL"]
CHAT = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": "plugin"}]}

def test_requests_stream():
    with requests.post(URL + "/v1/chat/completions", json={**CHAT, "stream": True}, stream=True) as r:
        assert sum(1 for line in r.iter_lines() if line.startswith(b"data: {")) > 1

def test_urllib3_and_urllib():
    r = urllib3.request("POST", URL + "/v1/chat/completions", json=CHAT)
    assert r.json()["choices"][0]["message"]["content"] == "echo: plugin"
    with urllib.request.urlopen(URL + "/plain") as u:
        assert u.read() == b"hello from fake upstream"

def test_bedrock_stream():
    c = boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=URL,
                     aws_access_key_id="AKIAIOSFODNN7EXAMPLE", aws_secret_access_key="x" * 40)
    out = c.converse_stream(modelId="m", messages=[{"role": "user", "content": [{"text": "plugin"}]}])
    text = "".join(e["contentBlockDelta"]["delta"]["text"] for e in out["stream"] if "contentBlockDelta" in e)
    assert text == "echo: plugin"
"""


def test_record_then_replay_offline(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makeconftest(GUARD_CONFTEST)
    (pytester.path / "suite").mkdir()
    (pytester.path / "suite" / "test_app.py").write_text(APP_TESTS)

    recorded = pytester.runpytest("--inference-mode=record")
    recorded.assert_outcomes(passed=3)
    recorded.stdout.fnmatch_lines(["hashreplay: 0 replayed, 4 recorded, 0 missed (record)"])
    files = recordings(pytester.path)
    assert len(files) == 4

    upstream.stop()
    monkeypatch.setenv("GUARD", "1")
    replayed = pytester.runpytest()
    replayed.assert_outcomes(passed=3)
    replayed.stdout.fnmatch_lines(
        ["connect attempts: 0", "hashreplay: 4 replayed, 0 recorded, 0 missed (replay)"]
    )
