"""The miss report (docs/design.md §6) for each case, with the exact field paths printed."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from hashreplay import HashReplayWarning, Mode
from hashreplay.core.config import load_config
from hashreplay.core.matching import MatchRule, RuleSource
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.replay import Miss, Replay
from hashreplay.engine.session import Session

URL = "http://127.0.0.1:9/v1/chat/completions"
TEST = "tests/suite/test_chat.py::test_one"


def request(body: Any, url: str = URL, method: str = "POST") -> IncomingRequest:
    content = json.dumps(body).encode() if body is not None else b""
    return IncomingRequest(method, url, [("content-type", "application/json")], content)


def chat(*texts: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": t} for t in texts]}


def session(root: Path, mode: Mode, **overrides: object) -> Session:
    return Session(load_config(root, env={}, mode=mode.value, **overrides))


def record(root: Path, test_id: str | None, incoming: IncomingRequest) -> Path:
    s = session(root, Mode.RECORD)
    s.begin_test(test_id)
    prep = s.prepare(incoming, test_id=test_id)
    body = b'{"id": "chatcmpl-1", "choices": []}'
    return s.record(prep, LiveExchange(200, [("content-type", "application/json")], [body]))


def miss(root: Path, test_id: str | None, incoming: IncomingRequest) -> str:
    s = session(root, Mode.REPLAY)
    s.begin_test(test_id)
    decision = s.decide(incoming, test_id=test_id)
    assert isinstance(decision, Miss)
    return decision.error.report


def test_same_test_and_endpoint_shows_the_first_differing_field(tmp_path: Path) -> None:
    path = record(tmp_path, TEST, request(chat("system says", "echo:hi", "and more")))
    record(tmp_path, TEST, request(chat("totally", "different")))
    report = miss(tmp_path, TEST, request(chat("system says", "echo:bye", "and more")))
    lines = report.splitlines()
    # where the request went, port included (the file stores loopback without its port)
    assert (
        lines[0]
        == "hashreplay: no recording for POST http://127.0.0.1:9/v1/chat/completions (replay mode)"
    )
    assert lines[1] == f"  test:      {TEST}"
    assert lines[2].startswith("  hash:      ") and len(lines[2].split()[-1]) == 32
    assert lines[3].startswith("  looked in: tests/suite/recordings/")
    assert ", recordings/" in lines[3]
    assert lines[4] == (f"  nearest:   tests/suite/recordings/{path.name} (same test and endpoint)")
    assert lines[5] == (
        "  differs:   body.messages[1].content: recorded 'echo:hi', incoming 'echo:bye'"
    )
    assert lines[6] == f"  to record it: INFERENCE_MODE=record-if-missing pytest {TEST}"


def test_missing_and_added_fields_are_named(tmp_path: Path) -> None:
    record(tmp_path, TEST, request({**chat("x"), "temperature": 0.5}))
    report = miss(tmp_path, TEST, request(chat("x")))
    assert "  differs:   body.temperature: recorded 0.5, incoming has no such field" in report
    report = miss(tmp_path, TEST, request({**chat("x"), "temperature": 0.5, "top_p": 1}))
    assert "  differs:   body.top_p: not in the recording, incoming 1" in report


def test_type_change_is_reported_as_such(tmp_path: Path) -> None:
    record(tmp_path, TEST, request({**chat("x"), "n": 1}))
    report = miss(tmp_path, TEST, request({**chat("x"), "n": "1"}))
    assert "  differs:   body.n: recorded number 1, incoming string '1'" in report


def test_same_test_other_endpoint_when_no_same_endpoint(tmp_path: Path) -> None:
    path = record(
        tmp_path,
        TEST,
        request({"model": "m", "input": "x"}, URL.replace("chat/completions", "embeddings")),
    )
    report = miss(tmp_path, TEST, request(chat("x")))
    assert f"  nearest:   tests/suite/recordings/{path.name} (same test, other endpoint)" in report
    assert (
        "  differs:   endpoint: recorded '/v1/embeddings', incoming '/v1/chat/completions'"
        in report
    )


def test_same_endpoint_of_another_test_in_the_suite(tmp_path: Path) -> None:
    record(tmp_path, TEST, request(chat("mine")))
    other = "tests/suite/test_chat.py::test_two"
    path = record(tmp_path, other, request(chat("theirs")))
    report = miss(tmp_path, TEST, request(chat("yours")))
    # the test has a recording, but not for this endpoint's body; nearest of its own comes first
    assert "(same test and endpoint)" in report
    assert "body.messages[0].content: recorded 'mine', incoming 'yours'" in report
    assert path.name not in report


def test_new_test_with_no_recordings_says_so(tmp_path: Path) -> None:
    record(tmp_path, "tests/suite/test_chat.py::test_other", request(chat("a")))
    report = miss(tmp_path, TEST, request(chat("b")))
    assert "  this test has no recordings yet (a new test, or one renamed or moved)" in report
    assert "  nearest:   tests/suite/recordings/" in report
    assert "(same endpoint, other test)" in report


def test_renamed_test_names_the_likely_old_test_id(tmp_path: Path) -> None:
    """Outside pytest (a proxy, `install()`) the run knows no test ids: another test's
    recording of exactly this request is named, with the `mv` command, when this test has
    none."""
    old = "tests/suite/test_chat.py::test_old_name"
    path = record(tmp_path, old, request(chat("same request")))
    report = miss(tmp_path, TEST, request(chat("same request")))
    lines = report.splitlines()
    assert "  this test has no recordings yet (a new test, or one renamed or moved)" in lines
    at = lines.index(
        f"  tests/suite/recordings/{path.name} holds exactly this request, recorded by test "
        f"{old}, recorded under another test id: if that test was renamed or moved, keep its "
        "recordings with"
    )
    assert lines[at + 1] == f"    hashreplay mv '{old}' '{TEST}'"
    assert lines[at + 2] == f"  to record it: INFERENCE_MODE=record-if-missing pytest {TEST}"
    # once this test has recordings of its own, another test's is only the nearest
    record(tmp_path, TEST, request(chat("something else")))
    assert "hashreplay mv" not in miss(tmp_path, TEST, request(chat("same request")))


def known_miss(root: Path, test_id: str, incoming: IncomingRequest, known: set[str]) -> str:
    s = session(root, Mode.REPLAY)
    s.replayer.known_tests = frozenset(known)  # as the pytest plugin sets it
    s.begin_test(test_id)
    decision = s.decide(incoming, test_id=test_id)
    assert isinstance(decision, Miss)
    return decision.error.report


def test_in_a_pytest_run_only_an_uncollected_test_id_is_named(tmp_path: Path) -> None:
    old = "tests/suite/test_chat.py::test_old_name[sk-abcdefghijklmnopqrstuvwxyz0123]"
    stored = "tests/suite/test_chat.py::test_old_name[[secret removed]]"
    record(tmp_path, TEST, request(chat("mine")))  # the test has recordings of its own
    path = record(tmp_path, old, request(chat("same request")))
    gone = known_miss(tmp_path, TEST, request(chat("same request")), {TEST})
    assert (
        f"  tests/suite/recordings/{path.name} holds exactly this request, recorded by test "
        f"{stored}, which its test file, collected by this run, no longer has: if that test "
        "was renamed or moved, keep its recordings with\n"
        f"    hashreplay mv '{stored}' '{TEST}'\n"
    ) in gone
    # the test still exists (collected, its id as pytest gives it): a sibling, not an orphan
    alive = known_miss(tmp_path, TEST, request(chat("same request")), {TEST, old})
    assert "hashreplay mv" not in alive
    assert "  nearest:   tests/suite/recordings/" in alive  # its own nearest recording


def test_a_test_file_moved_to_another_directory_finds_its_old_recordings(
    tmp_path: Path,
) -> None:
    """The old directory's `recordings/` is searched even while other test files there are
    collected: only the moved test's own id has to be gone."""
    old = "tests/old/test_chat.py::test_one"
    staying = "tests/old/test_other.py::test_two"
    (tmp_path / "tests" / "old").mkdir(parents=True)
    (tmp_path / "tests" / "old" / "test_other.py").write_text("def test_two(): pass\n")
    record(tmp_path, staying, request(chat("stays here")))
    path = record(tmp_path, old, request(chat("moved along")))
    report = known_miss(tmp_path, TEST, request(chat("moved along")), {TEST, staying})
    lines = report.splitlines()
    assert "  this test has no recordings yet (a new test, or one renamed or moved)" in lines
    assert (
        f"  tests/old/recordings/{path.name} holds exactly this request, recorded by test "
        f"{old}, whose test file no longer exists: if that test was renamed or moved, keep "
        "its recordings with"
    ) in lines
    assert f"    hashreplay mv '{old}' '{TEST}'" in lines
    # the old test still collected: a sibling making the same request, not an orphan
    kept = known_miss(tmp_path, TEST, request(chat("moved along")), {TEST, staying, old})
    assert "hashreplay mv" not in kept


