"""The network guard (docs/design.md §2): sees what the process does on the network and hands
what no adapter handled to the engine (`Session.connections`), which fails a replay-mode test
for it or lists it in the recording modes' summary:

- TCP connections and UDP datagrams, through the `socket.connect`, `socket.sendto` and
  `socket.sendmsg` audit events (asyncio's included, without patching anything);
- DNS lookups through every resolver entry point, judged by the name looked up: the
  `socket.getaddrinfo` and `socket.gethostbyname` audit events (the latter is raised by
  `gethostbyname_ex` too), `socket.gethostbyaddr` and `socket.getnameinfo` (reverse
  lookups: judged by the address, loopback aside). Audit events see every caller, an alias
  taken before the guard (`from socket import gethostbyname`) included, where a wrapper
  would not; `socket.getnameinfo` is wrapped as well, only to learn its flags (the event
  leaves them out), so an `NI_NUMERICHOST` call, which asks no resolver, passes. The
  standard library's proxy check (`urllib.request`, which calls `gethostbyname` on macOS
  for every `requests` call before any adapter could answer) is left alone: the connection
  that follows is judged. asyncio's `loop.getaddrinfo` / `loop.getnameinfo` resolve in a
  worker thread that works for whoever asked, so they are judged where they are awaited
  (`BaseEventLoop`'s two methods are wrapped while the guard is installed);
- gRPC channels, whose sockets are opened in C where no audit event sees them: judged when
  the channel is created (`grpc.insecure_channel`, `secure_channel` and their `grpc.aio`
  twins, patched on grpc's first import).

A connection is judged by the address it connects to. `socket.getaddrinfo`,
`gethostbyname` and `gethostbyname_ex` are wrapped only to learn which names resolved to
which addresses (asyncio's resolvers call `socket.getaddrinfo` in their worker thread, so
they are learnt from too), so a report can name the host and an `allowed_hosts` name can
allow its own addresses, never another connection's.

Audit hooks cannot be removed, so the hook is added once per process and does nothing while
no session is guarding. Network use an adapter makes on the engine's behalf runs inside
`adapter_io()` and passes.
"""

from __future__ import annotations

import functools
import importlib.util
import ipaddress
import os
import socket
import sys
import sysconfig
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

from hashreplay.adapters._shared import Patches, when_imported
from hashreplay.core.context import current_test_id, has_own_test_context, in_adapter_io
from hashreplay.core.network import grpc_target_hosts, is_loopback
from hashreplay.engine.connections import Connection, Reach

if TYPE_CHECKING:
    from hashreplay.engine.session import Session

#: Modules that are plumbing under whatever opened a connection.
_PLUMBING = frozenset(
    (
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
)
#: How many addresses the guard remembers the names of (oldest forgotten first).
_RESOLVED_LIMIT = 4096
#: The gRPC functions that create a channel, in `grpc` and in `grpc.aio`.
_GRPC_MODULES = ("grpc", "grpc.aio")
_GRPC_FUNCTIONS = ("insecure_channel", "secure_channel")

_lock = threading.Lock()
_guarding: list[Session | None] = [None]
_hook_added = [False]
#: address → the names that resolved to it, most recent first
_resolved: dict[str, tuple[str, ...]] = {}
_resolved_lock = threading.Lock()
#: the machine's own names: looking them up reaches no network
_own_names: set[str] = set()
#: The `socket` functions the guard wraps while installed, each as it was when the guard
#: took its place; `_IMPORTED` as they were at import, for a caller that kept a wrapper after
#: `uninstall`.
_WRAPPED_NAMES = ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "getnameinfo")
_real: dict[str, Callable[..., Any]] = {}
_IMPORTED: dict[str, Callable[..., Any]] = {name: getattr(socket, name) for name in _WRAPPED_NAMES}
#: gRPC's channel functions, each under its (module, function)
_grpc = Patches(None)
#: set while the wrapper runs a `getnameinfo` call that asks for numbers only
_numeric = threading.local()
#: the asyncio resolver methods wrapped while guarding: name → original
_ASYNC_LOOKUPS = ("getaddrinfo", "getnameinfo")
_async_originals: dict[str, Callable[..., Any]] = {}


