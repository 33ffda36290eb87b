"""File names in the store (docs/design.md §4): the one module that
composes and reads them.

A recording is `<hash>.json`; a shared model list is `models-<hash>-<digest>.json`, where the
digest names the set of model ids it lists (so two model sets of one request live side by
side and are merged on replay).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from hashreplay.core.constants import MODEL_LIST_PREFIX
from hashreplay.core.key import digest

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
