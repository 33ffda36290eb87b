"""Incremental decoding of `content-encoding` (gzip, deflate, br, zstd) for recordings.

Files store decoded bodies so they stay readable; replayed headers then carry no
`content-encoding`. An encoding this process cannot decode is kept as it came (the header
too), so replay still hands the client exactly what it can decode.
"""

from __future__ import annotations

import zlib
from typing import Any, Protocol


class Decoder(Protocol):
    def decode(self, data: bytes) -> bytes: ...
    def flush(self) -> bytes: ...


class _Identity:
    def decode(self, data: bytes) -> bytes:
        return data

    def flush(self) -> bytes:
        return b""


class _Zlib:
    def __init__(self, wbits: int) -> None:
        self._obj = zlib.decompressobj(wbits)
        self._first = wbits == zlib.MAX_WBITS

    def decode(self, data: bytes) -> bytes:
        try:
            return self._obj.decompress(data)
        except zlib.error:
            if not self._first:
                raise
            # "deflate" is sent both zlib-wrapped (per the RFC) and raw, as browsers accept.
            self._first = False
            self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
            return self._obj.decompress(data)

    def flush(self) -> bytes:
        return self._obj.flush()


class _Brotli:
    def __init__(self, module: Any) -> None:
        self._obj = module.Decompressor()

    def decode(self, data: bytes) -> bytes:
        out: bytes = (
            self._obj.process(data)
            if hasattr(self._obj, "process")
            else (self._obj.decompress(data))
        )
        return out

    def flush(self) -> bytes:
        return b""


class _Zstd:
    def __init__(self, module: Any) -> None:
        self._obj = module.ZstdDecompressor().decompressobj()

    def decode(self, data: bytes) -> bytes:
        out: bytes = self._obj.decompress(data)
        return out

    def flush(self) -> bytes:
        return b""


def _brotli_module() -> Any:
    for name in ("brotli", "brotlicffi"):
        try:
            return __import__(name)
        except ImportError:
            continue
    return None


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
        module = _brotli_module()
        return _Brotli(module) if module is not None else None
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


#: compressed input handed to a decoder at a time where it cannot bound its own output
_STEP = 256


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

    if isinstance(decoder, _Identity):
        take(data)
    elif isinstance(decoder, _Zlib):
        _zlib_limited(decoder, data, limit, take)
    elif isinstance(decoder, _Brotli) and hasattr(decoder._obj, "can_accept_more_data"):
        obj = decoder._obj
        take(obj.process(data, output_buffer_limit=limit + 1))
        while not obj.can_accept_more_data():
            take(obj.process(b"", output_buffer_limit=limit + 1))
    elif isinstance(decoder, _Zstd):
        import io

        import zstandard  # type: ignore[import-not-found,unused-ignore]

        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as reader:
            while piece := reader.read(min(limit + 1, 1 << 20)):
                take(piece)
    else:  # an older brotli: small steps bound what one call can produce
        for at in range(0, len(data), _STEP):
            take(decoder.decode(data[at : at + _STEP]))
        take(decoder.flush())
    return bytes(out)


def _zlib_limited(decoder: _Zlib, data: bytes, limit: int, take: Any) -> None:
    try:
        obj, tail = decoder._obj, data
        take(obj.decompress(tail, limit + 1))
    except zlib.error:
        if not decoder._first:
            raise
        obj = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate, as in `_Zlib.decode`
        take(obj.decompress(data, limit + 1))
    while obj.unconsumed_tail:
        take(obj.decompress(obj.unconsumed_tail, limit + 1))
    take(obj.flush())