def install(session: Session) -> None:
    """Guard `session`'s tests from now on (idempotent; a second call swaps the session)."""
    with _lock:
        _guarding[0] = session
        if not _hook_added[0]:
            sys.addaudithook(_hook)
            _hook_added[0] = True
        if not _own_names:
            _own_names.update({socket.gethostname().lower(), "localhost"})
        for name, wrapper in _WRAPPERS.items():
            if getattr(socket, name) is not wrapper:
                _real[name] = getattr(socket, name)
                setattr(socket, name, wrapper)
    when_imported("asyncio.base_events", _patch_asyncio)
    if "grpc" in sys.modules or _installed("grpc"):
        when_imported("grpc", _patch_grpc)


def uninstall() -> None:
    """Stop guarding and put back the `socket` resolvers, asyncio's and gRPC's functions."""
    with _lock:
        _guarding[0] = None
        _resolved.clear()
        for name, wrapper in _WRAPPERS.items():
            real = _real.pop(name, None)
            if real is not None and getattr(socket, name) is wrapper:
                setattr(socket, name, real)
        _unpatch_asyncio()
        _grpc.restore()


def is_installed() -> bool:
    """Whether the guard watches connections now (its audit hook stays, idle, once added)."""
    return _guarding[0] is not None


def _hook(event: str, args: tuple[Any, ...]) -> None:
    __tracebackhide__ = True  # pytest shows the report, not this frame
    handler = _HANDLERS.get(event)
    if handler is None or _guarding[0] is None:
        return
    handler(args, sys._getframe(1))


def _on_connect(args: tuple[Any, ...], frame: FrameType) -> None:
    __tracebackhide__ = True
    sock, address = args
    _on_address(sock, address, frame)


def _on_send(args: tuple[Any, ...], frame: FrameType) -> None:
    __tracebackhide__ = True
    sock, address = args[0], args[1]
    if address is not None:  # sendmsg on a connected socket: judged at its connect
        _on_address(sock, address, frame)


def _on_address(sock: Any, address: Any, frame: FrameType) -> None:
    __tracebackhide__ = True
    session = _guarding[0]
    if session is None or in_adapter_io():
        return
    if getattr(sock, "family", None) not in (socket.AF_INET, socket.AF_INET6):
        return
    if not isinstance(address, tuple) or len(address) < 2:
        return
    host, port = str(address[0]), int(address[1])
    datagram = getattr(sock, "type", None) == socket.SOCK_DGRAM
    names = _resolved.get(host, ())
    rules = session.connections.rules
    # the name to show: one that allows this address, else the latest that resolved to it
    name = next((n for n in names if rules.listed(port, n)), names[0] if names else None)
    opener, caller = _openers(frame)
    reach = Reach.DATAGRAM if datagram else Reach.CONNECTION
    connection = Connection(host, port, None if name == host else name, opener, caller, reach)
    failure = session.connections.check(current_test_id(), connection)
    if failure is not None:
        raise failure


def _on_lookup(args: tuple[Any, ...], frame: FrameType) -> None:
    """A forward DNS lookup (`getaddrinfo(host, port, …)`), judged by the name looked up."""
    __tracebackhide__ = True
    _judge_lookup(args[0] if args else None, args[1] if len(args) > 1 else None, frame)


def _on_gethostbyname(args: tuple[Any, ...], frame: FrameType) -> None:
    """`gethostbyname(host)` / `gethostbyname_ex(host)`: judged as `getaddrinfo`, but for
    the standard library's proxy check (`urllib.request`, on macOS)."""
    __tracebackhide__ = True
    if _module(frame) == "urllib.request":
        return
    _judge_lookup(args[0] if args else None, None, frame)


def _on_gethostbyaddr(args: tuple[Any, ...], frame: FrameType) -> None:
    """`gethostbyaddr(address or name)`: a reverse lookup, which asks DNS of an address too."""
    __tracebackhide__ = True
    _judge_lookup(args[0] if args else None, None, frame, reverse=True)


def _on_getnameinfo(args: tuple[Any, ...], frame: FrameType) -> None:
    """`getnameinfo(sockaddr, flags)`: a reverse lookup unless it asks for numbers only."""
    __tracebackhide__ = True
    if getattr(_numeric, "active", False):
        return
    sockaddr = args[0] if args else None
    if isinstance(sockaddr, tuple) and len(sockaddr) >= 2:
        _judge_lookup(sockaddr[0], sockaddr[1], frame, reverse=True)


