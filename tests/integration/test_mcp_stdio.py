"""MCP stdio sessions end to end (docs/usage.md, "MCP servers"): real pytest runs of a project
whose tests drive the real mcp SDK's `ClientSession` against stdio servers that answer with
fresh ids and times (tests/fakes/mcp_stdio.py). Recorded, then replayed with the server
unable to start (it never runs), re-recorded to a zero diff; misses, ids, sampling, progress,
a crash, a server that never answers, a malformed recording."""

from __future__ import annotations

import json

import mcp  # noqa: F401  (in pytester's baseline: one copy of the SDK for every run)
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.mcp_project import (
    outputs,
    project,
    recordings,
    starts,
    unable_to_start,
)

pytest_plugins = ["pytester"]

SEARCH = """
import os
from mcp_app import run, write_out

Q = os.environ.get("SEARCH_Q", "cats")


def test_search():
    async def body(client):
        found = await client.call_tool("search", {"q": Q})
        total = await client.call_tool("add", {"a": 2, "b": 3})
        return found.structured_content, found.content[0].text, total.structured_content

    found, text, total = run("tools", body)
    assert found["q"] == Q and found["hits"] == [Q + " result 1", Q + " result 2"]
    assert found["id"] in text
    assert total == {"result": 5}
    write_out("search", {"found": found, "total": total})
"""