def test_a_test_of_a_file_this_run_did_not_collect_is_never_taken_for_gone(
    tmp_path: Path,
) -> None:
    """`pytest tests/suite/test_chat.py` collects nothing of tests/other: a test there whose
    file still exists may well exist, so its recordings are not offered to `mv`."""
    other = "tests/other/test_api.py::test_same_call"
    (tmp_path / "tests" / "other").mkdir(parents=True)
    (tmp_path / "tests" / "other" / "test_api.py").write_text("def test_same_call(): pass\n")
    record(tmp_path, other, request(chat("same request")))
    report = known_miss(tmp_path, TEST, request(chat("same request")), {TEST})
    assert "hashreplay mv" not in report
    assert "holds" not in report
    # in the test's own directory too
    sibling = "tests/suite/test_api.py::test_same_call"
    (tmp_path / "tests" / "suite").mkdir(parents=True, exist_ok=True)
    (tmp_path / "tests" / "suite" / "test_api.py").write_text("def test_same_call(): pass\n")
    record(tmp_path, sibling, request(chat("same request")))
    report = known_miss(tmp_path, TEST, request(chat("same request")), {TEST})
    assert "hashreplay mv" not in report
    assert "  nearest:   tests/suite/recordings/" in report


def test_another_request_is_never_offered_to_mv(tmp_path: Path) -> None:
    """A recording of the same endpoint with another prompt is the nearest, never "exactly
    this request", even when its test is gone."""
    old = "tests/suite/test_chat.py::test_old_name"
    record(tmp_path, old, request(chat("the old prompt")))
    report = known_miss(tmp_path, TEST, request(chat("a new prompt")), {TEST})
    assert "hashreplay mv" not in report
    assert "holds" not in report
    assert "body.messages[0].content: recorded 'the old prompt', incoming 'a new prompt'" in report


