"""The network guard (docs/design.md §2) beyond TCP connects, in real pytest sessions: a
connection is judged by its own address (never by a name looked up before it), DNS lookups
and UDP datagrams are judged like connections, gRPC channels are judged when they are
created, and the recording modes list loopback connections too."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hashreplay import Mode
from hashreplay.adapters import activate, deactivate
from hashreplay.core.config import load_config
from hashreplay.core.network import BlockNetwork, NetworkRules, grpc_target_hosts
from hashreplay.engine.session import Session
from tests.sdks import sdk

pytest_plugins = ["pytester"]

#: A resolver that knows two names, each at a loopback address standing in for a remote host
#: (with `block_network = "all"` the guard treats them as it would remote ones). It announces
#: each lookup as the real one does (the `socket.getaddrinfo` audit event).
CONFTEST = """
import socket

RESOLVER = '''
import socket, sys

NAMES = {"api.example.test": "127.0.0.2", "db.example.test": "127.0.0.3"}
_real = socket.getaddrinfo

def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
    name = host.decode() if isinstance(host, bytes) else host
    if name in NAMES:
        sys.audit("socket.getaddrinfo", host, port, family, type, proto, flags)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (NAMES[name], int(port or 0)))]
    return _real(host, port, family, type, proto, flags)
'''
# its frames count as the socket module's own, as the real resolver's would
namespace = {"__name__": "socket.fake_resolver"}
exec(compile(RESOLVER, "fake_resolver.py", "exec"), namespace)
socket.getaddrinfo = namespace["getaddrinfo"]
"""

APP = """
import os, socket, threading

PORT = int(os.environ["GUARD_PORT"])

def test_connect_by_name():
    socket.create_connection(("db.example.test", PORT), timeout=5).close()

def test_lookup_then_other_address():
    socket.getaddrinfo("db.example.test", PORT)  # allowed, and resolves to 127.0.0.3
    socket.create_connection(("127.0.0.2", PORT), timeout=5).close()

def test_lookup_in_another_thread():
    thread = threading.Thread(target=socket.getaddrinfo, args=("db.example.test", PORT))
    thread.start()
    thread.join()
    socket.create_connection(("127.0.0.2", PORT), timeout=5).close()

def test_lookup_of_other_name():
    socket.getaddrinfo("api.example.test", 443)

def test_datagram():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(b"ping", ("127.0.0.2", PORT))

def test_loopback():
    socket.create_connection(("127.0.0.1", PORT), timeout=5).close()
