"""The pytest plugin in real pytest sessions of temporary projects (pytester)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes.upstream import FakeUpstream

pytest_plugins = ["pytester"]

APP_TESTS = """
import os
import openai
import pytest

def client(**kw):
    return openai.OpenAI(base_url=os.environ["FAKE_URL"] + "/v1", api_key=os.environ.get("KEY", "sk-none"), **kw)

def test_chat():
    r = client(max_retries=0).chat.completions.create(
        model="gpt-fake-1", messages=[{"role": "user", "content": "hello"}])
    print("TEXT:", r.choices[0].message.content)
    assert r.choices[0].message.content == "echo: hello"

@pytest.mark.parametrize("word", ["one", "two"])
def test_stream(word):
    s = client(max_retries=0).chat.completions.create(
        model="gpt-fake-1", messages=[{"role": "user", "content": word}], stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in s if c.choices)
    print("TEXT:", text)
    assert text == "echo: " + word

async def test_async_chat():
    c = openai.AsyncOpenAI(base_url=os.environ["FAKE_URL"] + "/v1", api_key="sk-none", max_retries=0)
    r = await c.chat.completions.create(model="gpt-fake-1", messages=[{"role": "user", "content": "async"}])
    assert r.choices[0].message.content == "echo: async"
"""

GUARD_CONFTEST = """
import socket
import pytest

ATTEMPTS = []

@pytest.fixture(autouse=True)
def no_connections(monkeypatch):
    def refuse(sock, address):
        ATTEMPTS.append(address)
        raise OSError(f"replay opened a socket to {address!r}")
    if __import__("os").environ.get("GUARD") == "1":
        monkeypatch.setattr(socket.socket, "connect", refuse)
    yield

def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"connect attempts: {len(ATTEMPTS)}")
"""

PYPROJECT = """
[tool.pytest.ini_options]
# hypothesis' plugin re-imports itself in every in-process run (1-2 s each); not needed here
addopts = "-p no:hypothesispytest"
asyncio_mode = "auto"
asyncio_default_fixture_loop_scope = "function"

