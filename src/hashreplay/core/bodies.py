"""HTTP bodies to and from their stored form: JSON when JSON, text when text, else base64
(docs/design.md §4). Request forms and multipart uploads are parsed too, so a client's random
multipart boundary never reaches the hash. Files store bodies decoded from their
`content-encoding` (gzip, deflate, br, zstd), so they stay readable and replayed headers carry
none; an encoding this process cannot decode is kept as it came, header too.

How deep a body may nest: `MAX_NESTING` levels (docs/design.md §13). orjson serialises at
most 255 levels and a server's deeper stack reaches Python's recursion limit sooner, so nothing
deeper ever reaches the normaliser, the redactor or the hash. A request is refused with
`RequestTooDeep` in every intercepting mode, in-process and through the proxy (live mode never
looks at bodies); a response being stored (`deep_field`), a recording file being read
(`deep_recording_field`: a `RecordingError` naming the file and field path) and the files
`import vcr|ogx` read are held to the same limit.
"""

from __future__ import annotations

import base64
import io
import re
import zlib
from collections.abc import Iterator
from enum import Enum
from typing import Any, Protocol
from urllib.parse import parse_qsl

import orjson

from hashreplay.core.errors import HashReplayError


class BodyEncoding(str, Enum):
    JSON = "json"
    TEXT = "text"
    BASE64 = "base64"
    FORM = "form"
    MULTIPART = "multipart"
    EMPTY = "empty"

    def __str__(self) -> str:
        return self.value


#: Media types kept as base64 even when their bytes happen to decode as UTF-8.
_BINARY_TYPES = (
    "application/octet-stream",
    "image/",
    "audio/",
    "video/",
    "application/pdf",
    "application/zip",
)

#: compiled on first use (multipart bodies only), not at import
_BOUNDARY = r'boundary="?([^";]+)"?'

#: Every digit byte → "1", every other byte → "0": a run of 20 ones marks a long number.
_DIGIT_RUNS = bytes(0x31 if 0x30 <= b <= 0x39 else 0x30 for b in range(256))

_TWENTY_DIGITS = b"1" * 20


