"""The fake upstream's Mistral, Cohere v2 and Groq APIs (one module each), registered with
:func:`.apis.find_handler` and :func:`.apis.error_reply` through the two functions here."""

from __future__ import annotations

from types import ModuleType

from . import cohere, groq, mistral
from .apis import ApiError, Handler, Reply

__all__ = ["find_sdk_handler", "sdk_error_reply"]

_FAMILIES: tuple[ModuleType, ...] = (mistral, cohere, groq)

ROUTES: dict[tuple[str, str], Handler] = {
    ("POST", mistral.CHAT): mistral.chat,
    ("POST", cohere.CHAT): cohere.chat,
    ("POST", groq.CHAT): groq.chat,
}


def find_sdk_handler(method: str, path: str) -> Handler | None:
    """The handler for ``(method, path)``; a 405 in the API's shape for a known path asked
    with another method; None for a path that is not one of these APIs' routes."""
    handler = ROUTES.get((method, path))
    if handler is None and any(route == path for _, route in ROUTES):
        message = f"Method {method} not allowed for {path}."
        raise ApiError(sdk_error_reply(path, 405, message) or Reply(status=405))
    return handler


def sdk_error_reply(path: str, status: int, message: str) -> Reply | None:
    """The error in the shape of the API that owns ``path`` (None when none of these does)."""
    for family in _FAMILIES:
        if family.owns(path):
            reply: Reply = family.error_reply(status, message)
            return reply
    return None
