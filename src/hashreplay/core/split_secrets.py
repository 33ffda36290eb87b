"""Secrets split between pieces, and secrets in bytes that are not text (docs/design.md §7,
"Streams"): what redacting each piece or each string alone cannot see.

A model streams its text in deltas and a network splits raw chunks anywhere, so a key can
arrive as `sk-ab` in one piece and `cd…` in the next: the pieces are joined, scanned as one
text, and each secret cut from every piece it covers (`redact_across`). A binary body or
chunk is stored as base64, where no key shows: its bytes are scanned in their Latin-1 reading
(`redact_binary`), and a chunked body's raw chunks, binary or not, as one text
(`redact_raw_chunks`).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable, Iterator
from typing import Any

from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.streams import StreamFormat, decode_chunk, encode_chunk

__all__ = ["SpanFinder", "redact_across", "redact_binary", "redact_raw_chunks"]

#: Where secrets are in a text: sorted, non-overlapping (start, end) pairs
#: (`Redactor.spans`, `SecretValues.spans`).
SpanFinder = Callable[[str], list[tuple[int, int]]]
_Path = tuple[str | int, ...]


def redact_across(
    fmt: StreamFormat | None, items: list[Any], spans_of: SpanFinder, placeholder: str
) -> list[Any]:
    """`items` (a stream's events, lines, chunks or values) with every secret removed that
    is split between pieces (docs/design.md §7, "Streams").

    A model streams its text in deltas, and a network splits raw chunks anywhere, so a key
    can arrive as `sk-ab` in one event and `cd…` in the next. The text at one place of the
    events (the same field path: `data.choices[0].delta.content`, or a raw chunk) is joined
    across the stream and scanned as one text; each secret found is cut from every piece it
    covers, and the placeholder is put where it began. Pieces keep their number and their
    order, so the stream replays as the same count of events or chunks; a piece the secret
    covered whole is left empty. Binary chunks (base64) are left as they are and end a run
    of text. Items that change are copies; `items` is not modified."""
    if fmt is None or len(items) < 2:
        return items
    runs: dict[_Path, list[tuple[int, _Path, str]]] = {}
    breaks = 0
    for index, item in enumerate(items):
        if fmt is StreamFormat.CHUNKS:
            if isinstance(item, str):
                runs.setdefault((breaks,), []).append((index, (), item))
            else:
                breaks += 1
            continue
        value = item.get("data") if fmt is StreamFormat.SSE and isinstance(item, dict) else item
        if fmt is StreamFormat.SSE and not isinstance(item, dict):
            continue
        head: _Path = ("data",) if fmt is StreamFormat.SSE else ()
        for path, text in _text_leaves(value, ()):
            runs.setdefault(path, []).append((index, (*head, *path), text))
    changes: dict[int, list[tuple[_Path, str]]] = {}
    for pieces in runs.values():
        if len(pieces) < 2:
            continue
        texts = [text for _, _, text in pieces]
        cut = _cut(texts, spans_of("".join(texts)), placeholder)
        for (index, path, text), new in zip(pieces, cut, strict=True):
            if new != text:
                changes.setdefault(index, []).append((path, new))
    if not changes:
        return items
    out = list(items)
    for index, edits in changes.items():
        item = copy.deepcopy(items[index])
        for path, new in edits:
            item = _set(item, path, new)
        out[index] = item
    return out


def _text_leaves(value: Any, path: _Path) -> Iterator[tuple[_Path, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _text_leaves(item, (*path, key))
    elif isinstance(value, list):
        for position, item in enumerate(value):
            yield from _text_leaves(item, (*path, position))


def _set(value: Any, path: _Path, new: str) -> Any:
    if not path:
        return new
    container = value
    for step in path[:-1]:
        container = container[step]
    container[path[-1]] = new
    return value


def _cut(texts: list[str], spans: list[tuple[int, int]], placeholder: str) -> list[str]:
    """`texts` (pieces of one joined text) with the characters of each span removed and the
    placeholder put in the piece where the span starts."""
    if not spans:
        return texts
    out: list[str] = []
    start_of = 0
    for text in texts:
        end_of = start_of + len(text)
        kept: list[str] = []
        at = start_of
        for start, end in spans:
            if end <= at or start >= end_of:
                continue
            kept.append(text[at - start_of : max(start, at) - start_of])
            if start >= start_of:
                kept.append(placeholder)
            at = min(end, end_of)
        kept.append(text[at - start_of :])
        out.append("".join(kept))
        start_of = end_of
    return out


def redact_binary(body: Any, encoding: BodyEncoding, text: Callable[[str], str]) -> Any:
    """A base64 body, or a stream's binary chunks (`{"base64": …}`), with secrets removed
    from the bytes they encode by `text` (a redactor's): read as Latin-1, one character a
    byte, so an ASCII key inside binary data is found and every other byte kept as it is.
    Scanning the base64 text instead would find nothing."""

    def scrubbed(encoded: str) -> str:
        raw = base64.b64decode(encoded)
        read = raw.decode("latin-1")
        clean = text(read)
        return encoded if clean == read else base64.b64encode(clean.encode("latin-1")).decode()

    if encoding is BodyEncoding.BASE64 and isinstance(body, str):
        return scrubbed(body)
    if isinstance(body, list):
        return [
            {"base64": scrubbed(item["base64"])}
            if isinstance(item, dict) and isinstance(item.get("base64"), str) and len(item) == 1
            else item
            for item in body
        ]
    return body


def redact_raw_chunks(items: list[Any], spans_of: SpanFinder, placeholder: str) -> list[Any]:
    """Raw chunks with every secret removed that a network split between them, binary
    chunks included: their bytes are read as one Latin-1 text (one character a byte) and cut
    as a stream's text pieces are (`redact_across`); each chunk is stored again as text or
    base64, as it would be."""
    texts = [decode_chunk(item).decode("latin-1") for item in items]
    cut = redact_across(StreamFormat.CHUNKS, texts, spans_of, placeholder)
    if cut is texts:
        return items
    return [
        item if new == old else encode_chunk(new.encode("latin-1"))
        for item, old, new in zip(items, texts, cut, strict=True)
    ]
