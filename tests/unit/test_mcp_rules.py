"""core/mcp.py: what of an MCP message is compared, the key of a stdio session, and what of a
server's message is normalised before writing."""

from __future__ import annotations

from typing import Any

from hashreplay.core.constants import FIXED_EPOCH
from hashreplay.core.format import Frame, FrameDirection, FrameType
from hashreplay.core.frames import normalised_frames
from hashreplay.core.mcp import (
    Kind,
    compared,
    describe_command,
    executable_name,
    kind_of,
    prepared_frames,
    stdio_request,
)
from hashreplay.core.normalise import RequestRules, new_id_registry
from hashreplay.core.redact import Redactor

UUID_A = "7e390757-2678-4814-a066-89021b2b9064"
UUID_B = "42e30cb0-4d13-44e4-b562-fffc7ef4f51a"
NOW = "2026-12-03T16:44:20.930075+00:00"


def test_kinds() -> None:
    assert kind_of({"jsonrpc": "2.0", "id": 1, "method": "ping"}) is Kind.REQUEST
    assert kind_of({"jsonrpc": "2.0", "method": "notifications/initialized"}) is Kind.NOTIFICATION
    assert kind_of({"jsonrpc": "2.0", "id": 1, "result": {}}) is Kind.RESULT
    assert kind_of({"jsonrpc": "2.0", "id": 1, "error": {"code": 1}}) is Kind.ERROR
    assert kind_of([1]) is None and kind_of({"jsonrpc": "2.0"}) is None


def test_compared_drops_meta_and_ids_and_initialize_client_info() -> None:
    call = {"id": 9, "method": "tools/call", "params": {"name": "t", "_meta": {"progressToken": 9}}}
    assert compared(call) == {"name": "t"}
    init = {
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "v", "capabilities": {"x": {}}, "clientInfo": {"name": "a"}},
    }
    assert compared(init) == {"protocolVersion": "v", "capabilities": {"x": {}}}
    assert compared({"id": 3, "result": {"a": 1, "_meta": {"t": 1}}}) == {"result": {"a": 1}}
    assert compared({"id": 3, "method": "tools/list"}) == {}


def test_the_key_is_the_executables_name_and_its_arguments() -> None:
    assert executable_name("/usr/local/bin/python3") == "python3"
    assert executable_name(r"C:\Python\python.exe") == "python.exe"
    assert executable_name("npx") == "npx"
    method, url, body = stdio_request("/opt/venv/bin/python3", ["server.py", "tools"])
    assert (method, url) == ("MCP", "mcp+stdio:python3")
    assert body == {"command": "python3", "args": ["server.py", "tools"]}
    assert describe_command(body) == "python3 server.py tools"


def written(frames: list[Frame], known: dict[str, str] | None = None) -> list[Any]:
    """The frames' data as the recorder writes an MCP session's (prepared, then normalised
    as a connection's)."""
    ids = new_id_registry("0123456789abcdef")
    where = "response.frames"
    prepared = prepared_frames(frames, ids, where=where, known_ids=known)
    out = normalised_frames(
        prepared, ids, where=where, known_ids=known, rules=RequestRules(), redactor=Redactor()
    )
    return [f.data for f in out]


def sent(data: Any) -> Frame:
    return Frame(direction=FrameDirection.SENT, type=FrameType.TEXT, data=data)


def received(data: Any, after: int) -> Frame:
    return Frame(
        direction=FrameDirection.RECEIVED, type=FrameType.TEXT, data=data, after_sent=after
    )


def test_server_ids_and_times_are_stable_and_the_envelope_kept() -> None:
    text = f'{{"id": "{UUID_A}", "created_at": "{NOW}"}}'
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "search"}}
    answer = {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {
            "content": [{"type": "text", "text": text}],
            "structuredContent": {"id": UUID_A, "created_at": NOW, "note": f"summary[{UUID_B}]"},
        },
    }
    later = {"jsonrpc": "2.0", "id": 3, "result": {"ref": UUID_A}}
    echo = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"ref": UUID_B}}
    _, out, quoted, again = written(
        [sent(call), received(answer, 1), sent(echo), received(later, 2)]
    )
    assert out["id"] == 2 and out["jsonrpc"] == "2.0"
    structured = out["result"]["structuredContent"]
    assert structured["id"].startswith("rec-0123456789ab")
    assert structured["created_at"] == FIXED_EPOCH
    assert UUID_A not in str(out) and UUID_B not in str(out) and NOW not in str(out)
    assert structured["id"] in out["result"]["content"][0]["text"]
    assert FIXED_EPOCH in out["result"]["content"][0]["text"]
    # the same id in a later message of the session gets the same stable id, and a client
    # that quotes a server-made id stores the stable form (what it sends in replay)
    assert again["result"]["ref"] == structured["id"]
    assert quoted["params"]["ref"].startswith("rec-") and UUID_B not in str(quoted)


def test_ids_the_client_sent_or_the_test_knew_are_kept_or_mapped() -> None:
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"ref": UUID_A}}
    answer = {"jsonrpc": "2.0", "id": 1, "result": {"echo": UUID_A, "seen": UUID_B}}
    _, out = written([sent(call), received(answer, 1)], known={UUID_B: "rec-known"})
    assert out["result"] == {"echo": UUID_A, "seen": "rec-known"}


def test_progress_tokens_are_not_secrets() -> None:
    call = {
        "jsonrpc": "2.0",
        "id": 4,
        "method": "tools/call",
        "params": {"_meta": {"progressToken": 4}},
    }
    [out] = written([sent(call)])
    assert out["params"]["_meta"]["progressToken"] == 4
