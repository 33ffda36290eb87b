"""`hashreplay serve`: its command line (`configure_parser` and `run`, for `hashreplay.cli` and
`python -m hashreplay.server`), what it was asked to do (upstream routes, options: they travel
to uvicorn's workers as JSON in an environment variable) and the command a miss names to
record. Standard library only at import time (`run` imports uvicorn), so `--help` is fast."""

from __future__ import annotations

import argparse
import base64
import functools
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit, urlunsplit

from hashreplay.core.constants import SECRET_PLACEHOLDER, TEST_ID_HEADER
from hashreplay.core.errors import ReplayMiss, SettingsError, UnknownUpstream

if TYPE_CHECKING:
    from pydantic import TypeAdapter

#: Environment variable that carries the settings to the app factory in each worker.
SETTINGS_ENV = "HASHREPLAY_SERVE_SETTINGS"
#: Paths under this prefix are the proxy's own endpoints, never forwarded.
ADMIN_PREFIX = "/__hashreplay/"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8790
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
DEFAULT_UPSTREAM_TIMEOUT = 300.0
DEFAULT_GRACEFUL_TIMEOUT = 30
#: Test ids whose state the proxy keeps (least recently used beyond that are forgotten).
DEFAULT_MAX_TESTS = 1000
#: Seconds a client may take to send a request's head, and its body (else 408).
DEFAULT_HEADER_TIMEOUT = 30.0
DEFAULT_BODY_TIMEOUT = 120.0
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~-]*")
_NAMED_SPEC = re.compile(r"([^=:/?#]+)=(.*)", re.DOTALL)
_EXAMPLE = (
    "e.g. --upstream https://api.openai.com or --upstream anthropic=https://api.anthropic.com"
)


@dataclass(frozen=True)
class Upstream:
    """Where requests go: the default upstream (`name` None) or the one of a path prefix."""

    name: str | None
    #: The URL requests go to, with any userinfo (`user:password@`): never print it, print
    #: `shown` (docs/design.md §7).
    url: str = field(repr=False)

    @property
    def prefix(self) -> str:
        return "/" if self.name is None else f"/{self.name}/"

    @property
    def shown(self) -> str:
        """The URL for messages, logs and stats: userinfo replaced by `[secret removed]`."""
        parts = urlsplit(self.url)
        if "@" not in parts.netloc:
            return self.url
        netloc = f"{SECRET_PLACEHOLDER}@{parts.netloc.rpartition('@')[2]}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    @property
    def userinfo_values(self) -> tuple[str, ...]:
        """The user name and password in the URL, in every form they reach the upstream (its
        `user:password`, percent-encoded in the URL, and its base64 in the `Authorization: Basic`
        header the proxy sends): scrubbed by value, however echoed, from recordings and logs."""
        parts = urlsplit(self.url)
        user, password = unquote(parts.username or ""), unquote(parts.password or "")
        if not user and not password:
            return ()
        pair = f"{user}:{password}"
        basic = base64.b64encode(pair.encode("utf-8")).decode("ascii")
        forms = (user, password, pair, basic, f"Basic {basic}", parts.username, parts.password)
        return tuple(dict.fromkeys(v for v in forms if v))

    @property
    def label(self) -> str:
        if self.name is None:
            return f"default upstream {self.shown}"
        return f"upstream {self.name!r} ({self.shown})"


def parse_upstream(spec: str) -> Upstream:
    """`URL` (the default upstream) or `NAME=URL` (requests under `/NAME/`, prefix stripped)."""
    spec = spec.strip()
    named = _NAMED_SPEC.fullmatch(spec)
    name, url = (named.group(1).strip(), named.group(2).strip()) if named else (None, spec)
    if name is not None and not _NAME.fullmatch(name):
        msg = (
            f"invalid --upstream {spec!r}: the name {name!r} must start with a letter or digit "
            "and have only letters, digits and . _ ~ - (it becomes the path prefix /NAME/)"
        )
        raise SettingsError(msg)
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError as exc:
        msg = f"invalid --upstream {spec!r}: {exc}; {_EXAMPLE}"
        raise SettingsError(msg) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        msg = f"invalid --upstream {spec!r}: expected an http:// or https:// URL; {_EXAMPLE}"
        raise SettingsError(msg)
    if parts.query or parts.fragment:
        msg = f"invalid --upstream {spec!r}: the URL must have no query or fragment"
        raise SettingsError(msg)
    return Upstream(name, url.rstrip("/"))


