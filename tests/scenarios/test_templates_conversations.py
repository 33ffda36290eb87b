"""Request templates and conversations (docs/scenarios.md), in-process."""

from __future__ import annotations

import json
import random
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest

from hashreplay import Mode, conversation, test_context
from hashreplay.core.context import set_process_test_id
from hashreplay.core.errors import ReplayMiss
from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream

TEST_ID = "tests/test_app.py::test_scenario"


def ask(url: str, text: str, **extra: Any) -> dict[str, Any]:
    body = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": text}], **extra}
    answer = httpx2.post(f"{url}/v1/chat/completions", json=body)
    data: dict[str, Any] = answer.json()
    return data


def content(data: dict[str, Any]) -> str:
    return str(data["choices"][0]["message"]["content"])


def edit(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_a_fresh_uuid_each_run_comes_back_in_the_replayed_answer(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    recorder.start(Mode.RECORD, volatile_patterns=["uuid"])
    with test_context(TEST_ID):
        ask(upstream.url, "trace me", metadata={"trace_id": str(uuid.uuid4())})
    (path,) = recorder.files()

    def template(data: dict[str, Any]) -> None:
        message = data["response"]["body"]["choices"][0]["message"]
        message["content"] = "trace {{request:body.metadata.trace_id}} for {{{{you}}"
        data["response"]["body"]["echo"] = "{{request:body.messages[-1]}}"

    edit(path, template)
    upstream.stop()
    for _ in range(2):
        recorder.start(Mode.REPLAY, volatile_patterns=["uuid"])
        trace = str(uuid.uuid4())
        with test_context(TEST_ID):
            data = ask(upstream.url, "trace me", metadata={"trace_id": trace})
        assert content(data) == "trace " + trace + " for {{you}}"
        assert data["echo"] == {"role": "user", "content": "trace me"}


def test_live_text_with_markers_is_stored_escaped_and_replays_exactly(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    """What an upstream said is never a template (docs/scenarios.md, "Templates"): a model
    that prints a marker is stored with `{{` written `{{{{`, and replay gives the exact
    text back, whatever the request holds."""
    marker = "{{request:body.metadata.trace_id}} {{{ {{x}}"
    recorder.start(Mode.RECORD)
    with test_context(TEST_ID):
        ask(upstream.url, marker)  # the fake echoes it: redaction and normalisation keep it
    (path,) = recorder.files()
    stored = content(json.loads(path.read_text())["response"]["body"])
    assert stored == "echo: {{{{request:body.metadata.trace_id}} {{{{{ {{{{x}}"

    recorder.start(Mode.REPLAY)
    upstream.stop()
    with test_context(TEST_ID):
        assert content(ask(upstream.url, marker)) == f"echo: {marker}"


def test_a_template_whose_path_the_request_lacks_is_a_miss(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    recorder.start(Mode.RECORD)
    with test_context(TEST_ID):
        ask(upstream.url, "hi")
    (path,) = recorder.files()
    edit(path, lambda d: d["response"]["body"].update(trace="{{request:body.metadata.trace_id}}"))
    session = recorder.start(Mode.REPLAY)
    upstream.stop()
    with test_context(TEST_ID):
        answer = httpx2.post(
            f"{upstream.url}/v1/chat/completions",
            json={"model": "gpt-fake-1", "messages": [{"role": "user", "content": "hi"}]},
        )
    assert answer.status_code == 404
    (miss,) = session.take_misses(TEST_ID)
    assert isinstance(miss, ReplayMiss)
    assert "this request has nothing at 'body.metadata.trace_id'" in miss.report
    assert str(path) in miss.report


def test_a_template_with_bad_syntax_names_the_file_and_the_forms(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    recorder.start(Mode.RECORD)
    with test_context(TEST_ID):
        ask(upstream.url, "hi")
    (path,) = recorder.files()
    edit(path, lambda d: d["response"]["body"].update(bad="{{request:body[oops]}}"))
    session = recorder.start(Mode.REPLAY)
    with test_context(TEST_ID):
        assert (
            httpx2.post(
                f"{upstream.url}/v1/chat/completions",
                json={"model": "gpt-fake-1", "messages": [{"role": "user", "content": "hi"}]},
            ).status_code
            == 404
        )
    (miss,) = session.take_misses(TEST_ID)
    assert "does not parse" in miss.report
    assert "body.messages[-1].content" in miss.report


@contextmanager
def as_test() -> Iterator[None]:
    """As the plugin runs a test: threads without the context find it process-wide."""
    set_process_test_id(TEST_ID)
    try:
        with test_context(TEST_ID):
            yield
    finally:
        set_process_test_id(None)


def test_two_threads_in_two_conversations_replay_their_own_answers(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    def agent(url: str, name: str, out: list[str]) -> None:
        with conversation(name):
            for _ in range(3):
                out.append(content(ask(url, "same question")))

    def run(url: str) -> dict[str, list[str]]:
        answers: dict[str, list[str]] = {"a": [], "b": []}
        threads = [
            threading.Thread(target=agent, args=(url, name, answers[name]))
            for name in random.sample(["a", "b"], 2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return answers

    recorder.start(Mode.RECORD)
    with as_test():
        run(upstream.url)
    files = recorder.files()
    assert len(files) == 2  # one sequence per conversation
    for path in files:
        name = json.loads(path.read_text())["request"]["conversation"]

        def label(data: dict[str, Any], name: str = name) -> None:
            for i, response in enumerate([data["response"], *data["later_responses"]]):
                response["body"]["choices"][0]["message"]["content"] = f"{name}{i + 1}"

        edit(path, label)
    upstream.stop()
    for _ in range(20):
        session = recorder.start(Mode.REPLAY)
        with as_test():
            answers = run(upstream.url)
        assert answers == {"a": ["a1", "a2", "a3"], "b": ["b1", "b2", "b3"]}
        assert session.take_misses(TEST_ID) == []


def test_without_a_conversation_files_and_hashes_are_todays(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    recorder.start(Mode.RECORD)
    with test_context(TEST_ID):
        ask(upstream.url, "plain")
    (path,) = recorder.files()
    assert "conversation" not in json.loads(path.read_text())["request"]


def test_a_conversation_needs_a_name() -> None:
    with pytest.raises(ValueError, match="non-empty string"), conversation(""):
        pass
