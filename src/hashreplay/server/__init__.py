"""`hashreplay serve`: a standalone record/replay HTTP proxy for clients in any language.

Install the extra (`pip install 'hashreplay[server]'`) and run `hashreplay serve --upstream
URL` (or `python -m hashreplay.server`); see docs/server.md. The ASGI app is
`hashreplay.server.app.ProxyApp`. This package imports nothing at import time, so the
command line stays fast.
"""
