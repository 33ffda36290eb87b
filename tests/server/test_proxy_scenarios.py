"""Scenarios through the proxy: the fault header (with its counters shared by an SDK's
retries), hangs, and conversations by header."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx2
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.server.conftest import Servers, chat, load, recordings

TEST_ID = "tests/test_app.py::test_proxy_scenario"


def headers(run: str, **extra: str) -> dict[str, str]:
    return {"X-HashReplay-Test-Id": TEST_ID, "X-HashReplay-Run": run, **extra}


def test_fault_header_hang_and_conversations(
    servers: Servers, root: Path, upstream: FakeUpstream
) -> None:
    proxy = servers.serve("--mode", "record-if-missing", "--upstream", upstream.url, root=root)
    url = f"{proxy.url}/v1/chat/completions"
    run = uuid.uuid4().hex
    fault = json.dumps({"status": 429, "times": 1, "headers": {"retry-after": "0"}})
    first = httpx2.post(url, json=chat("hi"), headers=headers(run, **{"X-HashReplay-Fault": fault}))
    assert first.status_code == 429
    assert "injected by hashreplay_fault" in first.json()["error"]["message"]
    retried = httpx2.post(
        url, json=chat("hi"), headers=headers(run, **{"X-HashReplay-Fault": fault})
    )
    assert retried.status_code == 200  # times=1: the retry goes on
    assert len(upstream.calls) == 1  # the faulted request never reached it

    hang = json.dumps({"hang": True})
    with pytest.raises(httpx2.ReadTimeout):
        httpx2.post(
            url,
            json=chat("hang"),
            headers=headers(run, **{"X-HashReplay-Fault": hang}),
            timeout=0.3,
        )

    bad = httpx2.post(
        url, json=chat("x"), headers=headers(run, **{"X-HashReplay-Fault": '{"error": "boom"}'})
    )
    assert bad.status_code == 400  # a client error, not a replay miss
    assert bad.json()["error"]["code"] == "bad_fault"
    assert "unknown fault kind error='boom'" in bad.json()["error"]["message"]

    for name in ("a", "b"):
        conv = headers(run, **{"X-HashReplay-Conversation": name})
        assert httpx2.post(url, json=chat("same"), headers=conv).status_code == 200
    conversations = sorted(str(load(p)["request"].get("conversation")) for p in recordings(root))
    assert conversations == ["None", "a", "b"]
