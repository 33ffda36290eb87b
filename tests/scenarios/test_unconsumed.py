"""Unconsumed recordings (docs/scenarios.md), in the engine: fewer identical calls than
recorded, a recorded request never made, and the modes that are not checked."""

from __future__ import annotations

import httpx2

from hashreplay import Mode, test_context
from hashreplay.core.modes import Unconsumed
from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream

TEST_ID = "tests/test_app.py::test_calls"


def ask(url: str, text: str) -> None:
    body = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": text}]}
    with test_context(TEST_ID):
        assert httpx2.post(f"{url}/v1/chat/completions", json=body).status_code == 200


def test_fewer_calls_and_a_request_never_made_are_both_listed(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    recorder.start(Mode.RECORD)
    for text in ("twice", "twice", "never again"):
        ask(upstream.url, text)
    recorder.files()
    upstream.stop()

    session = recorder.start(Mode.REPLAY)
    session.begin_test(TEST_ID)
    ask(upstream.url, "twice")
    policy, unused, faults = session.leftovers(TEST_ID)
    assert policy is Unconsumed.WARN
    assert faults == []
    described = sorted(u.describe(recorder.root) for u in unused)
    assert len(described) == 2
    assert described[0].endswith(": 1 of 2 recorded response(s) used, 1 not")
    assert described[1].endswith(": never requested (1 recorded response(s))")


def test_every_call_made_leaves_nothing_and_record_mode_is_not_checked(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    recorder.start(Mode.RECORD)
    ask(upstream.url, "once")
    recorder.files()
    session = recorder.start(Mode.REPLAY)
    session.begin_test(TEST_ID)
    ask(upstream.url, "once")
    assert session.leftovers(TEST_ID)[1] == []

    session = recorder.start(Mode.RECORD, unconsumed="fail")
    session.begin_test(TEST_ID)
    assert session.leftovers(TEST_ID) == (Unconsumed.FAIL, [], [])
