"""The MCP stdio adapter: `mcp.client.stdio.stdio_client(params)`, the seam below
`ClientSession` (docs/usage.md, "MCP servers"; docs/design.md, "MCP servers").

`stdio_client` is an `asynccontextmanager`: every name it is known by (`mcp.stdio_client`,
`mcp.client.stdio.stdio_client`, `mcp.client.client`'s, which `Client` uses, and any a
module bound with `from mcp import stdio_client` before hashreplay started) is the one
wrapper function, which calls the generator function held in its closure. The adapter swaps
that generator function (and puts it back on `uninstall`), so all of them are intercepted
alike; where the closure is not of that shape, the three module attributes are replaced
instead.

Each session gets one engine decision (`engine/mcp.decide`, through `Session.decide`):
replay yields a pair of streams answered by the recording (`engine/mcp.McpReplay`) and
starts no process; record modes start the server through the original `stdio_client` and
yield its streams tapped, each message logged in order as it crosses (what the client
sends before it is passed on, what the server sends as the client takes it), and the
session is written when the context ends (cut when the server's output ended first). Live
and pass-through sessions get the original.

The client sees what it saw live: answers with its own ids, the end of its read stream
(`anyio.EndOfStream`, which `ClientSession` reports as "Connection closed") where the server
exited or crashed, and `anyio.BrokenResourceError` from a send after that end.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import AsyncIterator, Callable
from types import CellType, TracebackType
from typing import Any, TextIO, TypeVar

import anyio

from hashreplay.adapters import _shared as _state
from hashreplay.adapters._shared import Patches
from hashreplay.engine.mcp import (
    STALL_TIMEOUT,
    WAIT,
    End,
    McpLog,
    McpReplay,
    arecord,
    decide,
    replayer,
    unusable,
)
from hashreplay.engine.replay import Miss, Record, Replay
from hashreplay.engine.session import Session

_patches = Patches("mcp")

#: The swapped generator function: the wrapper's closure cell and what it held.
_swapped: list[tuple[CellType, Any]] = []


def _message_json(message: Any) -> Any:
    """A JSON-RPC message (the SDK's pydantic model) as the JSON it is sent as."""
    return message.model_dump(mode="json", by_alias=True, exclude_unset=True)


def _message_model(data: Any) -> Any:
    """The SDK's JSON-RPC message model for `data` (mcp 2.x: `mcp_types`; 1.x: `mcp.types`)."""
    try:
        from mcp_types import jsonrpc_message_adapter
    except ImportError:  # mcp 1.x
        import mcp.types

        return mcp.types.JSONRPCMessage.model_validate(data)  # type: ignore[attr-defined]
    return jsonrpc_message_adapter.validate_python(data, by_name=False)


def _session_message(data: Any) -> Any:
    from mcp.shared.message import SessionMessage

    return SessionMessage(_message_model(data))


# --- replay: streams answered by the recording ----------------------------------------------


class _Replayed:
    """The state both replayed streams share: the replayer, and the event a waiting reader
    wakes on when the client sends or closes."""

    def __init__(self, replay: McpReplay) -> None:
        self.replay = replay
        self.changed = anyio.Event()
        self.read_closed = False
        self.write_closed = False
        self.ended = False

    def wake(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()


_S = TypeVar("_S", bound="_Stream")


class _Stream(abc.ABC):
    """What the SDK's memory streams offer around `send` / `receive`: `async with` closes
    the stream."""

    @abc.abstractmethod
    async def aclose(self) -> None: ...

    async def __aenter__(self: _S) -> _S:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class _ReadStream(_Stream):
    """A read stream also iterates, until its end (`anyio.EndOfStream`) or its close."""

    @abc.abstractmethod
    async def receive(self) -> Any: ...

    def __aiter__(self: _S) -> _S:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None


class ReplayRead(_ReadStream):
    """The client's read stream in replay: the recorded server's messages as the replayer
    lets them out, then the recorded end (`anyio.EndOfStream`)."""

    def __init__(self, shared: _Replayed) -> None:
        self._shared = shared

    async def receive(self) -> Any:
        shared = self._shared
        while True:
            if shared.read_closed:
                raise anyio.ClosedResourceError
            if shared.ended:
                raise anyio.EndOfStream
            item = shared.replay.next_message()
            if isinstance(item, End):
                shared.ended = True
                raise anyio.EndOfStream
            if item is not WAIT:
                await anyio.lowlevel.checkpoint()
                return _session_message(item)
            changed = shared.changed
            if shared.replay.stalled() is None:
                await changed.wait()
                continue
            with anyio.move_on_after(STALL_TIMEOUT):
                await changed.wait()
            if not changed.is_set():
                shared.replay.give_up()

    async def aclose(self) -> None:
        self._shared.read_closed = True
        self._shared.wake()

    def close(self) -> None:
        self._shared.read_closed = True
        self._shared.wake()


class ReplayWrite(_Stream):
    """The client's write stream in replay: each message goes to the replayer."""

    def __init__(self, shared: _Replayed) -> None:
        self._shared = shared

    async def send(self, item: Any, /) -> None:
        shared = self._shared
        if shared.write_closed:
            raise anyio.ClosedResourceError
        if shared.ended:  # the recorded server is gone, as the live one was
            raise anyio.BrokenResourceError
        shared.replay.sent(_message_json(item.message))
        shared.wake()
        await anyio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        self._shared.write_closed = True
        self._shared.wake()

    def close(self) -> None:
        self._shared.write_closed = True
        self._shared.wake()


# --- record: the live streams, tapped --------------------------------------------------------


class TappedRead(_ReadStream):
    """The live read stream; each server message is logged as the client takes it, and the
    end of the server's output is noted (a session cut unless the client closed first)."""

    def __init__(self, inner: Any, tap: McpLog) -> None:
        self._inner = inner
        self._tap = tap

    def __getattr__(self, name: str) -> Any:  # `last_context` and the like, as the SDK reads
        return getattr(self._inner, name)

    async def receive(self) -> Any:
        try:
            item = await self._inner.receive()
        except anyio.EndOfStream:
            self._tap.server_ended()
            raise
        message = getattr(item, "message", None)
        if message is not None:
            self._tap.received(_message_json(message))
        return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    def close(self) -> None:
        self._inner.close()


class TappedWrite(_Stream):
    """The live write stream; each client message is logged before it is passed on."""

    def __init__(self, inner: Any, tap: McpLog) -> None:
        self._inner = inner
        self._tap = tap

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def send(self, item: Any, /) -> None:
        self._tap.sent(_message_json(item.message))
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def close(self) -> None:
        self._inner.close()


# --- the patch --------------------------------------------------------------------------------


def _original() -> Callable[..., Any]:
    """The generator function behind `stdio_client` as the SDK defined it (the wrapper's
    `__wrapped__`, which the swap of its closure leaves as it was)."""
    import mcp.client.stdio

    fn: Any = mcp.client.stdio.stdio_client
    patch = _patches.get("stdio_client")
    if patch is not None:
        fn = patch.original
    return fn.__wrapped__  # type: ignore[no-any-return]


def _is_ours(fn: Any) -> bool:
    """Whether `fn` is this adapter's `_intercepted` (of any copy of this module: one a
    test harness imported again must still be put back)."""
    return (
        getattr(fn, "__qualname__", None) == "_intercepted"
        and getattr(fn, "__module__", None) == __name__
    )


#: `errlog` not given: the SDK's own default (the process's stderr when it was imported).
_DEFAULT: Any = object()


async def _intercepted(server: Any, errlog: TextIO = _DEFAULT) -> AsyncIterator[Any]:
    """What `stdio_client(server, errlog)` runs while the adapter is installed: one engine
    decision for the session, carried out."""
    plain = contextlib.asynccontextmanager(_original())

    def original(server: Any, errlog: TextIO) -> Any:
        return plain(server) if errlog is _DEFAULT else plain(server, errlog)

    session = _state.active_session()
    if session is None:
        async with original(server, errlog) as streams:
            yield streams
        return
    decision = decide(session, server.command, server.args)
    if type(decision) is Replay:
        refused = unusable(session, decision)
        if refused is not None:
            raise refused
        shared = _Replayed(replayer(session, decision))
        try:
            yield ReplayRead(shared), ReplayWrite(shared)
        finally:
            shared.read_closed = shared.write_closed = True
        return
    if type(decision) is Miss:
        raise decision.error
    if type(decision) is not Record:  # live, or a call layer's recording already
        async with original(server, errlog) as streams:
            yield streams
        return
    log = McpLog(session, decision, server.command, server.args)
    stopped = False
    try:
        async with original(server, errlog) as (read, write):
            log.started()
            yield TappedRead(read, log), TappedWrite(write, log)
    except BaseException as exc:
        # a session the user stopped (Ctrl-C, a cancelled task) is no answer: not written
        stopped = not isinstance(exc, Exception)
        raise
    finally:
        if stopped:
            log.forget()
        else:  # a spawn that failed got no answer: counted, not written
            await arecord(session, log)


def _closure_cell(wrapper: Any) -> CellType | None:
    """The cell of the `asynccontextmanager` wrapper that holds its generator function."""
    code = getattr(wrapper, "__code__", None)
    closure = getattr(wrapper, "__closure__", None)
    if code is None or closure is None or code.co_freevars != ("func",):
        return None
    cell: CellType = closure[0]
    held = cell.cell_contents
    if getattr(wrapper, "__wrapped__", None) is not held and not _is_ours(held):
        return None
    return cell


def install(session: Session) -> None:
    """Intercept every MCP stdio session for `session`. Idempotent: a second call only swaps
    the session."""
    with _patches.lock:
        if not _patches.attach(session):
            return
        import mcp
        import mcp.client.client
        import mcp.client.stdio

        wrapper_fn = mcp.client.stdio.stdio_client
        cell = _closure_cell(wrapper_fn)
        if cell is not None:
            _swapped.append((cell, wrapper_fn.__wrapped__))  # type: ignore[attr-defined]
            cell.cell_contents = _intercepted
            return
        wrapper = contextlib.asynccontextmanager(_intercepted)
        original = _patches.replace(mcp.client.stdio, "stdio_client", wrapper, key="stdio_client")
        for module in (mcp, mcp.client.client):
            if getattr(module, "stdio_client", None) is original:
                _patches.replace(module, "stdio_client", wrapper, if_ours=True)


def uninstall() -> None:
    """Put back the SDK's `stdio_client` and forget the session."""
    with _patches.lock:
        while _swapped:
            cell, original = _swapped.pop()
            if _is_ours(cell.cell_contents):
                cell.cell_contents = original
        _patches.restore()


def is_installed() -> bool:
    return _patches.patched or bool(_swapped)
