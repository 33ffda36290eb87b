"""The next step a miss answered by `hashreplay serve` names: the proxy command that records.

The engine's miss report ends with the pytest command that records a test
(`INFERENCE_MODE=record-if-missing pytest <nodeid>`); a client of the proxy is often not
pytest at all (curl, a JavaScript suite), so the proxy replaces that line with its own
`hashreplay serve --mode record-if-missing …` command, built from the options it runs with
and quoted for a POSIX shell, and the header to send the test id in.
"""

from __future__ import annotations

import shlex

from hashreplay.core.constants import TEST_ID_HEADER
from hashreplay.core.errors import ReplayMiss
from hashreplay.server.settings import DEFAULT_HOST, DEFAULT_PORT, ServeSettings

#: The line of the engine's report that this replaces.
RECORD_LINE = "  to record it: "


def record_command(settings: ServeSettings) -> str:
    """`hashreplay serve --mode record-if-missing …` with this proxy's own routing options."""
    argv = ["hashreplay", "serve", "--mode", "record-if-missing"]
    for upstream in settings.upstreams:
        url = upstream.shown  # credentials in the URL are never printed
        spec = url if upstream.name is None else f"{upstream.name}={url}"
        argv += ["--upstream", spec]
    if settings.host != DEFAULT_HOST:
        argv += ["--host", settings.host]
    if settings.port != DEFAULT_PORT:
        argv += ["--port", str(settings.port)]
    if settings.root is not None:
        argv += ["--root", settings.root]
    if settings.recordings is not None:
        argv += ["--recordings", settings.recordings]
    command = shlex.join(argv)
    if not settings.upstreams:  # replay needs none; recording does
        command += " --upstream URL-OF-THE-API"
    return command


def serve_next_step(test_id: str | None, settings: ServeSettings) -> str:
    """The line that tells a proxy client how to record the request it missed."""
    step = f"{RECORD_LINE}{record_command(settings)}, then run the client again"
    if test_id:
        header = shlex.quote(f"{TEST_ID_HEADER}: {test_id}")
        step += f" (it sends {header}, as now)"
    return step


def with_serve_next_step(
    miss: ReplayMiss,
    settings: ServeSettings,
    *,
    stored_url: str | None = None,
    sent_url: str | None = None,
    asked: str | None = None,
    forwarded: str | None = None,
) -> ReplayMiss:
    """The same miss, its report ending with the proxy's way to record instead of pytest's.

    With `asked` (the URL the client used, the proxy's host:port), the report's first line
    names that instead of the URL the engine named (`sent_url`, the upstream URL the request
    was routed to, or `stored_url`, the URL as stored: a loopback upstream without its port,
    docs/design.md §13), followed by the upstream URL the request maps to."""
    lines = []
    named = [f" {url} " for url in (sent_url, stored_url) if url]
    for index, line in enumerate(miss.report.splitlines()):
        shown = next((url for url in named if url in line), None) if index == 0 else None
        if line.startswith(RECORD_LINE):
            lines.append(serve_next_step(miss.test_id, settings))
        elif asked and shown is not None:
            lines.append(line.replace(shown, f" {asked} ", 1))
            if forwarded:
                lines.append(f"  upstream:  {forwarded}")
        else:
            lines.append(line)
    return ReplayMiss("\n".join(lines), test_id=miss.test_id, request_hash=miss.request_hash)
