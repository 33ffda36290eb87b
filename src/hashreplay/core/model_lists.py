"""Model lists (docs/design.md §4): the `GET …/models`-style calls every test shares.

Which requests they are (hashed without the test id), the model ids a response lists, and
how the files of one request, one per model set, become one answer on replay (the union by
model id) dated by the newest of them (docs/recordings.md, "Age").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from hashreplay.core.format import RecordedResponse
from hashreplay.core.names import model_list_filename
from hashreplay.core.store import Store

#: Path endings of model-list calls (`GET`): hashed without the test id, shared by every test.
MODEL_LIST_SUFFIXES: tuple[str, ...] = ("/models", "/api/tags", "/api/ps")


def is_model_list(
    method: str, endpoint: str, suffixes: Iterable[str] = MODEL_LIST_SUFFIXES
) -> bool:
    """`GET …/models`, `…/api/tags`, `…/api/ps` (also behind a prefix such as `/v1/v1/models`)."""
    if method.upper() != "GET":
        return False
    path = endpoint.split("?", 1)[0].rstrip("/")
    return path.endswith(tuple(suffixes))


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
        if isinstance(body.get(key), list):
            seen: dict[str, Any] = {}
            for response in responses:
                items = response.body.get(key) if isinstance(response.body, dict) else None
                for item in items or []:
                    if (ident := model_id(item)) is not None:
                        seen.setdefault(ident, item)
            body[key] = list(seen.values())
    return first.replace(body=body)


def newest_model_list(files: Sequence[tuple[Path, RecordedResponse]]) -> int:
    """Which of a request's model-list files dates the list (docs/recordings.md, "Age"): the
    one recorded last, when the endpoint last answered live (the files of the union differ only
    in the models listed), so renewing one file makes the whole list fresh. Files without a day
    count only when none has one (ISO days compare as text)."""
    days = [response.recorded_on or "" for _, response in files]
    return max(range(len(days)), key=lambda i: (days[i], -i))
