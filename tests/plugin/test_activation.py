"""Activation (docs/design.md §16): installed, the plugin changes nothing in a project that
has not opted in (no adapter, no network guard, no placeholders, no files, no summary line);
a `[tool.hashreplay]` table or a mode turns it on. Each run is a subprocess, so an audit hook
armed by an earlier in-process run cannot hide one armed by this run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.upstream import FakeUpstream

pytest_plugins = ["pytester"]

PYTEST_TABLE = '[tool.pytest.ini_options]\naddopts = "-p no:hypothesispytest -p no:asyncio"\n'

#: A non-loopback address that no test here reaches (TEST-NET-2): only the answer differs,
#: the operating system's (refused, unreachable, timed out) or the network guard's.
REMOTE = "198.51.100.1"

APP = f"""
import os, socket, sys
import httpx

def test_http_goes_out_untouched():
    reply = httpx.get(os.environ["FAKE_URL"] + "/v1/models", timeout=5)
    assert reply.status_code == 200

def test_socket_goes_out_untouched():
    try:
        socket.create_connection(("{REMOTE}", 9), timeout=0.3).close()
    except OSError as exc:
        assert "hashreplay" not in str(exc), exc  # the system's answer, not the guard's

def test_nothing_is_armed():
    guard = sys.modules.get("hashreplay.adapters.network_guard")
    assert guard is None or not guard._hook_added[0], "the network guard's audit hook"
    assert not hasattr(httpx.HTTPTransport.handle_request, "__wrapped__")
    assert not hasattr(httpx.AsyncHTTPTransport.handle_async_request, "__wrapped__")
    assert "OPENAI_API_KEY" not in os.environ  # no keyless placeholder
"""

MARKED = """
import pytest

@pytest.mark.hashreplay(mode="record", record_timing=True)
def test_marked_still_collects():
    pass

def test_fixture_says_how_to_turn_it_on(hashreplay):
    pass
"""


@pytest.fixture
def project(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    for name in ("INFERENCE_MODE", "HASHREPLAY_ROOT", "OPENAI_API_KEY", "HASHREPLAY_PACE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FAKE_URL", upstream.url)
    pytester.makepyprojecttoml(PYTEST_TABLE)
    pytester.makepyfile(test_app=APP)
    return pytester


def run(project: pytest.Pytester, *args: str) -> pytest.RunResult:
    return project.runpytest_subprocess("-p", "no:cacheprovider", *args)


def written(root: Path) -> list[str]:
    """Every file under `root` that neither the test nor pytester made."""
    ours = {"pyproject.toml", "test_app.py", "test_marked.py", "stdout", "stderr"}
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file()
        and p.name not in ours
        and "__pycache__" not in p.parts
        and not p.parts[len(root.parts)].startswith("runpytest-")
    )


def test_a_project_without_the_table_or_a_mode_is_left_alone(
    project: pytest.Pytester, upstream: FakeUpstream
) -> None:
    result = run(project)
    result.assert_outcomes(passed=3)
    assert len(upstream.calls) == 1  # the call went out: nothing intercepted it
    assert "hashreplay:" not in result.stdout.str()  # no summary line, no hint
    assert written(project.path) == []  # no recordings, no .hashreplay/, no usage log
    assert not (project.path / ".hashreplay").exists()


def test_the_same_project_with_the_table_is_intercepted(
    project: pytest.Pytester, upstream: FakeUpstream
) -> None:
    project.makepyprojecttoml(PYTEST_TABLE + "[tool.hashreplay]\n")
    result = run(project)
    result.assert_outcomes(failed=3)
    assert upstream.calls == []  # replay never reached the upstream
    result.stdout.fnmatch_lines(
        [
            "*hashreplay: no recording for GET http://127.0.0.1:*/v1/models (replay mode)*",
            f"*hashreplay: blocked a connection to {REMOTE}:9 in replay mode*",
            "*the network guard's audit hook*",
            "hashreplay: 0 replayed, 0 recorded, 2 missed (replay)",  # the miss and the block
        ]
    )
    assert (project.path / ".hashreplay").is_dir()


@pytest.mark.parametrize("how", ["option", "env"])
def test_a_mode_alone_turns_it_on(
    project: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    args = ["-k", "http_goes"]
    if how == "option":
        args.append("--inference-mode=replay")
    else:
        monkeypatch.setenv("INFERENCE_MODE", "replay")
    result = run(project, *args)
    result.assert_outcomes(failed=1, deselected=2)
    assert upstream.calls == []
    result.stdout.fnmatch_lines(["hashreplay: 0 replayed, 0 recorded, 1 missed (replay)"])
    assert "hashreplay init" not in result.stdout.str()  # the hint is for recording runs


def test_a_recording_run_without_the_table_ends_with_the_init_hint(
    project: pytest.Pytester, upstream: FakeUpstream
) -> None:
    result = run(project, "--inference-mode=record-if-missing", "-k", "http_goes")
    result.assert_outcomes(passed=1, deselected=2)
    assert len(upstream.calls) == 1
    result.stdout.fnmatch_lines(
        [
            "hashreplay: 0 replayed, 1 recorded, 0 missed (record-if-missing)",
            "hashreplay: this project has no [tool.hashreplay] table in pyproject.toml, so "
            "plain `pytest` will not replay these recordings: run `hashreplay init` once",
        ]
    )
    # with the table, the same run says nothing of it
    project.makepyprojecttoml(PYTEST_TABLE + "[tool.hashreplay]\n")
    again = run(project, "--inference-mode=record", "-k", "http_goes")
    again.assert_outcomes(passed=1, deselected=2)
    assert "hashreplay init" not in again.stdout.str()


def test_markers_collect_and_the_fixture_fails_clearly_when_not_opted_in(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(test_marked=MARKED)
    result = run(project, "--strict-markers", "test_marked.py")
    result.assert_outcomes(passed=1, errors=1)  # fails at setup, where fixtures do
    assert (
        "the hashreplay fixture: hashreplay is not active in this project: run `hashreplay "
        "init` (adds [tool.hashreplay] to pyproject.toml), or give a mode (INFERENCE_MODE=replay "
        "or --inference-mode=replay)"
    ) in result.stdout.lines
    assert written(project.path) == []


def test_prune_without_opting_in_is_a_usage_error(project: pytest.Pytester) -> None:
    result = run(project, "--hashreplay-prune")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*hashreplay: --hashreplay-prune: hashreplay is not active in this project: run *"]
    )


def test_plugin_off_by_name_still_works(project: pytest.Pytester, upstream: FakeUpstream) -> None:
    project.makepyprojecttoml(PYTEST_TABLE + "[tool.hashreplay]\n")
    result = run(project, "-p", "no:hashreplay", "-k", "http_goes")
    result.assert_outcomes(passed=1, deselected=2)
    assert len(upstream.calls) == 1
