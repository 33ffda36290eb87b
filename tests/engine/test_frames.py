"""WebSocket connections in the engine (docs/design.md §17), with no socket and no WebSocket
library: the frame log an adapter feeds while recording (after_sent, timing, the bound by
max_body_bytes, a handshake with no answer), the file it becomes (ids stable, secrets gone,
a zero diff when re-recorded), and the replayer (the causal gate, the comparison of a sent
frame under `ignore` paths, a frame past the end, the recorded close and cut, an early
client close, a wait past its bound)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from hashreplay import Mode
from hashreplay.core.config import load_config
from hashreplay.core.errors import BodyTooLarge, ReplayMiss
from hashreplay.core.format import EndState, FrameType
from hashreplay.core.matching import MatchRule
from hashreplay.core.modes import Pace
from hashreplay.engine.frame_log import FrameLog
from hashreplay.engine.frame_replay import Closed, Cut, Deliver, Failed, FrameReplay, Wait
from hashreplay.engine.replay import Miss, Record, Replay
from hashreplay.engine.session import Session

TEST = "tests/suite/test_voice.py::test_talk"
KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
URL = f"wss://api.example.test/v1/realtime?model=gpt-realtime&key={KEY}"
HEADERS = [("Authorization", f"Bearer {KEY}"), ("OpenAI-Beta", "realtime=v1")]

_serial = itertools.count(1)


def fresh(prefix: str) -> str:
    """A server-made id, fresh per call like the real API's."""
    return f"{prefix}_{next(_serial):04d}Zq{next(_serial) * 7919:08x}"


def session(root: Path, mode: Mode, **overrides: Any) -> Session:
    s = Session(load_config(root, env={}, mode=mode.value, **overrides))
    s.begin_test(TEST)
    return s


def talk(log: FrameLog, *, instructions: str = "be brief", close: bool = True) -> None:
    """One realtime conversation as a fake server answers it, ids fresh each time; the
    client reads each frame as it comes."""

    def receive(kind: FrameType, payload: str | bytes) -> None:
        log.received(kind, payload)
        log.delivered()

    log.answered(101, [("Upgrade", "websocket"), ("Sec-WebSocket-Accept", "x" * 28)])
    receive(FrameType.TEXT, json.dumps({"type": "session.created", "event_id": fresh("event")}))
    update = {"type": "session.update", "session": {"instructions": instructions}}
    log.sent(FrameType.TEXT, json.dumps(update))
    item = fresh("item")
    created = {
        "type": "conversation.item.created",
        "event_id": fresh("event"),
        "item": {"id": item},
    }
    receive(FrameType.TEXT, json.dumps(created))
    log.sent(FrameType.TEXT, json.dumps({"type": "response.create", "item_id": item}))
    delta = {"type": "response.text.delta", "delta": "Hi", "event_id": fresh("event")}
    receive(FrameType.TEXT, json.dumps(delta))
    receive(FrameType.BINARY, b"\x00\x01audio\xff")
    receive(FrameType.TEXT, "not json, plain text")
    if close:
        log.closed(1000, "done", sent=True)
        log.closed(1000, "done")


def record(root: Path, mode: Mode = Mode.RECORD, **kw: Any) -> Path:
    s = session(root, mode)
    decision = s.decide_connection(URL, HEADERS, test_id=TEST)
    assert isinstance(decision, Record), decision
    log = s.frame_log(decision, URL)
    talk(log, **kw)
    path = s.record_connection(log)
    assert path is not None
    assert s.end_test(TEST) == []
    return path


def replayer(root: Path, s: Session | None = None) -> tuple[Session, FrameReplay]:
    s = s or session(root, Mode.REPLAY)
    decision = s.decide_connection(URL, HEADERS, test_id=TEST)
    assert isinstance(decision, Replay), decision
    assert decision.response.status == 101
    return s, s.connection_replay(decision)


