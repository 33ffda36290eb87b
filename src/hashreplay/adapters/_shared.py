"""What the adapters share.

The session they route through: one per process at a time, owned by the registry
(`hashreplay.adapters.activate` / `deactivate`). An adapter installed on its own (tests, a
server's `install()`) holds it until it is uninstalled; the session is forgotten only when no
holder is left, so one adapter's `uninstall` never takes it from another still installed.

What each adapter patched (`Patches`): the attributes it replaced and their originals, whether
it is installed, its lock and its hold on the session, so that every adapter installs
idempotently and puts back exactly what it replaced, in reverse order; each adapter keeps only
its own patch targets and I/O.

Patching a client library on its first import, not before (importing httpx or aiohttp just to
patch them costs tens of milliseconds): `when_imported(name, callback)` calls
`callback(module)` now when `name` is imported already, else right after its first import, on
the importing thread (a meta-path finder wraps the module's real loader for that one import);
`cancel_all()` forgets callbacks still waiting.

Replayed HTTP/1.1 responses for the clients built on `http.client` (urllib3, requests,
botocore, `urllib.request`): a replay plan is written out as the bytes a server would have
sent (status line, headers, `content-length` body or one `transfer-encoding: chunked` chunk
per recorded chunk) and parsed by a real `http.client.HTTPResponse` over an in-memory file, so
every way a client reads a response (whole, `read(amt)`, lines, raw chunks) behaves as it
does live. A recorded stream that broke ends without its last chunk; reading past what
arrived raises the recorded exception (rebuilt here), as the broken connection did.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import http.client
import importlib.abc
import importlib.machinery
import inspect
import io
import re
import sys
import threading
from collections.abc import Callable, Hashable, Iterable, Sequence
from http import HTTPStatus
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

from hashreplay.core.errors import assert_never
from hashreplay.engine import scenarios as pacing
from hashreplay.engine.http import BreakKind, ReplayPlan

if TYPE_CHECKING:
    from hashreplay.engine.session import Session


_session_lock = threading.Lock()

_active: list[Session | None] = [None]

_holders: set[str] = set()


def active_session() -> Session | None:
    return _active[0]


def attach(holder: str, session: Session) -> None:
    """`holder` (an adapter, or the registry) routes through `session` from now on."""
    with _session_lock:
        _holders.add(holder)
        _active[0] = session


def detach(holder: str) -> None:
    """`holder` is done; the session is forgotten once nobody holds it."""
    with _session_lock:
        _holders.discard(holder)
        if not _holders:
            _active[0] = None


def detach_all() -> None:
    with _session_lock:
        _holders.clear()
        _active[0] = None


class Patch(NamedTuple):
    """One attribute an adapter replaced."""

    owner: Any
    attr: str
    #: the attribute as it was stored (a function, a staticmethod or classmethod object)
    original: Any
    replacement: Any
    #: whether `owner` held the attribute itself (else it was inherited, and is deleted again)
    owned: bool
    #: put back only while the attribute is still ours (another patch on top is left alone)
    if_ours: bool


class Patches:
    """One adapter's bookkeeping: its lock, whether it is installed, what it replaced, and
    (for `holder`, its name) its hold on the shared session; `holder` None for one that routes
    through the session some other way (the network guard, the call layer)."""

    def __init__(self, holder: str | None) -> None:
        self.holder = holder
        self.lock = threading.RLock()
        #: installed (some patches may wait for their library's import, or be impossible)
        self.installed = False
        self._patches: list[Patch] = []
        self._keys: dict[Hashable, Patch] = {}

    def attach(self, session: Session) -> bool:
        """Route through `session` from now on: True the first time, when the adapter
        patches; False when it was installed already (only the session is swapped)."""
        with self.lock:
            if self.holder is not None:
                attach(self.holder, session)
            first = not self.installed
            self.installed = True
            return first

    def replace(
        self,
        owner: Any,
        attr: str,
        replacement: Any,
        *,
        key: Hashable = None,
        if_ours: bool = False,
    ) -> Any:
        """Set `owner.attr` to `replacement`, remembering what it was (returned), under
        `key` when given (`get(key)`)."""
        original = inspect.getattr_static(owner, attr)
        try:
            owned = attr in vars(owner)
        except TypeError:  # an owner without a __dict__ (slots): the attribute was its own
            owned = True
        with self.lock:
            setattr(owner, attr, replacement)
            patch = Patch(owner, attr, original, replacement, owned, if_ours)
            self._patches.append(patch)
            if key is not None:
                self._keys[key] = patch
        return original

    def get(self, key: Hashable) -> Patch | None:
        """The patch made under `key`, while it is in place."""
        with self.lock:
            return self._keys.get(key)

    def __len__(self) -> int:
        """How many attributes are replaced now."""
        return len(self._patches)

    @property
    def patched(self) -> bool:
        """Whether anything is replaced now (tests check that nothing stays patched)."""
        return bool(self._patches)

    def restore(self) -> None:
        """Put back everything, last patch first; the adapter is uninstalled and lets go of
        the session."""
        with self.lock:
            for patch in reversed(self._patches):
                current = inspect.getattr_static(patch.owner, patch.attr, None)
                if patch.if_ours and current is not patch.replacement:
                    continue
                if patch.owned:
                    setattr(patch.owner, patch.attr, patch.original)
                else:
                    delattr(patch.owner, patch.attr)
            self._patches.clear()
            self._keys.clear()
            self.installed = False
            if self.holder is not None:
                detach(self.holder)


Callback = Callable[[ModuleType], None]

_lock = threading.RLock()

_waiting: dict[str, list[Callback]] = {}


def when_imported(name: str, callback: Callback) -> None:
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            _waiting.setdefault(name, []).append(callback)
            if _FINDER not in sys.meta_path:
                sys.meta_path.insert(0, _FINDER)
            return
    callback(module)


def cancel_all() -> None:
    with _lock:
        _waiting.clear()
        if _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)


def waiting() -> list[str]:
    with _lock:
        return sorted(_waiting)


class _Loader(importlib.abc.Loader):
    """The real loader, then the callbacks."""

    def __init__(self, inner: importlib.abc.Loader, name: str) -> None:
        self._inner = inner
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        with _lock:
            callbacks = _waiting.pop(self._name, [])
            if not _waiting and _FINDER in sys.meta_path:
                sys.meta_path.remove(_FINDER)
        for callback in callbacks:
            callback(module)

    def __getattr__(self, name: str) -> Any:  # resource readers and the like
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _waiting:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec: importlib.machinery.ModuleSpec | None = (
                find(fullname, path, target) if find is not None else None
            )
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader, fullname)
                return spec
        return None


_FINDER = _Finder()

#: Framing headers the replayed bytes set themselves.
_FRAMING = frozenset({"content-length", "transfer-encoding", "connection"})


def wire_bytes(plan: ReplayPlan) -> bytes:
    """The response `plan` as an HTTP/1.1 server would have sent it (no status None)."""
    return wire_layout(plan)[0]


def wire_layout(plan: ReplayPlan) -> tuple[bytes, list[int]]:
    """`wire_bytes` and the offset where each of the plan's chunks begins (its framing
    included), so pacing can wait before a read reaches it."""
    status = plan.status if plan.status is not None else 500
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    lines = [f"HTTP/1.1 {status} {reason}".rstrip()]
    lines.extend(f"{k}: {v}" for k, v in plan.headers if k.lower() not in _FRAMING)
    ended = not plan.broken
    pieces = [b"%x\r\n%b\r\n" % (len(c), c) if plan.is_streaming and c else c for c in plan.chunks]
    if plan.is_streaming:
        lines.append("transfer-encoding: chunked")
        body = b"".join(pieces)
        if ended:
            body += b"0\r\n\r\n"
    else:
        body = b"".join(pieces)
        # a body that broke off promises more than arrived: reading on raises the failure
        lines.append(f"content-length: {len(body) + (0 if ended else 1)}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", errors="replace")
    starts: list[int] = []
    at = len(head)
    for piece in pieces:
        starts.append(at)
        at += len(piece)
    return head + body, starts


class AbandonedRead(http.client.IncompleteRead):
    """`http.client.IncompleteRead` that says why the body ends early (a replayed fault, a
    recording cut where its client stopped reading): urllib3 shows its repr."""

    def __init__(self, message: str) -> None:
        super().__init__(b"")
        self.message = message

    def __repr__(self) -> str:
        return f"IncompleteRead(0 bytes read: {self.message})"

    __str__ = __repr__


def kind_exception(plan: ReplayPlan, *, in_body: bool) -> BaseException:
    """What the socket or `http.client` raises for a plan's `error_kind`: a timeout
    (`socket.timeout`, i.e. `TimeoutError`), a refused connection, the server closing it
    (`RemoteDisconnected` before a response, `IncompleteRead` in a body), a recording that
    ends early (`IncompleteRead`)."""
    message = plan.exception_message
    kind = plan.error_kind
    if kind is None or kind is BreakKind.ABANDONED:
        return AbandonedRead(message)
    if kind is BreakKind.READ_TIMEOUT:
        return TimeoutError(message)  # socket.timeout
    if kind is BreakKind.CONNECT_ERROR:
        return ConnectionRefusedError(errno.ECONNREFUSED, message)
    if kind is BreakKind.DISCONNECT:
        return AbandonedRead(message) if in_body else http.client.RemoteDisconnected(message)
    assert_never(kind)


def body_failure(
    plan: ReplayPlan, recorded: Callable[[], BaseException] | None
) -> Callable[[], BaseException] | None:
    """What reading past a broken body raises: the kind's exception, else the recorded
    one (`recorded`); None for a body that ends cleanly."""
    if plan.error_kind is not None:
        return lambda: kind_exception(plan, in_body=True)
    return recorded if plan.exception_type else None


class ReplayFile(io.BytesIO):
    """A socket's read side holding a recorded response; past its end it raises `exc`
    (the recorded failure) instead of signalling a clean end of stream."""

    def __init__(
        self,
        data: bytes,
        exc: Callable[[], BaseException] | None,
        marks: Sequence[tuple[int, float]] = (),
    ) -> None:
        super().__init__(data)
        self._exc = exc
        self._size = len(data)
        #: (offset, seconds): wait `seconds` before a read returns the byte at `offset`
        self._marks = [m for m in marks if m[1] > 0]

    def _check(self, wanted: int | None) -> None:
        if self._exc is not None and self.tell() >= self._size and wanted != 0:
            raise self._exc()

    def _pace(self, size: int | None, *, short: bool = False) -> int | None:
        """Wait for every chunk this read reaches; a short read (`read1`, `readinto`)
        stops at the next chunk still to wait for, so each is handed over on its own."""
        if not self._marks or size == 0:
            return size
        position = self.tell()
        end = self._size if size is None or size < 0 else min(self._size, position + size)
        if short:
            later = [m[0] for m in self._marks if m[0] > position]
            if later and later[0] < end:
                end = later[0]
                size = end - position
        reached = bisect.bisect_left([m[0] for m in self._marks], end)
        waits, self._marks = self._marks[:reached], self._marks[reached:]
        for _, seconds in waits:
            pacing.sleep(seconds)
        return size

    def read(self, size: int | None = -1, /) -> bytes:
        self._check(size)
        self._pace(size)
        return super().read(size)

    def read1(self, size: int | None = -1, /) -> bytes:
        self._check(size)
        return super().read1(self._pace(size, short=True))

    def readline(self, size: int | None = -1, /) -> bytes:
        self._check(size)
        if self._marks:
            newline = self.getvalue().find(b"\n", self.tell())
            line = self._size - self.tell() if newline < 0 else newline + 1 - self.tell()
            self._pace(line if size is None or size < 0 else min(size, line))
        return super().readline(size)

    def readinto(self, buffer: Any, /) -> int:
        self._check(len(buffer))
        size = self._pace(len(buffer), short=True)
        if size is not None and size < len(buffer):
            return super().readinto(memoryview(buffer)[:size])
        return super().readinto(buffer)

    def peek(self, size: int = 0, /) -> bytes:
        position = self.tell()
        return self.getvalue()[position : position + max(size, 1)]


class _ReplaySocket:
    """Just enough of a socket for `http.client.HTTPResponse` to read from."""

    def __init__(self, fp: ReplayFile) -> None:
        self._fp = fp

    def makefile(self, mode: str, *args: Any, **kwargs: Any) -> ReplayFile:
        return self._fp


def httplib_response(
    plan: ReplayPlan,
    method: str,
    url: str,
    exc: Callable[[], BaseException] | None,
    response_class: type[http.client.HTTPResponse] = http.client.HTTPResponse,
) -> http.client.HTTPResponse:
    """A real, begun `http.client.HTTPResponse` reading the recorded response: `exc` is
    the recorded failure (a plan's `error_kind` raises its own, `kind_exception`), and
    `plan.delays` are waited before the head and as reads reach each chunk."""
    data, starts = wire_layout(plan)
    marks = list(zip(starts, plan.delays[1:], strict=False))
    if plan.delays:
        pacing.sleep(plan.delays[0])
    fp = ReplayFile(data, body_failure(plan, exc), marks)
    response = response_class(_ReplaySocket(fp), method=method.upper(), url=url)  # type: ignore[arg-type]
    response.begin()
    return response


#: compiled on first use (an error path), not at import
_CAUSED_BY = r"\(Caused by (\w+)\((.*)\)\)\s*$"


def find_exception_class(
    qualified: str | None, namespaces: Sequence[Any], default: type[Exception]
) -> type[Exception]:
    """The class a recording names (`module.Name`), looked up in modules already imported
    (never importing anything new) and in `namespaces`; `default` when none fits. Never a
    BaseException that is not an Exception: the rule is the core's (`refused_exception`),
    and a recording naming one is a miss before any adapter sees it."""
    from hashreplay.core.typed import exception_class  # an error path: not at start-up

    return exception_class(qualified, namespaces, default)


def rebuild_exception(cls: type[BaseException], message: str, **attributes: Any) -> BaseException:
    """An instance of `cls` whose `str()` is the recorded message, made without calling its
    constructor (clients' exception classes take differing arguments); `attributes` are set
    on it (what callers inspect, e.g. urllib3's `pool`, `url`, `reason`)."""
    exc = cls.__new__(cls)
    BaseException.__init__(exc, message)
    for name, value in attributes.items():
        with contextlib.suppress(AttributeError):  # a read-only property on this version
            setattr(exc, name, value)
    return exc


def caused_by(message: str) -> tuple[str, str] | None:
    """`(class name, message)` of the cause in a urllib3 retry message
    (`... (Caused by NewConnectionError("..."))`), or None."""
    match = re.search(_CAUSED_BY, message, re.DOTALL)
    if match is None:
        return None
    name, inner = match.groups()
    if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
        inner = inner[1:-1]
    return name, inner


def body_bytes(body: Any) -> tuple[bytes, Any]:
    """A request body's bytes and what to send in its place: the body itself when it is
    bytes or text, else (a file, an iterable of chunks) the bytes read from it."""
    if body is None:
        return b"", None
    if isinstance(body, bytes):
        return body, body
    if isinstance(body, str):
        return body.encode("utf-8"), body
    if isinstance(body, (bytearray, memoryview)):
        data = bytes(body)
        return data, data
    if hasattr(body, "read"):
        raw = body.read()
        data = raw.encode("utf-8") if isinstance(raw, str) else bytes(raw)
        return data, data
    if isinstance(body, Iterable):
        parts = [p.encode("utf-8") if isinstance(p, str) else bytes(p) for p in body]
        data = b"".join(parts)
        return data, data
    return b"", body


def reason_phrase(status: int) -> str:
    """The standard reason phrase of a status (empty for one HTTP does not name)."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def seconds(value: Any) -> float | None:
    """A timeout value in seconds, or None when it is not a number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None