def test_record_replay_without_the_server_and_rerecord_to_a_zero_diff(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = project(pytester, monkeypatch, test_search=SEARCH)
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    assert len(starts(root)) == 1
    recorded = recordings(root)
    assert len(recorded) == 1
    [data] = recorded.values()
    stored = json.loads(data)
    assert stored["request"]["method"] == "MCP"
    assert stored["request"]["body"]["args"] == ["fake_mcp.py", "tools"]
    live = outputs(root)["search"]

    unable_to_start(monkeypatch, root)
    run = pytester.runpytest()  # replay, the default
    run.assert_outcomes(passed=1)
    assert starts(root) == []  # no server ran: its executable does not even exist
    replayed = outputs(root)["search"]
    assert replayed["found"]["hits"] == live["found"]["hits"]
    assert replayed["found"]["id"].startswith("rec-")  # the stable id the file holds
    assert replayed["total"] == live["total"]

    monkeypatch.delenv("MCP_PYTHON")
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    assert len(starts(root)) == 1  # it ran again, with fresh ids and times
    assert recordings(root) == recorded  # byte for byte


def test_a_changed_argument_is_a_named_miss(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = project(pytester, monkeypatch, test_search=SEARCH)
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    starts(root)
    [name] = recordings(root)
    unable_to_start(monkeypatch, root)
    monkeypatch.setenv("SEARCH_Q", "birds")
    run = pytester.runpytest()
    run.assert_outcomes(failed=1)
    text = run.stdout.str()
    assert "params.arguments.q: recorded 'cats', incoming 'birds'" in text
    assert "request tools/call" in text
    assert "fake_mcp.py tools" in text
    assert name in text
    assert "to record the session again: INFERENCE_MODE=record pytest test_search.py" in text
    assert starts(root) == []


RAW_IDS = """
import os
import anyio
from mcp.client.stdio import stdio_client
from mcp.shared.message import SessionMessage
from mcp_types import jsonrpc_message_adapter
from mcp_app import server, write_out

BASE = int(os.environ.get("ID_BASE", "1"))


def message(data):
    return SessionMessage(jsonrpc_message_adapter.validate_python(data))


def test_ids_are_the_live_ones():
    async def go():
        async with stdio_client(server("tools")) as (read, write):
            init = {"protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "raw", "version": str(BASE)}}
            await write.send(message({"jsonrpc": "2.0", "id": f"init-{BASE}",
                                      "method": "initialize", "params": init}))
            first = await read.receive()
            await write.send(message({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            await write.send(message({"jsonrpc": "2.0", "id": BASE + 1, "method": "tools/call",
                                      "params": {"name": "add", "arguments": {"a": 1, "b": 2}}}))
            second = await read.receive()
            return [m.message.model_dump(by_alias=True, exclude_unset=True) for m in (first, second)]

    first, second = anyio.run(go)
    assert first["id"] == f"init-{BASE}"
    assert second["id"] == BASE + 1
    assert second["result"]["structuredContent"] == {"result": 3}
    write_out("ids", [first["id"], second["id"]])
"""


def test_json_rpc_ids_that_differ_between_record_and_replay(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = project(pytester, monkeypatch, test_raw=RAW_IDS)
    monkeypatch.setenv("ID_BASE", "100")
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    assert outputs(root)["ids"] == ["init-100", 101]
    starts(root)
    unable_to_start(monkeypatch, root)
    monkeypatch.setenv("ID_BASE", "7000")  # and another clientInfo, which is not compared
    pytester.runpytest().assert_outcomes(passed=1)
    assert outputs(root)["ids"] == ["init-7000", 7001]
    assert starts(root) == []


SAMPLING_AND_PROGRESS = """
from mcp_app import ELICITED, SAMPLED, run, write_out


def test_sampling():
    async def body(client):
        return await client.call_tool("summarise", {"text": "a long story"})

    result = run("sampling", body)
    assert SAMPLED == ["sum: a long story"]  # the client's callback answered the server
    assert result.content[0].text.endswith(": model says sum: a long story")
    write_out("sampling", result.content[0].text)


def test_elicitation():
    async def body(client):
        return await client.call_tool("confirm", {"action": "delete the draft"})

    result = run("sampling", body)
    assert ELICITED == ["may I delete the draft?"]  # the client's callback answered the user
    assert result.content[0].text.startswith("delete the draft: accept ok=True ref=")


def test_progress():
    seen = []
    logged = []

    async def on_progress(progress, total, message):
        seen.append([progress, total, message])

    async def on_log(params):
        logged.append(params.data)

    async def body(client):
        return await client.call_tool("slow", {"n": 3}, progress_callback=on_progress)

    result = run("progress", body, logging_callback=on_log)
    assert result.content[0].text == "done after 3 steps"
    assert seen == [[1, 3, "step 1 of 3"], [2, 3, "step 2 of 3"], [3, 3, "step 3 of 3"]]
    assert logged == ["working on step 1", "working on step 2", "working on step 3"]
    write_out("progress", seen)
"""


def test_sampling_and_progress_replay_at_their_places(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = project(pytester, monkeypatch, test_flows=SAMPLING_AND_PROGRESS)
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=3)
    assert len(starts(root)) == 3
    recorded = recordings(root)
    unable_to_start(monkeypatch, root)
    pytester.runpytest().assert_outcomes(passed=3)
    assert starts(root) == []
    sampling = outputs(root)["sampling"]
    assert sampling.startswith("summary[rec-") and sampling.endswith("model says sum: a long story")
    monkeypatch.delenv("MCP_PYTHON")
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=3)
    assert recordings(root) == recorded


CRASH_AND_SILENCE = """
import pytest
from mcp.shared.exceptions import MCPError
from mcp_app import run, write_out


def test_crash():
    async def body(client):
        found = await client.call_tool("search", {"q": "x"})
        with pytest.raises(MCPError, match="Connection closed"):
            await client.call_tool("crash", {})
        return found.structured_content["hits"]

    assert run("crash", body) == ["x result 1", "x result 2"]


def test_silent():
    async def body(client):
        with pytest.raises(MCPError, match="timed out"):
            await client.call_tool("hang", {}, read_timeout_seconds=1.0)
        return True

    assert run("silent", body)
"""


def test_a_crash_is_stored_as_cut_and_a_silent_server_times_out_in_both_modes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = project(pytester, monkeypatch, test_ends=CRASH_AND_SILENCE)
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=2)
    assert len(starts(root)) == 2
    files = {json.loads(data)["test_id"]: json.loads(data) for data in recordings(root).values()}
    crash = files["test_ends.py::test_crash"]["response"]
    assert crash["ended"]["state"] == "error"  # never stored as complete
    assert crash["ended"]["after_chunks"] == len(crash["frames"])
    silent = files["test_ends.py::test_silent"]["response"]
    assert "ended" not in silent  # the client closed it
    methods = [f["data"].get("method") for f in silent["frames"] if f["direction"] == "sent"]
    assert "notifications/cancelled" in methods  # the client's own timeout, recorded
    unable_to_start(monkeypatch, root)
    pytester.runpytest().assert_outcomes(passed=2)
    assert starts(root) == []


def test_a_malformed_recording_fails_only_its_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = project(pytester, monkeypatch, test_search=SEARCH, test_flows=SAMPLING_AND_PROGRESS)
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    starts(root)
    for name, data in recordings(root).items():
        stored = json.loads(data)
        if stored["test_id"] == "test_search.py::test_search":
            stored["response"]["frames"][1]["direction"] = "sideways"
            (root / name).write_text(json.dumps(stored, indent=2))
            broken = name
    unable_to_start(monkeypatch, root)
    run = pytester.runpytest()
    run.assert_outcomes(passed=3, failed=1)
    text = run.stdout.str()
    assert broken in text
    assert "response.frames[1].direction" in text
    assert starts(root) == []


AGENT = """
import os
import anyio
import openai
from mcp_app import run, write_out

URL = os.environ["FAKE_URL"]


def test_agent():
    llm = openai.AsyncOpenAI(base_url=URL + "/v1", api_key=os.environ.get("OPENAI_API_KEY"),
                             max_retries=0)

    async def body(client):
        found = await client.call_tool("search", {"q": "weather in Paris"})
        # the tool's answer (a fresh id and time live) goes into the next LLM request
        reply = await llm.chat.completions.create(
            model="gpt-fake-1",
            messages=[{"role": "user", "content": "summarise " + found.content[0].text}],
        )
        again = await client.call_tool("search", {"q": reply.choices[0].message.content[:20]})
        return found.structured_content, reply.choices[0].message.content, again.structured_content

    found, said, again = run("tools", body)
    assert said.startswith("echo: summarise ") and found["id"] in said
    assert again["q"] == said[:20]
    write_out("agent", {"found": found, "said": said})
"""


def test_an_agent_calling_an_llm_and_an_mcp_tool_replays_fully_offline(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream
) -> None:
    root = project(pytester, monkeypatch, test_agent=AGENT)
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-agentkeyagentkeyagentkey0001")
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    assert len(starts(root)) == 1 and len(upstream.calls) == 1
    recorded = recordings(root)
    assert len(recorded) == 2  # the LLM call and the MCP session
    live = outputs(root)["agent"]
    upstream.stop()

    unable_to_start(monkeypatch, root)
    monkeypatch.delenv("OPENAI_API_KEY")  # keyless: the placeholder stands in
    run = pytester.runpytest()
    run.assert_outcomes(passed=1)
    run.stdout.fnmatch_lines(["*hashreplay: 2 replayed, 0 recorded, 0 missed (replay)*"])
    assert starts(root) == []
    replayed = outputs(root)["agent"]
    assert replayed["found"]["hits"] == live["found"]["hits"]
    assert replayed["found"]["id"].startswith("rec-")
    assert replayed["said"].startswith("echo: summarise ")

    monkeypatch.delenv("MCP_PYTHON")
    with FakeUpstream() as fresh:  # fresh ids and times from both servers: a zero diff
        monkeypatch.setenv("FAKE_URL", fresh.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-agentkeyagentkeyagentkey0001")
        pytester.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    assert recordings(root) == recorded


IGNORED = """
import os
import pytest
from mcp_app import run

Q = os.environ.get("SEARCH_Q", "cats")


@pytest.mark.hashreplay(ignore=["frames[*].params.arguments.q"])
def test_search_any_q():
    async def body(client):
        return (await client.call_tool("search", {"q": Q})).structured_content

    assert run("tools", body)["hits"] == ["cats result 1", "cats result 2"]
"""


def test_the_tests_ignore_paths_apply_to_each_message(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = project(pytester, monkeypatch, test_ignored=IGNORED)
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    starts(root)
    unable_to_start(monkeypatch, root)
    monkeypatch.setenv("SEARCH_Q", "birds")  # left out of the comparison: the recorded answer
    pytester.runpytest().assert_outcomes(passed=1)
    assert starts(root) == []
