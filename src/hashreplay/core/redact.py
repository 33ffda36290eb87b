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
        "secrets",
        "signature",
        "x_amz_signature",
        "jwt",
        "bearer",
    }
)

#: Query parameters that carry credentials in URLs (Gemini's `?key=`, signed URLs, …).
SECRET_QUERY_KEYS: frozenset[str] = SECRET_KEYS | frozenset(
    {"key", "sig", "signature", "x_amz_signature", "x_amz_security_token", "code"}
)

#: A secret-named key is left alone inside a dict that also has one of these keys: OpenAI
#: and Ollama log-probabilities are `{"token": " Hello", "logprob": -0.1}`.
NOT_SECRET_BESIDE: Mapping[str, frozenset[str]] = {"token": frozenset({"logprob", "logprobs"})}

#: Keys that are secrets only inside an OAuth token request (a mapping, or a form body, that
#: has a `grant_type`): the authorization `code` a client trades for a token, its PKCE
#: verifier, a device code, a JWT assertion. Elsewhere `code` is an error code.
SECRET_BESIDE_GRANT: frozenset[str] = frozenset(
    {"code", "code_verifier", "device_code", "assertion", "client_assertion"}
)

#: What may not come right before a secret shape: an ASCII letter or digit (`task-…`,
#: `desk-…` are words, not keys). A word boundary is not asked for: a key glued to `_`, to a
#: non-ASCII letter or to a path (`/_sk-…`, `é_sk-proj-…`) is a key all the same.
_START = r"(?<![A-Za-z0-9])"

#: Value shapes that are secrets wherever they appear (in text, URLs, exception messages).
SECRET_SHAPES: tuple[str, ...] = (
    _START + r"[Bb]earer\s+[A-Za-z0-9._~+/=\-]{8,}",
    _START + r"sk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_\-]{16,}",
    _START + r"AIza[0-9A-Za-z_\-]{35,}",
    _START + r"(?:gsk|xai|pplx|ghp|gho|ghs|ghu|github_pat|glpat|nvapi|r8)_[A-Za-z0-9_\-]{16,}",
    _START + r"hf_[A-Za-z0-9]{30,}",
    _START + r"xox[abprs]-[A-Za-z0-9\-]{10,}",
    _START + r"(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])",
    _START + r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
)


#: the shortest text a `SECRET_SHAPES` pattern matches (`Bearer ` and 8 characters);
#: tests/unit/test_redact.py holds it to the patterns
SHAPE_MIN_LENGTH = 15


# Patterns are compiled on first use, not at import: compiling them cost milliseconds of
# every run's start-up (docs/benchmarks.md).
@functools.cache
def _shapes() -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{s})" for s in SECRET_SHAPES))


@functools.cache
def _query_in_text() -> re.Pattern[str]:
    # the value runs to the parameter's end, even past a placeholder an earlier pass left
    # in its first characters: a tail of a key is still a key
    return re.compile(
        r"([?&])([A-Za-z0-9_\-]+)=((?:" + re.escape(SECRET_PLACEHOLDER) + r")?[^&#\s\"'<>]*)"
    )


@functools.cache
def _assignment_in_text() -> re.Pattern[str]:
    """`api_key=…`, `key: …` in free text (a log line, an error message): a name, `=` or
    `:`, and a token-like value of 16 or more characters, taken whole."""
    return re.compile(
        r"(?<![A-Za-z0-9_\-])([A-Za-z][A-Za-z0-9_\-]*)(\s*[=:]\s*)"
        r"((?:" + re.escape(SECRET_PLACEHOLDER) + r")?[A-Za-z0-9._~+/%\-]{16,}=*)"
    )


@functools.cache
def _dsn_password() -> re.Pattern[str]:
    """The password of `scheme://user:password@host` anywhere in text (database DSNs,
    broker URLs, `redis://:password@host`)."""
    return re.compile(r"\b([A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@?#\[\]]*:)([^\s@/?#]+)@")


