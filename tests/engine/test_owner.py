"""One owner per test (docs/design.md §10): the interactions its parts had when they lived
apart. `repeat = "last"` records past the end of a sequence where recording is allowed and
repeats only in replay; a drift run keys a follow-up request with the ids its recording
had, as replay does; ages are parsed once, say their limit, and a day after today is stale;
the configuration's `pace` and `max_age` arrive parsed."""

from __future__ import annotations

import datetime
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from hashreplay import Mode
from hashreplay.core.age import LONGEST_AGE_DAYS, MaxAge, stale_age
from hashreplay.core.config import load_config
from hashreplay.core.errors import ConfigError
from hashreplay.core.modes import Pace
from hashreplay.engine.drift import DriftCheck
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.owner import TestRecordings
from hashreplay.engine.replay import Record, Replay
from hashreplay.engine.session import Session

TEST = "tests/suite/test_jobs.py::test_poll"
JOB_URL = "http://127.0.0.1:9/v1/jobs/poll"
CHAT_URL = "http://127.0.0.1:9/v1/chat/completions"
JSON = [("content-type", "application/json")]


def poll() -> IncomingRequest:
    return IncomingRequest("POST", JOB_URL, JSON, json.dumps({"job": "j1"}).encode())


def status(state: str) -> LiveExchange:
    return LiveExchange(200, JSON, [json.dumps({"status": state}).encode()])


def session(root: Path, mode: Mode, **overrides: Any) -> Session:
    s = Session(load_config(root, env={}, mode=mode.value, **overrides))
    s.begin_test(TEST)
    return s


def answered(s: Session, request: IncomingRequest) -> str:
    decision = s.decide(request, test_id=TEST)
    assert isinstance(decision, Replay), decision
    return str(decision.response.body["status"])


def record_polls(root: Path, *states: str) -> Path:
    s = session(root, Mode.RECORD)
    path = None
    for state in states:
        decision = s.decide(poll(), test_id=TEST)
        assert isinstance(decision, Record)
        path = s.record(decision.prep, status(state))
    assert path is not None
    return path


# --- repeat = "last" only where nothing may be recorded -----------------------------------


def test_repeat_last_in_record_if_missing_records_the_next_poll_and_replays_it_in_order(
    tmp_path: Path,
) -> None:
    path = record_polls(tmp_path, "pending")
    s = session(tmp_path, Mode.RECORD_IF_MISSING, repeat="last")
    assert answered(s, poll()) == "pending"
    decision = s.decide(poll(), test_id=TEST)  # past the end: recorded, not repeated
    assert isinstance(decision, Record)
    assert s.record(decision.prep, status("done")) == path
    file = json.loads(path.read_text())
    assert [file["response"]["body"]["status"], file["later_responses"][0]["body"]["status"]] == [
        "pending",
        "done",
    ]
    assert (s.stats.replayed, s.stats.recorded) == (1, 1)

    again = session(tmp_path, Mode.REPLAY, repeat="last")
    assert [answered(again, poll()) for _ in range(4)] == ["pending", "done", "done", "done"]


def test_repeat_last_in_replay_answers_with_the_last_response(tmp_path: Path) -> None:
    record_polls(tmp_path, "pending", "done")
    s = session(tmp_path, Mode.REPLAY, repeat="last")
    assert [answered(s, poll()) for _ in range(4)] == ["pending", "done", "done", "done"]
    assert s.take_misses(TEST) == []


def test_the_marker_repeat_last_records_past_the_end_too(tmp_path: Path) -> None:
    from hashreplay.core.matching import Repeat

    record_polls(tmp_path, "pending")
    s = session(tmp_path, Mode.RECORD_IF_MISSING)
    s.set_test_options(TEST, repeat=Repeat.LAST)
    assert answered(s, poll()) == "pending"
    assert isinstance(s.decide(poll(), test_id=TEST), Record)


# --- drift keys follow-ups as replay does -------------------------------------------------


def ask(text: str, previous: str | None = None) -> IncomingRequest:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": text}]}
    if previous is not None:
        body["previous_response_id"] = previous
    return IncomingRequest("POST", CHAT_URL, JSON, json.dumps(body).encode())


def reply(response_id: str, text: str) -> LiveExchange:
    body = {"id": response_id, "choices": [{"message": {"content": text}}]}
    return LiveExchange(200, JSON, [json.dumps(body).encode()])


def converse(s: Session, first_id: str, second_id: str) -> list[str]:
    """Two turns, the second quoting the first answer's id as the client got it; returns
    the keys of the two requests."""
    one = s.decide(ask("hi"), test_id=TEST)
    assert isinstance(one, Record)
    s.record(one.prep, reply(first_id, "hello"))
    two = s.decide(ask("more", previous=first_id), test_id=TEST)
    assert isinstance(two, Record)
    s.record(two.prep, reply(second_id, "more"))
    return [one.prep.hash, two.prep.hash]


def test_drift_keys_a_follow_up_that_quotes_a_live_id_as_it_was_recorded(
    tmp_path: Path,
) -> None:
    recorded = converse(session(tmp_path, Mode.RECORD), "resp_AAAA1111", "resp_BBBB2222")
    s = session(tmp_path, Mode.REPLAY)
    s.drift = DriftCheck(s)
    live = converse(s, "resp_ZZZZ9999", "resp_YYYY8888")  # new ids, same shape
    assert live == recorded
    s.drift.end_test(TEST)
    assert s.drift.entries == {}, s.drift.entries
    assert s.drift.checked == 2


