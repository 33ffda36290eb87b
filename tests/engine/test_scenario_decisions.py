"""Scenarios in the decision (docs/design.md §11, "Scenarios"): a fault is a `Replay` in every
intercepting mode and never goes live; an abandoned response is re-recorded in place by
record-if-missing and replays as broken in replay mode; plans carry the instructions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hashreplay import Mode
from hashreplay.engine.faults import FaultSpec
from hashreplay.engine.http import BreakKind, LiveExchange
from hashreplay.engine.replay import Live, Miss, Record, Replay
from hashreplay.engine.session import Session
from tests.engine.test_decision import JSON, TEST, answer, chat, record, session


def abandoned(text: str) -> LiveExchange:
    body = json.dumps({"id": "x", "choices": [{"message": {"content": text}}]}).encode()
    return LiveExchange(200, JSON, [body[:10]], abandoned=True)


def faulted(root: Path, mode: Mode, **fault: object) -> Session:
    s = session(root, mode)
    s.set_test_options(TEST, faults=[FaultSpec.parse(fault)])
    return s


@pytest.mark.parametrize("mode", [Mode.REPLAY, Mode.RECORD_IF_MISSING, Mode.RECORD])
def test_a_status_fault_is_a_replay_in_every_intercepting_mode(tmp_path: Path, mode: Mode) -> None:
    decision = faulted(tmp_path, mode, status=503).decide(chat(), test_id=TEST)
    assert isinstance(decision, Replay)
    plan = decision.plan()
    assert plan.status == 503
    assert b"injected by hashreplay_fault(status=503)" in plan.chunks[0]


def test_live_mode_never_faults(tmp_path: Path) -> None:
    assert isinstance(faulted(tmp_path, Mode.LIVE, status=503).decide(chat(), test_id=TEST), Live)


def test_error_hang_and_after_chunks_plans(tmp_path: Path) -> None:
    plan = faulted(tmp_path, Mode.REPLAY, error="connect_error").decide(chat(), TEST)
    assert isinstance(plan, Replay)
    assert (plan.plan().status, plan.plan().error_kind) == (None, BreakKind.CONNECT_ERROR)

    hang = faulted(tmp_path, Mode.REPLAY, hang=True).decide(chat(), TEST)
    assert isinstance(hang, Replay)
    assert hang.plan().hang is not None

    record(tmp_path, chat(), answer("one"))
    cut = faulted(tmp_path, Mode.REPLAY, error="disconnect", after_chunks=0).decide(chat(), TEST)
    assert isinstance(cut, Replay)
    assert cut.plan().chunks == []
    assert cut.plan().error_kind == BreakKind.DISCONNECT
    assert not any(k == "content-length" for k, _ in cut.plan().headers)


def test_breaking_a_recording_that_is_not_there_is_a_miss_in_replay(tmp_path: Path) -> None:
    s = faulted(tmp_path, Mode.REPLAY, error="read_timeout", after_chunks=1)
    decision = s.decide(chat(), TEST)
    assert isinstance(decision, Miss)
    assert "record it first in record-if-missing mode" in decision.error.report
    assert f"INFERENCE_MODE=record-if-missing pytest {TEST}" in decision.error.report


@pytest.mark.parametrize("mode", [Mode.RECORD_IF_MISSING, Mode.RECORD])
def test_breaking_a_recording_that_is_not_there_records_it_first(
    tmp_path: Path, mode: Mode
) -> None:
    s = faulted(tmp_path, mode, error="read_timeout", after_chunks=1)
    decision = s.decide(chat(), TEST)
    assert isinstance(decision, Record)
    assert s.recorded_first(TEST) == ["hashreplay_fault(error='read_timeout', after_chunks=1)"]


def test_an_abandoned_response_replays_broken_and_is_re_recorded_in_place(tmp_path: Path) -> None:
    path = record(tmp_path, chat(), abandoned("one"), answer("two"))
    stored = json.loads(path.read_text())
    assert stored["response"]["ended"] == {"state": "abandoned", "after_chunks": 1}

    replay = session(tmp_path, Mode.REPLAY).decide(chat(), TEST)
    assert isinstance(replay, Replay)
    plan = replay.plan()
    assert plan.error_kind == BreakKind.ABANDONED
    assert "re-record" in plan.exception_message
    assert not any(k == "content-length" for k, _ in plan.headers)

    s = session(tmp_path, Mode.RECORD_IF_MISSING)
    first = s.decide(chat(), TEST)
    assert isinstance(first, Record)
    s.record(first.prep, answer("one again"))
    assert isinstance(s.decide(chat(), TEST), Replay)  # the second response stays
    stored = json.loads(path.read_text())
    assert "ended" not in stored["response"]
    assert stored["response"]["body"]["choices"][0]["message"]["content"] == "one again"
    assert stored["later_responses"][0]["body"]["choices"][0]["message"]["content"] == "two"
