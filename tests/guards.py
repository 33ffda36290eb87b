"""A guard that fails on any outgoing connection: replay must never open a socket."""

from __future__ import annotations

import socket
from types import TracebackType
from typing import Any


class ConnectAttempted(AssertionError):
    pass


class ConnectGuard:
    """Counts (and refuses) every `socket.connect` made while it is active."""

    def __init__(self) -> None:
        self.attempts: list[Any] = []
        self._saved: tuple[Any, Any] | None = None

    def __enter__(self) -> ConnectGuard:
        original_connect = socket.socket.connect
        original_connect_ex = socket.socket.connect_ex
        self._saved = (original_connect, original_connect_ex)
        guard = self

        def connect(sock: socket.socket, address: Any) -> None:
            guard.attempts.append(address)
            msg = f"replay opened a socket to {address!r}"
            raise ConnectAttempted(msg)

        def connect_ex(sock: socket.socket, address: Any) -> int:
            guard.attempts.append(address)
            msg = f"replay opened a socket to {address!r}"
            raise ConnectAttempted(msg)

        socket.socket.connect = connect  # type: ignore[method-assign]
        socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._saved is not None
        socket.socket.connect, socket.socket.connect_ex = self._saved  # type: ignore[method-assign]
