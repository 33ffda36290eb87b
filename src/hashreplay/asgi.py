"""`hashreplay.asgi.TestIdMiddleware` (contract, docs/design.md §8): the ASGI middleware of
in-process server mode, which lives in `hashreplay.server_mode`."""

from hashreplay.server_mode import ASGIApp, conversation_of, test_and_run_ids
from hashreplay.server_mode import ASGITestIdMiddleware as TestIdMiddleware

__all__ = ["ASGIApp", "TestIdMiddleware", "conversation_of", "test_and_run_ids"]