# the project opts in to hashreplay (docs/design.md §16 Activation)
[tool.hashreplay]
"""


@pytest.fixture
def project(pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makeconftest(GUARD_CONFTEST)
    (pytester.path / "suite").mkdir()
    (pytester.path / "suite" / "test_app.py").write_text(APP_TESTS)
    return pytester


def recordings(root: Path) -> list[Path]:
    return sorted(root.glob("suite/recordings/*.json"))


def test_record_stop_upstream_replay_offline(
    project: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = project.runpytest("--inference-mode=record", "-s")
    recorded.assert_outcomes(passed=4)
    recorded.stdout.fnmatch_lines(["hashreplay: 0 replayed, 4 recorded, 0 missed (record)"])
    files = recordings(project.path)
    assert len(files) == 4
    ids = {json.loads(f.read_text())["test_id"] for f in files}
    assert ids == {
        "suite/test_app.py::test_chat",
        "suite/test_app.py::test_stream[one]",
        "suite/test_app.py::test_stream[two]",
        "suite/test_app.py::test_async_chat",
    }
    live_texts = sorted(line for line in recorded.outlines if line.startswith("TEXT:"))

    upstream.stop()
    monkeypatch.setenv("GUARD", "1")
    replayed = project.runpytest("-s")  # replay is the default mode
    replayed.assert_outcomes(passed=4)
    replayed.stdout.fnmatch_lines(
        ["connect attempts: 0", "hashreplay: 4 replayed, 0 recorded, 0 missed (replay)"]
    )
    assert sorted(line for line in replayed.outlines if line.startswith("TEXT:")) == live_texts
    assert [f.read_bytes() for f in recordings(project.path)] == [f.read_bytes() for f in files]


def test_env_and_config_modes(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    project.makepyprojecttoml(PYPROJECT + 'mode = "record-if-missing"\n')
    first = project.runpytest("-k", "test_chat")
    first.assert_outcomes(passed=1, deselected=3)
    first.stdout.fnmatch_lines(["*0 replayed, 1 recorded, 0 missed (record-if-missing)"])
    monkeypatch.setenv("INFERENCE_MODE", "replay")  # the environment wins over the file
    second = project.runpytest("-k", "test_chat")
    second.stdout.fnmatch_lines(["*1 replayed, 0 recorded, 0 missed (replay)"])
    third = project.runpytest("-k", "test_chat", "--inference-mode=live")  # the option wins
    third.stdout.fnmatch_lines(["*0 replayed, 0 recorded, 0 missed (live); 1 passed through"])


def test_miss_fails_fast_with_report_despite_sdk_retries(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_miss="""
        import os, httpx, openai

        def test_swallowed():
            sent = []  # every attempt the SDK makes passes its client's request hook
            http = httpx.Client(event_hooks={"request": [sent.append]})
            c = openai.OpenAI(
                base_url=os.environ["FAKE_URL"] + "/v1", api_key="sk-x", max_retries=2,
                http_client=http,
            )
            try:
                c.chat.completions.create(model="m", messages=[{"role": "user", "content": "new"}])
            except openai.APIError:
                pass  # the code under test swallows the error: the test must still fail
            finally:
                print(f"ATTEMPTS: {len(sent)}")
        """
    )
    result = project.runpytest("test_miss.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*hashreplay: no recording for POST http://127.0.0.1:*/v1/chat/completions (replay mode)",
            "*test:      test_miss.py::test_swallowed",
            "*hash:      *",
            "*to record it: INFERENCE_MODE=record-if-missing pytest test_miss.py::test_swallowed",
            "*hashreplay: 0 replayed, 0 recorded, 1 missed (replay)",
        ]
    )
    # the SDK made exactly one attempt, so no retry back-off ran (counted, not timed)
    result.stdout.fnmatch_lines(["ATTEMPTS: 1"])
    assert "Retrying request" not in result.stdout.str()


def test_miss_report_names_the_differing_field(project: pytest.Pytester) -> None:
    project.runpytest("--inference-mode=record", "-k", "test_chat").assert_outcomes(passed=1)
    app = project.path / "suite" / "test_app.py"
    app.write_text(app.read_text().replace('"content": "hello"', '"content": "bye"'))
    result = project.runpytest("-k", "test_chat")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*nearest:   suite/recordings/*.json (same test and endpoint)",
            "*differs:   body.messages[[]0[]].content: recorded 'hello', incoming 'bye'",
        ]
    )


def test_marker_overrides_the_mode_for_one_test(
    project: pytest.Pytester, upstream: FakeUpstream
) -> None:
    project.makepyfile(
        test_marked="""
        import os, httpx2, pytest

        @pytest.mark.hashreplay(mode="live")
        def test_live():
            assert httpx2.get(os.environ["FAKE_URL"] + "/plain").status_code == 200

        @pytest.mark.hashreplay(mode="bogus")
        def test_bad_marker():
            pass
        """
    )
    result = project.runpytest("test_marked.py")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*invalid @pytest.mark.hashreplay mode 'bogus': expected one of replay, record-if-missing, record, live*"
        ]
    )
    assert list(project.path.rglob("recordings/*.json")) == []
    assert len(upstream.calls) == 1


@pytest.mark.parametrize(
    ("args", "env"),
    [(["--inference-mode=sometimes"], None), ([], "sometimes")],
    ids=["option", "env"],
)
def test_invalid_mode_is_a_usage_error(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: list[str], env: str | None
) -> None:
    if env:
        monkeypatch.setenv("INFERENCE_MODE", env)
    result = project.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*invalid * 'sometimes': expected one of replay, record-if-missing, record, live"]
    )


def test_unknown_config_key_is_a_usage_error(project: pytest.Pytester) -> None:
    project.makepyprojecttoml(PYPROJECT + "replay_mode = 1\n")
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown key 'replay_mode'; valid keys are: *"])
    assert str(project.path / "pyproject.toml") in result.stderr.str()


def test_unreadable_recording_fails_only_its_test(project: pytest.Pytester) -> None:
    project.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    chat_file = next(
        f
        for f in recordings(project.path)
        if json.loads(f.read_text())["test_id"].endswith("test_chat")
    )
    chat_file.write_text('{"format_version": 99}')
    result = project.runpytest()
    result.assert_outcomes(passed=3, failed=1)
    shown = chat_file.relative_to(project.path)
    result.stdout.fnmatch_lines(
        [
            f"*unreadable recording: {shown}: format_version 99, this hashreplay reads format_version 1*",
            "*the file was left untouched",
            "*to fix it: re-record it with INFERENCE_MODE=record pytest suite/test_app.py::test_chat"
            f" (it replaces the file), or restore it with git (git checkout -- {shown})*",
        ]
    )
    assert chat_file.read_text() == '{"format_version": 99}'


def test_plugin_can_be_disabled(project: pytest.Pytester) -> None:
    result = project.runpytest("-p", "no:hashreplay", "-k", "test_chat")
    result.assert_outcomes(passed=1)  # live call to the fake upstream, nothing intercepted
    assert "hashreplay:" not in result.stdout.str()
    assert recordings(project.path) == []


def test_subprocess_run_with_threads(project: pytest.Pytester) -> None:
    """A real subprocess pytest run; calls from threads the code starts find their test."""
    project.makepyfile(
        test_threads="""
        import os, threading, httpx2

        def test_from_thread():
            out = {}
            def work():
                out["r"] = httpx2.get(os.environ["FAKE_URL"] + "/plain").text
            t = threading.Thread(target=work); t.start(); t.join()
            assert out["r"] == "hello from fake upstream"
        """
    )
    result = project.runpytest_subprocess("test_threads.py", "--inference-mode=record")
    result.assert_outcomes(passed=1)
    stored = [json.loads(p.read_text()) for p in project.path.glob("recordings/*.json")]
    assert [s["test_id"] for s in stored] == ["test_threads.py::test_from_thread"]


def test_xdist_workers_counts_are_merged(project: pytest.Pytester) -> None:
    recorded = project.runpytest("-n", "2", "--inference-mode=record", "-p", "xdist")
    recorded.assert_outcomes(passed=4)
    recorded.stdout.fnmatch_lines(["hashreplay: 0 replayed, 4 recorded, 0 missed (record)"])
    replayed = project.runpytest("-n", "2", "-p", "xdist")
    replayed.assert_outcomes(passed=4)
    replayed.stdout.fnmatch_lines(["hashreplay: 4 replayed, 0 recorded, 0 missed (replay)"])


def test_bad_callables_entry_is_a_usage_error(project: pytest.Pytester) -> None:
    project.makepyprojecttoml(PYPROJECT + 'callables = ["nowhere.at_all:f"]\n')
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*callables entry 'nowhere.at_all:f': cannot import module 'nowhere.at_all'*"]
    )


def test_wide_scoped_fixtures_record_under_their_own_id(
    project: pytest.Pytester, upstream: FakeUpstream
) -> None:
    """A session fixture's calls must not belong to whichever test ran first, or `-k` would
    miss in replay."""
    (project.path / "suite" / "conftest.py").write_text(
        "import os, httpx2, pytest\n"
        "@pytest.fixture(scope='session')\n"
        "def warm():\n"
        "    return httpx2.get(os.environ['FAKE_URL'] + '/plain').text\n"
    )
    (project.path / "suite" / "test_uses_fixture.py").write_text(
        "def test_first(warm):\n    assert warm == 'hello from fake upstream'\n"
        "def test_second(warm):\n    assert warm == 'hello from fake upstream'\n"
    )
    project.runpytest("--inference-mode=record", "suite/test_uses_fixture.py").assert_outcomes(
        passed=2
    )
    stored = [json.loads(p.read_text()) for p in recordings(project.path)]
    assert [s["test_id"] for s in stored] == ["suite/conftest.py::[fixture]warm"]
    result = project.runpytest("suite/test_uses_fixture.py", "-k", "second")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["hashreplay: 1 replayed, 0 recorded, 0 missed (replay)"])


def test_miss_in_a_session_fixture_fails_the_test_that_needs_it(project: pytest.Pytester) -> None:
    (project.path / "suite" / "conftest.py").write_text(
        "import os, httpx2, pytest\n"
        "@pytest.fixture(scope='session')\n"
        "def warm():\n"
        "    return httpx2.get(os.environ['FAKE_URL'] + '/plain').status_code\n"
    )
    (project.path / "suite" / "test_uses_fixture.py").write_text(
        "def test_needs_it(warm):\n    pass\ndef test_independent():\n    pass\n"
    )
    result = project.runpytest("suite/test_uses_fixture.py")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_needs_it*",
            "*hashreplay: no recording for GET http://127.0.0.1:*/plain (replay mode)",
            "*test:      suite/conftest.py::[[]fixture[]]warm",
            "*to record it: INFERENCE_MODE=record-if-missing pytest suite",
        ]
    )


def test_a_miss_fails_an_xfail_test_and_conftest_wrappers_see_the_failure(
    project: pytest.Pytester,
) -> None:
    """The hooks keep the plugin module's place among pytest's plugins: the miss is turned
    into a failure after `xfail` had its say, and before a conftest wrapper looks."""
    project.makeconftest(
        """
        import pytest

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_makereport(item, call):
            report = yield
            if call.when == "call":
                print(f"SEEN: {item.name} {report.outcome}")
            return report
        """
    )
    project.makepyfile(
        test_xfail="""
        import os, httpx2, pytest

        @pytest.mark.xfail(reason="the app is expected to fail here")
        def test_swallowed_miss():
            try:
                httpx2.get(os.environ["FAKE_URL"] + "/plain")
            except Exception:
                pass
        """
    )
    result = project.runpytest("-s", "test_xfail.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*SEEN: test_swallowed_miss failed*"])