def test_a_renamed_parametrised_case_names_the_whole_test(tmp_path: Path) -> None:
    old = "tests/suite/test_chat.py::test_old[a-1]"
    new = "tests/suite/test_chat.py::test_new[a-1]"
    record(tmp_path, old, request(chat("case a")))
    report = known_miss(tmp_path, new, request(chat("case a")), {new})
    assert (
        "    hashreplay mv 'tests/suite/test_chat.py::test_old' 'tests/suite/test_chat.py::test_new'"
        in report.splitlines()
    )
    # a case whose parameters changed too: the exact ids
    other = "tests/suite/test_chat.py::test_new[b-2]"
    report = known_miss(tmp_path, other, request(chat("case a")), {other})
    assert f"    hashreplay mv '{old}' '{other}'" in report.splitlines()


def test_a_recording_under_a_markers_rule_is_named_when_its_rule_matches(
    tmp_path: Path,
) -> None:
    old = "tests/suite/test_chat.py::test_old_name"
    s = session(tmp_path, Mode.RECORD)
    rule = MatchRule(match_on=["method", "endpoint"], source=RuleSource.MARKER)
    s.begin_test(old)
    s.set_test_options(old, match=rule)
    prep = s.prepare(request(chat("any words")), test_id=old)
    body = b'{"id": "chatcmpl-1", "choices": []}'
    path = s.record(prep, LiveExchange(200, [("content-type", "application/json")], [body]))
    assert path is not None
    report = known_miss(tmp_path, TEST, request(chat("other words")), {TEST})
    assert f"    hashreplay mv '{old}' '{TEST}'" in report.splitlines()
    assert (
        f"{path.name} holds this request under the rule it was recorded with "
        "(match_on = ['method', 'endpoint']), recorded by test"
    ) in report


