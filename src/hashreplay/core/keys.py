"""What names a recording: the current test id and conversation, the request hash (docs/design.md
§3), file names and stored URLs (§4, §13).

The current test id: a ContextVar (concurrent asyncio tasks keep theirs) with a
process-wide fallback, so calls from threads an SDK starts still find their test.

The request hash (docs/design.md §3, contract).

`xxh3_128` hex of the canonical JSON (orjson, sorted keys) of method, endpoint, normalised
body and test id. A changed hash for the same request is a contract break: golden hashes are
pinned in tests/unit/test_hashing.py and any change needs a KEY_VERSION bump.

File names in the store (docs/design.md §4): the one module that
composes and reads them.

A recording is `<hash>.json`; a shared model list is `models-<hash>-<digest>.json`, where the
digest names the set of model ids it lists (so two model sets of one request live side by
side and are merged on replay).

The URL a recording stores (docs/design.md §13, contract): a loopback upstream keeps no port.

Neither host nor port is hashed (§3), so a recording made against a fake or local server on
port 8000 replays against port 9000; storing the port would still rewrite every file on a
re-record against a new port. A loopback host (`localhost`, `*.localhost`, `127.0.0.0/8`,
`::1`) is stored as `localhost` without a port; provider hosts stay as they are, for
readability. Pure: it never resolves a name.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson
import xxhash

from hashreplay.core.constants import MODEL_LIST_PREFIX

_UNSET: Final = "\x00unset"


_current: ContextVar[str | None] = ContextVar("hashreplay_test_id", default=_UNSET)


_process_wide: list[str | None] = [None]


def current_test_id() -> str | None:
    """The test id of the calling context, else the process-wide one, else None."""
    value = _current.get()
    return _process_wide[0] if value == _UNSET else value


def has_own_test_context() -> bool:
    """True when the calling context carries a test id of its own (set in it, or copied
    into a task or thread), not only the process-wide fallback: a thread pool's worker
    (asyncio's resolver) runs for whoever submitted the work, not for the current test."""
    return _current.get() != _UNSET


def process_test_id() -> str | None:
    return _process_wide[0]


def set_process_test_id(test_id: str | None) -> None:
    """Set the test id seen by threads and tasks that have no context of their own."""
    _process_wide[0] = test_id


@contextmanager
def test_context(test_id: str | None) -> Iterator[None]:
    """Run a block (and the tasks it creates) as test `test_id`; None means outside any test."""
    token = _current.set(test_id)
    try:
        yield
    finally:
        _current.reset(token)


test_context.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


_conversation: ContextVar[str | None] = ContextVar("hashreplay_conversation", default=None)


def current_conversation() -> str | None:
    """The conversation of the calling context (`conversation(name)`), or None."""
    return _conversation.get()


@contextmanager
def conversation(name: str) -> Iterator[None]:
    """Run a block as conversation `name`: identical requests of different conversations in
    one test keep their own recorded sequences. Context-local: tasks and threads that copy
    the context inherit it."""
    if not isinstance(name, str) or not name:
        msg = f"hashreplay.conversation(name): name must be a non-empty string, got {name!r}"
        raise ValueError(msg)
    token = _conversation.set(name)
    try:
        yield
    finally:
        _conversation.reset(token)


class _Flag:
    """A context-local on/off flag, set for the duration of a `with` block."""

    def __init__(self, name: str) -> None:
        self._var: ContextVar[bool] = ContextVar(name, default=False)

    def is_set(self) -> bool:
        return self._var.get()

    @contextmanager
    def set(self) -> Iterator[None]:
        token = self._var.set(True)
        try:
            yield
        finally:
            self._var.reset(token)


_in_call = _Flag("hashreplay_in_call")


_adapter_io = _Flag("hashreplay_adapter_io")


def in_call() -> bool:
    """True while a recorded call-layer target runs live: the HTTP it makes underneath is
    part of that call's recording and is not recorded a second time."""
    return _in_call.is_set()


def inside_call() -> AbstractContextManager[None]:
    """Run a call-layer target's live body (its HTTP is not recorded on its own)."""
    return _in_call.set()


def in_adapter_io() -> bool:
    """True while an adapter sends a request the engine decided on (record, live,
    passthrough): the network guard lets its connections through."""
    return _adapter_io.is_set()


def adapter_io() -> AbstractContextManager[None]:
    """Mark the connections made inside as handled by an adapter (not for the guard)."""
    return _adapter_io.set()


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


#: The suffix of every recording file.
SUFFIX = ".json"


#: compiled on first use (the `re` module's cache), not at import: start-up time
_HASH = r"[0-9a-f]{32}"


def recording_name(hash_hex: str) -> str:
    """`<hash>.json`: the file of one request of one test."""
    return f"{hash_hex}{SUFFIX}"


def is_model_list_name(name: str) -> bool:
    return name.startswith(MODEL_LIST_PREFIX)


def model_list_glob(hash_hex: str) -> str:
    """The glob pattern of every model-list file of one request hash."""
    return f"{MODEL_LIST_PREFIX}{hash_hex}-*{SUFFIX}"


def model_list_name_prefix(hash_hex: str) -> str:
    return f"{MODEL_LIST_PREFIX}{hash_hex}-"


def hash_of_name(name: str) -> str | None:
    """The request hash in a file name: `<hash>.json` or `models-<hash>-<digest>.json`."""
    stem = name.removesuffix(SUFFIX)
    if stem.startswith(MODEL_LIST_PREFIX):
        stem = stem[len(MODEL_LIST_PREFIX) :].split("-", 1)[0]
    return stem if re.fullmatch(_HASH, stem) else None


def model_ids(body: Any) -> list[str]:
    """The model ids a model-list response names (OpenAI `data[].id`, Ollama `models[].name`)."""
    found: set[str] = set()
    if isinstance(body, dict):
        for list_key in MODEL_LIST_KEYS:
            items = body.get(list_key)
            if isinstance(items, list):
                for item in items:
                    ident = model_id(item)
                    if ident is not None:
                        found.add(ident)
    return sorted(found)


#: Where model lists keep their entries, and which field names an entry.
MODEL_LIST_KEYS: tuple[str, ...] = ("data", "models")


MODEL_ID_KEYS: tuple[str, ...] = ("id", "name", "model")


def model_id(item: Any) -> str | None:
    if isinstance(item, dict):
        for key in MODEL_ID_KEYS:
            value = item.get(key)
            if isinstance(value, str):
                return value
    return None


def model_list_filename(hash_hex: str, ids: Iterable[str]) -> str:
    """`models-<hash>-<8 hex digest of the sorted model ids>.json`."""
    ids_digest = digest("\n".join(sorted(ids)).encode())[:8]
    return f"{MODEL_LIST_PREFIX}{hash_hex}-{ids_digest}{SUFFIX}"


#: The host every loopback upstream is stored as.
LOOPBACK_HOST = "localhost"


@functools.lru_cache(maxsize=1024)
def is_loopback_host(host: str) -> bool:
    host = host.strip("[]").lower().rstrip(".")
    if host == LOOPBACK_HOST or host.endswith("." + LOOPBACK_HOST):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@functools.lru_cache(maxsize=4096)
def stored_url(url: str) -> str:
    """`url` as a recording stores it: `http://127.0.0.1:8765/v1/x` → `http://localhost/v1/x`.

    Anything that is not an absolute URL with a loopback host is returned unchanged.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return url
    if not parts.scheme or host is None or not is_loopback_host(host):
        return url
    userinfo, _, _ = parts.netloc.rpartition("@")
    netloc = f"{userinfo}@{LOOPBACK_HOST}" if userinfo else LOOPBACK_HOST
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
