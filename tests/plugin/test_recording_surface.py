"""pytest-recording's surface answered by hashreplay (docs/usage.md, "Moving off
pytest-recording"): in a project that opted in and where pytest-recording is not installed
(`-p no:recording` stands in for `pip uninstall`), a suite written for it runs unchanged, with
vcrpy importable or not (a directory on PYTHONPATH whose `vcr` raises ModuleNotFoundError
stands in for its uninstall); where pytest-recording is installed hashreplay registers none of
its names and says once how to hand them over. Each run is a subprocess: the network guard's
audit hook of one run must not decide another's."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.upstream import FakeUpstream

pytest_plugins = ["pytester"]

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest -p no:asyncio --strict-markers"

[tool.hashreplay]
"""

#: A conftest a pytest-recording suite keeps: its hook (never called here) and vcr_config.
CONFTEST = """
import pytest

def pytest_recording_configure(config, vcr):
    raise AssertionError("hashreplay never calls pytest_recording_configure")

@pytest.fixture(scope="module")
def vcr_config():
    return {"filter_headers": ["authorization"], "decode_compressed_response": True}
"""

SUITE = """
import json, os
import httpx
import pytest

def chat(text):
    reply = httpx.post(os.environ["FAKE_URL"] + "/v1/chat/completions?trace=1",
                       json={"model": "gpt-fake-1", "messages": [{"role": "user", "content": text}]},
                       timeout=5)
    return reply.json()["choices"][0]["message"]["content"]

@pytest.mark.vcr("extra.yaml", record_mode="once", match_on=["method", "uri"])
def test_vcr_marker_and_fixture(vcr, vcr_config, vcr_cassette_dir):
    assert len(vcr) == 0 and vcr.play_count == 0 and vcr.requests == []
    print("TEXT:", chat("hello"))
    assert len(vcr) == 1
    request, response = vcr.data[0]
    assert request.method == "POST" and request.path == "/v1/chat/completions"
    assert request.query == [("trace", "1")]
    assert json.loads(request.body)["messages"][0]["content"] == "hello"
    assert vcr.requests[0].uri == "/v1/chat/completions?trace=1"
    assert response == vcr.responses[0] and response["status"]["code"] == 200
    replaying = vcr.write_protected
    assert vcr.play_count == (1 if replaying else 0)
    assert vcr.all_played
    assert vcr_config["filter_headers"] == ["authorization"]  # the conftest's, untouched
    assert vcr_cassette_dir.endswith(os.path.join("cassettes", "test_suite"))

@pytest.mark.default_cassette("shared")
@pytest.mark.vcr
def test_default_cassette_marker():
    print("TEXT:", chat("again"))

@pytest.mark.allowed_hosts("example.com")
def test_allowed_hosts_marker_is_accepted():
    pass

def test_vcr_fixture_without_the_marker(vcr):
    assert len(vcr) == 0 and repr(vcr) == "<Cassette containing 0 recorded response(s)>"
"""


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("INFERENCE_MODE", "HASHREPLAY_ROOT", "PYTEST_ADDOPTS", "HASHREPLAY_PACE"):
        monkeypatch.delenv(name, raising=False)