def _judge_lookup(host: Any, port: Any, frame: FrameType, *, reverse: bool = False) -> None:
    """Judge a DNS lookup of `host` (for `reverse`, of the name of an address). Only where
    the test's own context runs: a resolver thread (asyncio's) works for whoever asked, so
    its lookups are judged where they are awaited (`_guarded_async_lookup`)."""
    __tracebackhide__ = True
    session = _guarding[0]
    if session is None or in_adapter_io() or not has_own_test_context():
        return
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str) or not host:
        return
    name = host.lower().rstrip(".")
    if name in _own_names or is_loopback(name) or (not reverse and _is_address(name)):
        return  # no DNS traffic, or none beyond this machine: the connection is judged
    try:
        number = int(port) if port is not None else 0
    except (TypeError, ValueError):
        number = 0  # a service name ("https")
    opener, caller = _openers(frame)
    connection = Connection(host, number, None, opener, caller, Reach.LOOKUP)
    failure = session.connections.check(current_test_id(), connection)
    if failure is not None:
        raise failure


_HANDLERS: dict[str, Callable[[tuple[Any, ...], FrameType], None]] = {
    "socket.connect": _on_connect,
    "socket.sendto": _on_send,
    "socket.sendmsg": _on_send,
    "socket.getaddrinfo": _on_lookup,
    "socket.gethostbyname": _on_gethostbyname,
    "socket.gethostbyaddr": _on_gethostbyaddr,
    "socket.getnameinfo": _on_getnameinfo,
}


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _real_function(name: str) -> Callable[..., Any]:
    return _real.get(name) or _IMPORTED[name]


def _name_looked_up(host: Any) -> str | None:
    """The name a lookup of `host` asks about, if remembering its answer makes sense."""
    if _guarding[0] is None or not isinstance(host, (str, bytes)) or not host:
        return None
    name = host.decode("ascii", "replace") if isinstance(host, bytes) else host
    return None if _is_address(name) else name


def _getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
    """`socket.getaddrinfo`, remembering which addresses each name resolved to."""
    results = _real_function("getaddrinfo")(host, port, *args, **kwargs)
    name = _name_looked_up(host)
    if name is not None:
        for result in results:
            _remember(str(result[4][0]), name)
    return results


def _gethostbyname(host: Any, /) -> Any:
    """`socket.gethostbyname`, remembering the address the name resolved to."""
    address = _real_function("gethostbyname")(host)
    name = _name_looked_up(host)
    if name is not None and isinstance(address, str):
        _remember(address, name)
    return address


def _gethostbyname_ex(host: Any, /) -> Any:
    """`socket.gethostbyname_ex`, remembering the addresses the name (and its canonical
    name) resolved to."""
    answer = _real_function("gethostbyname_ex")(host)
    name = _name_looked_up(host)
    if name is not None and isinstance(answer, tuple) and len(answer) == 3:
        canonical, _aliases, addresses = answer
        for address in addresses:
            if isinstance(canonical, str) and canonical and canonical != name:
                _remember(str(address), canonical)
            _remember(str(address), name)
    return answer


def _getnameinfo(sockaddr: Any, flags: int, /) -> Any:
    """`socket.getnameinfo`, telling the audit hook when the call asks for numbers only."""
    real = _real_function("getnameinfo")
    numeric = isinstance(flags, int) and bool(flags & socket.NI_NUMERICHOST)
    before = getattr(_numeric, "active", False)
    _numeric.active = before or numeric
    try:
        return real(sockaddr, flags)
    finally:
        _numeric.active = before


#: The wrapper of each `socket` function in `_WRAPPED_NAMES`.
_WRAPPERS: dict[str, Callable[..., Any]] = {
    "getaddrinfo": _getaddrinfo,
    "gethostbyname": _gethostbyname,
    "gethostbyname_ex": _gethostbyname_ex,
    "getnameinfo": _getnameinfo,
}


def _patch_asyncio(events: ModuleType) -> None:
    """asyncio's event loops were imported: wrap their resolver methods."""
    loop = events.BaseEventLoop
    with _lock:
        for name in _ASYNC_LOOKUPS:
            if name not in _async_originals:
                _async_originals[name] = getattr(loop, name)
                setattr(loop, name, _guarded_async_lookup(_async_originals[name], name))


def _unpatch_asyncio() -> None:
    events = sys.modules.get("asyncio.base_events")
    for name, original in list(_async_originals.items()):
        if events is not None:
            current = getattr(events.BaseEventLoop, name, None)
            if getattr(current, "__wrapped__", None) is original:  # still ours: put back
                setattr(events.BaseEventLoop, name, original)
        del _async_originals[name]