@dataclass(frozen=True)
class ServeSettings:
    upstreams: tuple[Upstream, ...] = ()
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    #: None: INFERENCE_MODE, then [tool.hashreplay] mode, then replay (load_config decides).
    mode: str | None = None
    #: The common recordings directory (relative to the root); None: the config's.
    recordings: str | None = None
    #: The project root; None: HASHREPLAY_ROOT, else found upward (core/paths.py).
    root: str | None = None
    workers: int = 1
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    upstream_timeout: float = DEFAULT_UPSTREAM_TIMEOUT
    graceful_timeout: int = DEFAULT_GRACEFUL_TIMEOUT
    log_level: str = "info"
    access_log: bool = True
    max_tests: int = DEFAULT_MAX_TESTS
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    named: dict[str, Upstream] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        named: dict[str, Upstream] = {}
        defaults = [u for u in self.upstreams if u.name is None]
        if len(defaults) > 1:
            urls = ", ".join(u.shown for u in defaults)
            msg = f"more than one default --upstream ({urls}); name the others as NAME=URL"
            raise SettingsError(msg)
        for upstream in self.upstreams:
            if upstream.name is None:
                continue
            if upstream.name in named:
                msg = f"--upstream name {upstream.name!r} is given twice"
                raise SettingsError(msg)
            named[upstream.name] = upstream
        object.__setattr__(self, "named", named)
        levels = ", ".join(LOG_LEVELS)
        checks = (  # (option, its value, valid, what is expected)
            ("--port", self.port, 0 <= self.port <= 65535, "0-65535"),
            ("--workers", self.workers, self.workers >= 1, "1 or more"),
            ("--max-body-bytes", self.max_body_bytes, self.max_body_bytes >= 1, "> 0"),
            ("--upstream-timeout", self.upstream_timeout, self.upstream_timeout > 0, "> 0"),
            ("--graceful-timeout", self.graceful_timeout, self.graceful_timeout > 0, "> 0"),
            ("--max-tests", self.max_tests, self.max_tests >= 1, "1 or more"),
            ("--header-timeout", self.header_timeout, self.header_timeout > 0, "> 0"),
            ("--body-timeout", self.body_timeout, self.body_timeout > 0, "> 0"),
            ("--log-level", self.log_level, self.log_level in LOG_LEVELS, f"one of {levels}"),
        )
        for option, value, ok, expected in checks:
            if not ok:
                msg = f"{option} {value!r}: expected {expected}"  # a level name quoted
                raise SettingsError(msg)

    @property
    def default_upstream(self) -> Upstream | None:
        return next((u for u in self.upstreams if u.name is None), None)

    def route(self, path: str) -> tuple[Upstream | None, str]:
        """The upstream of a request path and the path to send it (its prefix stripped); with
        no upstream at all (replay needs none), every path is its own endpoint. Raises
        UnknownUpstream for a path that matches no prefix when there is no default."""
        first, _, rest = path.lstrip("/").partition("/")
        upstream = self.named.get(first)
        if upstream is not None:
            return upstream, "/" + rest
        default = self.default_upstream
        if default is None and self.named:
            raise UnknownUpstream(path, [u.prefix for u in self.upstreams if u.name is not None])
        return default, path if path.startswith("/") else "/" + path

    def to_json(self) -> str:
        """The settings as each worker's app factory reads them (`SETTINGS_ENV`): the dataclass
        is the one definition; pydantic writes it and reads it back, `__post_init__` included."""
        return _settings_adapter().dump_json(self, exclude={"named"}).decode()

    @classmethod
    def from_json(cls, text: str) -> ServeSettings:
        return _settings_adapter().validate_json(text)


@functools.cache
def _settings_adapter() -> TypeAdapter[ServeSettings]:
    from pydantic import TypeAdapter  # only when serving: `hashreplay --help` stays light

    return TypeAdapter(ServeSettings)


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
        metavar="MODE",
        help="replay, record-if-missing, record or live (default: $INFERENCE_MODE, then "
        "[tool.hashreplay] mode, then replay)",
    )
    parser.add_argument(
        "--recordings",
        metavar="DIR",
        help="the common recordings directory, for requests without a test id "
        "(default: [tool.hashreplay] recordings_dir, else recordings/ under the root)",
    )
    parser.add_argument(
        "--root",
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
            ws=_websocket_protocol(),
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


def _websocket_protocol() -> str:
    """uvicorn's WebSocket protocol: the `websockets` one (the `server` extra brings the
    library; it answers a refused handshake with the proxy's JSON error), else none (an
    upgrade is then answered as plain HTTP)."""
    try:
        import websockets  # noqa: F401
    except ImportError:
        return "none"
    return "websockets-sansio"


#: The engine's miss report ends with this line and the pytest command that records a test; a
#: client of the proxy is often not pytest at all (curl, a JavaScript suite), so the proxy puts
#: its own command there, built from the options it runs with and quoted for a POSIX shell,
#: and the header to send the test id in.
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


def with_serve_next_step(
    miss: ReplayMiss,
    settings: ServeSettings,
    *,
    stored_url: str | None = None,
    sent_url: str | None = None,
    asked: str | None = None,
    forwarded: str | None = None,
    shown_test_id: str | None = None,
) -> ReplayMiss:
    """The same miss, its report ending with the proxy's way to record instead of pytest's.

    With `asked` (the URL the client used, the proxy's host:port), the report's first line
    names that instead of the URL the engine named (`sent_url`, the upstream URL the request
    was routed to, or `stored_url`, the URL as stored: a loopback upstream without its port,
    docs/design.md §13), followed by the upstream URL the request maps to."""
    step = f"{RECORD_LINE}{record_command(settings)}, then run the client again"
    test_id = shown_test_id or miss.test_id  # as files hold it: secrets removed
    if test_id:
        header = shlex.quote(f"{TEST_ID_HEADER}: {test_id}")
        step += f" (it sends {header}, as now)"
    lines = []
    named = [f" {url} " for url in (sent_url, stored_url) if url]
    for index, line in enumerate(miss.report.splitlines()):
        shown = next((url for url in named if url in line), None) if index == 0 else None
        if line.startswith(RECORD_LINE):
            lines.append(step)
        elif asked and shown is not None:
            lines.append(line.replace(shown, f" {asked} ", 1))
            if forwarded:
                lines.append(f"  upstream:  {forwarded}")
        else:
            lines.append(line)
    # the proxy's client reads this miss's test id in the JSON error body: the shown one
    return ReplayMiss("\n".join(lines), test_id=test_id, request_hash=miss.request_hash)