def test_drift_still_reports_a_real_change_of_shape(tmp_path: Path) -> None:
    converse(session(tmp_path, Mode.RECORD), "resp_AAAA1111", "resp_BBBB2222")
    s = session(tmp_path, Mode.REPLAY)
    s.drift = DriftCheck(s)
    first = s.decide(ask("hi"), test_id=TEST)
    assert isinstance(first, Record)
    changed = {"id": "resp_ZZZZ9999", "choices": [{"message": {"content": 1}}]}
    s.record(first.prep, LiveExchange(200, JSON, [json.dumps(changed).encode()]))
    assert [e["kind"] for e in s.drift.entries[TEST]] == ["drift"]


# --- ages ---------------------------------------------------------------------------------


def test_a_long_max_age_in_days_is_an_age() -> None:
    assert MaxAge.parse("3000000d") == MaxAge(3_000_000)


def test_an_age_past_the_longest_says_the_limit_in_the_users_terms() -> None:
    with pytest.raises(ConfigError) as info:
        MaxAge.parse("999999w")
    message = str(info.value)
    assert message.startswith("max_age: '999999w' (6999993 days) is longer than")
    assert f"{LONGEST_AGE_DAYS}d" in message
    assert "leave max_age out" in message


def test_the_config_reports_a_long_max_age_as_given(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.hashreplay]\nmax_age = "999999w"\n')
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={})
    assert "'999999w' (6999993 days)" in str(info.value)
    assert "'6999993d'" not in str(info.value)


def test_a_day_after_today_is_stale() -> None:
    day = datetime.date(2026, 1, 10)
    assert stale_age("2026-01-12", MaxAge(180), day) == -2
    assert stale_age("2026-01-10", MaxAge(180), day) is None
    assert stale_age("2025-01-10", MaxAge(180), day) == 365
    assert stale_age("2026-01-12", None, day) is None


def test_a_replayed_response_from_the_future_is_reported_stale(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.RECORD)
    s.recorder.today = lambda: datetime.date(2030, 1, 1)
    decision = s.decide(poll(), test_id=TEST)
    assert isinstance(decision, Record)
    s.record(decision.prep, status("done"))
    r = session(tmp_path, Mode.REPLAY, max_age="180d")
    r.replayer.today = lambda: datetime.date(2026, 1, 1)
    assert answered(r, poll()) == "done"
    _, used = r.stale_used(TEST)
    assert [u.age for u in used] == [-1461]
    assert "1461 days after today" in used[0].describe(tmp_path)


# --- the configuration arrives parsed -----------------------------------------------------


def test_pace_and_max_age_are_parsed_once_in_the_config(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.hashreplay]\npace = "fixed:20"\nmax_age = "26w"\n'
    )
    config = load_config(tmp_path, env={})
    assert config.pace == Pace("fixed", 20.0)
    assert config.max_age == MaxAge(182)
    assert load_config(tmp_path, env={"HASHREPLAY_PACE": "recorded"}).pace == Pace("recorded")
    s = Session(config)
    assert s.owners.defaults.pace is config.pace
    assert s.owners.defaults.max_age is config.max_age


# --- the owner and its registry -----------------------------------------------------------


def test_each_test_has_its_own_owner_and_lock(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.REPLAY)
    other = "tests/suite/test_jobs.py::test_other"
    s.begin_test(other)
    mine, theirs = s.owners.get(TEST), s.owners.get(other)
    assert isinstance(mine, TestRecordings) and isinstance(theirs, TestRecordings)
    assert mine.lock is not theirs.lock
    # a test holding its own lock does not stop another test's decision
    done = threading.Event()
    with mine.lock:
        worker = threading.Thread(
            target=lambda: (s.decide(poll(), test_id=other), done.set()), daemon=True
        )
        worker.start()
        assert done.wait(10)
    worker.join(10)
    assert len(s.take_misses(other)) == 1
    assert s.end_test(TEST) == []
    assert s.owners.get(TEST) is None


def test_a_job_polled_by_the_id_it_was_given_replays(tmp_path: Path) -> None:
    create = IncomingRequest("POST", "http://127.0.0.1:9/v1/jobs", JSON, b'{"task": "t"}')
    r = session(tmp_path, Mode.RECORD)
    made = r.decide(create, test_id=TEST)
    assert isinstance(made, Record)
    r.record(made.prep, LiveExchange(200, JSON, [b'{"id": "job_abc123def456"}']))
    polled = r.decide(
        IncomingRequest("GET", "http://127.0.0.1:9/v1/jobs/job_abc123def456?full=1", [], b""),
        test_id=TEST,
    )
    assert isinstance(polled, Record)
    r.record(polled.prep, status("done"))

    s = session(tmp_path, Mode.REPLAY)
    given = s.decide(create, test_id=TEST)
    assert isinstance(given, Replay)
    job = given.response.body["id"]
    url = f"http://127.0.0.1:9/v1/jobs/{job}?full=1"
    assert answered(s, IncomingRequest("GET", url, [], b"")) == "done"