def drive(replay: FrameReplay, *, instructions: str = "be brief") -> list[Any]:
    """The client of `talk`: what it received, in order."""
    got: list[Any] = []
    first = replay.next_step()
    assert isinstance(first, Deliver)
    got.append(json.loads(first.payload))
    assert isinstance(replay.next_step(), Wait)  # gated on the client's first frame
    update = {"type": "session.update", "session": {"instructions": instructions}}
    assert replay.send(FrameType.TEXT, json.dumps(update)) is None
    created = replay.next_step()
    assert isinstance(created, Deliver)
    got.append(json.loads(created.payload))
    item = got[-1]["item"]["id"]
    assert (
        replay.send(FrameType.TEXT, json.dumps({"type": "response.create", "item_id": item}))
        is None
    )
    for _ in range(3):
        step = replay.next_step()
        assert isinstance(step, Deliver)
        got.append(step.payload)
    return got


def test_a_connection_is_recorded_as_one_file_with_ordered_frames(tmp_path: Path) -> None:
    path = record(tmp_path)
    data = json.loads(path.read_text())
    response = data["response"]
    assert data["request"]["method"] == "GET"
    assert response["status"] == 101
    assert "sec-websocket-accept" not in response["headers"]
    frames = response["frames"]
    assert [(f["direction"], f["type"]) for f in frames] == [
        ("received", "text"),
        ("sent", "text"),
        ("received", "text"),
        ("sent", "text"),
        ("received", "text"),
        ("received", "binary"),
        ("received", "text"),
        ("sent", "close"),
        ("received", "close"),
    ]
    assert [f.get("after_sent") for f in frames] == [0, None, 1, None, 2, 2, 2, None, 3]
    assert frames[5]["data_encoding"] == "base64"
    assert frames[6] == {
        "direction": "received",
        "type": "text",
        "data": "not json, plain text",
        "data_encoding": "text",
        "after_sent": 2,
    }
    assert frames[8]["code"] == 1000 and frames[8]["reason"] == "done"
    assert "at_us" not in frames[0]  # timing off
    # server-made ids are stable, and the client's echo of one stores the stable id
    item = frames[2]["data"]["item"]["id"]
    assert item.startswith("rec-")
    assert frames[3]["data"]["item_id"] == item
    assert frames[0]["data"]["event_id"].startswith("rec-")
    assert "ended" not in response  # closed with a close frame: complete


def test_the_handshakes_secrets_are_never_written(tmp_path: Path) -> None:
    path = record(tmp_path)
    text = path.read_text()
    assert KEY not in text
    assert KEY[:20] not in text


def test_rerecording_unchanged_behaviour_is_a_zero_diff(tmp_path: Path) -> None:
    path = record(tmp_path)
    first = path.read_bytes()
    assert record(tmp_path) == path
    assert path.read_bytes() == first


def test_timing_stamps_offsets_when_on(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.RECORD, record_timing=True)
    decision = s.decide_connection(URL, HEADERS, test_id=TEST)
    assert isinstance(decision, Record)
    log = s.frame_log(decision, URL)
    talk(log)
    path = s.record_connection(log)
    assert path is not None
    data = json.loads(path.read_text())
    assert all(isinstance(f["at_us"], int) for f in data["response"]["frames"])
    assert "timing" in data["response"]


def test_replay_gates_received_frames_on_the_clients_sent_count(tmp_path: Path) -> None:
    record(tmp_path)
    s, replay = replayer(tmp_path)
    got = drive(replay)
    assert got[0]["type"] == "session.created"
    assert got[1]["item"]["id"].startswith("rec-")
    assert got[3] == b"\x00\x01audio\xff"
    assert got[4] == "not json, plain text"
    end = replay.next_step()  # the recording's next event is the client's close
    assert isinstance(end, Wait) and "close" in end.why
    replay.close(1000, "done")
    closed = replay.next_step()
    assert isinstance(closed, Closed) and closed.code == 1000
    assert s.end_test(TEST) == []


def test_the_recorded_server_close_is_reproduced(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.RECORD)
    decision = s.decide_connection(URL, HEADERS, test_id=TEST)
    assert isinstance(decision, Record)
    log = s.frame_log(decision, URL)
    log.answered(101, [])
    log.received(FrameType.TEXT, '{"type": "error"}')
    log.closed(4001, "policy: bye")
    assert s.record_connection(log) is not None
    s.end_test(TEST)
    _, replay = replayer(tmp_path)
    assert isinstance(replay.next_step(), Deliver)
    closed = replay.next_step()
    assert isinstance(closed, Closed)
    assert (closed.code, closed.reason, closed.by_client) == (4001, "policy: bye", False)


