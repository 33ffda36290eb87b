"""Shared blobs for large values (docs/design.md §13, contract): their rules and their files.

A string inside a stored body (a base64 image, audio, a PDF), or a whole non-JSON body
(stored as text or base64), longer than `blob_threshold` bytes is kept once in
`<recordings_dir>/blobs/<xxh3_128 hex of its UTF-8 bytes>` and the body holds a reference in
its place: `{"__blob__": "<hex>", "size": <bytes>, "type": "<media type>"}`. Keys are computed
on the full value before anything is stored, so a blob never changes a hash; the store puts
the value back on every read, so replay is byte-identical. Only the bodies are searched
(`request.body`, `response.body`, `later_responses[*].body`, and a WebSocket connection's
`frames[*].data`), never headers or ids.

A blob file is read bounded: never through a symlink, only a regular file of the size its
reference says, at most that size plus one byte, and checked against its name.
"""

from __future__ import annotations

import base64
import binascii
import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import xxhash

from hashreplay.core.constants import BLOB_REF_KEY
from hashreplay.core.errors import RecordingError

_REF_KEYS = frozenset({BLOB_REF_KEY, "size", "type"})
_HEX = frozenset("0123456789abcdef")

#: Leading bytes of common binary payloads, for the `type` shown in reviews.
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
    (b"ID3", "audio/mpeg"),
    (b"\xff\xfb", "audio/mpeg"),
    (b"OggS", "audio/ogg"),
    (b"fLaC", "audio/flac"),
)


class BlobRef(NamedTuple):
    """What a recording holds in place of a large value."""

    digest: str
    size: int
    media_type: str

    def to_json(self) -> dict[str, Any]:
        return {BLOB_REF_KEY: self.digest, "size": self.size, "type": self.media_type}

    def describe(self) -> str:
        return f"<blob {self.digest[:12]}…, {self.size} bytes, {self.media_type}>"


def blob_digest(data: bytes) -> str:
    """The name of a blob: the `xxh3_128` hex digest of its bytes."""
    return xxhash.xxh3_128_hexdigest(data)


def parse_ref(value: Any) -> BlobRef | None:
    """The reference `value` is, or None (any other value, however it looks)."""
    if not isinstance(value, dict) or value.keys() != _REF_KEYS:
        return None
    digest, size, media = value[BLOB_REF_KEY], value["size"], value["type"]
    if (
        not isinstance(digest, str)
        or len(digest) != 32
        or not _HEX.issuperset(digest)
        or type(size) is not int
        or not isinstance(media, str)
    ):
        return None
    return BlobRef(digest, size, media)


def media_type_of(text: str) -> str:
    """A best guess at what a large string holds: a data URL's type, the type of the bytes a
    base64 string decodes to, else `text/plain`."""
    if text.startswith("data:"):
        head = text[5:64].split(",", 1)[0].split(";", 1)[0]
        return head or "text/plain"
    prefix = text[:64]
    try:
        raw = base64.b64decode(prefix[: len(prefix) // 4 * 4], validate=True)
    except (binascii.Error, ValueError):
        return "text/plain"
    for magic, media in _MAGIC:
        if raw.startswith(magic):
            return media
    if raw[:4] == b"RIFF" and raw[8:12] in (b"WEBP", b"WAVE"):
        return "image/webp" if raw[8:12] == b"WEBP" else "audio/wav"
    return "application/octet-stream" if _looks_base64(text) else "text/plain"


def _looks_base64(text: str) -> bool:
    sample = text[:4096].rstrip("=")
    return bool(sample) and all(c.isalnum() or c in "+/-_" for c in sample)


def describe_value(text: str) -> str:
    """A large string as a review shows it: digest, size and type, never the bytes."""
    data = text.encode("utf-8")
    return BlobRef(blob_digest(data), len(data), media_type_of(text)).describe()


# --- the body fields of a recording's JSON ----------------------------------------------------


def _bodies(data: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], str]]:
    """Each JSON object of `data` that holds a body, with the name of that body and its key:
    `body`, or `data` for each frame of a WebSocket connection (docs/design.md §17)."""
    request = data.get("request")
    if isinstance(request, dict):
        yield "request body", request, "body"
    response = data.get("response")
    if isinstance(response, dict):
        yield "response body", response, "body"
        yield from _frames("response", response)
    later = data.get("later_responses")
    if isinstance(later, list):
        for index, item in enumerate(later, start=2):
            if isinstance(item, dict):
                yield f"response body {index}", item, "body"
                yield from _frames(f"response {index}", item)


