"""`hashreplay serve`: the command line of the record/replay proxy.

`hashreplay.cli` registers the subcommand through `configure_parser` and `run`;
`python -m hashreplay.server` does the same on its own. Only the standard library is
imported here at module level: uvicorn and httpx2 are imported by `run`, so `--help` is fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from hashreplay.core.errors import SettingsError
from hashreplay.server.settings import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_GRACEFUL_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_HOST,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_TESTS,
    DEFAULT_PORT,
    DEFAULT_UPSTREAM_TIMEOUT,
    LOG_LEVELS,
    SETTINGS_ENV,
    ServeSettings,
    parse_upstream,
)

DESCRIPTION = (
    "Record/replay HTTP proxy for clients in any language: point their base URL at it. "
    "It forwards to --upstream and records (record, record-if-missing) or answers from the "
    "recordings (replay), per test when clients send X-HashReplay-Test-Id."
)
EXTRA_HINT = "hashreplay serve needs the server extra: pip install 'hashreplay[server]'"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the `serve` options to `parser`."""
    if parser.description is None:
        parser.description = DESCRIPTION
    parser.add_argument(
        "--upstream",
        action="append",
        default=[],
        metavar="[NAME=]URL",
        help="where requests go (repeatable): a bare URL is the default upstream; NAME=URL "
        "sends requests under /NAME/ to URL with the prefix stripped. Needed to record",
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"(default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"(default {DEFAULT_PORT})")
    parser.add_argument(
        "--mode",
        default=None,
        metavar="MODE",
        help="replay, record-if-missing, record or live (default: $INFERENCE_MODE, then "
        "[tool.hashreplay] mode, then replay)",
    )
    parser.add_argument(
        "--recordings",
        default=None,
        metavar="DIR",
        help="the common recordings directory, for requests without a test id "
        "(default: [tool.hashreplay] recordings_dir, else recordings/ under the root)",
    )
    parser.add_argument(
        "--root",
        default=None,
        metavar="DIR",
        help="the project root: per-test directories are relative to it "
        "(default: $HASHREPLAY_ROOT, else found upward from the working directory)",
    )
    parser.add_argument(
        "--workers", type=int, default=1, metavar="N", help="worker processes (default 1)"
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        metavar="N",
        help=f"largest request body accepted, else 413 (default {DEFAULT_MAX_BODY_BYTES})",
    )
    parser.add_argument(
        "--upstream-timeout",
        type=float,
        default=DEFAULT_UPSTREAM_TIMEOUT,
        metavar="SECONDS",
        help="connect/read/write timeout towards the upstream, else 504 "
        f"(default {DEFAULT_UPSTREAM_TIMEOUT:g})",
    )
    parser.add_argument(
        "--graceful-timeout",
        type=int,
        default=DEFAULT_GRACEFUL_TIMEOUT,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, how long in-flight requests may take to finish "
        f"(default {DEFAULT_GRACEFUL_TIMEOUT})",
    )
    parser.add_argument(
        "--max-tests",
        type=int,
        default=DEFAULT_MAX_TESTS,
        metavar="N",
        help="test ids whose state (identical-request order, id mappings) is kept; the least "
        f"recently used beyond that are forgotten (default {DEFAULT_MAX_TESTS})",
    )
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=DEFAULT_HEADER_TIMEOUT,
        metavar="SECONDS",
        help="time a client has to send a request line and headers, else 408 "
        f"(default {DEFAULT_HEADER_TIMEOUT:g})",
    )
    parser.add_argument(
        "--body-timeout",
        type=float,
        default=DEFAULT_BODY_TIMEOUT,
        metavar="SECONDS",
        help="time a client has to send a request body, else 408 "
        f"(default {DEFAULT_BODY_TIMEOUT:g})",
    )
    parser.add_argument("--log-level", default="info", choices=LOG_LEVELS)
    parser.add_argument(
        "--no-access-log", dest="access_log", action="store_false", help="no line per request"
    )


def settings_from_args(args: argparse.Namespace) -> ServeSettings:
    """Validated settings; raises SettingsError naming the bad option."""
    return ServeSettings(
        upstreams=tuple(parse_upstream(spec) for spec in args.upstream),
        host=args.host,
        port=args.port,
        mode=args.mode,
        # Paths on the command line are relative to the working directory.
        recordings=str(Path(args.recordings).resolve()) if args.recordings else None,
        root=str(Path(args.root).resolve()) if args.root else None,
        workers=args.workers,
        max_body_bytes=args.max_body_bytes,
        upstream_timeout=args.upstream_timeout,
        graceful_timeout=args.graceful_timeout,
        log_level=args.log_level,
        access_log=args.access_log,
        max_tests=args.max_tests,
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
    )


def _fail(message: str) -> int:
    print(f"hashreplay serve: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """Start the proxy and serve until SIGINT/SIGTERM; returns the exit status."""
    try:
        settings = settings_from_args(args)
    except SettingsError as exc:
        return _fail(str(exc))
    try:
        import uvicorn
    except ImportError as exc:
        return _fail(f"{exc}; {EXTRA_HINT}")
    try:
        import httpx2  # noqa: F401  (the upstream client)
    except ImportError as exc:
        return _fail(f"{exc}; hashreplay serve forwards with httpx2: pip install httpx2")

    from hashreplay.core.config import load_config
    from hashreplay.core.errors import ConfigError
    from hashreplay.core.modes import Mode

    try:
        config = load_config(settings.root, mode=settings.mode, recordings_dir=settings.recordings)
    except ConfigError as exc:
        return _fail(str(exc))
    if config.mode is not Mode.REPLAY and not settings.upstreams:
        return _fail(
            f"{config.mode.value} mode (from {config.mode_source}) sends requests upstream, "
            "but no --upstream was given; add --upstream URL (or NAME=URL)"
        )
    from hashreplay.server.wire import JsonErrorH11Protocol

    os.environ[SETTINGS_ENV] = settings.to_json()  # read by each worker's app factory
    try:
        uvicorn.run(
            "hashreplay.server.app:app_from_environment",
            factory=True,
            host=settings.host,
            port=settings.port,
            workers=settings.workers,
            http=JsonErrorH11Protocol,
            ws="none",
            lifespan="on",
            log_level=settings.log_level,
            access_log=settings.access_log,
            server_header=False,
            date_header=False,
            proxy_headers=False,
            timeout_graceful_shutdown=settings.graceful_timeout,
        )
    except SystemExit as exc:  # uvicorn exits when it cannot start (e.g. the port is taken)
        code = exc.code if isinstance(exc.code, int) else 1
        if code:
            print(
                f"hashreplay serve: could not serve on {settings.host}:{settings.port} "
                "(see uvicorn's message above)",
                file=sys.stderr,
            )
        return code
    return 0
