"""The network guard (docs/design.md §12): sees every connection the process opens, through
the `socket.connect` audit event (asyncio's included, without patching anything), and hands
the ones no adapter handled to the engine (`Session.connections`), which fails a replay-mode
test for them or lists them in the recording modes' summary.

Audit hooks cannot be removed, so the hook is added once per process and does nothing while
no session is guarding. Connections an adapter makes on the engine's behalf run inside
`adapter_io()` and pass.
"""

from __future__ import annotations

import os
import socket
import sys
import sysconfig
import threading
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from hashreplay.core.context import current_test_id, in_adapter_io
from hashreplay.engine.connections import Connection

if TYPE_CHECKING:
    from hashreplay.engine.session import Session

#: Modules that are plumbing under whatever opened a connection.
_PLUMBING = (
    "socket",
    "ssl",
    "asyncio",
    "selectors",
    "concurrent",
    "threading",
    "contextlib",
    "hashreplay",
    "anyio",
    "trio",
    "uvloop",
)
_LOOKUP_MEMORY_S = 10.0
#: Where the standard library and installed packages live (a frame there is a library's).
_LIBRARY_DIRS = tuple(
    {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
)

_lock = threading.Lock()
_guarding: list[Session | None] = [None]
_hook_added = [False]
_local = threading.local()
#: port → (name, when): the last names looked up, for connections made from another thread
#: than their lookup (asyncio resolves in an executor)
_recent: dict[int, tuple[str, float]] = {}


def install(session: Session) -> None:
    """Guard `session`'s tests from now on (idempotent; a second call swaps the session)."""
    with _lock:
        _guarding[0] = session
        if not _hook_added[0]:
            sys.addaudithook(_hook)
            _hook_added[0] = True


def uninstall() -> None:
    with _lock:
        _guarding[0] = None
        _recent.clear()


def is_guarding() -> bool:
    return _guarding[0] is not None


def _hook(event: str, args: tuple[Any, ...]) -> None:
    __tracebackhide__ = True  # pytest shows the report, not this frame
    if event == "socket.getaddrinfo":
        if _guarding[0] is not None and args and isinstance(args[0], (str, bytes)):
            _note_lookup(args[0], args[1])
        return
    if event != "socket.connect":
        return
    session = _guarding[0]
    if session is None or in_adapter_io():
        return
    sock, address = args
    if getattr(sock, "family", None) not in (socket.AF_INET, socket.AF_INET6):
        return
    if not isinstance(address, tuple) or len(address) < 2:
        return
    host, port = str(address[0]), int(address[1])
    test_id = current_test_id()
    opener, caller = _openers(sys._getframe(1))
    name = _looked_up(port)
    connection = Connection(host, port, None if name == host else name, opener, caller)
    failure = session.connections.check(test_id, connection)
    if failure is not None:
        raise failure


def _note_lookup(host: str | bytes, port: Any) -> None:
    name = host.decode() if isinstance(host, bytes) else host
    try:
        number = int(port) if port is not None else 0
    except (TypeError, ValueError):
        number = 0
    if not number:
        return
    _local.lookup = (name, number)
    _recent[number] = (name, time.monotonic())


def _looked_up(port: int) -> str | None:
    mine = getattr(_local, "lookup", None)
    if mine is not None and mine[1] == port:
        return str(mine[0])
    recent = _recent.get(port)
    if recent is not None and time.monotonic() - recent[1] < _LOOKUP_MEMORY_S:
        return recent[0]
    return None


def _module(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", "?"))


def _where(frame: FrameType) -> str:
    """`file:line`, the file relative to the working directory when it is below it."""
    filename = frame.f_code.co_filename
    cwd = str(Path.cwd()) + os.sep
    if filename.startswith(cwd):
        filename = filename[len(cwd) :]
    return f"{filename}:{frame.f_lineno}"


def _is_library(frame: FrameType) -> bool:
    filename = frame.f_code.co_filename
    return filename.startswith(_LIBRARY_DIRS) or "site-packages" in filename


def _openers(frame: FrameType | None) -> tuple[str, str | None]:
    """The module that opened the connection (the first frame outside socket/asyncio
    plumbing), and where: that line for the project's own code, or for a library the first
    caller outside the libraries (`file:line`)."""
    while frame is not None and _module(frame).startswith(_PLUMBING):
        frame = frame.f_back
    if frame is None:
        return "?", None
    opener = _module(frame)
    if not _is_library(frame):
        return opener, _where(frame)
    while frame is not None:
        if not _is_library(frame) and not _module(frame).startswith(_PLUMBING):
            return opener, _where(frame)
        frame = frame.f_back
    return opener, None
