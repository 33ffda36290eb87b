"""HTTP bodies to and from their stored form: JSON when JSON, text when text, else base64.

Request bodies are also parsed when they are forms or multipart uploads, so that the random
multipart boundary of a client never reaches the hash.
"""

from __future__ import annotations

import base64
import re
from enum import Enum
from typing import Any
from urllib.parse import parse_qsl

import orjson


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


def _media(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


#: Every digit byte → "1", every other byte → "0": a run of 20 ones marks a long number.
_DIGIT_RUNS = bytes(0x31 if 0x30 <= b <= 0x39 else 0x30 for b in range(256))
_TWENTY_DIGITS = b"1" * 20


def _loads_json(content: bytes) -> Any:
    """Parse JSON; a body with an integer beyond 64 bits raises ValueError (orjson would
    silently turn it into a float), so callers keep it as text, byte for byte."""
    import json

    try:
        value = orjson.loads(content)
    except orjson.JSONDecodeError as exc:
        if "depth" in exc.msg:  # past orjson's 1,024 levels the stdlib parser recurses too
            raise RecursionError(exc.msg) from None
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
            form: dict[str, Any] = {}
            for key, value in pairs:
                prior = form.get(key)
                if prior is None:
                    form[key] = value
                elif isinstance(prior, list):
                    prior.append(value)
                else:
                    form[key] = [prior, value]
            return form, BodyEncoding.FORM
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
    sections = content.split(delimiter)
    parts: list[dict[str, Any]] = []
    for section in sections[1:]:
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
        data, encoding = encode_body(body, part.get("content_type", "text/plain"))
        part["data"] = data
        if encoding is BodyEncoding.BASE64:
            part["data_encoding"] = "base64"
        parts.append(part)
    return parts
