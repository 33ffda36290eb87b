"""The network guard (docs/design.md §2) in real pytest sessions: a connection that no
adapter handled fails a replay-mode test (even when the code swallows the error), is listed
in the recording modes' summary, and loopback, `allowed_hosts` and `passthrough` pass."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from hashreplay.core.network import BlockNetwork, NetworkRules, is_loopback

pytest_plugins = ["pytester"]

#: A second loopback address stands in for a host outside this machine: with
#: `block_network = "all"` the guard treats it as it would a remote host.
OTHER = "127.0.0.2"

APP = """
import asyncio, ftplib, os, socket

PORT = int(os.environ["OTHER_PORT"])

def test_raw_socket():
    socket.create_connection(("127.0.0.2", PORT), timeout=5).close()

def test_swallowed():
    try:
        ftplib.FTP().connect("127.0.0.2", PORT, timeout=5)  # a library no adapter covers
    except Exception:
        pass  # the code under test hides the failure: the test must fail all the same

async def test_asyncio():
    reader, writer = await asyncio.open_connection("127.0.0.2", PORT)
    writer.close()
"""


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP server on 127.0.0.2 that accepts and closes (stands in for a remote host)."""
    server = socket.socket()
    server.bind((OTHER, 0))
    server.listen(16)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=2)
        server.close()


def project(pytester: pytest.Pytester, port: int, monkeypatch: pytest.MonkeyPatch, table: str):
    monkeypatch.setenv("OTHER_PORT", str(port))
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\naddopts = "-p no:hypothesispytest"\n'
        'asyncio_mode = "auto"\nasyncio_default_fixture_loop_scope = "function"\n'
        f"[tool.hashreplay]\n{table}\n"
    )
    pytester.makepyfile(test_app=APP)
    return pytester


def test_replay_fails_each_test_that_connects_outside(
    pytester: pytest.Pytester, listener: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = project(pytester, listener, monkeypatch, 'block_network = "all"').runpytest()
    run.assert_outcomes(failed=3)
    run.stdout.fnmatch_lines(
        [
            f"*hashreplay: blocked a connection to 127.0.0.2:{listener} in replay mode",
            "*  test:      test_app.py::test_raw_socket",
            "*  opened by: test_app at test_app.py:6",
            "*no adapter handled it: the library that opened it is not intercepted*",
            '*to allow it: add "127.0.0.2" to allowed_hosts (or its URL to passthrough)*',
        ]
    )
    run.stdout.fnmatch_lines(
        ["*  test:      test_app.py::test_swallowed", "*  opened by: ftplib at test_app.py:10"]
    )
    run.stdout.fnmatch_lines(["*  test:      test_app.py::test_asyncio"])


def test_loopback_passes_by_default(
    pytester: pytest.Pytester, listener: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = project(pytester, listener, monkeypatch, "").runpytest()
    run.assert_outcomes(passed=3)


@pytest.mark.parametrize(
    "table",
    [
        'block_network = "all"\nallowed_hosts = ["127.0.0.2"]',
        'block_network = "all"\nallowed_hosts = ["127.0.0.2:{port}"]',
        'block_network = "all"\npassthrough = ["http://127.0.0.2:{port}"]',
        'block_network = "off"',
    ],
    ids=["allowed-host", "allowed-host-port", "passthrough", "off"],
)
def test_allowed_connections_pass(
    pytester: pytest.Pytester, listener: int, monkeypatch: pytest.MonkeyPatch, table: str
) -> None:
    run = project(pytester, listener, monkeypatch, table.format(port=listener)).runpytest()
    run.assert_outcomes(passed=3)


def test_a_passthrough_url_opens_its_port_only(
    pytester: pytest.Pytester, listener: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = listener + 1 if listener < 65535 else listener - 1
    table = f'block_network = "all"\npassthrough = ["http://127.0.0.2:{other}"]'
    proj = project(pytester, listener, monkeypatch, table)
    replayed = proj.runpytest("-k", "raw_socket")
    replayed.assert_outcomes(failed=1, deselected=2)
    replayed.stdout.fnmatch_lines([f"*hashreplay: blocked a connection to 127.0.0.2:{listener}*"])
    recorded = proj.runpytest("--inference-mode=record-if-missing", "-k", "raw_socket")
    recorded.assert_outcomes(passed=1, deselected=2)
    recorded.stdout.fnmatch_lines(
        [f"hashreplay: 1 connection was not recorded: 127.0.0.2:{listener} from test_app"]
    )


def test_recording_modes_list_what_was_not_recorded(
    pytester: pytest.Pytester, listener: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    proj = project(pytester, listener, monkeypatch, 'block_network = "all"')
    run = proj.runpytest("--inference-mode=record-if-missing", "-k", "raw_socket or swallowed")
    run.assert_outcomes(passed=2, deselected=1)
    run.stdout.fnmatch_lines(
        [f"hashreplay: 1 connection was not recorded: 127.0.0.2:{listener} from ftplib, test_app"]
    )


def test_live_mode_says_nothing(
    pytester: pytest.Pytester, listener: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    proj = project(pytester, listener, monkeypatch, 'block_network = "all"')
    run = proj.runpytest("--inference-mode=live")
    run.assert_outcomes(passed=3)
    assert "not recorded" not in run.stdout.str()


# --- the rules --------------------------------------------------------------------------------


def test_loopback_names() -> None:
    for host in ("127.0.0.1", "127.3.4.5", "::1", "localhost", "api.localhost"):
        assert is_loopback(host)
    for host in ("10.0.0.1", "93.184.216.34", "example.com", "::ffff:8.8.8.8", ""):
        assert not is_loopback(host)


def test_rules() -> None:
    rules = NetworkRules(BlockNetwork.NON_LOOPBACK, ["db.internal", "Cache:6379"], [])
    assert rules.allows(443, "127.0.0.1")
    assert rules.allows(5432, "10.1.2.3", "db.internal")  # the address, the name it came from
    assert rules.allows(6379, "cache")
    assert not rules.allows(6380, "cache")
    assert not rules.allows(443, "93.184.216.34", "api.example.com")
    strict = NetworkRules(BlockNetwork.ALL, [], ["http://localhost:8000/v1"])
    assert not strict.allows(80, "127.0.0.1")
    assert strict.allows(8000, "127.0.0.1", "localhost")
    assert NetworkRules(BlockNetwork.OFF, [], []).allows(443, "93.184.216.34")


def test_block_network_value_is_checked() -> None:
    with pytest.raises(ValueError, match="must be one of 'non-loopback', 'all', 'off'"):
        BlockNetwork.parse("sometimes")
