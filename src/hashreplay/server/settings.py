"""What `hashreplay serve` was asked to do: upstream routes and server options.

Standard library only, so the command line (`hashreplay --help`) stays fast. The settings
travel to uvicorn's worker processes as JSON in an environment variable.

The next step a miss answered by `hashreplay serve` names: the proxy command that records.

The engine's miss report ends with the pytest command that records a test
(`INFERENCE_MODE=record-if-missing pytest <nodeid>`); a client of the proxy is often not
pytest at all (curl, a JavaScript suite), so the proxy replaces that line with its own
`hashreplay serve --mode record-if-missing …` command, built from the options it runs with
and quoted for a POSIX shell, and the header to send the test id in.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from hashreplay.core.constants import SECRET_PLACEHOLDER, TEST_ID_HEADER
from hashreplay.core.errors import ReplayMiss, SettingsError, UnknownUpstream

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
        host = parts.netloc.rpartition("@")[2]
        netloc = f"{SECRET_PLACEHOLDER}@{host}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    @property
    def userinfo_values(self) -> tuple[str, ...]:
        """The user name and password in the URL, in every form they reach the upstream
        (`user:password` and its base64 in the `Authorization: Basic` header the proxy
        sends, percent-encoded in the URL): scrubbed by value from every recording and log
        line, however the upstream echoes them."""
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
        return (
            f"default upstream {self.shown}"
            if self.name is None
            else f"upstream {self.name!r} ({self.shown})"
        )


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
        checks = (
            (0 <= self.port <= 65535, f"--port {self.port}: expected 0-65535"),
            (self.workers >= 1, f"--workers {self.workers}: expected 1 or more"),
            (self.max_body_bytes >= 1, f"--max-body-bytes {self.max_body_bytes}: expected > 0"),
            (
                self.upstream_timeout > 0,
                f"--upstream-timeout {self.upstream_timeout}: expected > 0",
            ),
            (
                self.graceful_timeout > 0,
                f"--graceful-timeout {self.graceful_timeout}: expected > 0",
            ),
            (self.max_tests >= 1, f"--max-tests {self.max_tests}: expected 1 or more"),
            (self.header_timeout > 0, f"--header-timeout {self.header_timeout}: expected > 0"),
            (self.body_timeout > 0, f"--body-timeout {self.body_timeout}: expected > 0"),
            (
                self.log_level in LOG_LEVELS,
                f"--log-level {self.log_level!r}: expected one of {', '.join(LOG_LEVELS)}",
            ),
        )
        for ok, msg in checks:
            if not ok:
                raise SettingsError(msg)

    @property
    def default_upstream(self) -> Upstream | None:
        for upstream in self.upstreams:
            if upstream.name is None:
                return upstream
        return None

    def route(self, path: str) -> tuple[Upstream | None, str]:
        """The upstream of a request path and the path to send it (its prefix stripped).

        With no upstream at all (replay needs none), every path is its own endpoint.
        Raises UnknownUpstream for a path that matches no prefix when there is no default.
        """
        first, _, rest = path.lstrip("/").partition("/")
        upstream = self.named.get(first)
        if upstream is not None:
            return upstream, "/" + rest
        default = self.default_upstream
        if default is None and self.named:
            raise UnknownUpstream(path, [u.prefix for u in self.upstreams if u.name is not None])
        return default, path if path.startswith("/") else "/" + path

    def to_json(self) -> str:
        data = asdict(self)
        data.pop("named", None)
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> ServeSettings:
        data: dict[str, Any] = json.loads(text)
        data["upstreams"] = tuple(Upstream(**u) for u in data.get("upstreams", ()))
        return cls(**data)


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