def test_a_project_rule_the_project_dropped_names_no_orphan(tmp_path: Path) -> None:
    """A file keyed by a project rule that is no longer configured is not "this request"
    for another prompt: the configuration decides how requests match."""
    old = "tests/suite/test_chat.py::test_old_name"
    s = session(tmp_path, Mode.RECORD, match_on=["method", "endpoint"])
    s.begin_test(old)
    prep = s.prepare(request(chat("any words")), test_id=old)
    body = b'{"id": "chatcmpl-1", "choices": []}'
    assert s.record(prep, LiveExchange(200, [("content-type", "application/json")], [body]))
    report = known_miss(tmp_path, TEST, request(chat("other words")), {TEST})
    assert "hashreplay mv" not in report
    assert "holds" not in report


def test_beyond_the_recorded_sequence_says_how_many(tmp_path: Path) -> None:
    incoming = request(chat("again"))
    record(tmp_path, TEST, incoming)
    s = session(tmp_path, Mode.REPLAY)
    s.begin_test(TEST)
    assert isinstance(s.decide(incoming, test_id=TEST), Replay)
    decision = s.decide(incoming, test_id=TEST)
    assert isinstance(decision, Miss)
    report = decision.error.report
    assert (
        "  this request was recorded once in this test; call 2 has no recording "
        "(the code now makes more identical calls than when recorded)"
    ) in report


def test_long_values_are_shortened_around_the_difference(tmp_path: Path) -> None:
    base = "lorem ipsum " * 40
    record(tmp_path, TEST, request(chat(base + "ending one")))
    report = miss(tmp_path, TEST, request(chat(base + "ending two")))
    differs = next(line for line in report.splitlines() if "differs:" in line)
    assert "ending one" in differs and "ending two" in differs
    assert "…" in differs
    assert len(differs) < 260


def test_secrets_never_reach_the_report(tmp_path: Path) -> None:
    key = "sk-proj-" + "a1" * 20
    record(tmp_path, TEST, request(chat("hello")))
    report = miss(
        tmp_path, TEST, request({**chat("hello"), "note": f"use {key}"}, URL + "?key=" + key)
    )
    assert key not in report
    assert "[secret removed]" in report


def test_outside_any_test(tmp_path: Path) -> None:
    report = miss(tmp_path, None, request(chat("x")))
    assert "  test:      (no test: a request outside any test)" in report
    assert "  to record it: run the same code with INFERENCE_MODE=record-if-missing" in report


def test_hand_edited_recording_is_replayed_with_a_warning(tmp_path: Path) -> None:
    incoming = request(chat("original"))
    path = record(tmp_path, TEST, incoming)
    data = json.loads(path.read_text())
    data["request"]["body"]["messages"][0]["content"] = "edited by hand"
    path.write_text(json.dumps(data))
    s = session(tmp_path, Mode.REPLAY)
    s.begin_test(TEST)
    with pytest.warns(HashReplayWarning) as caught:
        assert isinstance(s.decide(incoming, test_id=TEST), Replay)
    message = str(caught[0].message)
    assert str(path) in message
    assert "body.messages[0].content: recorded 'edited by hand', incoming 'original'" in message
    assert "hashreplay verify" in message


def test_untouched_recording_replays_without_warning(tmp_path: Path) -> None:
    incoming = request(chat("original"))
    record(tmp_path, TEST, incoming)
    s = session(tmp_path, Mode.REPLAY)
    s.begin_test(TEST)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(s.decide(incoming, test_id=TEST), Replay)


def test_recorded_exception_messages_are_redacted(tmp_path: Path) -> None:
    key = "sk-proj-" + "Q9" * 16
    s = session(tmp_path, Mode.RECORD, record_failures="all")  # a no-response error
    s.begin_test(TEST)
    prep = s.prepare(request(chat("x")), test_id=TEST)
    boom = ConnectionError(f"cannot reach http://h/v1?api_key={key} with Bearer {key}")
    path = s.record(prep, LiveExchange(None, [], [], exception=boom))
    assert path is not None
    text = path.read_text()
    assert key not in text
    stored = json.loads(text)["response"]
    assert stored["is_exception"] is True
    assert stored["exception"]["type"] == "builtins.ConnectionError"
    assert stored["exception"]["message"] == (
        "cannot reach http://h/v1?api_key=[secret removed] with [secret removed]"
    )