def _guarded_async_lookup(original: Callable[..., Any], name: str) -> Callable[..., Any]:
    """`loop.getaddrinfo(host, port, …)` or `loop.getnameinfo(sockaddr, flags)`, judged in
    the awaiting task's context (its worker thread has none of its own)."""

    @functools.wraps(original)
    async def lookup(self: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        frame = sys._getframe(1)
        if name == "getaddrinfo":
            host = args[0] if args else kwargs.get("host")
            port = args[1] if len(args) > 1 else kwargs.get("port")
            _judge_lookup(host, port, frame)
        else:
            sockaddr = args[0] if args else kwargs.get("sockaddr")
            flags = args[1] if len(args) > 1 else kwargs.get("flags", 0)
            numeric = isinstance(flags, int) and bool(flags & socket.NI_NUMERICHOST)
            if isinstance(sockaddr, tuple) and len(sockaddr) >= 2 and not numeric:
                _judge_lookup(sockaddr[0], sockaddr[1], frame, reverse=True)
        return await original(self, *args, **kwargs)

    return lookup


def _remember(address: str, name: str) -> None:
    with _resolved_lock:
        names = _resolved.pop(address, ())
        _resolved[address] = (name, *(n for n in names if n != name))[:8]
        if len(_resolved) > _RESOLVED_LIMIT:
            _resolved.pop(next(iter(_resolved)))


# --- gRPC -------------------------------------------------------------------------------------


def _patch_grpc(_: ModuleType) -> None:
    """grpc was imported: guard channel creation in it and in grpc.aio (loaded with it)."""
    for name in _GRPC_MODULES:
        module = sys.modules.get(name)
        if module is None:
            if name == "grpc.aio":  # an old grpc that does not load it: when it comes
                when_imported(name, _patch_grpc)
            continue
        for function in _GRPC_FUNCTIONS:
            original = getattr(module, function, None)
            if original is None or _grpc.get((name, function)) is not None:
                continue
            guarded = _guarded_channel(original)
            _grpc.replace(module, function, guarded, key=(name, function), if_ours=True)


def _guarded_channel(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def channel(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        target = args[0] if args else kwargs.get("target")
        session = _guarding[0]
        if session is not None and isinstance(target, str) and not in_adapter_io():
            opener, caller = _openers(sys._getframe(1))
            for host, port in grpc_target_hosts(target):
                connection = Connection(host, port, None, opener, caller, Reach.GRPC)
                failure = session.connections.check(current_test_id(), connection)
                if failure is not None:
                    raise failure
        return original(*args, **kwargs)

    return channel


def _installed(library: str) -> bool:
    try:
        return importlib.util.find_spec(library) is not None
    except (ImportError, ValueError):
        return False


# --- who opened it ----------------------------------------------------------------------------


def _module(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", "?"))


def _is_plumbing(frame: FrameType) -> bool:
    """A frame of `socket`, `asyncio`, … or one of their submodules (not `socketio`)."""
    module = _module(frame)
    return module.partition(".")[0] in _PLUMBING


def _where(frame: FrameType) -> str:
    """`file:line`, the file relative to the working directory when it is below it."""
    filename = frame.f_code.co_filename
    cwd = str(Path.cwd()) + os.sep
    if filename.startswith(cwd):
        filename = filename[len(cwd) :]
    return f"{filename}:{frame.f_lineno}"


@functools.cache
def _library_dirs() -> tuple[str, ...]:
    """Where the standard library and installed packages live (a frame there is a
    library's). Looked up when a connection is first labelled, not when the guard loads:
    `sysconfig.get_paths()` loads the interpreter's build data, ~5 ms a run would pay."""
    paths = sysconfig.get_paths()
    return tuple({paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")})


def _is_library(frame: FrameType) -> bool:
    filename = frame.f_code.co_filename
    return filename.startswith(_library_dirs()) or "site-packages" in filename


def _openers(frame: FrameType | None) -> tuple[str, str | None]:
    """The module that opened the connection (the first frame outside socket/asyncio
    plumbing), and where: that line for the project's own code, or for a library the first
    caller outside the libraries (`file:line`)."""
    while frame is not None and _is_plumbing(frame):
        frame = frame.f_back
    if frame is None:
        return "?", None
    opener = _module(frame)
    if not _is_library(frame):
        return opener, _where(frame)
    while frame is not None:
        if not _is_library(frame) and not _is_plumbing(frame):
            return opener, _where(frame)
        frame = frame.f_back
    return opener, None
