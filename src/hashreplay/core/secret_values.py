"""Redaction by value (docs/design.md §7): the credentials a request carries, scrubbed everywhere.

Redaction by key and by shape (`redact.py`) misses a key whose shape is unknown when the
upstream echoes it (`"invalid api key: acme-7f3k…"`), a key in a test id, or a token in a
URL path. So the engine takes the exact credential values out of each request (secret
headers, `Bearer`/`Basic`/AWS `Authorization` parts, cookies, secret query parameters, URL
userinfo, `x-amz-security-token`) and replaces every occurrence of them, in any text, with
`[secret removed]` before anything is written or printed.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
import threading
from collections.abc import Container, Iterable, Sequence
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlsplit

import orjson

from hashreplay.core.constants import SECRET_PLACEHOLDER
from hashreplay.core.format import (
    RecordedRequest,
    Recording,
    recording_from_json,
    request_from_json,
)
from hashreplay.core.redact import Redactor, merge_spans

__all__ = [
    "MIN_SECRET_LENGTH",
    "NO_SECRETS",
    "SecretValues",
    "SeenSecrets",
    "request_secrets",
    "scrub_recording",
    "scrub_request",
]

#: Shorter values are not scrubbed by value: replacing every `test` or `abc` in a body
#: would destroy ordinary text. Such values are still removed by key where they travel.
MIN_SECRET_LENGTH = 8
_SCHEMES = ("bearer", "basic", "token", "apikey", "key", "digest")
#: compiled on first use (the `re` module's cache), not at import: start-up time
_AWS_PART = r"\b(Credential|Signature)=([^,\s/]+)"


class SecretValues:
    """A set of exact secret values and the scrubber that removes them from any text.

    Plain substring replacement, longest value first (no regular expression: a process
    sees a new cookie or key with nearly every request, and compiling a pattern for each
    set cost milliseconds and filled the `re` cache)."""

    __slots__ = ("_encoded", "values")

    def __init__(self, values: Iterable[str] = ()) -> None:
        found = {
            v
            for v in values
            if len(v) >= MIN_SECRET_LENGTH and v not in SECRET_PLACEHOLDER  # never re-scrubbed
        }
        #: longest first, so a value that contains another is removed whole
        self.values: tuple[str, ...] = tuple(sorted(found, key=lambda v: (-len(v), v)))
        self._encoded: tuple[bytes, ...] | None = None

    def __bool__(self) -> bool:
        return bool(self.values)

    def __or__(self, other: SecretValues) -> SecretValues:
        return SecretValues((*self.values, *other.values))

    def text(self, text: str) -> str:
        if not text:
            return text
        for value in self.values:
            if value in text:
                text = text.replace(value, SECRET_PLACEHOLDER)
        return text

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where the values occur in `text` (sorted, joined where they overlap): what a
        stream's joined pieces are scanned with (`core.secret_values.redact_across`)."""
        found: list[tuple[int, int]] = []
        for value in self.values:
            at = text.find(value)
            while at >= 0:
                found.append((at, at + len(value)))
                at = text.find(value, at + len(value))
        return merge_spans(found)

    def mentioned_in(self, serialised: bytes) -> bool:
        """Whether any value occurs in these JSON bytes (as it would be written there)."""
        if self._encoded is None:
            # the base64 of each form too: a value inside a binary body is in the JSON only
            # as base64 (scrubbed in the bytes it encodes, `base64`)
            forms = {
                form
                for v in self.values
                for form in (
                    v.encode(),
                    orjson.dumps(v)[1:-1],
                    *(f.encode() for f in _base64_forms(v) if len(f) >= MIN_SECRET_LENGTH),
                )
            }
            self._encoded = _irreducible(forms)
        return any(form in serialised for form in self._encoded)

    def data(self, data: bytes) -> bytes:
        if not self.values or not data:
            return data
        placeholder = SECRET_PLACEHOLDER.encode()
        for value in self.values:
            data = data.replace(value.encode("utf-8"), placeholder)
        return data

    def base64(self, text: str) -> str:
        """A base64 body or chunk with the secrets removed from the bytes it encodes, encoded
        again: taking a value's base64 characters out of it, as from text, would leave data
        that no longer decodes, and a recording that cannot be read."""
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            return self.text(text)
        scrubbed = self.data(raw)
        return text if scrubbed == raw else base64.b64encode(scrubbed).decode("ascii")

    def value(self, value: Any) -> Any:
        """A copy of a JSON-like value with the secrets removed from every string and key;
        base64 bodies and binary chunks are scrubbed in the bytes they encode (`base64`)."""
        if not self.values:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            if value.get("body_encoding") == "base64" and isinstance(value.get("body"), str):
                return {**self.value({**value, "body": None}), "body": self.base64(value["body"])}
            if len(value) == 1 and isinstance(value.get("base64"), str):  # a binary chunk
                return {"base64": self.base64(value["base64"])}
            return {
                (self.text(k) if isinstance(k, str) else k): self.value(v) for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            return [self.value(v) for v in value]
        return value


NO_SECRETS = SecretValues()


def _irreducible(forms: Iterable[bytes]) -> tuple[bytes, ...]:
    """The forms that contain no other form: where `Bearer sk-…` occurs, `sk-…` occurs too,
    so looking for the shorter alone answers whether any occurs (one scan of each request
    instead of one per form)."""
    kept: list[bytes] = []
    for form in sorted(forms, key=len):
        if not any(shorter in form for shorter in kept):
            kept.append(form)
    return tuple(kept)


def _with_encodings(value: str) -> list[str]:
    """The value and the forms it takes when an upstream or a client encodes it: inside URLs
    (percent-encoded, `+` for spaces) and in base64 (`_base64_forms`). A value too short to
    be scrubbed is not scrubbed encoded either (`short` encodes to 8 characters)."""
    if len(value) < MIN_SECRET_LENGTH:
        return [value]
    return [
        value,
        quote(value, safe=""),
        quote(value, safe="/:"),
        quote_plus(value, safe=""),
        *_base64_forms(value),
    ]


#: Where the characters that encode only the value's own bits begin in the base64 of a text
#: in which the value starts 0, 1 or 2 bytes after a 3-byte group's start.
_BASE64_START = (0, 2, 3)


def _base64_forms(value: str) -> list[str]:
    """The value's base64, standard and URL-safe, padded and not, and at each of the three
    alignments it can have inside a longer encoded text (`{"auth": "Bearer sk-…"}` encoded
    whole): the run of characters that encode the value's bytes alone, the same whatever
    comes before and after it."""
    raw = value.encode("utf-8")
    forms: list[str] = []
    for offset, start in enumerate(_BASE64_START):
        encoded = base64.b64encode(b"\0" * offset + raw).decode("ascii")
        end = (offset + len(raw)) * 8 // 6  # the last character holding no later bits
        forms.append(encoded[start:end])
        if offset == 0:
            forms.extend((encoded, encoded.rstrip("=")))
    return [form for f in forms for form in (f, f.translate(_URLSAFE))]


_URLSAFE = str.maketrans("+/", "-_")


def _authorization_values(value: str) -> list[str]:
    found = [value]
    scheme, _, rest = value.strip().partition(" ")
    rest = rest.strip()
    if rest and scheme.lower() in _SCHEMES:
        found.append(rest)
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(rest, validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError, ValueError):
                decoded = ""
            user, sep, password = decoded.partition(":")
            found.extend([decoded, password] if sep else [decoded])
            if sep and not password:
                found.append(user)
    # AWS SigV4: the access key id of `Credential=` and the signature
    found.extend(part for _, part in re.findall(_AWS_PART, value))
    return found


def _cookie_values(value: str) -> list[str]:
    return [part.partition("=")[2].strip() for part in value.split(";") if "=" in part]


def request_secrets(
    redactor: Redactor, url: str, headers: Sequence[tuple[str, str]]
) -> SecretValues:
    """The credential values one request carries, in its headers and its URL."""
    found: list[str] = []
    for name, value in headers:
        if not redactor.is_secret_key(name) or not value:
            continue
        lname = name.lower()
        if lname in ("cookie", "set-cookie"):
            found.extend(_cookie_values(value))
        found.extend(_authorization_values(value))
    parts = urlsplit(url)
    for key, value in parse_qsl(parts.query, keep_blank_values=False):
        if redactor.is_query_secret(key):
            found.append(value)
    if parts.password:
        found.append(unquote(parts.password))
    elif parts.username:
        found.append(unquote(parts.username))  # `https://KEY@host`: a key as the user
    return _secret_values(tuple(found)) if found else NO_SECRETS


@functools.lru_cache(maxsize=256)
def _secret_values(found: tuple[str, ...]) -> SecretValues:
    """Memoised: a suite sends the same key with nearly every request, and building the
    encoded forms costs more than the rest of keying a request."""
    return SecretValues(v for value in found for v in _with_encodings(value.strip()))


class SeenSecrets:
    """Every secret value a long-lived process has seen (bounded), for what it prints
    outside one request: the usage log, the proxy's access log."""

    def __init__(self, limit: int = 1024) -> None:
        self._limit = limit
        self._values: dict[str, None] = {}
        self._lock = threading.Lock()
        self._scrubber: SecretValues | None = NO_SECRETS

    def add(self, secrets: SecretValues) -> None:
        if not secrets or all(v in self._values for v in secrets.values):
            return
        with self._lock:
            for value in secrets.values:
                self._values.pop(value, None)
                self._values[value] = None
            while len(self._values) > self._limit:
                del self._values[next(iter(self._values))]
            self._scrubber = None  # rebuilt when next needed

    @property
    def scrubber(self) -> SecretValues:
        scrubber = self._scrubber
        if scrubber is None:
            with self._lock:
                scrubber = self._scrubber = SecretValues(self._values)
        return scrubber

    def text(self, text: str) -> str:
        return self.scrubber.text(text)


def scrub_request(request: RecordedRequest, secrets: SecretValues) -> RecordedRequest:
    """The request with the secret values removed (before hashing: the name of its file
    stays what `hashreplay verify` recomputes from the file)."""
    if not secrets:
        return request
    data = request.model_dump(mode="json")
    if not secrets.mentioned_in(orjson.dumps(data)):
        return request  # the common case: the key travels only where redaction removed it
    return request_from_json(secrets.value(data))


def scrub_recording(recording: Recording, secrets: SecretValues) -> Recording:
    """The recording with the secret values removed from every string: response bodies,
    stream chunks, exception messages, the test id."""
    if not secrets:
        return recording
    return recording_from_json(secrets.value(recording.model_dump(mode="json")))


def carries_any(
    redactor: Redactor, url: str, headers: Sequence[tuple[str, str]], values: Container[str]
) -> bool:
    """Whether a request's credentials (auth headers, key parameters, userinfo) include one
    of `values` (keyless replay's placeholders, docs/design.md §7)."""
    secret_headers, _ = redactor.split_headers(headers)
    return any(value in values for value in request_secrets(redactor, url, secret_headers).values)