@pytest.mark.parametrize(
    ("prefix", "url", "expected"),
    [
        ("http://127.0.0.1:80", "http://127.0.0.1:80/v1/x", True),
        ("http://127.0.0.1:80", "http://127.0.0.1:80", True),
        ("http://127.0.0.1:80", "http://127.0.0.1:8000/v1/x", False),
        ("http://h/api", "http://h/api?x=1", True),
        ("http://h/api", "http://h/apis/v1", False),
        ("http://h/api/", "http://h/api/v1", True),
    ],
)
def test_passthrough_prefixes_end_at_a_boundary(
    tmp_path: Path, prefix: str, url: str, expected: bool
) -> None:
    s = Session(load_config(tmp_path, env={}, passthrough=[prefix]))
    assert s.is_passthrough(url) is expected


def test_undecodable_content_encoding_is_kept_with_the_raw_bytes(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.RECORD)
    s.begin_test(TEST)
    prep = s.prepare(request(chat("x")), test_id=TEST)
    raw = b"\x8b\x02\x80compressed-by-an-unknown-coding"
    headers = [("content-type", "application/json"), ("content-encoding", "zz-unknown")]
    path = s.record(prep, LiveExchange(200, headers, [raw]))
    stored = json.loads(path.read_text())["response"]
    assert stored["headers"]["content-encoding"] == "zz-unknown"
    assert stored["body_encoding"] == "base64"
    replay = session(tmp_path, Mode.REPLAY)
    replay.begin_test(TEST)
    decision = replay.decide(request(chat("x")), test_id=TEST)
    assert isinstance(decision, Replay)
    plan = decision.plan()
    assert b"".join(plan.chunks) == raw
    assert ("content-encoding", "zz-unknown") in plan.headers


def test_a_run_reads_the_other_recordings_directories_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A suite of new tests in replay: the first miss reads the project's other recordings
    directories, the later misses of the same run reuse what it found."""
    from hashreplay.engine import miss as miss_module

    old = "tests/old/test_chat.py::test_one"
    path = record(tmp_path, old, request(chat("moved along")))
    walks: list[Path] = []
    real = miss_module._recordings_dirs

    def counted(root: Path) -> Any:
        walks.append(root)
        return real(root)

    monkeypatch.setattr(miss_module, "_recordings_dirs", counted)
    s = session(tmp_path, Mode.REPLAY)
    new_ids = [f"tests/suite/test_chat.py::test_{n}" for n in ("a", "b", "c")]
    s.replayer.known_tests = frozenset(new_ids)
    reports = []
    for test_id in new_ids:
        s.begin_test(test_id)
        decision = s.decide(request(chat("moved along")), test_id=test_id)
        assert isinstance(decision, Miss)
        reports.append(decision.error.report)
    assert len(walks) == 1
    assert all(f"tests/old/recordings/{path.name} holds exactly this request" in r for r in reports)


def test_in_a_server_under_test_the_report_names_no_pytest_command(tmp_path: Path) -> None:
    """`hashreplay.install()`'s middleware runs each request `serving`: its misses say to
    restart the server recording, an unreadable file names no pytest command either, and
    each miss is counted for the request."""
    from hashreplay.engine.miss import ServerRequest, serving

    record(tmp_path, TEST, request(chat("recorded")))
    with serving(ServerRequest()) as served:
        report = miss(tmp_path, TEST, request(chat("new")))
        assert report.splitlines()[-1] == (
            "  to record it: restart the server with INFERENCE_MODE=record-if-missing in its "
            "environment (the mode given to pytest does not reach it), then run the test "
            f"again: pytest {TEST}"
        )
        path = record(tmp_path, TEST, request(chat("broken")))
        path.write_text("{not json")
        broken = miss(tmp_path, TEST, request(chat("broken")))
    assert served.misses == 2
    assert "pytest" not in broken.splitlines()[-1]
    assert "then re-record the test that made it" in broken.splitlines()[-1]
    assert miss(tmp_path, TEST, request(chat("new"))).splitlines()[-1] == (
        f"  to record it: INFERENCE_MODE=record-if-missing pytest {TEST}"
    )
