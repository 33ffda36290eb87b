"""The request hash (docs/design.md §3, contract): the key that names a recording.

`xxh3_128` hex of the canonical JSON (orjson, sorted keys) of method, endpoint, normalised
body and test id. A changed hash for the same request is a contract break: golden hashes are
pinned in tests/unit/test_hashing.py and any change needs a KEY_VERSION bump.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import xxhash

_CANONICAL = orjson.OPT_SORT_KEYS


def canonical_json(value: Any) -> bytes:
    """Compact JSON with sorted keys: the bytes that are hashed."""
    return orjson.dumps(value, option=_CANONICAL)


def digest(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


def request_hash(
    method: str,
    endpoint: str,
    body: Any,
    test_id: str | None,
    *,
    headers: Mapping[str, str | None] | None = None,
    shared: bool = False,
    conversation: str | None = None,
    match: Mapping[str, Any] | None = None,
) -> str:
    """The file name (without `.json`) of a request.

    `body` must already be redacted and normalised. `shared` (model lists) leaves the test id
    out so every test finds the same recording. `headers` are the `match_headers` values and
    are only part of the hash when that option is set; `conversation` only when there is one
    (`hashreplay.conversation`), so every other request keeps its hash; `match` only under
    a narrower matching rule (docs/design.md §14), whose projection of the request the
    other arguments then are.
    """
    payload: dict[str, Any] = {"method": method.upper(), "endpoint": endpoint, "body": body}
    if not shared:
        payload["test_id"] = test_id
    if headers:
        payload["headers"] = dict(headers)
    if conversation is not None:
        payload["conversation"] = conversation
    if match is not None:
        payload["match"] = dict(match)
    return digest(canonical_json(payload))
