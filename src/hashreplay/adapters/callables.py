"""The call layer (docs/design.md §2): record and replay named Python callables.

`[tool.hashreplay] callables = ["pkg.mod:Class.method", "pkg.mod:function"]`, or
`hashreplay.record_callable(...)`, wraps a target so that each call is hashed by its
arguments (`self` excluded) and answered from a recording: return values are stored typed
(pydantic models and dataclasses rebuilt as the same class), iterators as their list of items
(replayed lazily), and raised exceptions are raised again. While a target runs live, the HTTP
it makes underneath is not recorded a second time.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any, TypeVar

from hashreplay.adapters import _shared as _state
from hashreplay.adapters._shared import Patches
from hashreplay.core.context import inside_call
from hashreplay.core.errors import ConfigError
from hashreplay.core.format import RecordedException, RecordedResponse
from hashreplay.core.streams import StreamFormat
from hashreplay.core.typed import (
    EXCEPTION_KEY,
    TypeAllowlist,
    exception_from_json,
    from_jsonable,
    to_jsonable,
    type_name,
)
from hashreplay.engine.keys import Prepared
from hashreplay.engine.replay import Miss, Record, Replay
from hashreplay.engine.session import Session

F = TypeVar("F", bound=Callable[..., Any])


#: The targets patched by name (`module:qualname`, the key of each patch); the call layer
#: routes through the session the registry holds.
_patches = Patches(None)
_packages: set[str] = set()


def _fail(spec: str, problem: str) -> ConfigError:
    expected = "expected 'package.module:Class.method' or 'package.module:function'"
    return ConfigError(f"callables entry {spec!r}: {problem}; {expected}")


def resolve(spec: str) -> tuple[Any, str, Any]:
    """`(owner, attribute name, attribute as stored)` of a `module:qualname` entry."""
    module_name, sep, qualname = spec.partition(":")
    if not sep or not module_name or not qualname:
        raise _fail(spec, "missing the ':' between module and name")
    try:
        owner: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise _fail(spec, f"cannot import module {module_name!r} ({exc})") from None
    *path, attr = qualname.split(".")
    where = module_name
    for part in path:
        try:
            owner = getattr(owner, part)
        except AttributeError:
            raise _fail(spec, f"{where} has no attribute {part!r}") from None
        where = f"{module_name}:{part}" if where == module_name else f"{where}.{part}"
    try:
        raw = inspect.getattr_static(owner, attr)
    except AttributeError:
        raise _fail(spec, f"{where} has no attribute {attr!r}") from None
    if not callable(raw) and not isinstance(raw, (staticmethod, classmethod)):
        raise _fail(spec, f"{attr!r} is not callable")
    return owner, attr, raw


def record_callable(target: str | F, *, name: str | None = None) -> Any:
    """Record and replay a callable.

    With a `"package.module:Class.method"` string the target is patched in place (undone by
    `unpatch_callables`); with a function it is returned wrapped, for use as a decorator.
    """
    if isinstance(target, str):
        return _patch(target)
    label = name or f"{target.__module__}:{target.__qualname__}"
    _packages.add(target.__module__.split(".")[0])
    return _wrap(target, label, skip_first=False)


def patch_callables(specs: Iterable[str]) -> None:
    """Patch every configured target; a bad entry raises a ConfigError naming it."""
    for spec in specs:
        _patch(spec)


def unpatch_callables() -> None:
    """Restore every target patched by name."""
    _patches.restore()


def _patch(spec: str) -> Any:
    with _patches.lock:
        if (patch := _patches.get(spec)) is not None:
            return getattr(patch.owner, patch.attr)
        owner, attr, raw = resolve(spec)
        is_class = inspect.isclass(owner)
        if isinstance(raw, staticmethod):
            wrapped: Any = staticmethod(_wrap(raw.__func__, spec, skip_first=False))
        elif isinstance(raw, classmethod):
            wrapped = classmethod(_wrap(raw.__func__, spec, skip_first=True))
        else:
            wrapped = _wrap(raw, spec, skip_first=is_class)
        _packages.add(spec.split(":", 1)[0].split(".", maxsplit=1)[0])
        _patches.replace(owner, attr, wrapped, key=spec)
        return wrapped


def allowlist(session: Session) -> TypeAllowlist:
    """Types a call-layer recording may name: the SDKs, and the packages of the targets."""
    configured = {c.split(":", 1)[0].split(".")[0] for c in session.config.callables}
    return TypeAllowlist(configured | _packages)


def _decide(name: str, args: Any, kwargs: Any) -> tuple[Session, Replay | Record] | None:
    """The engine's decision for one call; None when nothing intercepts it."""
    session = _state.active_session()
    if session is None:
        return None
    decision = session.decide_call(name, list(args), kwargs)
    if isinstance(decision, Miss):
        raise decision.error
    if isinstance(decision, (Replay, Record)):
        return session, decision
    return None  # Live or Passthrough: not intercepted


