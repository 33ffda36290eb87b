"""`hashreplay serve` driven by curl, a client that knows nothing of Python or hashreplay."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.server.conftest import Servers, chat, load, recordings

pytestmark = pytest.mark.skipif(
    shutil.which("curl") is None, reason="curl is not installed (apt-get install curl)"
)

TEST_ID = "client/chat.test.sh::chat and stream"
SECRET = "sk-curl-0123456789abcdefghijklmnop"
#: What the normaliser replaces (docs/design.md §5): ids, timestamps, the fingerprint, and the
#: random `obfuscation` padding of stream chunks.
VOLATILE = ("id", "created", "system_fingerprint", "obfuscation")


def curl(url: str, body: dict[str, Any], *headers: str, expect_ok: bool = True) -> bytes:
    command = [
        "curl", "--silent", "--show-error", "--no-buffer", "--max-time", "20",
        "--fail-with-body", url,
        "-H", "content-type: application/json",
        "-H", f"authorization: Bearer {SECRET}",
        "-H", f"x-hashreplay-test-id: {TEST_ID}",
        "--data-binary", json.dumps(body),
    ]  # fmt: skip
    for header in headers:
        command += ["-H", header]
    done = subprocess.run(command, capture_output=True, timeout=30, check=False)
    if expect_ok:
        assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    else:
        assert done.returncode == 22, (done.returncode, done.stdout, done.stderr)  # HTTP >= 400
    return done.stdout


def sse_events(raw: bytes) -> list[Any]:
    events = []
    for block in raw.decode().split("\n\n"):
        data = [line[6:] for line in block.splitlines() if line.startswith("data: ")]
        if data:
            text = "\n".join(data)
            events.append(text if text == "[DONE]" else json.loads(text))
    return events


def without(value: Any, keys: tuple[str, ...] = VOLATILE) -> Any:
    if isinstance(value, dict):
        return {k: without(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [without(v, keys) for v in value]
    return value


def text_of(events: list[Any]) -> str:
    return "".join(
        e["choices"][0]["delta"].get("content") or ""
        for e in events
        if isinstance(e, dict) and e["choices"]
    )


def test_curl_records_then_replays_offline(
    servers: Servers, root: Path, upstream: FakeUpstream
) -> None:
    whole_body = chat("hello from curl")
    stream_body = chat("stream to curl please", stream=True)
    recorder = servers.serve("--mode", "record", "--upstream", upstream.url, root=root)
    live_whole = json.loads(curl(recorder.url + "/v1/chat/completions", whole_body))
    live_events = sse_events(curl(recorder.url + "/v1/chat/completions", stream_body))
    recorder.stop()

    files = recordings(root)
    assert len(files) == 2
    assert {p.parent for p in files} == {root / "client" / "recordings"}
    assert {load(p)["test_id"] for p in files} == {TEST_ID}
    assert all(SECRET not in p.read_text() for p in files)
    assert upstream.calls[0].headers["authorization"] == f"Bearer {SECRET}"  # forwarded
    upstream.stop()

    replayer = servers.serve("--mode", "replay", "--upstream", "http://127.0.0.1:9", root=root)
    url = replayer.url + "/v1/chat/completions"
    replays_whole, replays_stream = [], []
    for run in ("x-hashreplay-run: first", "x-hashreplay-run: second"):
        replays_whole.append(curl(url, whole_body, run))
        replays_stream.append(curl(url, stream_body, run))
    # Each request was recorded once in its test; asking again within the same run is a
    # call that was never recorded (identical requests replay in recorded order).
    miss = json.loads(curl(url, whole_body, "x-hashreplay-run: second", expect_ok=False))
    assert "this request was recorded once in this test" in miss["error"]["message"]

    # Replay is deterministic: byte for byte the same answer in every run.
    assert replays_whole[0] == replays_whole[1]
    assert replays_stream[0] == replays_stream[1]

    # Against what the client saw while recording: the same content, with the volatile
    # values the recorder saw live replaced by stable ones.
    replay_whole = json.loads(replays_whole[0])
    assert replay_whole["choices"][0]["message"]["content"] == "echo: hello from curl"
    assert without(replay_whole) == without(live_whole)
    assert replay_whole["id"].startswith("rec-") and live_whole["id"].startswith("chatcmpl-")
    assert replay_whole["created"] == 0 != live_whole["created"]

    replay_events = sse_events(replays_stream[0])
    assert text_of(replay_events) == text_of(live_events) == "echo: stream to curl please"
    assert len(replay_events) == len(live_events)
    assert without(replay_events) == without(live_events)
    assert {e["id"] for e in replay_events if isinstance(e, dict)} == {
        load(f)["response"]["body"][0]["data"]["id"]
        for f in files
        if load(f)["response"]["is_streaming"]
    }


def test_curl_expect_continue_and_a_bad_prefix(
    servers: Servers, root: Path, upstream: FakeUpstream
) -> None:
    proxy = servers.serve("--mode", "record", "--upstream", f"openai={upstream.url}", root=root)
    answer = json.loads(
        curl(proxy.url + "/openai/v1/chat/completions", chat("big " * 400), "Expect: 100-continue")
    )
    assert answer["choices"][0]["message"]["content"].startswith("echo: big big")
    assert "expect" not in upstream.calls[-1].headers  # the proxy answered the 100 itself
    error = json.loads(curl(proxy.url + "/v1/chat/completions", chat("x"), expect_ok=False))
    assert error["error"]["code"] == "unknown_upstream"
    assert "/openai/" in error["error"]["message"]
