"""Request and response normalisers (docs/design.md §3, §5).

The request normaliser makes semantically equal requests byte-equal before hashing; the
response normaliser replaces per-call values (ids, timestamps, durations) before writing, so
a re-record of unchanged behaviour is a zero-line diff. Provider rules are data (the tables
below), not code paths. Both functions are deterministic and idempotent.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from decimal import ROUND_HALF_EVEN, Context, Decimal, InvalidOperation
from typing import Any, Protocol

from hashreplay.core.constants import FIXED_EPOCH, SECRET_PLACEHOLDER, STABLE_ID_PREFIX
from hashreplay.core.volatile import Placeholders, VolatilePatterns

FLOAT_DIGITS = 5
_QUANTUM = Decimal(1).scaleb(-FLOAT_DIGITS)
_INT64 = 2**63

# --- response rules (data, not code) -------------------------------------------------------

#: Keys whose non-null string values are per-call ids, replaced by stable `rec-…` ids.
RESPONSE_ID_KEYS: frozenset[str] = frozenset({"id", "call_id", "responseId"})
#: Keys whose non-null values are creation/completion times: numbers → 0, strings → epoch.
RESPONSE_TIME_KEYS: frozenset[str] = frozenset(
    {"created", "created_at", "completed_at", "createTime", "updateTime"}
)
#: Keys whose non-null values are measured durations (Ollama reports nanoseconds, Bedrock's
#: Converse API `metrics.latencyMs`) → 0.
RESPONSE_DURATION_KEYS: frozenset[str] = frozenset(
    {
        "total_duration",
        "load_duration",
        "prompt_eval_duration",
        "eval_duration",
        "processing_ms",
        "latencyMs",
    }
)
#: Keys whose non-null values vary per call or per backend without meaning for the caller
#: (random stream padding, the serving configuration's fingerprint) → a fixed value.
RESPONSE_CLEARED_KEYS: Mapping[str, Any] = {
    "obfuscation": "",
    "system_fingerprint": "fp_recorded",
}

#: Top-level keys of an AWS event stream payload whose string values are random padding
#: (Bedrock pads every event with `"p": "abcdef…"` of random length) → a fixed value.
EVENTSTREAM_CLEARED_KEYS: Mapping[str, str] = {"p": ""}

#: Response headers kept by default: the ones that change how a client parses or retries.
KEPT_RESPONSE_HEADERS: frozenset[str] = frozenset(
    # x-amzn-errortype: the error code of AWS services (botocore reads it from the header)
    {"content-type", "retry-after", "retry-after-ms", "x-should-retry", "x-amzn-errortype"}
)

#: Request headers worth keeping in a file for review; the rest (user agents, SDK/OS
#: versions, retry counters, lengths) differ between machines and runs and would churn diffs.
KEPT_REQUEST_HEADERS: frozenset[str] = frozenset(
    {
        "content-type",
        "accept",
        "anthropic-version",
        "anthropic-beta",
        "openai-beta",
        "openai-organization",
        "openai-project",
    }
)


# --- request normalisation -----------------------------------------------------------------


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
    volatile values numbered; with a `redactor`, secrets removed in the same walk (exactly
    what redacting first and normalising the copy would give, for half the cost)."""
    return _RequestNormaliser(rules or _NO_RULES, id_map, redactor).value(value, ())


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

    def text(self, text: str) -> str:
        if self.redactor is not None:
            text = self.redactor.text(text)
        if self.plain and text.isascii() and "." not in text:
            return text
        return normalise_text(text, self.id_map, self.volatile, self.placeholders)

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


# --- response normalisation ----------------------------------------------------------------


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


def normalise_response_values(
    values: Iterable[Any],
    ids: IdRegistry,
    *,
    rewrite_ids: bool = True,
    rewrite_times: bool = True,
    where: str = "response.body",
    item_suffix: str = "",
    known_ids: Mapping[str, str] | None = None,
) -> list[Any]:
    """Normalise the body (or the ordered stream chunks) of one response.

    Ids are collected over all values first (so a chunk that references an id defined by a
    later chunk is still mapped), then every occurrence of an original id anywhere in the
    values is replaced by its stable form. `known_ids` are ids the same test received earlier
    (a response that echoes `previous_response_id`): mapped too, not registered again. Model
    lists pass `rewrite_ids=False,
    rewrite_times=False`: their ids are model names and their times are facts.
    """
    values = list(values)
    if rewrite_ids:
        for index, value in enumerate(values):
            label = where if len(values) == 1 else f"{where}[{index}]{item_suffix}"
            _collect_ids(value, ids, label, known_ids)
    mapping = {**(known_ids or {}), **ids.stable} if rewrite_ids else {}
    return [_rewrite(value, mapping, rewrite_times) for value in values]


def _collect_ids(
    value: Any, ids: IdRegistry, where: str, known: Mapping[str, str] | None = None
) -> None:
    _Collector(ids, where, known).walk(value)


class _Collector:
    """One pass registering the ids of a response value; a field's label (`where`) is only
    written out for the fields that hold an id, not for every field walked past."""

    def __init__(self, ids: IdRegistry, where: str, known: Mapping[str, str] | None) -> None:
        self.ids = ids
        self.where = where
        self.known = known
        self.path: list[str | int] = []

    def label(self) -> str:
        return self.where + "".join(
            f"[{step}]" if type(step) is int else f".{step}" for step in self.path
        )

    def walk(self, value: Any) -> None:
        path = self.path
        if isinstance(value, dict):
            known = self.known
            for key, item in value.items():
                if (
                    key in RESPONSE_ID_KEYS
                    and isinstance(item, str)
                    and item
                    and not item.startswith(STABLE_ID_PREFIX)
                    and not (known is not None and item in known)
                ):
                    path.append(key)
                    self.ids.assign(item, self.label())
                    path.pop()
                elif isinstance(item, (dict, list)):
                    path.append(key)
                    self.walk(item)
                    path.pop()
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, (dict, list)):
                    path.append(index)
                    self.walk(item)
                    path.pop()


def _rewrite(value: Any, id_map: Mapping[str, str], times: bool) -> Any:
    if isinstance(value, str):
        return map_ids(value, id_map) if id_map else value
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if times and item is not None and key in _FIXED_KEYS:
                replaced = _fixed_value(key, item)
                if replaced is not _KEEP:
                    out[key] = replaced
                    continue
            out[key] = item if type(item) in _PLAIN else _rewrite(item, id_map, times)
        return out
    if isinstance(value, list):
        return [item if type(item) in _PLAIN else _rewrite(item, id_map, times) for item in value]
    return value


#: Values `_rewrite` returns as they are (exact types).
_PLAIN = frozenset({int, float, bool, type(None)})


_KEEP = object()


def _fixed_value(key: str, value: Any) -> Any:
    if key in RESPONSE_TIME_KEYS and not isinstance(value, (dict, list, bool)):
        return FIXED_EPOCH if isinstance(value, str) else 0
    if key in RESPONSE_DURATION_KEYS and isinstance(value, (int, float)):
        return 0
    if key in RESPONSE_CLEARED_KEYS and not isinstance(value, (dict, list)):
        return RESPONSE_CLEARED_KEYS[key]
    return _KEEP


#: Every key `_fixed_value` may replace: a set lookup spares the call for the others.
_FIXED_KEYS = RESPONSE_TIME_KEYS | RESPONSE_DURATION_KEYS | frozenset(RESPONSE_CLEARED_KEYS)


# --- headers -------------------------------------------------------------------------------


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