"""


@pytest.fixture
def port() -> Iterator[int]:
    """One port open on 127.0.0.1, 127.0.0.2 and 127.0.0.3 (TCP servers that accept and
    close): the old guard matched a connection to the last lookup by port alone."""
    servers: list[socket.socket] = []
    number = 0
    for _ in range(20):  # a port free on all three addresses
        servers = []
        try:
            for address in ("127.0.0.1", "127.0.0.2", "127.0.0.3"):
                server = socket.socket()
                servers.append(server)
                server.bind((address, number))
                number = server.getsockname()[1]
                server.listen(16)
                server.settimeout(0.2)
            break
        except OSError:
            for server in servers:
                server.close()
            number = 0
    stop = threading.Event()

    def serve(server: socket.socket) -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.close()

    threads = [threading.Thread(target=serve, args=(s,), daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    try:
        yield number
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=2)
        for server in servers:
            server.close()


def project(pytester: pytest.Pytester, port: int, monkeypatch: pytest.MonkeyPatch, table: str):
    monkeypatch.setenv("GUARD_PORT", str(port))
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\naddopts = "-p no:hypothesispytest"\n'
        'asyncio_mode = "auto"\nasyncio_default_fixture_loop_scope = "function"\n'
        f"[tool.hashreplay]\n{table}\n"
    )
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_app=APP)
    return pytester


def test_a_connection_is_judged_by_its_own_address(
    pytester: pytest.Pytester, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    proj = project(
        pytester, port, monkeypatch, 'block_network = "all"\nallowed_hosts = ["db.example.test"]'
    )
    run = proj.runpytest("-k", "connect_by_name or other_address or another_thread")
    run.assert_outcomes(passed=1, failed=2, deselected=3)
    for test in ("test_lookup_then_other_address", "test_lookup_in_another_thread"):
        run.stdout.fnmatch_lines(
            [
                f"*hashreplay: blocked a connection to 127.0.0.2:{port} in replay mode",
                f"*  test:      test_app.py::{test}",
                '*to allow it: add "127.0.0.2" to allowed_hosts*',
            ]
        )
    assert "db.example.test:" not in run.stdout.str()  # never named by another's lookup


def test_recording_names_a_connection_by_what_resolved_to_it(
    pytester: pytest.Pytester, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    proj = project(pytester, port, monkeypatch, "")
    run = proj.runpytest("--inference-mode=record", "-k", "connect_by_name or other_address")
    run.assert_outcomes(passed=2, deselected=4)
    # db.example.test was looked up last, but 127.0.0.2 is not its address
    run.stdout.fnmatch_lines(
        [
            "hashreplay: 2 connections were not recorded: "
            f"127.0.0.2:{port} from test_app; db.example.test:{port} from test_app"
        ]
    )


@pytest.mark.parametrize("table", ["", 'block_network = "all"'])
def test_replay_fails_a_lookup_of_a_name_not_allowed(
    pytester: pytest.Pytester, port: int, monkeypatch: pytest.MonkeyPatch, table: str
) -> None:
    run = project(pytester, port, monkeypatch, table).runpytest("-k", "lookup_of_other_name")
    run.assert_outcomes(failed=1, deselected=5)
    run.stdout.fnmatch_lines(
        [
            "*hashreplay: blocked a DNS lookup of api.example.test in replay mode",
            "*  test:      test_app.py::test_lookup_of_other_name",
            "*  opened by: test_app at test_app.py:19",
            '*to allow it: add "api.example.test" to allowed_hosts*',
        ]
    )


@pytest.mark.parametrize(
    "table",
    ['allowed_hosts = ["api.example.test:443"]', 'passthrough = ["https://api.example.test/v1"]'],
)
def test_a_lookup_of_an_allowed_name_passes(
    pytester: pytest.Pytester, port: int, monkeypatch: pytest.MonkeyPatch, table: str
) -> None:
    run = project(pytester, port, monkeypatch, table).runpytest("-k", "lookup_of_other_name")
    run.assert_outcomes(passed=1, deselected=5)


def test_replay_fails_a_datagram_and_names_a_resolved_address(
    pytester: pytest.Pytester, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # allowed on another port: the lookup passes, the connection is judged with its name
    table = 'block_network = "all"\nallowed_hosts = ["db.example.test:1"]'
    run = project(pytester, port, monkeypatch, table).runpytest("-k", "datagram or by_name")
    run.assert_outcomes(failed=2, deselected=4)
    run.stdout.fnmatch_lines(
        [
            f"*hashreplay: blocked a UDP datagram to 127.0.0.2:{port} in replay mode",
            "*  opened by: test_app at test_app.py:23",
        ]
    )
    # a connection to an address that a name resolved to: named by it, the address beside
    run.stdout.fnmatch_lines(
        [
            f"*hashreplay: blocked a connection to db.example.test:{port} (127.0.0.3) in replay "
            "mode",
            '*to allow it: add "db.example.test" to allowed_hosts*',
        ]
    )


def test_recording_modes_list_loopback_lookups_and_datagrams(
    pytester: pytest.Pytester, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local server reached through a client no adapter covers records nothing: the
    summary says so, while replay lets loopback through by default."""
    proj = project(pytester, port, monkeypatch, "")
    selection = "loopback or datagram or lookup_of_other_name or connect_by_name"
    run = proj.runpytest("--inference-mode=record-if-missing", "-k", selection)
    run.assert_outcomes(passed=4, deselected=2)
    # the datagram went to the address api.example.test resolved to, so it is named so, and
    # the lookup is not listed again beside it
    run.stdout.fnmatch_lines(
        [
            "hashreplay: 3 connections were not recorded: "
            f"127.0.0.1:{port} from test_app; api.example.test:{port} (UDP) from test_app; "
            f"db.example.test:{port} from test_app"
        ]
    )
    run = proj.runpytest("--inference-mode=record", "-k", "lookup_of_other_name")
    run.stdout.fnmatch_lines(
        ["hashreplay: 1 connection was not recorded: api.example.test (DNS lookup) from test_app"]
    )
    proj.runpytest("-k", "loopback").assert_outcomes(passed=1, deselected=5)


@pytest.mark.parametrize(
    "table",
    ['block_network = "off"', 'allowed_hosts = ["127.0.0.1", "db.example.test"]'],
)
def test_recording_modes_leave_out_what_was_allowed_on_purpose(
    pytester: pytest.Pytester, port: int, monkeypatch: pytest.MonkeyPatch, table: str
) -> None:
    proj = project(pytester, port, monkeypatch, table)
    run = proj.runpytest("--inference-mode=record", "-k", "loopback or connect_by_name")
    run.assert_outcomes(passed=2, deselected=4)
    assert "not recorded" not in run.stdout.str()


