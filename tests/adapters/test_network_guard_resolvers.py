"""The network guard judges every resolver entry point Python offers as it judges
`getaddrinfo` (docs/design.md §11), in real pytest sessions: `gethostbyname`,
`gethostbyname_ex`, `gethostbyaddr`, `getnameinfo` (unless it asks for numbers only) and
asyncio's `loop.getaddrinfo` / `loop.getnameinfo`. Replay fails a test whose lookup of a
name not allowed, naming it; the recording modes list it; loopback names pass."""

from __future__ import annotations

import contextlib
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hashreplay import Mode
from hashreplay.adapters import activate, deactivate
from hashreplay.core.config import load_config
from hashreplay.engine.session import Session

pytest_plugins = ["pytester"]

#: Resolvers that know one remote name and one remote address and answer them without any
#: network; each announces its call with the audit event CPython's own raises (pinned by
#: `test_cpython_raises_the_events_the_guard_judges`). Anything else goes to the real one.
CONFTEST = """
import socket, sys

RESOLVER = '''
import socket, sys

NAME, ADDRESS = "api.example.test", "192.0.2.10"
NAMES = ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr", "getnameinfo")
_real = {n: getattr(socket, n) for n in NAMES}

def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
    if host != NAME:
        return _real["getaddrinfo"](host, port, family, type, proto, flags)
    sys.audit("socket.getaddrinfo", host, port, family, type, proto, flags)
    return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ADDRESS, int(port or 0)))]

def gethostbyname(host):
    if host != NAME:
        return _real["gethostbyname"](host)
    sys.audit("socket.gethostbyname", host)
    return ADDRESS

def gethostbyname_ex(host):
    if host != NAME:
        return _real["gethostbyname_ex"](host)
    sys.audit("socket.gethostbyname", host)
    return NAME, [], [ADDRESS]

def gethostbyaddr(address):
    if address not in (NAME, ADDRESS):
        return _real["gethostbyaddr"](address)
    sys.audit("socket.gethostbyaddr", address)
    return NAME, [], [ADDRESS]

def getnameinfo(sockaddr, flags):
    if sockaddr[0] != ADDRESS:
        return _real["getnameinfo"](sockaddr, flags)
    sys.audit("socket.getnameinfo", sockaddr)
    host = ADDRESS if flags & socket.NI_NUMERICHOST else NAME
    return host, str(sockaddr[1])
'''
# its frames count as the socket module's own, as the real resolver's would
namespace = {"__name__": "socket.fake_resolver"}
exec(compile(RESOLVER, "fake_resolver.py", "exec"), namespace)
for name in namespace["NAMES"]:
    setattr(socket, name, namespace[name])
"""

APP = """
import asyncio, socket

def test_gethostbyname():
    socket.gethostbyname("api.example.test")

def test_gethostbyname_ex():
    socket.gethostbyname_ex("api.example.test")

def test_gethostbyaddr():
    socket.gethostbyaddr("192.0.2.10")

def test_getnameinfo():
    socket.getnameinfo(("192.0.2.10", 443), 0)

async def test_loop_getaddrinfo():
    await asyncio.get_running_loop().getaddrinfo("api.example.test", 443)

async def test_loop_getnameinfo():
    await asyncio.get_running_loop().getnameinfo(("192.0.2.10", 443))

def test_numeric_getnameinfo():
    numbers = socket.NI_NUMERICHOST | socket.NI_NUMERICSERV
    assert socket.getnameinfo(("192.0.2.10", 443), numbers) == ("192.0.2.10", "443")

def test_swallowed():
    try:
        socket.gethostbyname("api.example.test")
    except Exception:
        pass

def test_loopback_names():
    assert socket.gethostbyname("localhost").startswith("127.")
    socket.gethostbyname_ex("localhost")
    socket.getnameinfo(("127.0.0.1", 80), 0)
"""

JUDGED = [
    ("test_gethostbyname", "api.example.test"),
    ("test_gethostbyname_ex", "api.example.test"),
    ("test_gethostbyaddr", "192.0.2.10"),
    ("test_getnameinfo", "192.0.2.10"),
    ("test_loop_getaddrinfo", "api.example.test"),
    ("test_loop_getnameinfo", "192.0.2.10"),
    ("test_swallowed", "api.example.test"),
]


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\naddopts = "-p no:hypothesispytest -p no:randomly"\n'
        'asyncio_mode = "auto"\nasyncio_default_fixture_loop_scope = "function"\n'
        "[tool.hashreplay]\n"
    )
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_app=APP)
    yield pytester


