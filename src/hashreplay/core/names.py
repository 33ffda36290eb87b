"""File names in the store (docs/design.md §4): the one module that composes and reads them.

A recording is `<hash>.json`; a shared model list is `models-<hash>-<digest>.json`, where the
digest names the set of model ids it lists (so two model sets of one request live side by
side and are merged on replay).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hashreplay.core.constants import MODEL_LIST_PREFIX
from hashreplay.core.hashing import digest

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


def model_list_filename(hash_hex: str, ids: Iterable[str]) -> str:
    """`models-<hash>-<8 hex digest of the sorted model ids>.json`."""
    ids_digest = digest("\n".join(sorted(ids)).encode())[:8]
    return f"{MODEL_LIST_PREFIX}{hash_hex}-{ids_digest}{SUFFIX}"
