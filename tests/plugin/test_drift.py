"""Drift runs through real pytest runs (docs/design.md §15, "Drift"): `--hashreplay-drift`
sends every intercepted call to a fake upstream whose answers changed shape since they were
recorded (a field added, a type changed, a stream event added) or only changed their text;
writes nothing but `.hashreplay/drift.json`; exits 1 on drift (`drift_fail = false`: 0);
reports recordings no live call used, live calls nothing recorded, and live failures as
"could not check"; merges pytest-xdist workers; refuses to start without keys; writes no
result when interrupted. `hashreplay drift-report` renders the last result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hashreplay.cli import main
from tests.fakes.upstream import FakeUpstream, Scripted

pytest_plugins = ["pytester"]

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest -p no:randomly -p no:cacheprovider"

[tool.hashreplay]
{extra}
"""

#: One JSON call and one streamed call, each to its own path of $FAKE_URL.
TESTS = """
import os
import httpx

URL = os.environ["FAKE_URL"]


def test_chat():
    body = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": "capital?"}]}
    r = httpx.post(URL + "/v1/chat/completions", json=body, timeout=10)
    print("STATUS", r.status_code)


def test_stream():
    body = {"model": "claude-fake", "stream": True, "messages": []}
    with httpx.stream("POST", URL + "/v1/messages", json=body, timeout=10) as r:
        for _ in r.iter_lines():
            pass
"""

KEY = {"OPENAI_API_KEY": "sk-drift-test-0123456789"}


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{len(text)}",
        "object": "chat.completion",
        "created": 1700000000 + len(text),
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": len(text.split())},
        **extra,
    }


def sse(*events: tuple[str, dict[str, Any]]) -> Scripted:
    frames = [f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events]
    return Scripted(frames=frames, headers={"content-type": "text/event-stream"})


def message_stream(*words: str, ping: bool = False, citations: bool = False) -> Scripted:
    def delta(word: str) -> tuple[str, dict[str, Any]]:
        d: dict[str, Any] = {"type": "text_delta", "text": word}
        if citations:
            d["citations"] = []
        return "content_block_delta", {"type": "content_block_delta", "delta": d}

    events = [("message_start", {"type": "message_start", "message": {"id": f"msg_{len(words)}"}})]
    if ping:
        events.append(("ping", {"type": "ping"}))
    events += [delta(w) for w in words]
    events.append(("message_stop", {"type": "message_stop"}))
    return sse(*events)


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    for name, value in KEY.items():
        monkeypatch.setenv(name, value)


def make_project(pytester: pytest.Pytester, extra: str = "", tests: str = TESTS) -> Path:
    pytester.makepyprojecttoml(PYPROJECT.format(extra=extra))
    (pytester.path / "suite").mkdir(exist_ok=True)
    (pytester.path / "suite" / "test_app.py").write_text(tests)
    return pytester.path


def recordings(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.glob("suite/recordings/*.json"))}


def drift_file(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / ".hashreplay" / "drift.json").read_text())
    return data


def record(pytester: pytest.Pytester, upstream: FakeUpstream) -> dict[str, bytes]:
    upstream.script("POST", "/v1/chat/completions", Scripted(json=chat("Paris.")))
    upstream.script("POST", "/v1/messages", message_stream("Par", "is."))
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=2)
    return recordings(pytester.path)


def test_shape_changes_are_drift_and_fail_the_run(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(pytester)
    monkeypatch.setenv("FAKE_URL", upstream.url)
    before = record(pytester, upstream)
    assert len(before) == 2

    # the API added a field, retyped another, and added an event type to its stream
    changed = chat("Paris.", service_tier="default")
    changed["usage"]["prompt_tokens"] = "3"
    upstream.script("POST", "/v1/chat/completions", Scripted(json=changed))
    upstream.script("POST", "/v1/messages", message_stream("Par", "is.", ping=True))
    calls = len(upstream.calls)
    result = pytester.runpytest("--hashreplay-drift")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2)
    assert len(upstream.calls) == calls + 2  # both went live
    result.stdout.fnmatch_lines(
        [
            "hashreplay drift: 2 test(s) drifted; 2 live answer(s) compared with their recordings",
            "*test*endpoint*first differences",
            "*suite/test_app.py::test_chat*POST /v1/chat/completions*"
            "body: field added service_tier (string)",
            "*body: type of usage.prompt_tokens changed from number to string",
            "*suite/test_app.py::test_stream*POST /v1/messages*stream events changed from *",
            "*full result: .hashreplay/drift.json*",
        ]
    )
    assert (
        "stream events changed from [message_start, content_block_delta, message_stop] to "
        "[message_start, ping, content_block_delta, message_stop]" in result.stdout.str()
    )
    # nothing written: every recording byte for byte, no new file
    assert recordings(root) == before
    result_file = drift_file(root)
    assert result_file["checked"] == 2
    assert result_file["could_not_check"] == {}
    (chat_entry,) = result_file["drifted"]["suite/test_app.py::test_chat"]
    assert chat_entry["kind"] == "drift"
    assert chat_entry["endpoint"] == "POST /v1/chat/completions"
    assert chat_entry["file"].startswith("suite/recordings/")
    assert chat_entry["differences"] == [
        "body: field added service_tier (string)",
        "body: type of usage.prompt_tokens changed from number to string",
    ]
    # a field added inside a stream event is drift too
    upstream.script("POST", "/v1/chat/completions", Scripted(json=chat("Paris.")))
    upstream.script("POST", "/v1/messages", message_stream("Par", "is.", citations=True))
    result = pytester.runpytest("--hashreplay-drift")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert list(drift_file(root)["drifted"]) == ["suite/test_app.py::test_stream"]
    result.stdout.fnmatch_lines(
        ["*test_stream*event content_block_delta: field added delta.citations (array)"]
    )
    # the recordings still replay as before
    pytester.runpytest().assert_outcomes(passed=2)


