"""Iterators of the call layer: replayed ones rebuild items lazily; recording ones pass a live
iterator's items through and hand them to a sink when it ends, breaks or is closed."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

from hashreplay.core.keys import inside_call


class ChunkSink(Protocol):
    """Where a recording iterator delivers what it saw (the call being recorded)."""

    def finish_chunks(self, chunks: list[Any], exc: BaseException | None) -> None: ...

    async def afinish_chunks(self, chunks: list[Any], exc: BaseException | None) -> None: ...


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

    async def close(self) -> None:
        pass

    async def __aenter__(self) -> ReplayAsyncIterator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class RecordingIterator:
    """Passes a live iterator's items through and records them when it ends or is closed.
    Other attributes (an SDK stream's `response`, …) are the live iterator's."""

    def __init__(self, inner: Iterator[Any], sink: ChunkSink) -> None:
        self._inner = inner
        self._call = sink
        self._chunks: list[Any] = []
        self._done = False

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
        if not self._done:
            self._done = True
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

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class RecordingAsyncIterator:
    def __init__(self, inner: AsyncIterator[Any], sink: ChunkSink) -> None:
        self._inner = inner
        self._call = sink
        self._chunks: list[Any] = []
        self._done = False

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
        if not self._done:
            self._done = True
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

    async def close(self) -> None:
        await self.aclose()

    async def __aenter__(self) -> RecordingAsyncIterator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
