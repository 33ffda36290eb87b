"""A fast slice of the secrets fuzz campaign (`scripts/fuzz_secrets.py`, docs/benchmarks.md,
"Secrets fuzz campaign"), and the leaks the full campaign found, pinned one by one."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from hashreplay.core.config import load_config
from hashreplay.engine.drift import DriftCheck, render
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.session import Session
from hashreplay.server.app import ProxyApp
from hashreplay.server.cli import ServeSettings

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fuzz_secrets.py"
JSON = [("content-type", "application/json")]
#: a key of a known shape, 34 characters after its prefix
HF_KEY = "hf_" + "Ab3dEf6hIj9lMn2pQr5tUv8xYz1bCd4fGh"


def load_campaign() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_secrets", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_secrets"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_slice_of_the_campaign_finds_no_leak_and_no_crash() -> None:
    campaign = load_campaign()
    result = campaign.campaign(300, seed=7, proxy_every=5, drift_every=10, batch=100, faults=True)
    assert result.cases == 300
    assert result.leaks == [] and result.crashes == [], result.leaks + result.crashes
    # every surface was reached, not skipped
    assert set(result.surfaces) == {
        "keying",
        "file",
        "file (decoded)",
        "textconv",
        "miss report",
        "proxy error body",
        "proxy log",
        "drift output",
    }


def test_a_shaped_key_split_between_stream_events_is_removed_to_its_last_character(
    tmp_path: Path,
) -> None:
    # the first event holds enough of the key to match its shape alone: redacting each
    # event first removed that part and left the last characters in the next one
    head, tail = HF_KEY[:-4], HF_KEY[-4:]
    events = [
        b'data: {"choices": [{"delta": {"content": "key: ' + head.encode() + b'"}}]}\n\n',
        b'data: {"choices": [{"delta": {"content": "' + tail.encode() + b' ok"}}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    session = Session(load_config(tmp_path, env={}, mode="record"))
    prep = session.prepare(
        IncomingRequest("POST", "http://127.0.0.1:9/v1/chat", JSON, b"{}"), test_id="t.py::t"
    )
    answer = LiveExchange(200, [("content-type", "text/event-stream")], events, chunked=True)
    path = session.record(prep, answer)
    assert path is not None
    written = json.loads(path.read_text())["response"]["body"]
    text = "".join(
        e["data"]["choices"][0]["delta"]["content"] for e in written if isinstance(e["data"], dict)
    )
    assert text == "key: [secret removed] ok"
    assert len(written) == len(events)  # the events keep their number


def test_drift_output_shows_a_test_id_without_its_secret(tmp_path: Path) -> None:
    test_id = f"tests/test_app.py::test_keys[{HF_KEY}]"
    incoming = IncomingRequest("POST", "http://127.0.0.1:9/v1/chat", JSON, b'{"q": 1}')
    recorder = Session(load_config(tmp_path, env={}, mode="record"))
    recorder.record(recorder.prepare(incoming, test_id=test_id), LiveExchange(200, JSON, [b"{}"]))
    session = Session(load_config(tmp_path, env={}, mode="record"))
    check = session.drift = DriftCheck(session)
    changed = LiveExchange(200, JSON, [b'{"new": "field"}'])
    session.record(session.prepare(incoming, test_id=test_id), changed)
    check.end_test(test_id)
    shown = "\n".join(render(check.result(), every=True)) + json.dumps(check.result())
    assert "tests/test_app.py::test_keys[[secret removed]]" in shown
    assert HF_KEY not in shown and HF_KEY[3:] not in shown


async def proxy_answer(app: ProxyApp, headers: list[tuple[str, str]]) -> dict[str, Any]:
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat",
        "raw_path": b"/v1/chat",
        "query_string": b"",
        "headers": [(k.encode(), v.encode()) for k, v in headers],
    }
    sent = await load_campaign().answer(app, scope, b'{"q": 1}')
    body: dict[str, Any] = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    return body


def test_the_proxy_miss_body_names_the_test_id_without_its_secret(tmp_path: Path) -> None:
    session = Session(load_config(tmp_path, env={}, mode="replay"))
    app = ProxyApp(ServeSettings(root=str(tmp_path)), session=session)
    test_id = f"tests/test_app.py::test_keys[{HF_KEY}]"
    body = asyncio.run(proxy_answer(app, [*JSON, ("x-hashreplay-test-id", test_id)]))
    error = body["error"]
    assert error["code"] == "hashreplay_miss"
    assert error["test_id"] == "tests/test_app.py::test_keys[[secret removed]]"
    assert HF_KEY not in json.dumps(body) and HF_KEY[3:] not in json.dumps(body)
    assert (
        "X-HashReplay-Test-Id: tests/test_app.py::test_keys[[secret removed]]" in (error["message"])
    )


def test_the_proxy_bad_fault_body_does_not_quote_the_credential(tmp_path: Path) -> None:
    session = Session(load_config(tmp_path, env={}, mode="replay"))
    app = ProxyApp(ServeSettings(root=str(tmp_path)), session=session)
    headers = [*JSON, ("x-api-key", HF_KEY), ("x-hashreplay-fault", f'{{"status": "{HF_KEY}"}}')]
    body = asyncio.run(proxy_answer(app, headers))
    assert body["error"]["code"] == "bad_fault"
    assert HF_KEY not in json.dumps(body)


def record_binary(root: Path, chunks: list[bytes], chunked: bool) -> Path:
    session = Session(load_config(root, env={}, mode="record"))
    prep = session.prepare(
        IncomingRequest("POST", "http://127.0.0.1:9/v1/files", JSON, b"{}"), test_id="t.py::t"
    )
    answer = LiveExchange(200, [("content-type", "application/octet-stream")], chunks, chunked)
    path = session.record(prep, answer)
    assert path is not None
    return path


def stored_bytes(path: Path) -> bytes:
    from hashreplay.core.store import parse_recording, read_file
    from hashreplay.core.streams import decode_chunk

    response = parse_recording(read_file(path), path).response  # what was written still reads
    body = response.body
    if isinstance(body, list):
        return b"".join(decode_chunk(item) for item in body)
    assert isinstance(body, str)
    return base64.b64decode(body)


def test_a_shaped_key_inside_a_binary_body_is_removed(tmp_path: Path) -> None:
    path = record_binary(tmp_path, [b"\x89\x00\xff key=" + HF_KEY.encode() + b"\xfe"], False)
    assert stored_bytes(path) == b"\x89\x00\xff key=[secret removed]\xfe"


def test_a_shaped_key_split_between_raw_chunks_is_removed_to_its_last_character(
    tmp_path: Path,
) -> None:
    # a binary chunk (stored as base64) holds the key's start, a text chunk its end
    head, tail = HF_KEY[:20].encode(), HF_KEY[20:].encode()
    path = record_binary(tmp_path, [b"\x89\x00\xff " + head, tail + b" end"], True)
    assert stored_bytes(path) == b"\x89\x00\xff [secret removed] end"
    assert HF_KEY[-8:] not in path.read_text()


def test_a_binary_chunk_that_holds_most_of_a_key_leaves_none_of_it_to_the_next(
    tmp_path: Path,
) -> None:
    # the first chunk holds enough of the key to match its shape alone (`hf_` and 30)
    head, tail = HF_KEY[:-4].encode(), HF_KEY[-4:].encode()
    path = record_binary(tmp_path, [b"\x89\x00\xff " + head, tail + b"\xfe end"], True)
    assert stored_bytes(path) == b"\x89\x00\xff [secret removed]\xfe end"
