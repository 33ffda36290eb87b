"""Secret redaction (docs/design.md §7): by key, recursively, and by value shape.

Runs before anything is written and on every incoming request before hashing, so a
recording made with one key replays with another or with none. It cannot be switched off;
`redact_keys` only adds names.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from hashreplay.core.constants import SECRET_PLACEHOLDER

#: Secret key names (compared case-insensitively, with `-` and `_` treated alike).
SECRET_KEYS: frozenset[str] = frozenset(
    {
        "authorization",
        "proxy_authorization",
        "api_key",
        "apikey",
        "x_api_key",
        "x_goog_api_key",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "cookie",
        "set_cookie",
        "secret",
        "client_secret",
        "password",
        "session_key",
    }
)

#: Query parameters that carry credentials in URLs (Gemini's `?key=`, signed URLs, …).
SECRET_QUERY_KEYS: frozenset[str] = SECRET_KEYS | frozenset(
    {"key", "sig", "signature", "x_amz_signature", "x_amz_security_token", "code"}
)

#: A secret-named key is left alone inside a dict that also has one of these keys: OpenAI
#: and Ollama log-probabilities are `{"token": " Hello", "logprob": -0.1}`.
NOT_SECRET_BESIDE: Mapping[str, frozenset[str]] = {"token": frozenset({"logprob", "logprobs"})}

#: Value shapes that are secrets wherever they appear (in text, URLs, exception messages).
SECRET_SHAPES: tuple[str, ...] = (
    r"\b[Bb]earer\s+[A-Za-z0-9._~+/=\-]{8,}",
    r"\bsk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_\-]{16,}",
    r"\bAIza[0-9A-Za-z_\-]{35}",
    r"\b(?:gsk|xai|pplx|ghp|gho|ghs|ghu|github_pat|glpat|nvapi|r8)_[A-Za-z0-9_\-]{16,}",
    r"\bhf_[A-Za-z0-9]{30,}",
    r"\bxox[abprs]-[A-Za-z0-9\-]{10,}",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
)


# Patterns are compiled on first use, not at import: compiling them cost milliseconds of
# every run's start-up (docs/benchmarks.md).
@functools.cache
def _shapes() -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{s})" for s in SECRET_SHAPES))


@functools.cache
def _query_in_text() -> re.Pattern[str]:
    return re.compile(
        r"([?&])([A-Za-z0-9_\-]+)=(" + re.escape(SECRET_PLACEHOLDER) + r"|[^&#\s\"'<>]+)"
    )


#: Strings at least this long have their redaction memoised.
_MEMO_MIN = 8
_KEY_CACHE_MAX = 65536


#: Values redaction leaves as they are (exact types: subclasses take the general path).
_SCALARS = frozenset({int, float, bool, type(None)})


def _fold(key: str) -> str:
    return key.lower().replace("-", "_")


@functools.cache
def _words() -> re.Pattern[str]:
    """Words of a key name: `apiToken` → api, token; `X-Amz-Security-Token` → x, amz,
    security, token."""
    return re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


#: A key whose last word is one of these is a secret whatever comes before it
#: (`db_password`, `passwd`, `clientSecret`, `aws_credentials`).
SECRET_LAST_WORDS: frozenset[str] = frozenset(
    {"password", "passwd", "passphrase", "pwd", "secret", "credential", "credentials", "apikey"}
)
#: `…_token` is a secret (`auth_token`, `apiToken`, `session_token`, `x-amz-security-token`)
#: unless the word before names a tokenizer's or a paginator's token, which is ordinary data.
NOT_SECRET_TOKENS: frozenset[str] = frozenset(
    {
        "bos", "eos", "pad", "unk", "sep", "cls", "mask", "stop", "start", "end",
        "special", "next", "page", "prev", "previous", "continuation", "cursor",
        "max", "min", "num", "total", "prompt", "completion", "input", "output",
        "cached", "reasoning", "first", "last", "sync", "resume",
    }
)  # fmt: skip
#: `…_key` is a secret only after one of these words (`private_key`, `secret_key`,
#: `aws_secret_access_key`); `cache_key`, `sort_key`, `idempotency_key` are ordinary.
SECRET_KEY_QUALIFIERS: frozenset[str] = frozenset(
    {
        "api", "private", "secret", "access", "session", "signing", "encryption", "client",
        "master", "auth", "account", "subscription", "service", "license", "licence",
        "ssh", "pgp", "gpg", "hmac", "webhook", "app", "developer",
    }
)  # fmt: skip


def is_compound_secret(key: str) -> bool:
    """Whether a key name is a secret by its words: `auth_token`, `apiToken`, `private_key`,
    `passwd`, `aws_secret_access_key`, `x-amz-security-token` are; `max_tokens`,
    `prompt_tokens`, `key_version`, `tokens`, `eos_token`, `cache_key` are not."""
    words = [w.lower() for w in _words().findall(key)]
    if not words:
        return False
    last = words[-1]
    if last in SECRET_LAST_WORDS:
        return True
    before = words[-2] if len(words) > 1 else ""
    if last == "token":
        return before not in NOT_SECRET_TOKENS
    if last == "key":
        return before in SECRET_KEY_QUALIFIERS
    return False


class Redactor:
    """Removes secrets from headers, URLs, bodies and text. Immutable and cheap to share."""

    def __init__(self, extra_keys: Iterable[str] = ()) -> None:
        self.keys = SECRET_KEYS | frozenset(_fold(k) for k in extra_keys)
        self.query_keys = SECRET_QUERY_KEYS | self.keys
        # Long strings (system prompts, documents) recur across requests: scanning them
        # for secret shapes is the costliest step of hashing a request, so it is memoised.
        self._long_text = functools.lru_cache(maxsize=4096)(self._scan)
        self._key_cache: dict[str, bool] = {}

    def is_secret_key(self, key: str) -> bool:
        found = self._key_cache.get(key)
        if found is None:
            found = _fold(key) in self.keys or is_compound_secret(key)
            if len(self._key_cache) < _KEY_CACHE_MAX:  # keys of real APIs are a small set
                self._key_cache[key] = found
        return found

    def split_headers(
        self, headers: Iterable[tuple[str, str]]
    ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """A request's headers as (secret-named, others), in order."""
        secret: list[tuple[str, str]] = []
        others: list[tuple[str, str]] = []
        cache = self._key_cache
        for header in headers:
            found = cache.get(header[0])
            if found is None:
                found = self.is_secret_key(header[0])
            (secret if found else others).append(header)
        return secret, others

    def hides(self, key: Any, item: Any, siblings: Mapping[Any, Any]) -> bool:
        """Whether the value `item` of `key` (in a mapping with `siblings`' keys) is replaced
        by the placeholder: a secret key's non-null value, unless a sibling key says the
        name means something else (`{"token": …, "logprob": …}`)."""
        if item is None or not isinstance(key, str):
            return False
        secret = self._key_cache.get(key)
        if secret is None:
            secret = self.is_secret_key(key)
        if not secret:
            return False
        beside = NOT_SECRET_BESIDE.get(_fold(key))
        return beside is None or not (beside & siblings.keys())

    def text(self, text: str) -> str:
        """Replace secret-shaped values and credential query parameters inside free text."""
        if len(text) >= _MEMO_MIN:
            result: str = self._long_text(text)
            return result
        return self._scan(text)

    def _scan(self, text: str) -> str:
        shapes = _shapes()
        if shapes.search(text) is not None:
            text = shapes.sub(SECRET_PLACEHOLDER, text)
        if "=" in text and ("?" in text or "&" in text):
            text = _query_in_text().sub(self._query_match, text)
        return text

    def _query_match(self, match: re.Match[str]) -> str:
        if _fold(match.group(2)) in self.query_keys and match.group(3) != SECRET_PLACEHOLDER:
            return f"{match.group(1)}{match.group(2)}={SECRET_PLACEHOLDER}"
        return match.group(0)

    def value(self, value: Any) -> Any:
        """A copy of a JSON-like value with secrets removed, by key and by shape."""
        kind = type(value)
        if kind is str:
            return self.text(value)
        if kind is dict:
            return self._mapping(value)
        if kind is list:
            return [item if type(item) in _SCALARS else self.value(item) for item in value]
        if kind in _SCALARS:
            return value
        # subclasses and other containers, by the same rules
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return self._mapping(value)
        if isinstance(value, (list, tuple)):
            return [self.value(item) for item in value]
        return value

    def _mapping(self, value: Mapping[Any, Any]) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if self.hides(key, item, value):
                out[key] = SECRET_PLACEHOLDER
            elif type(item) in _SCALARS:  # numbers, booleans, null: nothing to remove
                out[key] = item
            else:
                out[key] = self.value(item)
        return out

    def multipart_parts(self, body: Any, encoding: str) -> Any:
        """A multipart body with the data of secret-named parts (`name="api_key"`) removed,
        which `value` alone cannot see; other bodies as they are (the rest of the redaction
        is `value`'s)."""
        if encoding == "multipart" and isinstance(body, list):
            return [self._multipart_part(part) for part in body]
        return body

    def _multipart_part(self, part: Any) -> Any:
        if not isinstance(part, Mapping):
            return part
        name = part.get("name")
        if isinstance(name, str) and self.is_secret_key(name) and part.get("data") is not None:
            return {
                **{k: v for k, v in part.items() if k != "data_encoding"},
                "data": SECRET_PLACEHOLDER,
            }
        return part

    def header(self, name: str, value: str) -> str:
        if self.is_secret_key(name):
            return SECRET_PLACEHOLDER
        return self.text(value)

    def url(self, url: str) -> str:
        """The URL with credential query values and userinfo passwords removed."""
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, host = netloc.rpartition("@")
            user = userinfo.split(":", 1)[0]
            netloc = (
                f"{user}:{quote(SECRET_PLACEHOLDER, safe='')}@{host}" if ":" in userinfo else netloc
            )
        query = self.query(parts.query)
        return self.text(urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)))

    def query(self, query: str) -> str:
        """A query string with credential values replaced (order kept)."""
        if not query:
            return query
        pairs = parse_qsl(query, keep_blank_values=True)
        return "&".join(
            f"{quote(k, safe='')}="
            + (SECRET_PLACEHOLDER if self.is_query_secret(k) else quote(v, safe=""))
            for k, v in pairs
        )

    def is_query_secret(self, key: str) -> bool:
        return _fold(key) in self.query_keys