#: The placeholder as text and as `Redactor.url` writes it into userinfo.
_PLACEHOLDER_FORMS = frozenset({SECRET_PLACEHOLDER, quote(SECRET_PLACEHOLDER, safe="")})

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
#: (`db_password`, `passwd`, `clientSecret`, `aws_credentials`, `x-amz-signature`,
#: `userJwt`, `client_secrets`).
SECRET_LAST_WORDS: frozenset[str] = frozenset(
    {
        "password", "passwords", "passwd", "passphrase", "pwd", "secret", "secrets",
        "credential", "credentials", "apikey", "signature", "jwt", "bearer",
    }
)  # fmt: skip
#: `…_token` is a secret (`auth_token`, `apiToken`, `session_token`, `x-amz-security-token`)
#: unless the word before names a tokenizer's or a paginator's token, or MCP's
#: `progressToken` (the client's handle for a request's progress), which are ordinary data.
NOT_SECRET_TOKENS: frozenset[str] = frozenset(
    {
        "bos", "eos", "pad", "unk", "sep", "cls", "mask", "stop", "start", "end",
        "special", "next", "page", "prev", "previous", "continuation", "cursor",
        "max", "min", "num", "total", "prompt", "completion", "input", "output",
        "cached", "reasoning", "first", "last", "sync", "resume", "progress",
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
            return key in SECRET_BESIDE_GRANT and "grant_type" in siblings
        beside = NOT_SECRET_BESIDE.get(_fold(key))
        return beside is None or not (beside & siblings.keys())

    def text(self, text: str) -> str:
        """Replace secret-shaped values and credential query parameters inside free text."""
        if len(text) >= _MEMO_MIN:
            result: str = self._long_text(text)
            return result
        return self._scan(text)

    def _scan(self, text: str) -> str:
        return self._apply(text, self.spans(text))

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where secrets are in `text`: (start, end) pairs, sorted, not overlapping. What
        `text` replaces, and what a stream's pieces are scanned with as one text, so a key
        split between two events is still found (`core.secret_values.redact_across`)."""
        found: list[tuple[int, int]] = []
        if len(text) >= SHAPE_MIN_LENGTH:  # shorter texts hold none: no regex search for them
            found.extend(match.span() for match in _shapes().finditer(text))
        if "=" in text and ("?" in text or "&" in text):
            for match in _query_in_text().finditer(text):
                if self._hidden_value(match.group(2), match.group(3)):
                    found.append(match.span(3))
        if "=" in text or ":" in text:
            for match in _assignment_in_text().finditer(text):
                if self._hidden_value(match.group(1), match.group(3), free=True):
                    found.append(match.span(3))
        if "://" in text:
            for match in _dsn_password().finditer(text):
                if match.group(2) not in _PLACEHOLDER_FORMS:
                    found.append(match.span(2))
        return merge_spans(found)

    def _hidden_value(self, name: str, value: str, *, free: bool = False) -> bool:
        """Whether the value of parameter `name` is removed (not when it is empty or the
        placeholder already). In free text `code=`, `sig=` are too common to be secrets."""
        if not value or value == SECRET_PLACEHOLDER:
            return False
        folded = _fold(name)
        if free:
            return folded in self.keys or folded == "key" or is_compound_secret(name)
        return folded in self.query_keys

    @staticmethod
    def _apply(text: str, spans: list[tuple[int, int]]) -> str:
        if not spans:
            return text
        out: list[str] = []
        at = 0
        for start, end in spans:
            out.append(text[at:start])
            out.append(SECRET_PLACEHOLDER)
            at = end
        out.append(text[at:])
        return "".join(out)

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


def merge_spans(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted spans with overlapping or touching ones joined."""
    if len(spans) < 2:
        return spans
    spans.sort()
    merged = [spans[0]]
    for start, end in spans[1:]:
        last_start, last_end = merged[-1]
        if start <= last_end:
            merged[-1] = (last_start, max(last_end, end))
        else:
            merged.append((start, end))
    return merged