def test_a_cut_connection_replays_as_cut_never_as_closed(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.RECORD)
    decision = s.decide_connection(URL, HEADERS, test_id=TEST)
    assert isinstance(decision, Record)
    log = s.frame_log(decision, URL)
    log.answered(101, [])
    log.received(FrameType.TEXT, '{"type": "response.text.delta", "delta": "Hel"}')
    log.cut(ConnectionResetError("reset by peer"))
    path = s.record_connection(log)
    assert path is not None
    assert json.loads(path.read_text())["response"]["ended"] == {
        "state": "error",
        "after_chunks": 1,
    }
    s.end_test(TEST)
    _, replay = replayer(tmp_path)
    assert isinstance(replay.next_step(), Deliver)
    cut = replay.next_step()
    assert isinstance(cut, Cut)
    assert "cut with no close frame" in cut.message


def test_a_changed_client_frame_is_a_miss_naming_file_frame_and_field(tmp_path: Path) -> None:
    path = record(tmp_path)
    s, replay = replayer(tmp_path)
    assert isinstance(replay.next_step(), Deliver)
    changed = {"type": "session.update", "session": {"instructions": "be verbose"}}
    miss = replay.send(FrameType.TEXT, json.dumps(changed))
    assert isinstance(miss, ReplayMiss)
    report = str(miss)
    assert path.name in report
    assert "frames[1] (sent text)" in report
    assert "frames[1].session.instructions: recorded 'be brief', incoming 'be verbose'" in report
    assert "INFERENCE_MODE=record pytest" in report
    assert isinstance(replay.next_step(), Failed)  # the connection is over
    assert [str(m) for m in s.end_test(TEST)] == [report]  # fails even if swallowed


def test_ignore_paths_leave_a_frames_field_out_of_the_comparison(tmp_path: Path) -> None:
    record(tmp_path)
    s = session(tmp_path, Mode.REPLAY)
    rule = MatchRule(["frames[1].session.instructions"], source=None)
    # the file was keyed under the default rule; the ignore path narrows only the comparison
    decision = s.decide_connection(URL, HEADERS, test_id=TEST)
    assert isinstance(decision, Replay)
    replay = s.connection_replay(decision._replace(prep=decision.prep._replace(rule=rule)))
    drive(replay, instructions="something else entirely")
    assert s.end_test(TEST) == []


def test_a_frame_past_the_recordings_end_is_a_miss(tmp_path: Path) -> None:
    record(tmp_path)
    s, replay = replayer(tmp_path)
    drive(replay)
    miss = replay.send(FrameType.TEXT, '{"type": "response.create"}')
    assert isinstance(miss, ReplayMiss)
    assert "frames[9]" in str(miss) and "past the recording's end" in str(miss)
    assert len(s.end_test(TEST)) == 1


def test_an_early_client_close_is_fine(tmp_path: Path) -> None:
    record(tmp_path)
    s, replay = replayer(tmp_path)
    assert isinstance(replay.next_step(), Deliver)
    replay.close(1000, "")
    step = replay.next_step()
    assert isinstance(step, Closed) and step.by_client
    assert replay.send(FrameType.TEXT, "{}") is None  # the library refuses it itself
    assert s.end_test(TEST) == []


def test_a_wait_past_its_bound_fails_naming_the_frame(tmp_path: Path) -> None:
    record(tmp_path)
    s, replay = replayer(tmp_path)
    assert isinstance(replay.next_step(), Deliver)
    step = replay.next_step()
    assert isinstance(step, Wait)
    failure = replay.waited_too_long(step, 10)
    assert "recorded frame 2 (received text)" in str(failure)
    assert "had sent 1 frame(s); the client has sent 0" in str(failure)
    assert isinstance(replay.next_step(), Failed)
    assert [str(f) for f in s.end_test(TEST)] == [str(failure)]