def test_replay_fails_a_lookup_through_every_resolver_naming_it(project: Any) -> None:
    run = project.runpytest()
    run.assert_outcomes(failed=len(JUDGED), passed=2)
    out = run.stdout.str()
    for test, host in JUDGED:
        assert f"FAILED test_app.py::{test}" in out
        run.stdout.fnmatch_lines(
            [
                f"*hashreplay: blocked a DNS lookup of {host} in replay mode",
                f"*  test:      test_app.py::{test}",
            ]
        )
    run.stdout.fnmatch_lines(["*  opened by: test_app at test_app.py:*"])


def test_an_allowed_name_and_address_pass(project: Any) -> None:
    project.makepyprojecttoml(
        '[tool.pytest.ini_options]\naddopts = "-p no:hypothesispytest -p no:randomly"\n'
        'asyncio_mode = "auto"\nasyncio_default_fixture_loop_scope = "function"\n'
        '[tool.hashreplay]\nallowed_hosts = ["api.example.test", "192.0.2.10"]\n'
    )
    project.runpytest().assert_outcomes(passed=len(JUDGED) + 2)


def test_recording_modes_list_the_lookups(project: Any) -> None:
    run = project.runpytest("--inference-mode=record")
    run.assert_outcomes(passed=len(JUDGED) + 2)
    run.stdout.fnmatch_lines(
        [
            "hashreplay: 2 connections were not recorded: "
            "192.0.2.10 (DNS lookup) from test_app; api.example.test (DNS lookup) from test_app"
        ]
    )


def test_cpython_raises_the_events_the_guard_judges() -> None:
    """The events (and their arguments) the guard listens to, as this interpreter raises
    them, on loopback names: no query leaves the machine."""
    seen: list[tuple[str, tuple[Any, ...]]] = []
    listening = [True]

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if listening[0] and event.startswith("socket.get"):
            seen.append((event, args))

    sys.addaudithook(hook)  # cannot be removed: it stops listening below
    try:
        real = sys.modules["_socket"]
        real.gethostbyname("localhost")
        real.gethostbyname_ex("localhost")
        real.getnameinfo(("127.0.0.1", 80), socket.NI_NUMERICHOST | socket.NI_NUMERICSERV)
        with contextlib.suppress(OSError):  # a hosts file with no name for it
            real.gethostbyaddr("127.0.0.1")
    finally:
        listening[0] = False
    assert seen == [
        ("socket.gethostbyname", ("localhost",)),
        ("socket.gethostbyname", ("localhost",)),
        ("socket.getnameinfo", (("127.0.0.1", 80),)),
        ("socket.gethostbyaddr", ("127.0.0.1",)),
    ]


def test_uninstall_restores_getnameinfo_and_the_asyncio_resolvers(tmp_path: Path) -> None:
    import asyncio.base_events

    loop = asyncio.base_events.BaseEventLoop
    before = (socket.getnameinfo, loop.getaddrinfo, loop.getnameinfo)
    activate(Session(load_config(tmp_path, env={}, mode=str(Mode.REPLAY))))
    try:
        assert socket.getnameinfo is not before[0]
        assert loop.getaddrinfo is not before[1] and loop.getnameinfo is not before[2]
    finally:
        deactivate()
    assert (socket.getnameinfo, loop.getaddrinfo, loop.getnameinfo) == before


@pytest.mark.parametrize("resolver", ["gethostbyname", "gethostbyname_ex", "getaddrinfo"])
def test_a_connection_to_an_address_a_resolver_answered_is_named_by_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resolver: str
) -> None:
    """Every forward resolver teaches the guard which name an address belongs to, so a
    blocked connection to it names the host the code asked for (and an `allowed_hosts`
    name would allow it), whichever resolver the code used."""
    from hashreplay import test_context
    from hashreplay.adapters import network_guard
    from hashreplay.core.errors import NetworkBlocked

    name, address = "api.example.test", "192.0.2.10"
    answers: dict[str, Any] = {
        "gethostbyname": lambda host: address,
        "gethostbyname_ex": lambda host: (f"edge.{name}", [], [address]),
        "getaddrinfo": lambda host, port, *a, **k: [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))
        ],
    }
    monkeypatch.setattr(socket, resolver, answers[resolver])  # before the guard: its "real" one
    activate(Session(load_config(tmp_path, env={}, mode=str(Mode.REPLAY))))
    try:
        if resolver == "getaddrinfo":
            socket.getaddrinfo(name, 443)
        else:
            getattr(socket, resolver)(name)
        assert name in network_guard._resolved[address]
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        with test_context("tests/test_app.py::test_it"), pytest.raises(NetworkBlocked) as blocked:
            sock.connect((address, 443))
        sock.close()
    finally:
        deactivate()
    assert name in str(blocked.value)
    assert getattr(socket, resolver) is answers[resolver]  # put back as it was
    assert network_guard._resolved == {}
