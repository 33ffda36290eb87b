"""The engine's one decision per request (docs/design.md §11), as a table: each
mode by a recording present, absent, exhausted or unreadable, by a model list, by a passthrough
URL; plus record-mode truncation, reads that see queued writes, staging that redacts whatever
it is handed, and a failed background write that fails the run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hashreplay import Mode, RecordingError
from hashreplay.core.config import load_config
from hashreplay.core.constants import RUN_HEADER, SECRET_PLACEHOLDER, TEST_ID_HEADER
from hashreplay.core.context import inside_call
from hashreplay.core.format import RecordedException, RecordedResponse
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.replay import Decision, Live, Miss, Passthrough, Record, Replay
from hashreplay.engine.session import Session

TEST = "tests/suite/test_chat.py::test_one"
CHAT_URL = "http://127.0.0.1:9/v1/chat/completions"
MODELS_URL = "http://127.0.0.1:9/v1/models"
SERVER = "http://127.0.0.1:8123"
JSON = [("content-type", "application/json")]


def chat(text: str = "hi") -> IncomingRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    return IncomingRequest("POST", CHAT_URL, JSON, json.dumps(body).encode())


def models() -> IncomingRequest:
    return IncomingRequest("GET", MODELS_URL, [], b"")


def answer(text: str) -> LiveExchange:
    body = {"id": f"chatcmpl-{text}", "choices": [{"message": {"content": text}}]}
    return LiveExchange(200, JSON, [json.dumps(body).encode()])


def model_list(*ids: str) -> LiveExchange:
    body = {"object": "list", "data": [{"id": i, "object": "model"} for i in ids]}
    return LiveExchange(200, JSON, [json.dumps(body).encode()])


def session(root: Path, mode: Mode, **overrides: Any) -> Session:
    s = Session(load_config(root, env={}, mode=mode.value, **overrides))
    s.begin_test(TEST)
    return s


def record(root: Path, request: IncomingRequest, *outcomes: LiveExchange) -> Path:
    s = session(root, Mode.RECORD)
    path = None
    for outcome in outcomes:
        decision = s.decide(request, test_id=TEST)
        assert isinstance(decision, Record)
        path = s.record(decision.prep, outcome)
    assert path is not None
    return path


def kind(decision: Decision) -> str:
    return type(decision).__name__


# --- the table --------------------------------------------------------------------------------

#: mode → what a request gets when its recording is present / absent / exhausted / unreadable
TABLE = {
    Mode.REPLAY: ("Replay", "Miss", "Miss", "Miss"),
    Mode.RECORD_IF_MISSING: ("Replay", "Record", "Record", "Miss"),
    Mode.RECORD: ("Record", "Record", "Record", "Record"),
    Mode.LIVE: ("Live", "Live", "Live", "Live"),
}
STATES = ("present", "absent", "exhausted", "unreadable")


def prepare_state(root: Path, state: str) -> None:
    if state in ("present", "exhausted"):
        record(root, chat(), answer("one"))
    elif state == "unreadable":
        path = record(root, chat(), answer("one"))
        path.write_text('{"format_version": 1, "truncated', encoding="utf-8")


@pytest.mark.parametrize("mode", list(TABLE), ids=lambda m: m.value)
@pytest.mark.parametrize("state", STATES)
def test_decision_table(tmp_path: Path, mode: Mode, state: str) -> None:
    prepare_state(tmp_path, state)
    s = session(tmp_path, mode)
    if state == "exhausted":
        first = s.decide(chat(), test_id=TEST)
        if mode.may_replay:
            assert isinstance(first, Replay)
    decision = s.decide(chat(), test_id=TEST)
    expected = TABLE[mode][STATES.index(state)]
    assert kind(decision) == expected
    if isinstance(decision, Miss):
        assert s.take_misses(TEST) == [decision.error]  # the test fails, whatever it catches
        assert decision.plan().status == 404
        if state == "unreadable":
            assert "unreadable recording" in decision.error.report
    if isinstance(decision, Replay):
        assert json.loads(b"".join(decision.plan().chunks))["choices"][0]["message"] == {
            "content": "one"
        }


@pytest.mark.parametrize("mode", list(TABLE), ids=lambda m: m.value)
def test_model_lists_are_shared_and_merged(tmp_path: Path, mode: Mode) -> None:
    recorder = session(tmp_path, Mode.RECORD)
    for ids in (("a", "b"), ("b", "c")):
        decision = recorder.decide(models(), test_id=TEST)
        assert isinstance(decision, Record) and decision.prep.shared
        recorder.record(decision.prep, model_list(*ids))
    s = session(tmp_path, mode)
    s.begin_test("tests/other/test_x.py::test_other")  # any test finds them
    decision = s.decide(models(), test_id="tests/other/test_x.py::test_other")
    if mode is Mode.LIVE:
        assert isinstance(decision, Live)
    elif mode is Mode.RECORD:
        assert isinstance(decision, Record)
    else:
        assert isinstance(decision, Replay)
        body = json.loads(b"".join(decision.plan().chunks))
        assert sorted(m["id"] for m in body["data"]) == ["a", "b", "c"]  # union by id


@pytest.mark.parametrize("mode", list(TABLE), ids=lambda m: m.value)
def test_passthrough_urls_are_never_intercepted(tmp_path: Path, mode: Mode) -> None:
    s = session(tmp_path, mode, passthrough=[SERVER])
    request = IncomingRequest("POST", f"{SERVER}/chat", JSON, b"{}")
    decision = s.decide(request, test_id=TEST)
    assert isinstance(decision, Passthrough)
    assert dict(decision.headers) == {TEST_ID_HEADER: TEST, RUN_HEADER: s.run_id_for(TEST)}
    assert s.stats.passed_through == 1
    # the prefix ends at a boundary: another port is not under it
    other = IncomingRequest("POST", "http://127.0.0.1:81234/chat", JSON, b"{}")
    assert not isinstance(s.decide(other, test_id=TEST), Passthrough)


@pytest.mark.parametrize(
    ("headers", "counted"),
    [
        ({"x-hashreplay-server-misses": "3"}, 3),  # the in-process middleware's count
        ({"x-hashreplay-server-misses": "2", "x-hashreplay-miss": "1"}, 2),  # not twice
        ({"x-hashreplay-miss": "1"}, 1),  # a miss answer itself (hashreplay serve's)
        ({"content-type": "application/json"}, 0),
    ],
)
def test_a_servers_misses_in_a_passthrough_answer_are_counted(
    tmp_path: Path, headers: dict[str, str], counted: int
) -> None:
    s = session(tmp_path, Mode.REPLAY, passthrough=[SERVER])
    decision = s.decide(IncomingRequest("POST", f"{SERVER}/chat", JSON, b"{}"), test_id=TEST)
    assert isinstance(decision, Passthrough)
    s.live_status(decision, 500, headers.get)
    assert s.stats.server_missed == counted
    assert s.stats.missed == 0  # the server's misses, not this process's
    live = session(tmp_path, Mode.LIVE).decide(chat(), test_id=TEST)
    s.live_status(live, 404, {"x-hashreplay-miss": "1"}.get)  # not a server under test
    assert s.stats.server_missed == counted


def test_passthrough_outside_a_test_adds_no_headers(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.REPLAY, passthrough=[SERVER])
    decision = s.decide(IncomingRequest("GET", f"{SERVER}/x", [], b""), test_id=None)
    assert decision == Passthrough(())


def test_http_under_a_call_layer_target_goes_live_uncounted(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.REPLAY)
    with inside_call():
        assert isinstance(s.decide(chat(), test_id=TEST), Live)
    assert s.stats.as_dict() == {
        "replayed": 0,
        "recorded": 0,
        "missed": 0,
        "passed_through": 0,
        "not_recorded": 0,
        "server_missed": 0,
    }


def test_a_test_marked_live_is_not_intercepted(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.REPLAY)
    s.set_test_mode(TEST, Mode.LIVE)
    assert isinstance(s.decide(chat(), test_id=TEST), Live)
    assert isinstance(s.decide(chat(), test_id="tests/t.py::other"), Miss)


# --- sequences ----------------------------------------------------------------------------------


def test_identical_requests_replay_in_recorded_order(tmp_path: Path) -> None:
    record(tmp_path, chat(), answer("one"), answer("two"))
    s = session(tmp_path, Mode.REPLAY)
    texts = []
    for _ in range(2):
        decision = s.decide(chat(), test_id=TEST)
        assert isinstance(decision, Replay)
        texts.append(decision.response.body["choices"][0]["message"]["content"])
    assert texts == ["one", "two"]
    assert isinstance(s.decide(chat(), test_id=TEST), Miss)


def test_record_mode_truncates_the_recorded_sequence(tmp_path: Path) -> None:
    path = record(tmp_path, chat(), answer("one"), answer("two"), answer("three"))
    assert len(json.loads(path.read_text())["later_responses"]) == 2
    record(tmp_path, chat(), answer("new"))  # a new record run makes one call
    data = json.loads(path.read_text())
    assert data["response"]["body"]["choices"][0]["message"]["content"] == "new"
    assert "later_responses" not in data


def test_record_if_missing_appends_past_the_recorded_sequence(tmp_path: Path) -> None:
    path = record(tmp_path, chat(), answer("one"))
    s = session(tmp_path, Mode.RECORD_IF_MISSING)
    assert isinstance(s.decide(chat(), test_id=TEST), Replay)
    decision = s.decide(chat(), test_id=TEST)
    assert isinstance(decision, Record)
    s.record(decision.prep, answer("two"))
    data = json.loads(path.read_text())
    contents = [
        r["body"]["choices"][0]["message"]["content"]
        for r in [data["response"], *data["later_responses"]]
    ]
    assert contents == ["one", "two"]


# --- the store view sees queued writes ---------------------------------------------------------


def test_reads_see_writes_still_queued(tmp_path: Path) -> None:
    s = Session(load_config(tmp_path, env={}, mode="record-if-missing"), write_behind=True)
    s.begin_test(TEST)
    decision = s.decide(chat(), test_id=TEST)
    assert isinstance(decision, Record)
    path = s.record(decision.prep, answer("one"))
    for ids in (("a",), ("b",)):
        d = s.decide(models(), test_id=TEST)
        if isinstance(d, Record):
            s.record(d.prep, model_list(*ids))
    # a fresh test of the same session reads the file through the view, written or not
    s.begin_test(TEST)
    again = s.decide(chat(), test_id=TEST)
    assert isinstance(again, Replay) and again.path == path
    listed = s.decide(models(), test_id=TEST)
    assert isinstance(listed, Replay)
    s.flush()
    assert path.exists()
    s.close()


def test_a_failed_background_write_fails_the_flush(tmp_path: Path) -> None:
    blocker = tmp_path / "tests" / "suite"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("a file where the recordings directory must go")
    s = Session(load_config(tmp_path, env={}, mode="record"), write_behind=True)
    s.begin_test(TEST)
    decision = s.decide(chat(), test_id=TEST)
    assert isinstance(decision, Record)
    path = s.record(decision.prep, answer("one"))
    with pytest.raises(RecordingError) as info:
        s.flush()
    assert info.value.path == path
    assert "cannot write the recording" in str(info.value)
    s.close()


# --- staging redacts whatever it is handed ------------------------------------------------------


def test_staging_redacts_a_call_layer_response_handed_in_clear(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.RECORD)
    decision = s.decide_call("pkg.mod:fetch", ["q"], {"api_key": "sk-abcdefghijklmnopqrstuvwx"})
    assert isinstance(decision, Record)
    assert decision.prep.request.body["kwargs"]["api_key"] == SECRET_PLACEHOLDER
    leaked = RecordedResponse(
        status=None,
        headers={"set-cookie": "session=1", "content-type": "application/json"},
        body={"token": "t0ps3cret", "note": "Bearer abcdefghijklmnopqrstu"},
        is_exception=True,
        exception=RecordedException(
            type="builtins.ValueError",
            message="bad key sk-abcdefghijklmnopqrstuvwx",
            args=[{"password": "hunter2"}],
        ),
    )
    path = s.record(decision.prep, leaked)
    text = path.read_text()
    for secret in ("t0ps3cret", "sk-abcdefghijklmnopqrstuvwx", "hunter2", "session=1"):
        assert secret not in text
    data = json.loads(text)["response"]
    assert "set-cookie" not in data["headers"]
    assert data["body"]["token"] == SECRET_PLACEHOLDER


def test_staging_redacts_a_live_exchange(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.RECORD)
    decision = s.decide(chat(), test_id=TEST)
    assert isinstance(decision, Record)
    exchange = LiveExchange(
        401,
        [*JSON, ("set-cookie", "a=b")],
        [b'{"error": {"message": "Incorrect API key: sk-abcdefghijklmnopqrstuvwx"}}'],
    )
    text = s.record(decision.prep, exchange).read_text()
    assert "sk-abcdefghijklmnopqrstuvwx" not in text
    assert "a=b" not in text


def test_a_file_of_a_project_rule_the_project_dropped_answers_nothing(tmp_path: Path) -> None:
    """The configuration decides how requests match (docs/design.md §14): with the project's
    `ignore` gone, the file it named no longer answers a request that differs in an ignored
    field, and the miss says the rule changed and to run `hashreplay rehash`."""
    narrower = session(tmp_path, Mode.RECORD, ignore=["body.messages[0].content"])
    decision = narrower.decide(chat("recorded"), test_id=TEST)
    assert isinstance(decision, Record)
    path = narrower.record(decision.prep, answer("recorded"))
    assert json.loads(path.read_text())["match"]["from"] == "project"
    still = session(tmp_path, Mode.REPLAY, ignore=["body.messages[0].content"])
    assert isinstance(still.decide(chat("changed"), test_id=TEST), Replay)  # rule in force

    dropped = session(tmp_path, Mode.REPLAY).decide(chat("changed"), test_id=TEST)
    assert isinstance(dropped, Miss)
    assert (
        "it matches this request under the project rule it was recorded with (ignore = "
        "['body.messages[0].content'], match_on = ['method', 'endpoint', 'body']), but the "
        "rule for this test is now the default: run `hashreplay rehash`"
    ) in dropped.error.report


def test_only_a_strict_miss_reads_the_rules_its_directory_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/design.md §14: a strict hit never pays for the second look-up; a miss reads each
    directory's rules once per session and finds a file recorded under a narrower rule that
    it keeps as its own (a marker's)."""
    from hashreplay.core import matching

    strict = record(tmp_path, chat("strict"), answer("strict"))
    narrower = session(tmp_path, Mode.RECORD)
    rule = matching.MatchRule(["body.messages[0].content"], source=matching.RuleSource.MARKER)
    narrower.set_test_options(TEST, match=rule)
    decision = narrower.decide(chat("loose"), test_id=TEST)
    assert isinstance(decision, Record)
    loose = narrower.record(decision.prep, answer("loose"))
    assert loose != strict and loose.parent == strict.parent

    reads: list[Path] = []
    real = matching.directory_rules

    def counted(directory: Path) -> list[matching.MatchRule]:
        reads.append(directory)
        return real(directory)

    monkeypatch.setattr(matching, "directory_rules", counted)
    replay = session(tmp_path, Mode.REPLAY)  # no `ignore` configured
    hit = replay.decide(chat("strict"), test_id=TEST)
    assert isinstance(hit, Replay) and hit.path == strict
    assert reads == []
    other = replay.decide(chat("any other text"), test_id=TEST)
    assert isinstance(other, Replay) and other.path == loose
    assert strict.parent in reads
    read_once = list(reads)
    replay.begin_test(TEST)
    again = replay.decide(chat("a third text"), test_id=TEST)
    assert isinstance(again, Replay) and again.path == loose
    assert reads == read_once  # once per directory and session
