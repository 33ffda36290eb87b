"""Shared model lists (docs/design.md §3): one file per model set in the common
directory, and on replay every matching file merged into one answer (union by model id)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hashreplay.core.names import MODEL_LIST_KEYS, model_id, model_ids, model_list_filename
from hashreplay.core.recording import RecordedResponse
from hashreplay.core.store import Store


def model_list_path(store: Store, hash_hex: str, response: RecordedResponse) -> Path:
    """Where a model-list response of this request hash is stored."""
    return store.common_dir / model_list_filename(hash_hex, model_ids(response.body))


def merge_model_lists(responses: Sequence[RecordedResponse]) -> RecordedResponse:
    """One model-list response holding every model of all of them (union by model id)."""
    first = responses[0]
    if len(responses) == 1 or not isinstance(first.body, dict):
        return first
    body = dict(first.body)
    for key in MODEL_LIST_KEYS:
        if not isinstance(body.get(key), list):
            continue
        seen: dict[str, Any] = {}
        for response in responses:
            items = response.body.get(key) if isinstance(response.body, dict) else None
            for item in items or []:
                ident = model_id(item)
                if ident is not None and ident not in seen:
                    seen[ident] = item
        body[key] = list(seen.values())
    return first.replace(body=body)