def test_other_text_ids_and_delta_counts_are_no_drift(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(pytester)
    monkeypatch.setenv("FAKE_URL", upstream.url)
    before = record(pytester, upstream)
    upstream.script(
        "POST", "/v1/chat/completions", Scripted(json=chat("The capital of France is Paris."))
    )
    upstream.script("POST", "/v1/messages", message_stream("The", " capital", " is", " Paris."))
    result = pytester.runpytest("--hashreplay-drift")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["hashreplay drift: 0 test(s) drifted; 2 live answer(s) compared with their recordings"]
    )
    assert drift_file(root)["drifted"] == {}
    assert recordings(root) == before
    assert main(["drift-report", "--root", str(root)]) == 0


def test_drift_fail_false_reports_only(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(pytester, "drift_fail = false")
    monkeypatch.setenv("FAKE_URL", upstream.url)
    record(pytester, upstream)
    upstream.script("POST", "/v1/chat/completions", Scripted(json=chat("Paris.", extra=1)))
    upstream.script("POST", "/v1/messages", message_stream("Par", "is."))
    result = pytester.runpytest("--hashreplay-drift")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*test_chat*body: field added extra (number)",
            "hashreplay drift: drift_fail = false, so drift does not fail this run",
        ]
    )
    assert list(drift_file(root)["drifted"]) == ["suite/test_app.py::test_chat"]


def test_failed_live_calls_could_not_be_checked_and_are_no_drift(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(pytester)
    monkeypatch.setenv("FAKE_URL", upstream.url)
    record(pytester, upstream)
    upstream.script("POST", "/v1/chat/completions", Scripted(status=503))
    upstream.script("POST", "/v1/messages", Scripted(status=429))
    result = pytester.runpytest("--hashreplay-drift")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "hashreplay drift: 0 test(s) drifted; 0 live answer(s) compared with their "
            "recordings, 2 call(s) could not be checked",
            "  could not check (not drift; the live call failed):",
            "*test_chat*POST /v1/chat/completions*the live call answered 503",
            "*test_stream*POST /v1/messages*the live call answered 429",
        ]
    )
    result_file = drift_file(root)
    assert result_file["drifted"] == {}
    assert set(result_file["could_not_check"]) == {
        "suite/test_app.py::test_chat",
        "suite/test_app.py::test_stream",
    }

    # and a call that got no response at all (the upstream is gone)
    monkeypatch.setenv("FAKE_URL", "http://127.0.0.1:9")
    result = pytester.runpytest("--hashreplay-drift", "suite/test_app.py::test_chat")
    result.assert_outcomes(failed=1)  # the test sees its connection error
    assert drift_file(root)["drifted"] == {}
    reason = drift_file(root)["could_not_check"]["suite/test_app.py::test_chat"][0]["reason"]
    assert reason.startswith("no response (httpx.ConnectError")


CHOOSING = """
import os
import httpx

URL = os.environ["FAKE_URL"]


def test_calls():
    for name in os.environ["CALLS"].split(","):
        body = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": name}]}
        httpx.post(URL + "/v1/chat/completions", json=body, timeout=10)
"""


