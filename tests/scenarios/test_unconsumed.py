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


def test_a_test_whose_id_held_a_secret_is_checked_under_the_id_its_files_hold(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    """Files hold the test id redacted (a secret shape, or a credential the test's own
    requests sent); the check looks them up under that id, so they are not skipped."""
    key = "hr-test-credential-0123456789abcdef"
    test_id = f"tests/test_app.py::test_keys[sk-proj-{'a1' * 24}-{key}]"

    def ask_as(text: str) -> None:
        body = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": text}]}
        headers = {"authorization": f"Bearer {key}"}
        with test_context(test_id):
            answer = httpx2.post(f"{upstream.url}/v1/chat/completions", json=body, headers=headers)
            assert answer.status_code == 200

    recorder.start(Mode.RECORD)
    ask_as("kept")
    ask_as("never again")
    stored = {f.read_text().count(key) + f.read_text().count("sk-proj-") for f in recorder.files()}
    assert stored == {0}  # neither the shape nor the credential is written
    upstream.stop()

    session = recorder.start(Mode.REPLAY)
    session.begin_test(test_id)
    ask_as("kept")
    described = [u.describe(recorder.root) for u in session.leftovers(test_id)[1]]
    assert len(described) == 1
    assert described[0].endswith(": never requested (1 recorded response(s))")
