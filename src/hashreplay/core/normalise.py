"""The request normaliser (docs/design.md §3): semantically equal requests made byte-equal
before hashing (numbers, text, ids a test received mapped back to their stable form; volatile
values and ids a client generates numbered: `<uuid:1>`, `call_<id:1>`, the same value always
the same number), the id registry that maps them, and the headers a file keeps. The response
normaliser, which replaces per-call values before writing, is `core/normalise_response.py`.
Both are deterministic and idempotent.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from decimal import ROUND_HALF_EVEN, Context, Decimal, InvalidOperation
from functools import partial
from typing import Any, Protocol

from hashreplay.core.constants import SECRET_PLACEHOLDER, STABLE_ID_PREFIX

#: Built-in pattern names and what they match.
BUILTIN_PATTERNS: Mapping[str, str] = {
    "uuid": r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
    "iso-timestamp": (
        r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
    ),
    "iso-date": r"\b\d{4}-\d{2}-\d{2}\b",
    "unix-ms": r"\b1\d{12}\b",
    "unix-s": r"\b1\d{9}\b",
    "hex-id": r"\b[0-9a-f]{24,64}\b",
}


#: The placeholder label of a user's own regex.
CUSTOM_LABEL = "volatile"


class VolatilePatterns:
    """Compiled patterns, in the order they are applied."""

    # not a NamedTuple: its truth is whether it has patterns
    __slots__ = ("patterns",)

    def __init__(self, patterns: tuple[tuple[str, re.Pattern[str]], ...] = ()) -> None:
        self.patterns = patterns

    def __bool__(self) -> bool:
        return bool(self.patterns)


def compile_patterns(entries: Iterable[str]) -> VolatilePatterns:
    """Built-in names, or regular expressions (labelled `volatile`). A bad regex raises
    ValueError naming the entry."""
    compiled: list[tuple[str, re.Pattern[str]]] = []
    for entry in entries:
        source = BUILTIN_PATTERNS.get(entry)
        label = entry if source is not None else CUSTOM_LABEL
        try:
            pattern = re.compile(source if source is not None else entry)
        except re.error as exc:
            names = ", ".join(BUILTIN_PATTERNS)
            msg = (
                f"volatile pattern {entry!r} is neither a built-in name ({names}) "
                f"nor a valid regular expression: {exc}"
            )
            raise ValueError(msg) from None
        if pattern.search("") is not None:
            msg = f"volatile pattern {entry!r} matches the empty string"
            raise ValueError(msg)
        compiled.append((label, pattern))
    return VolatilePatterns(tuple(compiled))


class Placeholders:
    """Numbering for one request: value → placeholder, per label, in order of appearance."""

    __slots__ = ("counts", "seen")

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], str] = {}
        self.counts: dict[str, int] = {}

    def replace(self, text: str, patterns: VolatilePatterns) -> str:
        for label, pattern in patterns.patterns:
            if pattern.search(text) is not None:
                text = pattern.sub(partial(self._placeholder, label), text)
        return text

    def _placeholder(self, label: str, match: re.Match[str]) -> str:
        key = (label, match.group(0))
        found = self.seen.get(key)
        if found is None:
            n = self.counts[label] = self.counts.get(label, 0) + 1
            found = self.seen[key] = f"<{label}:{n}>"
        return found


FLOAT_DIGITS = 5
_QUANTUM = Decimal(1).scaleb(-FLOAT_DIGITS)
_INT64 = 2**63


#: Response headers that hand the client an id it sends back on its later requests (MCP's
#: streamable-HTTP session, `mcp-session-id`): kept in the file with the value replaced by a
#: stable id, as a body's ids are, so a replayed client sends back what the file holds and
#: a re-record against a server handing out fresh ones changes nothing (docs/design.md §5,
#: "Ids handed out in headers"). A request's value of one is mapped the same way where a
#: request header is stored or hashed (`match_headers`).
ID_HEADERS: frozenset[str] = frozenset({"mcp-session-id"})


#: Response headers kept by default: the ones that change how a client parses or retries.
KEPT_RESPONSE_HEADERS: frozenset[str] = frozenset(
    # x-amzn-errortype: the error code of AWS services (botocore reads it from the header)
    {"content-type", "retry-after", "retry-after-ms", "x-should-retry", "x-amzn-errortype"}
    | ID_HEADERS
)


#: Request headers worth keeping in a file for review; the rest (user agents, SDK/OS
#: versions, retry counters, lengths) differ between machines and runs and would churn diffs.
KEPT_REQUEST_HEADERS: frozenset[str] = frozenset(
    {"content-type", "accept", "anthropic-version", "anthropic-beta"}
    | {"openai-beta", "openai-organization", "openai-project"}
)


class RequestRules:
    """What the request normaliser needs besides the value itself."""

    # no __slots__: the cached properties need the instance dict
    def __init__(
        self, ignore_body_keys: tuple[str, ...] = (), volatile: VolatilePatterns | None = None
    ) -> None:
        #: Key names dropped at any depth (`request_id`) or dotted paths from the root
        #: (`metadata.trace_id`).
        self.ignore_body_keys = ignore_body_keys
        #: Patterns of volatile values replaced by numbered placeholders (`<uuid:1>`).
        self.volatile = volatile if volatile is not None else VolatilePatterns()

    @functools.cached_property
    def ignored_names(self) -> frozenset[str]:
        return frozenset(k for k in self.ignore_body_keys if "." not in k)

    @functools.cached_property
    def ignored_paths(self) -> frozenset[tuple[str, ...]]:
        return frozenset(tuple(k.split(".")) for k in self.ignore_body_keys if "." in k)


def normalise_number(value: float) -> int | float:
    """`1.0` → `1`; other floats rounded to 5 decimals (and `2.000001` → `2`)."""
    if math.isnan(value) or math.isinf(value):
        return value
    rounded = round(value, FLOAT_DIGITS)
    if rounded.is_integer() and abs(rounded) < _INT64:
        return int(rounded)
    return rounded


def _render_decimal(match: re.Match[str]) -> str:
    try:
        text = match.group(0)
        context = Context(prec=len(text) + FLOAT_DIGITS + 2)
        return str(Decimal(text).quantize(_QUANTUM, rounding=ROUND_HALF_EVEN, context=context))
    except InvalidOperation:  # pragma: no cover - the regex only matches plain decimals
        return match.group(0)


def normalise_text(
    text: str,
    id_map: Mapping[str, str] | None = None,
    volatile: VolatilePatterns | None = None,
    placeholders: Placeholders | None = None,
) -> str:
    """NFC, known ids mapped, volatile values numbered, decimals with 4+ fractional digits
    re-rendered with 5 (in that order: a timestamp's fraction belongs to the timestamp)."""
    if not id_map and not volatile:
        return _plain_text(text) if len(text) >= _MEMO_MIN else _decimals(_nfc(text))
    text = _nfc(text)
    if id_map:
        text = map_ids(text, id_map)
    if volatile:
        text = (placeholders or Placeholders()).replace(text, volatile)
    return _decimals(text)


def _nfc(text: str) -> str:
    if text.isascii() or unicodedata.is_normalized("NFC", text):
        return text
    return unicodedata.normalize("NFC", text)


@functools.cache  # compiled on first use, not at import (start-up: docs/benchmarks.md)
def _decimal_in_text() -> re.Pattern[str]:
    return re.compile(r"-?\d+\.\d{4,}")


def _decimals(text: str) -> str:
    return _decimal_in_text().sub(_render_decimal, text) if "." in text else text


#: Strings at least this long have their (pure) normalisation memoised: long prompts recur
#: across requests, and re-scanning them dominated the cost of hashing a request.
_MEMO_MIN = 64


@functools.lru_cache(maxsize=4096)
def _plain_text(text: str) -> str:
    """NFC and decimals: the part of text normalisation that depends on the text alone."""
    return _decimals(_nfc(text))


#: Ids shorter than this are only mapped where they are a whole value, never inside text,
#: so an id like "1" cannot corrupt unrelated strings.
MIN_EMBEDDED_ID = 8


def map_ids(text: str, id_map: Mapping[str, str]) -> str:
    """Replace every original id that `text` is, or contains, by its stable form."""
    stable = id_map.get(text)
    if stable is not None:
        return stable
    for original, replacement in id_map.items():
        if len(original) >= MIN_EMBEDDED_ID and original in text:
            text = text.replace(original, replacement)
    return text


def normalise_request_body(
    value: Any,
    rules: RequestRules | None = None,
    id_map: Mapping[str, str] | None = None,
    redactor: Redacting | None = None,
) -> Any:
    """The body as hashed: numbers by value, NFC text, ignored keys dropped, ids mapped,
    volatile values and client ids numbered; with a `redactor`, secrets removed in the
    same walk (what redacting first and normalising the copy would give, at half the cost)."""
    walk = _RequestNormaliser(rules or _NO_RULES, id_map, redactor)
    body = walk.value(value, ())
    return _ClientIds().value(body) if walk.client_ids else body


#: The placeholder label of a client-generated id: `call_<id:1>`, `msg_<id:2>`, `<id:3>`.
CLIENT_ID_LABEL = "id"
_CLIENT_ID_MIN = 32  # the shortest client id: 32 hex digits (a shorter text holds none)


@functools.cache  # compiled on first use, not at import (start-up: docs/benchmarks.md)
def _client_id() -> re.Pattern[str]:
    """A whole token that is a uuid or a 32-hex token (not all digits), bare or after a
    prefix such as `call_`, `msg_`, `toolu_`: group 1 is the prefix, group 2 the id."""
    uuid = BUILTIN_PATTERNS["uuid"].removeprefix(r"\b").removesuffix(r"\b")
    token = rf"(?:{uuid}|(?=[0-9]{{0,31}}[a-fA-F])[0-9a-fA-F]{{32}})"
    return re.compile(rf"(?<![0-9A-Za-z])((?:[A-Za-z][A-Za-z0-9]*[_-])?)({token})(?![0-9A-Za-z])")


#: every ASCII hex digit byte → "1", every other byte → "0"
_HEX_DIGITS = bytes(0x31 if chr(b) in "0123456789abcdefABCDEF" else 0x30 for b in range(256))

#: eight hex digits in a row: a uuid's first group, and part of every 32-hex token
_HEX_RUN = b"1" * 8


def has_client_id(text: str) -> bool:
    """Whether `text` holds a client-generated id (docs/design.md §3, "Client-generated
    ids"); long texts (prompts that recur) are looked at once."""
    if len(text) < _CLIENT_ID_MIN:
        return False
    return (_has_client_id_memo if len(text) >= _MEMO_MIN else _client_id_in)(text)


def _client_id_in(text: str) -> bool:
    # a text without eight hex digits in a row holds no client id: most prose, found out by
    # one C pass at a tenth of what the pattern's search costs it
    if _HEX_RUN not in text.encode("utf-8", "surrogatepass").translate(_HEX_DIGITS):
        return False
    return _client_id().search(text) is not None


_has_client_id_memo = functools.lru_cache(maxsize=4096)(_client_id_in)


class _ClientIds:
    """Ids a client made up for this request, numbered (docs/design.md §3) in sorted-key
    order, as `hashreplay rehash` sees a stored body, not in the order the client wrote
    them. One id (dashes or not, any case) is one number; its prefix is kept."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def value(self, value: Any) -> Any:
        kind = type(value)
        if kind is str:
            return self.text(value) if has_client_id(value) else value
        if kind is dict:
            return {key: self.value(value[key]) for key in sorted(value)}
        if kind is list:
            return [self.value(item) for item in value]
        return value

    def text(self, text: str) -> str:
        return _client_id().sub(self._placeholder, text)

    def _placeholder(self, match: re.Match[str]) -> str:
        key = match.group(2).replace("-", "").lower()
        found = self.seen.get(key)
        if found is None:
            found = self.seen[key] = f"<{CLIENT_ID_LABEL}:{len(self.seen) + 1}>"
        return match.group(1) + found


class Redacting(Protocol):
    """What the request walk needs of a redactor (`core.redact.Redactor`)."""

    def text(self, text: str) -> str: ...

    def hides(self, key: Any, item: Any, siblings: Mapping[Any, Any]) -> bool: ...


_NO_RULES = RequestRules()


class _RequestNormaliser:
    """One pass over one request body (placeholder numbering is per request).

    The hot path of keying every request: exact types are dispatched first (parsed JSON has
    no others), plain ASCII text without a decimal point is returned as it is."""

    def __init__(
        self,
        rules: RequestRules,
        id_map: Mapping[str, str] | None,
        redactor: Redacting | None = None,
    ) -> None:
        self.names = rules.ignored_names
        self.paths = rules.ignored_paths
        self.volatile = rules.volatile
        self.placeholders = Placeholders() if rules.volatile else None
        self.id_map = id_map
        self.plain = not id_map and not rules.volatile
        self.redactor = redactor
        #: whether a client-generated id was seen: numbered after the walk
        self.client_ids = False

    def text(self, text: str) -> str:
        if self.redactor is not None:
            text = self.redactor.text(text)
        if not (self.plain and text.isascii() and "." not in text):
            text = normalise_text(text, self.id_map, self.volatile, self.placeholders)
        # client ids are looked for in the text as stored (decimals re-rendered, ids
        # mapped), which is what `rehash` and `verify` walk again: both find the same ids
        if not self.client_ids and len(text) >= _CLIENT_ID_MIN and has_client_id(text):
            self.client_ids = True
        return text

    def key(self, key: Any) -> str:
        if type(key) is str and key.isascii() and "." not in key:
            return key
        return normalise_text(str(key))

    def value(self, value: Any, path: tuple[str, ...]) -> Any:
        kind = type(value)
        if kind is str:
            return self.text(value)
        if kind is dict:
            return self.mapping(value, path)
        if kind is list:
            return [self.value(item, path) for item in value]
        if kind is int:
            return value if -_INT64 <= value < _INT64 else str(value)
        if value is None or kind is bool:
            return value
        if kind is float:
            return normalise_number(value)
        return self.other(value, path)

    def other(self, value: Any, path: tuple[str, ...]) -> Any:
        """Subclasses and other containers, by the same rules."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, bool):
            return value
        if isinstance(value, int):
            return value if -_INT64 <= value < _INT64 else str(value)
        if isinstance(value, float):
            return normalise_number(value)
        if isinstance(value, Mapping):
            return self.mapping(value, path)
        if isinstance(value, (list, tuple)):
            return [self.value(item, path) for item in value]
        return value

    def mapping(self, value: Mapping[Any, Any], path: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        names, paths, redactor = self.names, self.paths, self.redactor
        for key, raw in value.items():
            hidden = redactor is not None and redactor.hides(key, raw, value)
            k = self.key(key)
            if k in names:
                continue
            child = path
            if paths:
                child = (*path, k)
                if child in paths:
                    continue
            out[k] = self.value(SECRET_PLACEHOLDER if hidden else raw, child)
        return out


class IdRegistry:
    """Original → stable ids for one recording file.

    `stable` holds the in-memory pairs (never written); `facts` holds what the file may keep:
    which stable id replaced the value at which field.
    """

    __slots__ = ("base", "facts", "stable")

    def __init__(self, base: str, facts: dict[str, str] | None = None) -> None:
        self.base = base
        self.stable: dict[str, str] = {}
        self.facts: dict[str, str] = {} if facts is None else facts

    def assign(self, original: str, where: str) -> str:
        found = self.stable.get(original)
        if found is not None:
            return found
        n = len(self.facts)
        new = f"{STABLE_ID_PREFIX}{self.base}" + (f"-{n}" if n else "")
        while new in self.facts:  # a file re-opened with earlier facts
            n += 1
            new = f"{STABLE_ID_PREFIX}{self.base}-{n}"
        self.stable[original] = new
        self.facts[new] = where
        return new


def new_id_registry(request_hash: str, facts: Mapping[str, str] | None = None) -> IdRegistry:
    return IdRegistry(base=request_hash[:12], facts=dict(facts or {}))


def filter_headers(
    headers: Iterable[tuple[str, str]],
    keep: Iterable[str],
    transform: Callable[[str, str], str] | None = None,
) -> dict[str, str]:
    """Lower-cased headers whose names are in `keep`; repeated headers joined with ', '."""
    allowed = frozenset(keep)
    out: dict[str, str] = {}
    for name, raw in headers:
        lname = name.lower()
        if lname not in allowed:
            continue
        value = raw if transform is None else transform(lname, raw)
        out[lname] = f"{out[lname]}, {value}" if lname in out else value
    return out
