"""The MCP session replayer (engine/mcp.py), sans-I/O: matching by method and params with live
ids, recorded order and gates, server requests and the client's answers, misses answered at
once, a cut session's end, stalls."""

from __future__ import annotations

from typing import Any

from hashreplay.core.errors import ReplayFailure
from hashreplay.engine.mcp import (
    MISS_ERROR_CODE,
    WAIT,
    Direction,
    End,
    Ending,
    McpReplay,
    Message,
)

S, R = Direction.SENT, Direction.RECEIVED


def req(id_: Any, method: str, params: Any = None, **meta: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None or meta:
        message["params"] = dict(params or {})
        if meta:
            message["params"]["_meta"] = meta
    return message


def note(method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def res(id_: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "result": result}


INIT = req(
    1,
    "initialize",
    {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "mcp", "version": "1"},
    },
)
SESSION = [
    Message(S, INIT),
    Message(R, res(1, {"protocolVersion": "2025-11-25", "capabilities": {}}), 1),
    Message(S, note("notifications/initialized")),
    Message(S, req(2, "tools/call", {"name": "search", "arguments": {"q": "cats"}})),
    Message(R, res(2, {"content": [{"type": "text", "text": "cats!"}]}), 3),
    Message(S, req(3, "tools/call", {"name": "search", "arguments": {"q": "dogs"}})),
    Message(R, res(3, {"content": [{"type": "text", "text": "dogs!"}]}), 4),
]


CLOSED = End(Ending.CLOSED)


class Fails:
    def __init__(self) -> None:
        self.noted: list[ReplayFailure] = []

    def __call__(self, failure: ReplayFailure) -> None:
        self.noted.append(failure)


def replay(
    messages: list[Message], end: End = CLOSED, ignore: tuple[str, ...] = ()
) -> tuple[McpReplay, Fails]:
    fails = Fails()
    r = McpReplay(
        messages,
        end,
        command={"command": "python3", "args": ["server.py", "tools"]},
        file="tests/recordings/abc.json",
        test_id="tests/test_a.py::test_x",
        ignore=ignore,
        fail=fails,
        record_command="INFERENCE_MODE=record pytest tests/test_a.py::test_x",
    )
    return r, fails


def drain(r: McpReplay) -> list[Any]:
    out = []
    while (m := r.next_message()) is not WAIT:
        out.append(m)
    return out


def test_answers_carry_the_live_ids_and_initialize_ignores_client_info() -> None:
    r, fails = replay(SESSION)
    assert r.next_message() is WAIT  # nothing before the client speaks
    live_init = req(
        "a",
        "initialize",
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "other", "version": "9"},
        },
    )
    r.sent(live_init)
    assert drain(r) == [res("a", {"protocolVersion": "2025-11-25", "capabilities": {}})]
    r.sent(note("notifications/initialized"))
    r.sent(
        req("b", "tools/call", {"name": "search", "arguments": {"q": "dogs"}}, progressToken="b")
    )
    r.sent(req("c", "tools/call", {"name": "search", "arguments": {"q": "cats"}}))
    # matched by params, whatever the order; each answer goes out with its live id
    assert drain(r) == [
        res("c", {"content": [{"type": "text", "text": "cats!"}]}),
        res("b", {"content": [{"type": "text", "text": "dogs!"}]}),
    ]
    assert fails.noted == []


def test_answer_waits_for_its_request_and_the_recorded_count() -> None:
    r, _ = replay(SESSION)
    r.sent(INIT)
    drain(r)
    r.sent(note("notifications/initialized"))
    assert r.next_message() is WAIT
    r.sent(req(2, "tools/call", {"name": "search", "arguments": {"q": "cats"}}))
    assert drain(r) == [SESSION[4].data]


def test_a_changed_argument_is_a_miss_answered_at_once() -> None:
    r, fails = replay(SESSION)
    r.sent(INIT)
    drain(r)
    r.sent(req(7, "tools/call", {"name": "search", "arguments": {"q": "birds"}}))
    [answer] = drain(r)
    assert answer["id"] == 7 and answer["error"]["code"] == MISS_ERROR_CODE
    [failure] = fails.noted
    assert failure.report == answer["error"]["message"]
    assert "params.arguments.q: recorded 'cats', incoming 'birds'" in failure.report
    assert "server: python3 server.py tools" in failure.report
    assert "tests/recordings/abc.json" in failure.report
    assert "request tools/call" in failure.report
    assert "to record the session again: INFERENCE_MODE=record pytest" in failure.report
    # the rest of the session still replays
    r.sent(req(8, "tools/call", {"name": "search", "arguments": {"q": "dogs"}}))
    assert drain(r) == [res(8, {"content": [{"type": "text", "text": "dogs!"}]})]


def test_unknown_method_and_exhausted_requests_are_misses() -> None:
    r, fails = replay(SESSION)
    r.sent(INIT)
    drain(r)
    r.sent(req(5, "resources/list"))
    r.sent(req(6, "initialize", INIT["params"]))
    drain(r)
    assert "the recording holds no resources/list request" in fails.noted[0].report
    assert "all 1 recorded initialize requests were answered already" in fails.noted[1].report