def _frames(name: str, response: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], str]]:
    frames = response.get("frames")
    if isinstance(frames, list):
        for index, frame in enumerate(frames):
            if isinstance(frame, dict):
                yield f"{name} frame {index}", frame, "data"


def body_sizes(data: dict[str, Any]) -> Iterator[tuple[str, int]]:
    """Each body of a recording's JSON and its size in bytes (a string's UTF-8 length, any
    other value's compact JSON length)."""
    for where, holder, key in _bodies(data):
        body = holder.get(key)
        if body is None:
            continue
        size = len(body.encode("utf-8")) if isinstance(body, str) else len(orjson.dumps(body))
        yield where, size


def binary_size(data: dict[str, Any], where: str) -> int | None:
    """The bytes a base64 body named `where` (as `body_sizes` names it) decodes to, or None
    for a body stored otherwise: messages speak of the bytes that came."""
    for name, holder, key in _bodies(data):
        body = holder.get(key)
        encoding = holder.get("body_encoding" if key == "body" else "data_encoding")
        if name == where and isinstance(body, str) and encoding == "base64":
            return len(body) * 3 // 4 - (len(body) - len(body.rstrip("=")))
    return None


def _map_strings(value: Any, change: Callable[[str], Any]) -> Any:
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {k: _map_strings(v, change) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_strings(v, change) for v in value]
    return value


def _map_refs(value: Any, change: Callable[[BlobRef], Any]) -> Any:
    ref = parse_ref(value)
    if ref is not None:
        return change(ref)
    if isinstance(value, dict):
        return {k: _map_refs(v, change) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_refs(v, change) for v in value]
    return value


def _with_bodies(data: dict[str, Any], change: Callable[[Any], Any]) -> dict[str, Any]:
    """A copy of `data` with every body (and every frame's data) replaced by `change`."""
    out = dict(data)
    if isinstance(out.get("request"), dict):
        out["request"] = {**out["request"], "body": change(out["request"].get("body"))}
    if isinstance(out.get("response"), dict):
        out["response"] = _response_with(out["response"], change)
    later = out.get("later_responses")
    if isinstance(later, list):
        out["later_responses"] = [
            _response_with(item, change) if isinstance(item, dict) else item for item in later
        ]
    return out


def _response_with(response: dict[str, Any], change: Callable[[Any], Any]) -> dict[str, Any]:
    out = {**response, "body": change(response.get("body"))}
    frames = response.get("frames")
    if isinstance(frames, list):
        out["frames"] = [
            {**frame, "data": change(frame["data"])}
            if isinstance(frame, dict) and frame.get("data") is not None
            else frame
            for frame in frames
        ]
    return out


def split_blobs(data: dict[str, Any], threshold: int) -> tuple[dict[str, Any], dict[str, bytes]]:
    """`data` with every string over `threshold` bytes in its bodies replaced by a reference,
    and the blobs to store (digest → bytes). `data` itself is not changed."""
    blobs: dict[str, bytes] = {}

    def change(text: str) -> Any:
        if len(text) * 4 <= threshold:  # cannot exceed it even in 4-byte UTF-8
            return text
        raw = text.encode("utf-8")
        if len(raw) <= threshold:
            return text
        digest = blob_digest(raw)
        blobs[digest] = raw
        return BlobRef(digest, len(raw), media_type_of(text)).to_json()

    out = _with_bodies(data, lambda body: _map_strings(body, change))
    return (out, blobs) if blobs else (data, blobs)


def join_blobs(data: dict[str, Any], read: Callable[[BlobRef], str]) -> dict[str, Any]:
    """`data` with every reference in its bodies replaced by the value `read` returns (the
    string the blob holds)."""
    return _with_bodies(data, lambda body: _map_refs(body, read))


