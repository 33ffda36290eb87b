"""Stable ids across turns and shared model lists (docs/design.md §3), with the real openai SDK."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx2
import openai

from hashreplay import Mode, test_context
from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream
from tests.guards import ConnectGuard

TEST_ID = "tests/test_agentic.py::test_conversation"
TOOL = {
    "type": "function",
    "name": "lookup",
    "description": "look something up",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
}


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="sk-none", max_retries=0)


def conversation(url: str) -> list[str]:
    """Three Responses-API turns chained by previous_response_id, then a tool-calling loop."""
    c = client(url)
    texts = []
    first = c.responses.create(model="gpt-fake-1", input="turn one")
    second = c.responses.create(model="gpt-fake-1", input="turn two", previous_response_id=first.id)
    third = c.responses.create(
        model="gpt-fake-1", input="turn three", previous_response_id=second.id
    )
    texts += [first.output_text, second.output_text, third.output_text]
    asked = c.responses.create(model="gpt-fake-1", input="weather in Oslo", tools=[TOOL])
    call = next(item for item in asked.output if item.type == "function_call")
    answered = c.responses.create(
        model="gpt-fake-1",
        previous_response_id=asked.id,
        tools=[TOOL],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
    )
    texts.append(answered.output_text)
    chat = c.chat.completions.create(
        model="gpt-fake-1",
        messages=[{"role": "user", "content": "Paris"}],
        tools=[{"type": "function", "function": {"name": "lookup", "parameters": {}}}],
    )
    tool_call = chat.choices[0].message.tool_calls[0]  # type: ignore[index]
    follow = c.chat.completions.create(
        model="gpt-fake-1",
        messages=[
            {"role": "user", "content": "Paris"},
            chat.choices[0].message.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"role": "tool", "tool_call_id": tool_call.id, "content": "rainy"},
        ],
        tools=[{"type": "function", "function": {"name": "lookup", "parameters": {}}}],
    )
    texts.append(follow.choices[0].message.content or "")
    return texts


def snapshot(recorder: Recorder) -> dict[str, bytes]:
    return {str(p.relative_to(recorder.root)): p.read_bytes() for p in recorder.files()}


def test_multi_turn_rerecords_are_byte_identical_and_replay_offline(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    recorder.start(Mode.RECORD)
    with test_context(TEST_ID):
        live = conversation(upstream.url)
    first = snapshot(recorder)
    recorder.start(Mode.RECORD)
    with test_context(TEST_ID):
        assert conversation(upstream.url) == live
    assert snapshot(recorder) == first
    assert len(first) == 7

    text = b"".join(first.values()).decode()
    leaked = re.findall(r'"(?:resp_|msg_|fc_|call_|chatcmpl-)[A-Za-z0-9]{6,}"', text)
    assert leaked == []
    # the follow-up requests quote the stable ids, and the files say which field got which id
    stored = [json.loads(v) for v in first.values()]
    previous = {s["request"]["body"].get("previous_response_id") for s in stored} - {None}
    assert previous and all(p.startswith("rec-") for p in previous)
    mappings = [s["id_normalization_mapping"] for s in stored]
    assert any("response.body.output[0].call_id" in m.values() for m in mappings)

    url = upstream.url
    upstream.stop()
    session = recorder.start(Mode.REPLAY)
    with ConnectGuard() as guard, test_context(TEST_ID):
        assert conversation(url) == live
    assert guard.attempts == []
    assert session.stats.missed == 0
    assert live[:3] == ["echo: turn one", "echo: turn two (turn 2)", "echo: turn three (turn 3)"]


def models_test(url: str, test_id: str) -> list[str]:
    with test_context(test_id):
        return [m.id for m in client(url).models.list()]


def test_model_lists_are_shared_and_merged(upstream: FakeUpstream, recorder: Recorder) -> None:
    recorder.start(Mode.RECORD_IF_MISSING)
    models_test(upstream.url, "tests/a/test_one.py::test_a")
    models_test(upstream.url, "tests/b/test_two.py::test_b")
    files = recorder.files()
    assert [f.relative_to(recorder.root).parent.as_posix() for f in files] == ["recordings"]
    assert files[0].name.startswith("models-")
    assert json.loads(files[0].read_text())["test_id"] is None
    assert len(upstream.calls) == 1  # the second test replayed the shared recording

    upstream.models = ["gpt-fake-1", "gpt-fake-3"]
    recorder.start(Mode.RECORD)
    models_test(upstream.url, "tests/a/test_one.py::test_a")
    assert len(recorder.files()) == 2  # a second model set, a second file
    recorder.start(Mode.RECORD)
    models_test(upstream.url, "tests/a/test_one.py::test_a")
    assert len(recorder.files()) == 2  # the same set again: nothing new

    url = upstream.url
    upstream.stop()
    recorder.start(Mode.REPLAY)
    with ConnectGuard():
        merged = models_test(url, "tests/c/test_new.py::test_c")
    assert merged == ["gpt-fake-1", "gpt-fake-2", "gpt-fake-3"]


def test_ollama_tags_and_configured_model_list_endpoints(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    recorder.start(Mode.RECORD, model_list_endpoints=["/plain"])
    with test_context("tests/test_x.py::t"), httpx2.Client() as c:
        tags: Any = c.get(f"{upstream.url}/api/tags").json()
        c.get(f"{upstream.url}/plain")
    names = sorted(f.name.split("-")[0] for f in recorder.files())
    assert names == ["models", "models"]
    assert tags["models"][0]["name"] == "llama-fake:1b"