def _media(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def _loads_json(content: bytes) -> Any:
    """Parse JSON; a body with an integer beyond 64 bits (orjson would silently turn it into
    a float) or a lone surrogate escape raises ValueError, so callers keep it as text, byte
    for byte."""
    import json

    try:
        value = orjson.loads(content)
    except orjson.JSONDecodeError as exc:
        if "depth" in exc.msg:  # past orjson's 1,024 levels the stdlib parser recurses too
            raise RecursionError(exc.msg) from None
        if "surrogate" in exc.msg:  # `"\ud83d"` alone, as json.dumps writes half an emoji:
            # the stdlib would parse it into a text that no UTF-8 (the key, the file) holds
            msg = "a lone surrogate escape: kept as text, byte for byte"
            raise ValueError(msg) from None
        value = json.loads(content)
    # translate + `in` run at C speed; a regex scan here cost ~10 µs per request
    if _TWENTY_DIGITS in content.translate(_DIGIT_RUNS):
        big = False

        def parse_int(text: str) -> int:
            nonlocal big
            number = int(text)
            big = big or not -(2**63) <= number < 2**64
            return number

        json.loads(content, parse_int=parse_int)
        if big:
            msg = "an integer beyond 64 bits: kept as text, byte for byte"
            raise ValueError(msg)
    return value


def encode_body(content: bytes, content_type: str | None) -> tuple[Any, BodyEncoding]:
    """The stored form of a response body (and the fallback for request bodies)."""
    if not content:
        return None, BodyEncoding.EMPTY
    media = _media(content_type)
    if "json" in media or (not media and content[:1] in (b"{", b"[")):
        try:
            return _loads_json(content), BodyEncoding.JSON
        except ValueError:
            pass
    if media.startswith(_BINARY_TYPES):
        return base64.b64encode(content).decode("ascii"), BodyEncoding.BASE64
    try:
        return content.decode("utf-8"), BodyEncoding.TEXT
    except UnicodeDecodeError:
        return base64.b64encode(content).decode("ascii"), BodyEncoding.BASE64


def decode_body(body: Any, encoding: BodyEncoding) -> bytes:
    """The bytes a client receives for a stored response body."""
    if encoding is BodyEncoding.EMPTY or (body is None and encoding is not BodyEncoding.JSON):
        return b""
    if encoding is BodyEncoding.JSON:
        return orjson.dumps(body)
    if encoding is BodyEncoding.BASE64:
        return base64.b64decode(body)
    if encoding is BodyEncoding.TEXT:
        return str(body).encode("utf-8")
    msg = f"a response body cannot have encoding {encoding.value!r}"
    raise ValueError(msg)


def encode_request_body(content: bytes, content_type: str | None) -> tuple[Any, BodyEncoding]:
    """The stored (and, after normalising, hashed) form of a request body."""
    media = _media(content_type)
    if content and media == "application/x-www-form-urlencoded":
        try:
            pairs = parse_qsl(content.decode("utf-8"), keep_blank_values=True, strict_parsing=True)
        except (UnicodeDecodeError, ValueError):
            pass
        else:
            form: dict[str, list[str]] = {}
            for key, value in pairs:
                form.setdefault(key, []).append(value)
            return {k: v[0] if len(v) == 1 else v for k, v in form.items()}, BodyEncoding.FORM
    if content and media == "multipart/form-data":
        parts = _parse_multipart(content, content_type or "")
        if parts is not None:
            return parts, BodyEncoding.MULTIPART
    return encode_body(content, content_type)


def _parse_multipart(content: bytes, content_type: str) -> list[dict[str, Any]] | None:
    match = re.search(_BOUNDARY, content_type, re.IGNORECASE)
    if match is None:
        return None
    delimiter = b"--" + match.group(1).encode("latin-1")
    parts: list[dict[str, Any]] = []
    for section in content.split(delimiter)[1:]:
        if section.startswith(b"--"):
            break
        head, sep, body = section.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        if not sep:
            return None
        body = body.removesuffix(b"\r\n")
        part: dict[str, Any] = {}
        for raw_line in head.decode("utf-8", errors="replace").split("\r\n"):
            name, _, value = raw_line.partition(":")
            name, value = name.strip().lower(), value.strip()
            if name == "content-disposition":
                for key in ("name", "filename"):
                    found = re.search(rf'\b{key}="([^"]*)"', value)
                    if found:
                        part[key] = found.group(1)
            elif name == "content-type":
                part["content_type"] = value
        part["data"], encoding = encode_body(body, part.get("content_type", "text/plain"))
        if encoding is BodyEncoding.BASE64:
            part["data_encoding"] = "base64"
        parts.append(part)
    return parts


#: compressed input handed to a decoder at a time where it cannot bound its own output
_STEP = 256

#: the same for zstd, whose blocks inflate further per input byte
_ZSTD_STEP = 32


class Decoder(Protocol):
    def pieces(self, data: bytes, size: int) -> Iterator[bytes]:
        """`data` decoded as pieces of about `size` bytes at most, each inflated only when
        asked for: a caller that stops at a limit never holds a bomb's whole output."""
        ...

    def flush(self) -> bytes:
        """What the decoder still holds at the end of the body."""
        return b""


class _Identity(Decoder):
    def pieces(self, data: bytes, size: int) -> Iterator[bytes]:
        yield data


class _Zlib(Decoder):
    def __init__(self, wbits: int) -> None:
        self._obj = zlib.decompressobj(wbits)
        self._first = wbits == zlib.MAX_WBITS

    def pieces(self, data: bytes, size: int) -> Iterator[bytes]:
        try:
            piece = self._obj.decompress(data, size)
        except zlib.error:
            if not self._first:
                raise
            # "deflate" is sent both zlib-wrapped (per the RFC) and raw, as browsers accept.
            self._first = False
            self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
            piece = self._obj.decompress(data, size)
        yield piece
        # a full piece may leave output inside zlib even when all input was taken
        while self._obj.unconsumed_tail or (len(piece) == size and not self._obj.eof):
            piece = self._obj.decompress(self._obj.unconsumed_tail, size)
            if not piece and not self._obj.unconsumed_tail:
                return
            yield piece

    def flush(self) -> bytes:
        return self._obj.flush()


class _Brotli(Decoder):
    def __init__(self, module: Any) -> None:
        self._obj = module.Decompressor()

    def pieces(self, data: bytes, size: int) -> Iterator[bytes]:
        obj = self._obj
        if hasattr(obj, "can_accept_more_data"):  # brotli >= 1.1 bounds its own output
            yield obj.process(data, output_buffer_limit=size)
            while not obj.can_accept_more_data():
                yield obj.process(b"", output_buffer_limit=size)
            return
        step = obj.process if hasattr(obj, "process") else obj.decompress
        for at in range(0, len(data), _STEP):  # older: small steps bound each call
            yield step(data[at : at + _STEP])


class _Zstd(Decoder):
    def __init__(self, module: Any) -> None:
        self.module = module
        self._obj = module.ZstdDecompressor().decompressobj()

    def pieces(self, data: bytes, size: int) -> Iterator[bytes]:
        # zstandard's decompressobj cannot bound its output: small steps bound each call
        for at in range(0, len(data), _ZSTD_STEP):
            yield self._obj.decompress(data[at : at + _ZSTD_STEP])


def decoder_for(content_encoding: str | None) -> Decoder | None:
    """A decoder for the header value, identity when there is none, None when unsupported."""
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if not codings:
        return _Identity()
    if len(codings) > 1:
        return None  # stacked encodings are vanishingly rare; keep the bytes as they came
    coding = codings[0]
    if coding in ("gzip", "x-gzip"):
        return _Zlib(zlib.MAX_WBITS | 16)
    if coding == "deflate":
        return _Zlib(zlib.MAX_WBITS)
    if coding == "br":
        for name in ("brotli", "brotlicffi"):
            try:
                return _Brotli(__import__(name))
            except ImportError:
                continue
        return None
    if coding == "zstd":
        try:
            import zstandard  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            return None
        return _Zstd(zstandard)
    return None


class DecodedTooLarge(ValueError):
    """A body that decodes to more than the limit it was decoded under (a "zip bomb")."""

    def __init__(self, coding: str, limit: int) -> None:
        self.coding = coding
        self.limit = limit
        super().__init__(f"the {coding} body decodes to more than {limit} bytes")


def decode_limited(content_encoding: str | None, data: bytes, limit: int) -> bytes | None:
    """`data` decoded per its `content-encoding`, never holding more than about `limit`
    decoded bytes: `DecodedTooLarge` past it. None for an encoding this process cannot
    decode; a corrupt body raises its decoder's error (`zlib.error`, `brotli.error`)."""
    decoder = decoder_for(content_encoding)
    if decoder is None:
        return None
    coding = (content_encoding or "identity").strip().lower()
    out = bytearray()

    def take(piece: bytes) -> None:
        out.extend(piece)
        if len(out) > limit:
            raise DecodedTooLarge(coding, limit)

    if isinstance(decoder, _Zstd):  # a stream reader bounds each read; decompressobj cannot
        with decoder.module.ZstdDecompressor().stream_reader(io.BytesIO(data)) as reader:
            while piece := reader.read(min(limit + 1, 1 << 20)):
                take(piece)
    else:
        for piece in decoder.pieces(data, limit + 1):
            take(piece)
        take(decoder.flush())
    return bytes(out)


MAX_NESTING = 128  # the deepest nesting of lists and objects a body may have
_NOT_OPENERS = bytes(b for b in range(256) if b not in b"[{")  # all bytes but `[` and `{`


def may_nest_deeper(content: bytes) -> bool:
    """Whether JSON `content` holds more `[` and `{` than `MAX_NESTING`, so that it may nest
    deeper (else it cannot). One C pass, in half the time of two `count`s."""
    return len(content.translate(None, _NOT_OPENERS)) > MAX_NESTING


_SHOWN_STEPS = 6  # how many steps of a field path an error shows before `…`


class RequestTooDeep(HashReplayError):
    """A request body nested deeper than `MAX_NESTING` levels."""

    def __init__(self, what: str, depth: int | None = None) -> None:
        self.depth = depth
        seen = f" (at least {depth})" if depth is not None else ""
        super().__init__(
            f"{what}: the body is nested more than {MAX_NESTING} levels deep{seen}, deeper "
            "than hashreplay records or replays; flatten it, or run this test in live mode "
            "(INFERENCE_MODE=live)"
        )


class TooDeep(HashReplayError):
    """A value to store (a response, an imported body) nested too deep at field path `where`."""

    def __init__(self, where: str, next_step: str) -> None:
        self.where = where
        super().__init__(f"{where}: {too_deep_problem()}; {next_step}")


def too_deep_problem() -> str:
    return f"nested more than {MAX_NESTING} levels deep, deeper than hashreplay stores or reads"


def deep_field(value: Any, where: str, limit: int = MAX_NESTING) -> str | None:
    """The field path (from `where`) where `value` first nests deeper than `limit` levels,
    or None. Walked with a stack, never recursively."""
    if not isinstance(value, (dict, list, tuple)):
        return None
    if nesting_depth(value, stop_after=limit) <= limit:
        return None
    stack: list[tuple[Any, int, str]] = [(value, 1, where)]
    while stack:
        node, depth, path = stack.pop()
        if depth > limit:
            return path
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            if isinstance(child, (dict, list, tuple)):
                if depth < _SHOWN_STEPS:
                    step = f".{key}" if isinstance(key, str) else f"[{key}]"
                else:
                    step = "…" if depth == _SHOWN_STEPS else ""
                stack.append((child, depth + 1, path + step))
    return None  # pragma: no cover - nesting_depth said it goes deeper


def deep_recording_field(data: dict[str, Any]) -> str | None:
    """The field path in a recording file's JSON that nests too deep (None when none does):
    a body or exception's args past `MAX_NESTING`, else past that plus the file's own levels."""
    if nesting_depth(data, stop_after=MAX_NESTING) <= MAX_NESTING:
        return None  # the whole file within the bodies' limit: one walk, not one per body
    fields: list[tuple[Any, str]] = []
    request = data.get("request")
    if isinstance(request, dict):
        fields.append((request.get("body"), "request.body"))
    later = data.get("later_responses")
    responses = [(data.get("response"), "response")]
    if isinstance(later, list):
        responses.extend((r, f"later_responses[{i}]") for i, r in enumerate(later))
    for response, where in responses:
        if isinstance(response, dict):
            fields.append((response.get("body"), f"{where}.body"))
            exception = response.get("exception")
            if isinstance(exception, dict):
                fields.append((exception.get("args"), f"{where}.exception.args"))
    for value, where in fields:
        found = deep_field(value, where)
        if found is not None:
            return found
    # anything else (fields a later format version added, kept as they are)
    return deep_field(data, "(file)", MAX_NESTING + _SHOWN_STEPS)


def nesting_depth(value: Any, stop_after: int | None = None) -> int:
    """How deep lists and dicts nest in `value` (a scalar: 0), counted to `stop_after` + 1."""
    level = [value] if isinstance(value, (dict, list, tuple)) else []
    depth = 0
    while level:
        depth += 1
        if stop_after is not None and depth > stop_after:
            return depth
        below: list[Any] = []
        for item in level:
            children = item.values() if isinstance(item, dict) else item
            below += [c for c in children if isinstance(c, (dict, list, tuple))]
        level = below
    return depth


class _Request(Protocol):
    @property
    def content(self) -> bytes: ...

    def header(self, name: str) -> str | None: ...


def parse_checked_body(request: _Request, what: str) -> tuple[Any, BodyEncoding]:
    """The stored form of a request body (`encode_request_body`), refused with
    `RequestTooDeep` when it nests deeper than `MAX_NESTING`; nearly free for ordinary
    requests, as only a body with more brackets than the limit is walked."""
    content = request.content
    try:
        parsed, encoding = encode_request_body(content, request.header("content-type"))
    except RecursionError:  # the pure-Python JSON fallback, past ~1,000 levels
        raise RequestTooDeep(what) from None
    if isinstance(parsed, (dict, list)) and may_nest_deeper(content):
        depth = nesting_depth(parsed, stop_after=MAX_NESTING)
        if depth > MAX_NESTING:
            raise RequestTooDeep(what, depth)
    return parsed, encoding
