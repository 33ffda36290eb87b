"""`hashreplay.wsgi.TestIdMiddleware` (docs/design.md §8): the WSGI middleware of in-process
server mode, which lives in `hashreplay.server_mode`."""

from hashreplay.server_mode import WSGIApp
from hashreplay.server_mode import WSGITestIdMiddleware as TestIdMiddleware

__all__ = ["TestIdMiddleware", "WSGIApp"]