def test_two_connections_with_one_key_replay_in_the_order_they_were_made(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.RECORD)
    for word in ("first", "second"):
        decision = s.decide_connection(URL, HEADERS, test_id=TEST)
        assert isinstance(decision, Record)
        log = s.frame_log(decision, URL)
        log.answered(101, [])
        log.received(FrameType.TEXT, json.dumps({"type": "hello", "word": word}))
        log.closed(1000, "")
        assert s.record_connection(log) is not None
    s.end_test(TEST)
    s = session(tmp_path, Mode.REPLAY)
    words = []
    for _ in range(2):
        _, replay = replayer(tmp_path, s)
        step = replay.next_step()
        assert isinstance(step, Deliver)
        words.append(json.loads(step.payload)["word"])
    assert words == ["first", "second"]
    third = s.decide_connection(URL, HEADERS, test_id=TEST)
    assert isinstance(third, Miss)


def test_frames_are_bounded_by_max_body_bytes_as_they_arrive(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.RECORD, max_body_bytes=4096)
    decision = s.decide_connection(URL, HEADERS, test_id=TEST)
    assert isinstance(decision, Record)
    log = s.frame_log(decision, URL)
    log.answered(101, [])
    with pytest.raises(BodyTooLarge) as raised:
        for n in itertools.count():  # a server that streams forever
            log.received(FrameType.TEXT, json.dumps({"type": "delta", "n": n, "pad": "x" * 100}))
    assert log.frames == [] and log.size <= 4096 + 200
    assert "max_body_bytes (4096)" in str(raised.value)
    assert KEY not in str(raised.value)
    with pytest.raises(BodyTooLarge):  # and every frame after it
        log.received(FrameType.TEXT, "{}")
    log.cut()
    assert s.record_connection(log) is None
    assert not list(tmp_path.rglob("*.json"))
    assert any("max_body_bytes" in str(f) for f in s.end_test(TEST))


def test_a_handshake_that_got_no_answer_is_not_recorded(tmp_path: Path) -> None:
    path = record(tmp_path)
    before = path.read_bytes()
    s = session(tmp_path, Mode.RECORD)
    decision = s.decide_connection(URL, HEADERS, test_id=TEST)
    assert isinstance(decision, Record)
    log = s.frame_log(decision, URL)
    log.cut(ConnectionRefusedError("refused"))
    assert s.record_connection(log) is None
    assert path.read_bytes() == before
    assert s.stats.not_recorded == 1


def test_a_refused_handshake_is_recorded_as_its_status(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.RECORD)
    decision = s.decide_connection(URL, HEADERS, test_id=TEST)
    assert isinstance(decision, Record)
    log = s.frame_log(decision, URL)
    log.answered(401, [("content-type", "application/json")], b'{"error": "bad key"}')
    path = s.record_connection(log)
    assert path is not None
    response = json.loads(path.read_text())["response"]
    assert response["status"] == 401 and "frames" not in response
    assert response["body"] == {"error": "bad key"}


def test_a_connection_left_open_is_recorded_as_abandoned_at_the_tests_end(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.RECORD)
    decision = s.decide_connection(URL, HEADERS, test_id=TEST)
    assert isinstance(decision, Record)
    log = s.frame_log(decision, URL)
    talk(log, close=False)
    assert s.end_test(TEST) == []
    s.flush()
    (path,) = tmp_path.rglob("*.json")
    ended = json.loads(path.read_text())["response"]["ended"]
    assert ended == {"state": EndState.ABANDONED.value, "after_chunks": 7}
    _, replay = replayer(tmp_path)
    drive(replay)
    step = replay.next_step()
    assert isinstance(step, Wait) and step.final and "stopped reading" in step.why


def test_fixed_pace_delays_each_received_frame(tmp_path: Path) -> None:
    record(tmp_path)
    s = session(tmp_path, Mode.REPLAY)
    s.set_test_options(TEST, pace=Pace("fixed", 20))
    _, replay = replayer(tmp_path, s)
    step = replay.next_step()
    assert isinstance(step, Deliver) and step.delay == pytest.approx(0.02)