def block_vcr(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `import vcr` fail as it does where vcrpy is not installed."""
    blocker = root.parent / f"{root.name}-no-vcrpy"
    (blocker / "vcr").mkdir(parents=True)
    (blocker / "vcr" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'vcr'\", name='vcr')\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(blocker), os.environ["PYTHONPATH"]]))


@pytest.fixture(params=["vcrpy installed", "vcrpy not importable"])
def vcrpy(
    request: pytest.FixtureRequest, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> bool:
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    if request.param == "vcrpy not importable":
        block_vcr(pytester.path, monkeypatch)
        return False
    return True


def test_a_pytest_recording_suite_records_and_replays_unchanged(
    pytester: pytest.Pytester,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    clean_env: None,
    vcrpy: bool,
) -> None:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    probe = pytester.runpytest_subprocess("-p", "no:recording", "-q", "-k", "nothing")
    probe.stdout.no_fnmatch_line("*pytest-recording is installed*")

    recorded = pytester.runpytest_subprocess("-p", "no:recording", "--record-mode=once", "-s")
    recorded.assert_outcomes(passed=4)
    recorded.stdout.fnmatch_lines(
        ["hashreplay: 0 replayed, 2 recorded, 0 missed (record-if-missing)"]
    )
    upstream.stop()
    replayed = pytester.runpytest_subprocess("-p", "no:recording", "--record-mode=none", "-s")
    replayed.assert_outcomes(passed=4)
    replayed.stdout.fnmatch_lines(["hashreplay: 2 replayed, 0 recorded, 0 missed (replay)"])
    assert not (pytester.path / "cassettes").exists()  # vcr_cassette_dir is only a name


@pytest.mark.parametrize(
    ("given", "env", "mode"),
    [
        (["--record-mode=none"], None, "replay"),
        (["--record-mode=new_episodes"], None, "record-if-missing"),
        (["--record-mode=rewrite"], None, "record"),
        (["--record-mode=all"], None, "record"),
        (["--disable-recording", "--record-mode=all"], None, "live"),
        # hashreplay's own names win over pytest-recording's, wherever they are given
        (["--record-mode=all"], "replay", "replay"),
        (["--record-mode=none", "--inference-mode=record"], "live", "record"),
    ],
)
def test_record_mode_maps_to_a_mode_below_hashreplays_own(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    clean_env: None,
    given: list[str],
    env: str | None,
    mode: str,
) -> None:
    if env is not None:
        monkeypatch.setenv("INFERENCE_MODE", env)
    pytester.makepyprojecttoml(PYPROJECT + 'mode = "live"\n')
    pytester.makepyfile("def test_x(hashreplay):\n    print('MODE:', hashreplay.mode.value)\n")
    result = pytester.runpytest_subprocess("-p", "no:recording", "-s", *given)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*MODE: {mode}"])


def test_an_unknown_record_mode_lists_the_valid_ones(
    pytester: pytest.Pytester, clean_env: None
) -> None:
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:recording", "--record-mode=never")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*hashreplay: --record-mode 'never' is not one of pytest-recording's record modes: "
            "none (replay), once (record-if-missing), new_episodes (record-if-missing), "
            "all (record), rewrite (record); or give hashreplay's own --inference-mode"
        ]
    )


def test_a_project_that_did_not_opt_in_gets_none_of_it(
    pytester: pytest.Pytester, clean_env: None
) -> None:
    """No fixture, no marker, no hookspec: the plugin changes nothing there (its options
    exist, and giving one says how to turn hashreplay on)."""
    pytester.makepyprojecttoml(PYPROJECT.replace("[tool.hashreplay]", ""))
    pytester.makepyfile("def test_x(vcr):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:recording")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'vcr' not found*"])
    given = pytester.runpytest_subprocess("-p", "no:recording", "--record-mode=none")
    assert given.ret == pytest.ExitCode.USAGE_ERROR
    given.stderr.fnmatch_lines(["*hashreplay: --record-mode: hashreplay is not active*"])


def test_where_pytest_recording_is_installed_its_names_stay_its_own(
    pytester: pytest.Pytester, clean_env: None
) -> None:
    pytest.importorskip("pytest_recording")
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(
        "import pytest\n\n"
        "def test_its_fixture(vcr):\n    assert vcr is None  # pytest-recording's, unmarked\n"
    )
    result = pytester.runpytest_subprocess("--record-mode=none")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "hashreplay: pytest-recording is installed, so the vcr marker and fixture, "
            "--record-mode and --block-network are its own (vcrpy replays cassettes); to let "
            "hashreplay answer them: pytest -p no:recording, or pip uninstall pytest-recording"
        ]
    )
    listed = pytester.runpytest_subprocess("--markers")
    listed.stdout.fnmatch_lines(["@pytest.mark.vcr: Mark the test as using VCR.py."])
    listed.stdout.no_fnmatch_line("*accepted and ignored by hashreplay*")


# --- the network guard per test ---------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


GUARDED = """
import os, socket
import pytest

def reach():
    socket.create_connection(("127.0.0.1", int(os.environ["PORT"])), timeout=2).close()

def test_default():
    reach()

@pytest.mark.hashreplay(block_network="all")
def test_hashreplay_all():
    reach()

@pytest.mark.hashreplay(block_network="all", allowed_hosts=["127.0.0.1"])
def test_hashreplay_all_allowed():
    reach()

@pytest.mark.block_network
def test_block_network():
    reach()

@pytest.mark.block_network(allowed_hosts=["127.0.0.1"])
def test_block_network_allowed():
    reach()

@pytest.mark.block_network(allow_private_ips=True)
def test_block_network_private():
    reach()

@pytest.mark.block_network
@pytest.mark.hashreplay(block_network="off")
def test_hashreplay_wins():
    reach()
"""


def test_block_network_per_test_through_either_marker(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, clean_env: None, listener: int
) -> None:
    monkeypatch.setenv("PORT", str(listener))
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_guarded=GUARDED)
    result = pytester.runpytest_subprocess("-p", "no:recording", "-rA")
    result.assert_outcomes(passed=5, failed=2)
    result.stdout.fnmatch_lines_random(
        [
            "PASSED test_guarded.py::test_default",
            "FAILED test_guarded.py::test_hashreplay_all - hashreplay: blocked a conn*",
            "PASSED test_guarded.py::test_hashreplay_all_allowed",
            "FAILED test_guarded.py::test_block_network - hashreplay: blocked a conn*",
            "PASSED test_guarded.py::test_block_network_allowed",
            "PASSED test_guarded.py::test_block_network_private",
            "PASSED test_guarded.py::test_hashreplay_wins",
        ]
    )
    result.stdout.fnmatch_lines([f"*blocked a connection to 127.0.0.1:{listener} in replay mode"])
    # the run's own rule is untouched by a test's: the project's default still lets it through
    alone = pytester.runpytest_subprocess("-p", "no:recording", "-k", "default or all_allowed")
    alone.assert_outcomes(passed=2)


def test_block_network_and_allowed_hosts_options(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, clean_env: None, listener: int
) -> None:
    monkeypatch.setenv("PORT", str(listener))
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_guarded=GUARDED)
    blocked = pytester.runpytest_subprocess(
        "-p", "no:recording", "--block-network", "-k", "default"
    )
    blocked.assert_outcomes(failed=1)
    blocked.stdout.fnmatch_lines([f"*blocked a connection to 127.0.0.1:{listener}*"])
    allowed = pytester.runpytest_subprocess(
        "-p", "no:recording", "--block-network", "--allowed-hosts=example.com,127.0.0.1",
        "-k", "default",
    )  # fmt: skip
    allowed.assert_outcomes(passed=1)
    private = pytester.runpytest_subprocess(
        "-p", "no:recording", "--block-network", "--allow-private-ips", "-k", "default"
    )
    private.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        (
            'hashreplay(block_network="some")',
            "*@pytest.mark.hashreplay block_network='some' must be one of 'non-loopback', "
            "'all', 'off'*",
        ),
        (
            'hashreplay(allowed_hosts=[".*\\\\.example\\\\.com"])',
            "*@pytest.mark.hashreplay allowed_hosts: '.*\\\\.example\\\\.com' looks like a "
            "regular expression; allowed_hosts entries are host names*",
        ),
        (
            "block_network(hosts=['a'])",
            "*@pytest.mark.block_network takes only the keywords allowed_hosts=, "
            "allow_private_ips=; got () and ?'hosts'?",
        ),
    ],
)
def test_a_network_marker_it_cannot_read_is_an_error_naming_it(
    pytester: pytest.Pytester, clean_env: None, marker: str, message: str
) -> None:
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(f"import pytest\n\n@pytest.mark.{marker}\ndef test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:recording")
    assert result.ret != 0
    pytest.LineMatcher(result.outlines + result.errlines).fnmatch_lines([message])
