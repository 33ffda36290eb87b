"""Slow clients: clients that send their request head or body a byte at a time are cut
off with a JSON 408 after --header-timeout / --body-timeout, never held open forever."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from tests.server.conftest import Servers

SLOW_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nX-Slow: "
SLOW_BODY = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\n"
    b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
)
#: Bound of the whole test: far above the 1 s limits, so a loaded machine cannot fail it.
GIVE_UP = 60.0


def drip(port: int, starts: list[bytes]) -> list[bytes]:
    """Open one connection per start, then send one byte on each every 0.2 s until the
    server closes it; returns what each connection received."""
    conns = []
    for start in starts:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(start)
        sock.setblocking(False)
        conns.append(sock)
    received = [b""] * len(conns)
    open_ = set(range(len(conns)))
    deadline = time.monotonic() + GIVE_UP
    while open_ and time.monotonic() < deadline:
        for i in list(open_):
            try:
                data = conns[i].recv(65536)
            except BlockingIOError:
                data = None
            except OSError:
                data = b""
            if data == b"":
                open_.discard(i)
                continue
            if data:
                received[i] += data
            try:
                conns[i].send(b"x")
            except BlockingIOError:
                pass
            except OSError:
                open_.discard(i)
        time.sleep(0.2)
    for sock in conns:
        sock.close()
    assert not open_, f"{len(open_)} slow connections still open after {GIVE_UP} s"
    return received


def test_slow_heads_and_bodies_get_a_408_and_are_closed(servers: Servers, tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    server = servers.serve(
        "--mode", "replay", "--header-timeout", "1", "--body-timeout", "1", root=root
    )
    received = drip(server.port, [SLOW_HEAD] * 10 + [SLOW_BODY] * 10)
    heads, bodies = received[:10], received[10:]
    for answer in heads:
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b'"code":"header_timeout"' in answer.replace(b'": "', b'":"')
    for answer in bodies:
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b'"code":"body_timeout"' in answer.replace(b'": "', b'":"')
        assert b"--body-timeout" in answer