# --- gRPC -------------------------------------------------------------------------------------

GRPC_APP = """
import grpc, grpc.aio

def test_insecure():
    grpc.insecure_channel("api.example.test:50051")

def test_secure():
    grpc.secure_channel(target="dns:///api.example.test", credentials=grpc.ssl_channel_credentials())

async def test_aio():
    await grpc.aio.insecure_channel("ipv4:10.1.2.3:50051").close()

def test_local():
    grpc.insecure_channel("localhost:50051").close()
    grpc.insecure_channel("unix:/tmp/hashreplay-guard.sock").close()
"""


def grpc_project(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, table: str, *, early: bool
) -> pytest.Pytester:
    sdk("grpc")
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\naddopts = "-p no:hypothesispytest"\n'
        'asyncio_mode = "auto"\nasyncio_default_fixture_loop_scope = "function"\n'
        f"[tool.hashreplay]\n{table}\n"
    )
    if early:  # imported before the plugin starts: patched at once, not on first import
        pytester.makeconftest("import grpc\n")
    pytester.makepyfile(test_grpc=GRPC_APP)
    return pytester


@pytest.mark.parametrize("early", [False, True], ids=["first-import", "imported-before"])
def test_replay_fails_grpc_channels_to_hosts_outside(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, early: bool
) -> None:
    run = grpc_project(pytester, monkeypatch, "", early=early).runpytest()
    run.assert_outcomes(passed=1, failed=3)
    run.stdout.fnmatch_lines(
        [
            "*hashreplay: blocked a gRPC channel to api.example.test:50051 in replay mode",
            "*  test:      test_grpc.py::test_insecure",
            "*  opened by: test_grpc at test_grpc.py:4",
        ]
    )
    run.stdout.fnmatch_lines(["*blocked a gRPC channel to api.example.test:443 in replay mode"])
    run.stdout.fnmatch_lines(["*blocked a gRPC channel to 10.1.2.3:50051 in replay mode"])