def test_recordings_not_called_and_calls_not_recorded_are_reported(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(pytester, tests=CHOOSING)
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.setenv("CALLS", "old,kept")
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    monkeypatch.setenv("CALLS", "kept,new")  # the code stopped making one call, makes another
    result = pytester.runpytest("--hashreplay-drift")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    entries = drift_file(root)["drifted"]["suite/test_app.py::test_calls"]
    kinds = sorted((e["kind"], e["differences"][0]) for e in entries)
    assert kinds == [
        ("live call not recorded", "the code makes this call; no recording has it"),
        ("recording not called live", "1 recorded response no live call asked for"),
    ]
    result.stdout.fnmatch_lines(
        [
            "*test_calls*POST /v1/chat/completions*live call not recorded: the code makes *",
            "*POST /v1/chat/completions*recording not called live: 1 recorded response *",
        ]
    )
    assert "left 1 recorded response(s) unused" not in result.stdout.str()


def test_without_keys_it_stops_before_any_call(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(pytester)
    monkeypatch.setenv("FAKE_URL", upstream.url)
    record(pytester, upstream)
    calls = len(upstream.calls)
    monkeypatch.delenv("OPENAI_API_KEY")
    result = pytester.runpytest("--hashreplay-drift")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*hashreplay: --hashreplay-drift sends every intercepted call to the real API, and "
            "this environment has no key to send: none of the provider key variables is set*"
        ]
    )
    # a replay-only environment: the variables hold keyless replay's placeholder
    monkeypatch.setenv("OPENAI_API_KEY", "hashreplay-replay-placeholder")
    result = pytester.runpytest("--hashreplay-drift")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*OPENAI_API_KEY hold(s) the replay placeholder*Nothing was sent."]
    )
    assert len(upstream.calls) == calls
    assert not (root / ".hashreplay" / "drift.json").exists()


def test_drift_with_prune_or_without_opting_in_is_a_usage_error(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest("--hashreplay-drift")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--hashreplay-drift: hashreplay is not active in this project*"])
    make_project(pytester)
    result = pytester.runpytest("--hashreplay-drift", "--hashreplay-prune")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--hashreplay-drift and --hashreplay-prune cannot be combined*"])


INTERRUPTED = (
    TESTS
    + """

def test_zz_interrupt():
    raise KeyboardInterrupt
"""
)


def test_an_interrupted_drift_run_writes_no_result(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(pytester)
    monkeypatch.setenv("FAKE_URL", upstream.url)
    before = record(pytester, upstream)
    upstream.script("POST", "/v1/chat/completions", Scripted(json=chat("Paris.", extra=1)))
    upstream.script("POST", "/v1/messages", message_stream("Par", "is."))
    (root / "suite" / "test_app.py").write_text(INTERRUPTED)
    # a subprocess: an interrupt in an in-process run would stop this session too
    result = pytester.runpytest_subprocess("--hashreplay-drift")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["hashreplay drift: the run was interrupted, so .hashreplay/drift.json was not written*"]
    )
    assert not (root / ".hashreplay" / "drift.json").exists()
    assert recordings(root) == before  # and no recording changed


def test_xdist_workers_results_are_merged(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(pytester)
    monkeypatch.setenv("FAKE_URL", upstream.url)
    record(pytester, upstream)
    upstream.script("POST", "/v1/chat/completions", Scripted(json=chat("Paris.", extra=1)))
    upstream.script("POST", "/v1/messages", message_stream("Par", "is.", ping=True))
    result = pytester.runpytest_subprocess("-n", "2", "-p", "xdist", "--hashreplay-drift")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["hashreplay drift: 2 test(s) drifted; 2 live answer(s) compared with their recordings"]
    )
    assert sorted(drift_file(root)["drifted"]) == [
        "suite/test_app.py::test_chat",
        "suite/test_app.py::test_stream",
    ]


def test_drift_report_renders_the_last_result_or_says_there_is_none(
    pytester: pytest.Pytester,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = make_project(pytester)
    assert main(["drift-report", "--root", str(root)]) == 1
    err = capsys.readouterr().err
    assert "no drift result: " in err
    assert "Run `pytest --hashreplay-drift` with the providers' keys set" in err

    monkeypatch.setenv("FAKE_URL", upstream.url)
    record(pytester, upstream)
    changed = chat("Paris.", a=1, b=True, c="x")
    upstream.script("POST", "/v1/chat/completions", Scripted(json=changed))
    upstream.script("POST", "/v1/messages", message_stream("Par", "is."))
    result = pytester.runpytest("--hashreplay-drift")
    # the summary shows the first two differences of a test, the report every one
    result.stdout.fnmatch_lines(["*body: field added b (boolean) (+1 more)"])
    capsys.readouterr()
    assert main(["drift-report", "--root", str(root)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("hashreplay drift: 1 test(s) drifted; 2 live answer(s) compared")
    assert out[1].split() == ["test", "endpoint", "first", "differences"]
    assert out[2].split()[:3] == ["suite/test_app.py::test_chat", "POST", "/v1/chat/completions"]
    assert out[2].endswith("body: field added a (number)")
    assert out[3].strip() == "body: field added b (boolean)"
    assert out[4].strip() == "body: field added c (string)"
    assert out[5] == "  recordings:"
    assert out[6].startswith("    suite/recordings/")

    (root / ".hashreplay" / "drift.json").write_text("{not json")
    assert main(["drift-report", "--root", str(root)]) == 1
    assert "drift.json cannot be read" in capsys.readouterr().err