def _wrap(func: Callable[..., Any], name: str, *, skip_first: bool) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(func):

        @functools.wraps(func)
        async def agen_wrapper(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            decided = _decide(name, args[1:] if skip_first else args, kwargs)
            if decided is None:
                async for item in func(*args, **kwargs):
                    yield item
                return
            call = _Call(*decided)
            if call.replayed is not None:
                source: Any = call.replay_aiter(call.replayed)
            else:
                source = RecordingAsyncIterator(func(*args, **kwargs), call)
            async for item in source:
                yield item

        return agen_wrapper

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            decided = _decide(name, args[1:] if skip_first else args, kwargs)
            if decided is None:
                return await func(*args, **kwargs)
            call = _Call(*decided)
            if call.replayed is not None:
                return call.rebuild(call.replayed, is_async=True)
            try:
                with inside_call():
                    result = await func(*args, **kwargs)
            except Exception as exc:
                await call.arecord(call.response(exc=exc))
                raise
            return await call.arecord_result(result)

        return async_wrapper

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        decided = _decide(name, args[1:] if skip_first else args, kwargs)
        if decided is None:
            return func(*args, **kwargs)
        call = _Call(*decided)
        if call.replayed is not None:
            return call.rebuild(call.replayed, is_async=False)
        try:
            with inside_call():
                result = func(*args, **kwargs)
        except Exception as exc:
            call.record(call.response(exc=exc))
            raise
        return call.record_result(result)

    return wrapper


# Iterators: replayed ones rebuild items lazily; recording ones pass a live one's items through.


class ReplayIterator:
    """A recorded iterator, rebuilt item by item as it is consumed."""

    def __init__(self, items: Iterator[Any]) -> None:
        self._items = items

    def __iter__(self) -> ReplayIterator:
        return self

    def __next__(self) -> Any:
        return next(self._items)

    def close(self) -> None:
        pass

    def __enter__(self) -> ReplayIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReplayAsyncIterator:
    def __init__(self, items: AsyncIterator[Any]) -> None:
        self._items = items

    def __aiter__(self) -> ReplayAsyncIterator:
        return self

    async def __anext__(self) -> Any:
        return await self._items.__anext__()

    async def aclose(self) -> None:
        pass

    close = aclose

    async def __aenter__(self) -> ReplayAsyncIterator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _Recording:
    """What the recording iterators share: the items seen, recorded once when the iterator
    ends, breaks or is closed; other attributes (an SDK stream's `response`, …) are the live
    iterator's."""

    def __init__(self, inner: Any, call: _Call) -> None:
        self._inner = inner
        self._call = call
        self._chunks: list[Any] = []
        self._done = False

    def _ends(self) -> bool:
        first, self._done = not self._done, True
        return first

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class RecordingIterator(_Recording):
    def __iter__(self) -> RecordingIterator:
        return self

    def __next__(self) -> Any:
        try:
            with inside_call():
                item = next(self._inner)
        except StopIteration:
            self._finish(None)
            raise
        except BaseException as exc:  # a Ctrl-C is no answer: the engine records nothing
            self._finish(exc)
            raise
        self._chunks.append(item)
        return item

    def _finish(self, exc: BaseException | None) -> None:
        if self._ends():
            self._call.finish_chunks(self._chunks, exc)

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        try:
            if callable(close):
                close()
        finally:
            self._finish(None)

    def __enter__(self) -> RecordingIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RecordingAsyncIterator(_Recording):
    def __aiter__(self) -> RecordingAsyncIterator:
        return self

    async def __anext__(self) -> Any:
        try:
            with inside_call():
                item = await self._inner.__anext__()
        except StopAsyncIteration:
            await self._finish(None)
            raise
        except BaseException as exc:  # a cancellation is no answer: nothing is recorded
            await self._finish(exc)
            raise
        self._chunks.append(item)
        return item

    async def _finish(self, exc: BaseException | None) -> None:
        if self._ends():
            await self._call.afinish_chunks(self._chunks, exc)

    async def aclose(self) -> None:
        close = getattr(self._inner, "aclose", None) or getattr(self._inner, "close", None)
        try:
            if callable(close):
                result = close()
                if inspect.isawaitable(result):
                    await result
        finally:
            await self._finish(None)

    close = aclose

    async def __aenter__(self) -> RecordingAsyncIterator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _has(value: Any, *names: str) -> bool:
    return all(hasattr(value, name) for name in names)


class _Call:
    """One intercepted call of a target: replayed from `replayed`, or recorded (the engine's
    staging redacts and normalises what it is handed)."""

    def __init__(self, session: Session, decision: Replay | Record) -> None:
        self.session = session
        self.prep: Prepared = decision.prep
        self.replayed: RecordedResponse | None = None
        self.path: Any = None
        if isinstance(decision, Replay):
            self.replayed, self.path = decision.response, decision.path

    def _exception(self, response: RecordedResponse) -> BaseException | None:
        exc = response.exception if response.is_exception else None
        if exc is None:
            return None
        data = {EXCEPTION_KEY: exc.type, "args": exc.args, "message": exc.message}
        return exception_from_json(data, allowlist(self.session), path=self.path)

    def value(self, data: Any) -> Any:
        return from_jsonable(data, allowlist(self.session), path=self.path)

    def rebuild(self, response: RecordedResponse, *, is_async: bool) -> Any:
        if response.is_streaming:
            if is_async:
                return ReplayAsyncIterator(self.replay_aiter(response))
            return ReplayIterator(self._items(response))
        error = self._exception(response)
        if error is not None:
            raise error
        return self.value(response.body)

    def _items(self, response: RecordedResponse) -> Iterator[Any]:
        for item in list(response.body or []):
            yield self.value(item)
        error = self._exception(response)
        if error is not None:
            raise error

    async def replay_aiter(self, response: RecordedResponse) -> AsyncIterator[Any]:
        for item in self._items(response):
            yield item

    def response(
        self, *, value: Any = None, chunks: list[Any] | None = None, exc: BaseException | None
    ) -> RecordedResponse:
        """An outcome as typed JSON values (redacted by the engine's staging)."""
        exception = None
        if exc is not None:
            exception = RecordedException(
                type=type_name(type(exc)),
                message=str(exc),
                args=to_jsonable([a for a in exc.args if _is_plain_arg(a)]),
            )
        streaming = chunks is not None
        return RecordedResponse(
            status=None,
            body=to_jsonable(chunks if streaming else value),
            is_streaming=streaming,
            stream_format=StreamFormat.VALUES if streaming else None,
            is_exception=exception is not None,
            exception=exception,
        )

    def record(self, response: RecordedResponse) -> None:
        self.session.record(self.prep, response)

    async def arecord(self, response: RecordedResponse) -> None:
        await self.session.arecord(self.prep, response)

    def finish_chunks(self, chunks: list[Any], exc: BaseException | None) -> None:
        self.record(self.response(chunks=chunks, exc=exc))

    async def afinish_chunks(self, chunks: list[Any], exc: BaseException | None) -> None:
        await self.arecord(self.response(chunks=chunks, exc=exc))

    def record_result(self, result: Any) -> Any:
        if _has(result, "__next__", "__iter__"):
            return RecordingIterator(result, self)
        if _has(result, "__anext__", "__aiter__"):
            return RecordingAsyncIterator(result, self)
        self.record(self.response(value=result, exc=None))
        return result

    async def arecord_result(self, result: Any) -> Any:
        if _has(result, "__anext__", "__aiter__"):
            return RecordingAsyncIterator(result, self)
        if _has(result, "__next__", "__iter__"):
            return RecordingIterator(result, self)
        await self.arecord(self.response(value=result, exc=None))
        return result


def _is_plain_arg(value: Any) -> bool:
    """Exception args kept: plain JSON values (an SDK error's response object is not rebuilt)."""
    return value is None or isinstance(value, (str, int, float, bool, list, dict))
