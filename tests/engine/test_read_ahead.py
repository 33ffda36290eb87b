"""A pytest run reads each recording once (docs/design.md §11, "The replay path"): the
file index of the unconsumed check reads every file of a directory at the end of its first
test, and the later tests' replays take those bytes instead of opening the file again. What
a replay checks is unchanged: a symlink is still judged by where it leads, a file the run
writes is read as written, and the bytes held are bounded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import hashreplay.core.store as store_module
from hashreplay.core.config import load_config
from hashreplay.core.store import ReadAhead
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.replay import Miss, Record, Replay
from hashreplay.engine.session import Session

pytest_plugins = ["pytester"]

URL = "http://127.0.0.1:9/v1/chat/completions"
HEADERS = [("content-type", "application/json")]
TESTS = [f"tests/test_chat.py::test_{n}" for n in range(3)]


def chat(n: int) -> IncomingRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": f"question {n}"}]}
    return IncomingRequest("POST", URL, HEADERS, json.dumps(body).encode())


def record_all(root: Path) -> dict[str, Path]:
    """One recording per test of `TESTS`, answered `answer <n>`."""
    s = Session(load_config(root, env={}, mode="record"))
    paths = {}
    for n, test in enumerate(TESTS):
        s.begin_test(test)
        decision = s.decide(chat(n), test_id=test)
        assert isinstance(decision, Record)
        body = json.dumps({"answer": f"answer {n}"}).encode()
        path = s.record(decision.prep, LiveExchange(200, HEADERS, [body]))
        assert path is not None
        paths[test] = path
        s.end_test(test)
    return paths


def run_session(root: Path) -> Session:
    """A replay session as the pytest plugin makes it (write-behind: a run)."""
    return Session(load_config(root, env={}, mode="replay"), write_behind=True)


def replay(s: Session, n: int) -> Replay | Miss:
    test = TESTS[n]
    s.begin_test(test)
    decision = s.decide(chat(n), test_id=test)
    s.leftovers(test)  # the test's end: the unconsumed check reads its directory once
    s.end_test(test)
    assert isinstance(decision, (Replay, Miss))
    return decision


def answer(decision: Replay | Miss) -> str:
    assert isinstance(decision, Replay), decision
    return str(json.loads(b"".join(decision.plan().chunks))["answer"])


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The recording files a replay opens itself."""
    seen: list[Path] = []
    real = store_module.read_contained

    def counting(path: Path, root: Path) -> bytes:
        seen.append(path)
        return real(path, root)

    monkeypatch.setattr(store_module, "read_contained", counting)
    return seen


def test_after_the_first_test_a_run_opens_no_recording_a_second_time(
    tmp_path: Path, opened: list[Path]
) -> None:
    paths = record_all(tmp_path)
    opened.clear()
    s = run_session(tmp_path)
    assert [answer(replay(s, n)) for n in range(3)] == [f"answer {n}" for n in range(3)]
    assert opened == [paths[TESTS[0]]]  # read before the directory's index existed
    assert s.store.ahead is not None
    assert s.store.ahead.held == 0  # each file taken once, nothing left behind


def test_a_session_outside_a_run_reads_each_file_when_asked(
    tmp_path: Path, opened: list[Path]
) -> None:
    # the proxy and install() live on while the files change on disk: they never read ahead
    paths = record_all(tmp_path)
    opened.clear()
    s = Session(load_config(tmp_path, env={}, mode="replay"))
    assert [answer(replay(s, n)) for n in range(3)] == [f"answer {n}" for n in range(3)]
    assert opened == [paths[t] for t in TESTS]
    assert s.store.ahead is None


def test_a_symlink_leading_outside_the_project_is_refused_though_the_index_read_it(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    paths = record_all(project)
    outside = tmp_path / "elsewhere.json"
    outside.write_bytes(paths[TESTS[1]].read_bytes())
    paths[TESTS[1]].unlink()
    paths[TESTS[1]].symlink_to(outside)
    s = run_session(project)
    assert answer(replay(s, 0)) == "answer 0"
    refused = replay(s, 1)
    assert isinstance(refused, Miss)
    assert "outside the project root" in str(refused.error)
    assert answer(replay(s, 2)) == "answer 2"


def test_a_file_the_run_writes_is_replayed_as_written_not_as_read_ahead(tmp_path: Path) -> None:
    paths = record_all(tmp_path)
    s = run_session(tmp_path)
    assert answer(replay(s, 0)) == "answer 0"  # the index now holds test_1's old bytes
    new = json.loads(paths[TESTS[1]].read_text())
    new["response"]["body"] = {"answer": "rewritten"}
    s.view.write(paths[TESTS[1]], json.dumps(new).encode())
    s.flush()
    assert answer(replay(s, 1)) == "rewritten"


def test_an_index_read_while_a_write_waits_does_not_offer_the_old_bytes() -> None:
    ahead = ReadAhead()
    ahead.written("/p/a.json")  # queued, not yet on disk
    ahead.offer("/p/a.json", b"old")  # the index read the file as it still was
    assert ahead.take("/p/a.json") is None
    ahead.offer("/p/b.json", b"bytes")
    assert ahead.take("/p/b.json") == b"bytes"
    assert ahead.take("/p/b.json") is None  # taken once


def test_the_bytes_held_stay_within_the_budget() -> None:
    ahead = ReadAhead(budget=10)
    ahead.offer("/p/a.json", b"123456")
    ahead.offer("/p/b.json", b"123456")  # over the budget: read from disk when asked
    assert ahead.held == 6
    assert ahead.take("/p/b.json") is None
    assert ahead.take("/p/a.json") == b"123456"
    assert ahead.held == 0
    ahead.offer("/p/b.json", b"123456")
    assert ahead.held == 6


AHEAD_CHECK = """
from hashreplay.plugin import RUN_KEY

def test_reads_ahead(request):
    ahead = request.config.stash[RUN_KEY].session.store.ahead
    worker = hasattr(request.config, "workerinput")
    assert (ahead is None) == worker, (ahead, worker)
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2", "-p", "xdist"]], ids=["run", "xdist"])
def test_a_run_reads_ahead_and_an_xdist_worker_does_not(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    # a worker replays a share of each directory: the rest, read ahead, would only be held
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml("[tool.hashreplay]\n")
    pytester.makepyfile(test_ahead=AHEAD_CHECK)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *workers)
    result.assert_outcomes(passed=1)