def test_grpc_channels_to_allowed_hosts_pass(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = 'allowed_hosts = ["api.example.test", "10.1.2.3:50051"]'
    run = grpc_project(pytester, monkeypatch, table, early=False).runpytest()
    run.assert_outcomes(passed=4)


def test_recording_modes_list_grpc_channels(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    proj = grpc_project(pytester, monkeypatch, "", early=False)
    run = proj.runpytest("--inference-mode=record", "-k", "insecure or local")
    run.assert_outcomes(passed=2, deselected=2)
    run.stdout.fnmatch_lines(
        [
            "hashreplay: 2 connections were not recorded: "
            "api.example.test:50051 (gRPC) from test_grpc; localhost:50051 (gRPC) from test_grpc"
        ]
    )


def test_deactivate_restores_grpc_and_getaddrinfo(tmp_path: Path) -> None:
    grpc = sdk("grpc")
    aio = sdk("grpc.aio")
    originals = (grpc.insecure_channel, grpc.secure_channel, aio.insecure_channel)
    getaddrinfo = socket.getaddrinfo
    activate(Session(load_config(tmp_path, env={}, mode=str(Mode.REPLAY))))
    try:
        assert grpc.insecure_channel is not originals[0]
        assert grpc.insecure_channel.__wrapped__ is originals[0]
        assert aio.insecure_channel.__wrapped__ is originals[2]
        assert socket.getaddrinfo is not getaddrinfo
        grpc.insecure_channel("api.example.test:443").close()  # outside a test: passes
    finally:
        deactivate()
    assert (grpc.insecure_channel, grpc.secure_channel, aio.insecure_channel) == originals
    assert socket.getaddrinfo is getaddrinfo


@pytest.mark.parametrize(
    ("target", "hosts"),
    [
        ("api.example.com:50051", [("api.example.com", 50051)]),
        ("api.example.com", [("api.example.com", 443)]),
        ("dns:///api.example.com:8443", [("api.example.com", 8443)]),
        ("dns://8.8.8.8/api.example.com", [("api.example.com", 443)]),
        ("dns:api.example.com:1", [("api.example.com", 1)]),
        ("ipv4:10.0.0.1:5,10.0.0.2", [("10.0.0.1", 5), ("10.0.0.2", 443)]),
        ("ipv6:[::1]:7", [("::1", 7)]),
        ("[2001:db8::1]:9", [("2001:db8::1", 9)]),
        ("localhost:50051", [("localhost", 50051)]),
        ("xds:///service", [("service", 443)]),
        ("unix:/tmp/x.sock", []),
        ("unix-abstract:name", []),
        ("vsock:3:50051", []),
    ],
)
def test_grpc_targets(target: str, hosts: list[tuple[str, int]]) -> None:
    assert grpc_target_hosts(target) == hosts


def test_rules_judge_the_address_and_only_a_resolved_name() -> None:
    rules = NetworkRules(BlockNetwork.ALL, ["db.internal", "cache:6379"], [])
    assert rules.allows(5432, "10.1.2.3", "db.internal")
    assert not rules.allows(5432, "10.1.2.3")
    assert rules.allows(6379, "10.1.2.4", "Cache.")
    assert not rules.allows(6380, "10.1.2.4", "cache")
    assert not rules.explicitly_allows(80, "127.0.0.1")
    default = NetworkRules(BlockNetwork.NON_LOOPBACK, [], [])
    assert default.allows(80, "127.0.0.1") and not default.explicitly_allows(80, "127.0.0.1")
    assert not default.allows(80, "93.184.216.34", "localhost")  # loopback by address only
    assert rules.allows_name("cache") and rules.allows_name("DB.internal")
    assert not rules.allows_name("api.example.com")
    assert NetworkRules(BlockNetwork.OFF, [], []).allows_name("api.example.com")


def test_a_passthrough_url_allows_its_port_only() -> None:
    rules = NetworkRules(BlockNetwork.ALL, [], ["http://server.internal:8000/v1"])
    assert rules.allows(8000, "10.1.2.3", "server.internal")
    assert not rules.allows(8001, "10.1.2.3", "server.internal")
    assert not rules.explicitly_allows(8001, "10.1.2.3", "server.internal")  # listed
    assert rules.allows_name("server.internal")  # a lookup has no port
    implied = NetworkRules(BlockNetwork.ALL, [], ["https://api.example.test"])
    assert implied.allows(443, "10.1.2.3", "api.example.test")
    assert not implied.allows(80, "10.1.2.3", "api.example.test")


@pytest.mark.parametrize(
    ("entry", "address", "allowed", "refused"),
    [
        ("db.internal", "db.internal", [5432, 1], []),
        ("DB.internal.:5432", "db.internal", [5432], [5433]),
        ("[::2]:9000", "::2", [9000], [9001]),
        ("::2", "::2", [1, 9000], []),
        ("http://db.internal:8080/api", "db.internal", [8080], [80]),
        ("https://db.internal", "db.internal", [443], [8443]),
    ],
)
def test_allowed_hosts_entries_name_a_host_and_maybe_its_port(
    entry: str, address: str, allowed: list[int], refused: list[int]
) -> None:
    rules = NetworkRules(BlockNetwork.ALL, [entry], [])
    for port in allowed:
        assert rules.allows(port, address), (entry, port)
    for port in refused:
        assert not rules.allows(port, address), (entry, port)


@pytest.mark.parametrize(
    ("url", "under"),
    [
        ("http://localhost:8000/v1/chat", True),
        ("http://LOCALHOST:8000/v1?x=1", True),
        ("http://localhost:8000/v1", True),
        ("http://localhost:8000/v10", False),
        ("http://localhost:8001/v1/chat", False),
        ("https://localhost:8000/v1/chat", False),
        ("http://localhost/v1", False),
    ],
)
def test_passthrough_urls_match_scheme_host_port_and_path(url: str, under: bool) -> None:
    from hashreplay.core.network import under_passthrough

    assert under_passthrough(("http://localhost:8000/v1",), url) is under
    assert under_passthrough(("http://localhost:80",), "http://localhost/v1")  # implied port


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ('allowed_hosts = ["db.internal:http"]', "allowed_hosts entry 'db.internal:http'"),
        ('allowed_hosts = ["http://db:99999"]', "allowed_hosts entry 'http://db:99999'"),
        ('passthrough = ["localhost:8000"]', "passthrough entry 'localhost:8000'"),
    ],
)
def test_a_bad_network_entry_is_a_config_error_naming_it(
    tmp_path: Path, table: str, named: str
) -> None:
    from hashreplay.core.errors import ConfigError

    (tmp_path / "pyproject.toml").write_text(f"[tool.hashreplay]\n{table}\n")
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_config(tmp_path)
