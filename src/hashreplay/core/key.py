"""The request hash (docs/design.md §3, contract).

`xxh3_128` hex of the canonical JSON (orjson, sorted keys) of method, endpoint, normalised
body and test id. A changed hash for the same request is a contract break: golden hashes are
pinned in tests/unit/test_hashing.py and any change needs a KEY_VERSION bump.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import orjson
import xxhash

#: Path endings of model-list calls (`GET`): hashed without the test id, shared by every test.
MODEL_LIST_SUFFIXES: tuple[str, ...] = ("/models", "/api/tags", "/api/ps")

_CANONICAL = orjson.OPT_SORT_KEYS


def canonical_json(value: Any) -> bytes:
    """Compact JSON with sorted keys: the bytes that are hashed."""
    return orjson.dumps(value, option=_CANONICAL)


def digest(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


def endpoint_of(url: str, is_secret_query: Any = None) -> str:
    """URL path plus its query sorted, with credential parameters removed; no host, no port.

    `is_secret_query(name) -> bool` decides which parameters are credentials (the redactor's).
    """
    parts = urlsplit(url)
    path = parts.path or "/"
    if not parts.query:
        return path
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if is_secret_query is not None:
        pairs = [(k, v) for k, v in pairs if not is_secret_query(k)]
    if not pairs:
        return path
    return f"{path}?{urlencode(sorted(pairs))}"


def is_model_list(
    method: str, endpoint: str, suffixes: Iterable[str] = MODEL_LIST_SUFFIXES
) -> bool:
    """`GET …/models`, `…/api/tags`, `…/api/ps` (also behind a prefix such as `/v1/v1/models`)."""
    if method.upper() != "GET":
        return False
    path = endpoint.split("?", 1)[0].rstrip("/")
    return path.endswith(tuple(suffixes))


def request_hash(
    method: str,
    endpoint: str,
    body: Any,
    test_id: str | None,
    *,
    headers: Mapping[str, str | None] | None = None,
    shared: bool = False,
    conversation: str | None = None,
) -> str:
    """The file name (without `.json`) of a request.

    `body` must already be redacted and normalised. `shared` (model lists) leaves the test id
    out so every test finds the same recording. `headers` are the `match_headers` values and
    are only part of the hash when that option is set; `conversation` only when there is one
    (`hashreplay.conversation`), so every other request keeps its hash.
    """
    payload: dict[str, Any] = {"method": method.upper(), "endpoint": endpoint, "body": body}
    if not shared:
        payload["test_id"] = test_id
    if headers:
        payload["headers"] = dict(headers)
    if conversation is not None:
        payload["conversation"] = conversation
    return digest(canonical_json(payload))