def test_ignore_paths_apply_to_params() -> None:
    messages = [
        Message(S, req(1, "tools/call", {"name": "t", "arguments": {"ts": 1, "q": "x"}})),
        Message(R, res(1, {"ok": True}), 1),
    ]
    r, fails = replay(messages, ignore=("frames[*].params.arguments.ts",))
    r.sent(req(1, "tools/call", {"name": "t", "arguments": {"ts": 99, "q": "x"}}))
    assert drain(r) == [res(1, {"ok": True})] and fails.noted == []


def test_meta_is_never_compared() -> None:
    messages = [
        Message(S, req(1, "tools/call", {"name": "t"}, progressToken=1)),
        Message(R, res(1, {"ok": True}), 1),
    ]
    r, fails = replay(messages)
    r.sent(req(1, "tools/call", {"name": "t"}, progressToken="other", traceparent="x"))
    assert drain(r) == [res(1, {"ok": True})] and fails.noted == []


def test_progress_goes_out_under_the_live_token_before_the_answer() -> None:
    progress = note("notifications/progress", {"progressToken": 4, "progress": 1, "total": 2})
    log = note("notifications/message", {"level": "info", "data": "step"})
    messages = [
        Message(S, req(4, "tools/call", {"name": "slow"}, progressToken=4)),
        Message(R, progress, 1),
        Message(R, log, 1),
        Message(R, res(4, {"done": True}), 1),
    ]
    r, _ = replay(messages)
    r.sent(req(40, "tools/call", {"name": "slow"}, progressToken="tok-40"))
    out = drain(r)
    assert out[0]["params"]["progressToken"] == "tok-40"
    assert out[1] == log
    assert out[2] == res(40, {"done": True})


def test_server_request_and_the_clients_answer() -> None:
    sampling = req(1, "sampling/createMessage", {"messages": [], "maxTokens": 8})
    answer = res(1, {"role": "assistant", "content": {"type": "text", "text": "hi"}})
    messages = [
        Message(S, req(2, "tools/call", {"name": "summarise"})),
        Message(R, sampling, 1),
        Message(S, answer),
        Message(R, res(2, {"text": "summary: hi"}), 2),
    ]
    r, fails = replay(messages)
    r.sent(req(2, "tools/call", {"name": "summarise"}))
    assert drain(r) == [sampling]  # the tool's answer waits for the client's answer
    r.sent(answer)
    assert drain(r) == [res(2, {"text": "summary: hi"})]
    assert fails.noted == []


def test_a_different_answer_to_a_server_request_is_a_miss() -> None:
    sampling = req(1, "sampling/createMessage", {"messages": [], "maxTokens": 8})
    messages = [
        Message(S, req(2, "tools/call", {"name": "summarise"})),
        Message(R, sampling, 1),
        Message(S, res(1, {"content": {"type": "text", "text": "hi"}})),
        Message(R, res(2, {"text": "summary: hi"}), 2),
    ]
    r, fails = replay(messages)
    r.sent(req(2, "tools/call", {"name": "summarise"}))
    drain(r)
    r.sent(res(1, {"content": {"type": "text", "text": "bye"}}))
    [failure] = fails.noted
    assert "the answer to the server's request 1" in failure.report
    assert "result.content.text: recorded 'hi', incoming 'bye'" in failure.report


def test_a_cut_session_ends_at_its_place() -> None:
    messages = [
        Message(S, req(1, "tools/call", {"name": "search"})),
        Message(R, res(1, {"ok": 1}), 1),
        Message(S, req(2, "tools/call", {"name": "crash"})),
    ]
    r, _ = replay(messages, End(Ending.CUT, 2))
    r.sent(req(1, "tools/call", {"name": "search"}))
    assert drain(r) == [res(1, {"ok": 1})]
    assert r.next_message() is WAIT  # not before the request that crashed it
    r.sent(req(2, "tools/call", {"name": "crash"}))
    assert r.next_message() == End(Ending.CUT, 2)
    assert r.next_message() is WAIT  # ended once


def test_a_closed_session_never_ends_from_the_server() -> None:
    r, _ = replay(SESSION[:2])
    r.sent(INIT)
    drain(r)
    assert r.next_message() is WAIT


def test_an_unanswered_request_stays_unanswered() -> None:
    messages = [Message(S, req(1, "tools/call", {"name": "hang"}))]
    r, fails = replay(messages)
    r.sent(req(1, "tools/call", {"name": "hang"}))
    assert r.next_message() is WAIT and r.stalled() is None and fails.noted == []


def test_a_stall_is_named_and_given_up() -> None:
    messages = [
        Message(S, req(1, "tools/call", {"name": "a"})),
        Message(S, req(2, "tools/call", {"name": "b"})),
        Message(R, res(1, {"a": 1}), 2),
        Message(R, res(2, {"b": 1}), 2),
    ]
    r, fails = replay(messages)
    r.sent(req(1, "tools/call", {"name": "a"}))  # the client waits before sending b
    assert r.next_message() is WAIT
    why = r.stalled()
    assert why is not None and "recorded answer to tools/call" in why
    r.give_up()
    [answer] = drain(r)
    assert answer["id"] == 1 and answer["error"]["code"] == MISS_ERROR_CODE
    assert len(fails.noted) == 1


def test_an_extra_client_notification_is_no_miss() -> None:
    r, fails = replay(SESSION)
    r.sent(INIT)
    drain(r)
    r.sent(note("notifications/cancelled", {"requestId": 1}))
    assert fails.noted == []