def test_a_frame_takes_its_place_where_the_client_read_it(tmp_path: Path) -> None:
    """A greeting that arrives while the client is still sending its first frames is
    placed (and counted) where the client reads it: the same client records the same file
    whatever the network's timing. A frame never read keeps its arrival count, at the end."""
    s = session(tmp_path, Mode.RECORD)
    decision = s.decide_connection(URL, HEADERS, test_id=TEST)
    assert isinstance(decision, Record)
    log = s.frame_log(decision, URL)
    log.answered(101, [])
    log.received(FrameType.TEXT, '{"type": "session.created"}')  # arrives first
    log.sent(FrameType.TEXT, '{"type": "session.update"}')
    log.sent(FrameType.TEXT, '{"type": "response.create"}')
    log.delivered()  # read only now
    log.received(FrameType.TEXT, '{"type": "never.read"}')
    log.sent(FrameType.TEXT, '{"type": "more"}')
    log.closed(1000, "", sent=True)
    path = s.record_connection(log)
    assert path is not None
    frames = json.loads(path.read_text())["response"]["frames"]
    assert [
        (f["direction"], f.get("data", {}).get("type"), f.get("after_sent")) for f in frames
    ] == [
        ("sent", "session.update", None),
        ("sent", "response.create", None),
        ("received", "session.created", 2),
        ("sent", "more", None),
        ("sent", None, None),
        ("received", "never.read", 2),
    ]


def test_a_large_frame_is_stored_once_as_a_blob(tmp_path: Path) -> None:
    audio = bytes(range(256)) * 40  # 10 KiB of audio
    s = session(tmp_path, Mode.RECORD, blob_threshold=1024)
    decision = s.decide_connection(URL, HEADERS, test_id=TEST)
    assert isinstance(decision, Record)
    log = s.frame_log(decision, URL)
    log.answered(101, [])
    log.received(FrameType.BINARY, audio)
    log.delivered()
    log.closed(1000, "")
    path = s.record_connection(log)
    assert path is not None
    stored = json.loads(path.read_text())["response"]["frames"][0]
    assert "__blob__" in stored["data"] and stored["data_encoding"] == "base64"
    assert len([p for p in tmp_path.rglob("blobs/*") if p.is_file()]) == 1
    s.end_test(TEST)
    _, replay = replayer(tmp_path)
    step = replay.next_step()
    assert isinstance(step, Deliver) and step.payload == audio


def test_recorded_pace_replays_the_gaps_between_frames(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.RECORD, record_timing=True)
    decision = s.decide_connection(URL, HEADERS, test_id=TEST)
    assert isinstance(decision, Record)
    log = s.frame_log(decision, URL)
    talk(log)
    assert s.record_connection(log) is not None
    s.end_test(TEST)
    recorded = json.loads(next(tmp_path.rglob("*.json")).read_text())["response"]["frames"]
    s = session(tmp_path, Mode.REPLAY)
    s.set_test_options(TEST, pace=Pace("recorded"))
    _, replay = replayer(tmp_path, s)
    first = replay.next_step()
    assert isinstance(first, Deliver)
    assert first.delay == pytest.approx(recorded[0]["at_us"] / 1e6)


def test_recorded_pace_without_timing_fails_the_connection(tmp_path: Path) -> None:
    record(tmp_path)  # timing off
    s = session(tmp_path, Mode.REPLAY)
    s.set_test_options(TEST, pace=Pace("recorded"))
    decision = s.decide_connection(URL, HEADERS, test_id=TEST)
    assert isinstance(decision, Miss)
    assert "timing" in str(decision.error)


def test_a_waiting_receive_is_woken_when_the_client_sends(tmp_path: Path) -> None:
    record(tmp_path)
    _, replay = replayer(tmp_path)
    woken: list[str] = []
    replay.on_change(lambda: woken.append("sent"))
    event = replay.changed
    assert isinstance(replay.next_step(), Deliver)
    assert isinstance(replay.next_step(), Wait)
    update = {"type": "session.update", "session": {"instructions": "be brief"}}
    assert replay.send(FrameType.TEXT, json.dumps(update)) is None
    assert event.is_set() and not replay.changed.is_set()  # a fresh event for the next wait
    assert woken == ["sent"]
    assert isinstance(replay.next_step(), Deliver)