def references(data: dict[str, Any]) -> list[BlobRef]:
    """Every blob reference in the bodies of a recording's JSON, in order."""
    found: list[BlobRef] = []

    def note(ref: BlobRef) -> BlobRef:
        found.append(ref)
        return ref

    for _where, holder, key in _bodies(data):
        _map_refs(holder.get(key), note)
    return found


# --- blob files ------------------------------------------------------------------------------

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_BLOB_FIX = "restore it from version control or re-record the test"


def read_blob_file(path: Path, size: int) -> bytes:
    """The bytes of a blob file that its reference says holds `size` bytes: never through
    a symlink, only a regular file, and never more than `size` + 1 bytes read.
    FileNotFoundError passes through; anything else is a RecordingError on `path` whose
    problem reads after the blob's name ("is a symlink to …")."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP or path.is_symlink():
            try:
                target: object = path.readlink()
            except OSError:
                target = "?"
            msg = (
                f"is a symlink to {target}: a blob is read only as a file of the store; "
                f"replace the link with the blob itself ({_BLOB_FIX})"
            )
            raise RecordingError(path, msg) from None
        raise RecordingError(path, f"cannot be read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RecordingError(path, f"is not a regular file; {_BLOB_FIX}")
        if info.st_size != size:
            msg = (
                f"is {info.st_size} bytes, its reference says {size} (changed or "
                f"corrupted); {_BLOB_FIX}"
            )
            raise RecordingError(path, msg)
        parts: list[bytes] = []
        left = size + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            parts.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise RecordingError(path, f"cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    data = b"".join(parts)
    if len(data) != size:
        msg = (
            f"holds {'more' if len(data) > size else 'fewer'} than the {size} bytes its "
            f"reference says (changed while read?); {_BLOB_FIX}"
        )
        raise RecordingError(path, msg)
    return data


def holds_blob(path: Path, size: int) -> bool:
    """Whether a blob file is in place: a regular file (not a link) of the right size. Its
    name is the digest of its bytes, so one of the right size is read back and checked."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size == size


def read_blob(
    blobs_dir: Path, ref: BlobRef, source: Path | str | None, max_body_bytes: int
) -> bytes:
    """The bytes of a referenced blob, checked against its name; a RecordingError naming
    the recording and the blob when it is missing, a symlink or not a regular file, not
    the size its reference says, or not what its name says. Never reads more than the
    referenced size and one byte (a blob linked to `/dev/zero` costs nothing)."""
    path = blobs_dir / ref.digest
    if ref.size > max_body_bytes:
        msg = (
            f"blob {path}: the blob is {ref.size} bytes, over "
            f"max_body_bytes ({max_body_bytes}); raise max_body_bytes in "
            "[tool.hashreplay] to read it"
        )
        raise RecordingError(source, msg)
    try:
        data = read_blob_file(path, ref.size)
    except FileNotFoundError:
        msg = (
            f"blob {path} is missing (a {ref.size}-byte {ref.media_type} value); restore "
            "it from version control or re-record the test"
        )
        raise RecordingError(source, msg) from None
    except RecordingError as exc:
        raise RecordingError(source, f"blob {path} {exc.problem}") from None
    if blob_digest(data) != ref.digest:
        msg = f"blob {path} does not match its name (changed or corrupted); re-record it"
        raise RecordingError(source, msg)
    return data


def read_blob_text(
    blobs_dir: Path, ref: BlobRef, source: Path | str | None, max_body_bytes: int
) -> str:
    """The string a blob stands for (a blob always holds UTF-8 text); a RecordingError
    naming the recording and the blob when it cannot be read or decoded."""
    raw = read_blob(blobs_dir, ref, source, max_body_bytes)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = (
            f"blob {blobs_dir / ref.digest} is not UTF-8 text (byte {exc.start} of "
            f"{len(raw)}), so it cannot be the value its reference stands for; {_BLOB_FIX}"
        )
        raise RecordingError(source, msg) from None
