"""The network guard's rules (docs/design.md §2): which connections, datagrams, DNS lookups and
gRPC channels a test may make that no adapter handled. Pure: the audit hook that sees them is
an adapter.

Keyless replay (docs/design.md §2): in replay mode, well-known provider key variables that
are unset get placeholders, so SDK constructors that demand a key work unchanged. Never in
record or live mode, where a real key must be the user's own.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Final, NamedTuple
from urllib.parse import urlsplit

from hashreplay.core.urls import is_loopback_host


class BlockNetwork(str, Enum):
    """`block_network`: which un-intercepted connections fail a replay-mode test."""

    NON_LOOPBACK = "non-loopback"
    ALL = "all"
    OFF = "off"

    @classmethod
    def parse(cls, value: object) -> BlockNetwork:
        if isinstance(value, BlockNetwork):
            return value
        for member in cls:
            if value == member.value:
                return member
        valid = ", ".join(repr(m.value) for m in cls)
        msg = f"must be one of {valid}"
        raise ValueError(msg)


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and `localhost` (a name that resolves nowhere else)."""
    return is_loopback_host(host.split("%", 1)[0])


#: The port a URL's scheme implies when it names none.
DEFAULT_PORTS: Final = {"http": 80, "https": 443, "ws": 80, "wss": 443}


class HostEntry(NamedTuple):
    """One host a connection may reach: `host` (lower-cased, no brackets or trailing dot)
    and its port, None for every port."""

    host: str
    port: int | None = None

    def covers(self, host: str, port: int) -> bool:
        return self.host == _bare(host) and self.port in (None, port)


class UrlPrefix(NamedTuple):
    """A `passthrough` entry: the scheme, host and port a URL must have (the port the scheme
    implies when the entry names none) and the path it must start with, at a `/`, `?` or `#`
    (`http://localhost:8000/v1` passes `/v1` and `/v1/chat`, not `/v10` nor port 8001)."""

    scheme: str
    host: str
    port: int | None
    path: str

    @classmethod
    def parse(cls, text: str) -> UrlPrefix:
        """A `passthrough` URL; a ValueError naming the entry for anything else."""
        try:
            parts = urlsplit(text.strip())
            port = parts.port
        except ValueError as exc:
            msg = f"passthrough entry {text!r}: {exc}; write a URL like http://localhost:8000"
            raise ValueError(msg) from None
        if not parts.scheme or not parts.hostname:
            msg = (
                f"passthrough entry {text!r} is not a URL with a scheme and a host; write one "
                "like http://localhost:8000 or https://api.example.com/v1"
            )
            raise ValueError(msg)
        scheme = parts.scheme.lower()
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        port = port if port is not None else DEFAULT_PORTS.get(scheme)
        return cls(scheme, _bare(parts.hostname), port, "" if path == "/" else path)

    @property
    def entry(self) -> HostEntry:
        """What the network guard lets through for it: its host at its port."""
        return HostEntry(self.host, self.port)

    def matches(self, url: str) -> bool:
        """Whether `url` has this scheme, host and port and starts with this path."""
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            return False
        scheme = parts.scheme.lower()
        if scheme != self.scheme or _bare(parts.hostname or "") != self.host:
            return False
        if (port if port is not None else DEFAULT_PORTS.get(scheme)) != self.port:
            return False
        prefix = self.path
        if not prefix:
            return True
        rest = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        if not rest.startswith(prefix):
            return False
        return len(rest) == len(prefix) or prefix[-1] in "/?#" or rest[len(prefix)] in "/?#"


def host_entry(text: str) -> HostEntry:
    """An `allowed_hosts` entry: `host` (every port), `host:port`, `[v6]:port`, a bare IPv6
    address (every port) or a URL (its host at the port it names or its scheme implies); a
    ValueError naming the entry for anything else."""
    entry = text.strip()
    if "://" in entry:
        try:
            return UrlPrefix.parse(entry).entry
        except ValueError as exc:
            msg = str(exc).replace("passthrough entry", "allowed_hosts entry", 1)
            raise ValueError(msg) from None
    host, port = entry, ""
    if entry.startswith("["):
        host, _, tail = entry[1:].partition("]")
        if tail and not tail.startswith(":"):
            host = ""
        port = tail.removeprefix(":")
    elif entry.count(":") == 1:
        host, _, port = entry.partition(":")
    if not host or "/" in host or (port and not (port.isdigit() and 0 < int(port) < 65536)):
        msg = (
            f"allowed_hosts entry {text!r} is not a host: write `name` or an address (every "
            "port), `name:port`, `[v6]:port` or a URL such as http://name:8000"
        )
        raise ValueError(msg)
    return HostEntry(_bare(host), int(port) if port else None)


def passthrough_prefixes(prefixes: Iterable[str]) -> tuple[UrlPrefix, ...]:
    """The `passthrough` entries, parsed (a ValueError names one that is not a URL)."""
    return tuple(UrlPrefix.parse(prefix) for prefix in prefixes)


@functools.lru_cache(maxsize=64)
def _parsed(prefixes: tuple[str, ...]) -> tuple[UrlPrefix, ...]:
    return passthrough_prefixes(prefixes)


def under_passthrough(prefixes: tuple[str, ...], url: str) -> bool:
    """Whether `url` is under one of the `passthrough` URLs (same scheme, host and port, and
    the entry's path at a `/`, `?` or `#`)."""
    return any(prefix.matches(url) for prefix in _parsed(prefixes))


class NetworkRules:
    """Whether a connection that no adapter handled may be opened. An `allowed_hosts` entry
    without a port allows every port of its host; one with a port (or a URL) and each
    `passthrough` URL allow that port only (docs/usage.md, "The network guard")."""

    def __init__(
        self, block: BlockNetwork, allowed_hosts: Iterable[str], passthrough: Iterable[str]
    ) -> None:
        self.block = block
        entries = [host_entry(h) for h in allowed_hosts]
        entries.extend(prefix.entry for prefix in passthrough_prefixes(passthrough))
        self.entries = tuple(dict.fromkeys(entries))

    def listed(self, port: int, *hosts: str) -> bool:
        """Whether one of `hosts` at `port` is in `allowed_hosts` or `passthrough`: the user
        said it may be reached."""
        return any(entry.covers(host, port) for host in hosts for entry in self.entries)

    def allows(self, port: int, address: str, name: str | None = None) -> bool:
        """Whether a replay-mode test may reach `address:port`. The address alone decides
        loopback; `name` counts only when it was really resolved to `address` (the caller
        knows), so a connection is never judged by some other name looked up before it."""
        if self.block is BlockNetwork.OFF:
            return True
        if self.listed(port, address, *(() if name is None else (name,))):
            return True
        return self.block is BlockNetwork.NON_LOOPBACK and is_loopback(address)

    def explicitly_allows(self, port: int, address: str, name: str | None = None) -> bool:
        """Whether the user let this connection through on purpose (`block_network = "off"`,
        `allowed_hosts`, `passthrough`): loopback allowed by default is not, so recording
        modes still list it (nothing recorded it)."""
        if self.block is BlockNetwork.OFF:
            return True
        return self.listed(port, address, *(() if name is None else (name,)))

    def allows_name(self, name: str) -> bool:
        """Whether a test may look up `name` (a lookup reaches the resolver, not the host):
        `allowed_hosts` or `passthrough` names it, at any port."""
        if self.block is BlockNetwork.OFF:
            return True
        bare = _bare(name)
        return any(entry.host == bare for entry in self.entries)


def _bare(host: str) -> str:
    """`host` lower-cased, without IPv6 brackets or a trailing dot."""
    return host.lower().strip("[]").rstrip(".")


#: gRPC target schemes that reach no network (the guard leaves Unix sockets alone too).
_GRPC_LOCAL_SCHEMES = frozenset({"unix", "unix-abstract", "vsock"})


#: gRPC's default port for a target without one.
GRPC_DEFAULT_PORT = 443


def grpc_target_hosts(target: str) -> list[tuple[str, int]]:
    """The `(host, port)` pairs a gRPC channel target names (gRPC's naming: `host:port`,
    `dns:///host:port`, `dns://resolver/host:port`, `ipv4:a:port,b:port`, `ipv6:[a]:port`,
    `xds:///name`); none for Unix sockets and vsock."""
    scheme, colon, rest = target.partition(":")
    scheme = scheme.lower()
    if not colon or scheme not in (*_GRPC_LOCAL_SCHEMES, "ipv4", "ipv6", "dns", "xds"):
        return [_host_port(target)]  # `host:port` (gRPC reads it as dns:///host:port)
    if scheme in _GRPC_LOCAL_SCHEMES:
        return []
    if scheme in ("ipv4", "ipv6"):
        return [_host_port(address) for address in rest.split(",") if address]
    if rest.startswith("//"):  # dns://authority/name, xds:///name
        rest = rest[2:].partition("/")[2]
    return [_host_port(rest)]


def _host_port(text: str) -> tuple[str, int]:
    """`host:port`, `[v6]:port`, `host` or a bare IPv6 address; the port defaults to 443."""
    text = text.strip()
    if text.startswith("["):
        host, _, tail = text[1:].partition("]")
        port = tail.removeprefix(":")
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    return host, int(port) if port.isdigit() else GRPC_DEFAULT_PORT


#: The value every placeholder key has: obviously not a key, in any log or error.
PLACEHOLDER = "hashreplay-replay-placeholder"


#: Variables that SDKs read at construction and refuse to start without.
DEFAULT_REPLAY_ENV: Mapping[str, str] = {
    "OPENAI_API_KEY": PLACEHOLDER,
    "AZURE_OPENAI_API_KEY": PLACEHOLDER,
    "ANTHROPIC_API_KEY": PLACEHOLDER,
    # one of these two only (ALTERNATIVES): google-genai warns on every client it builds
    # when both are set, and reads either alone without a word. GEMINI_API_KEY first: the
    # name Google's quick start tells users to set, so the one their own code reads.
    "GEMINI_API_KEY": PLACEHOLDER,
    "GOOGLE_API_KEY": PLACEHOLDER,
    "MISTRAL_API_KEY": PLACEHOLDER,
    "CO_API_KEY": PLACEHOLDER,
    "COHERE_API_KEY": PLACEHOLDER,
    "GROQ_API_KEY": PLACEHOLDER,
    "TOGETHER_API_KEY": PLACEHOLDER,
    "FIREWORKS_API_KEY": PLACEHOLDER,
    "DEEPSEEK_API_KEY": PLACEHOLDER,
    "XAI_API_KEY": PLACEHOLDER,
    "OPENROUTER_API_KEY": PLACEHOLDER,
    "PERPLEXITYAI_API_KEY": PLACEHOLDER,
    "VOYAGE_API_KEY": PLACEHOLDER,
    "REPLICATE_API_TOKEN": PLACEHOLDER,
    "HF_TOKEN": PLACEHOLDER,
    # botocore signs requests with these and will not build a client without a region
    "AWS_ACCESS_KEY_ID": "AKIAHASHREPLAYPLACEHOLDER",
    "AWS_SECRET_ACCESS_KEY": PLACEHOLDER,
    "AWS_DEFAULT_REGION": "us-east-1",
}


#: Variables that stand for one another: a placeholder is set for the first of a group only,
#: and only when none of the group is set.
ALTERNATIVES: tuple[frozenset[str], ...] = (frozenset({"GEMINI_API_KEY", "GOOGLE_API_KEY"}),)


_OTHERS: Mapping[str, frozenset[str]] = {
    name: group - {name} for group in ALTERNATIVES for name in group
}


def replay_env_values(setting: bool | Mapping[str, str]) -> dict[str, str]:
    """The variables `replay_env` provides: `true` the defaults, `false` none, a table the
    defaults plus (or overriding) its entries; an entry set to `""` is left out. The table's
    entries come first, so one of them wins over a default it is an alternative to."""
    if setting is False:
        return {}
    values = dict(setting) if isinstance(setting, Mapping) else {}
    values.update({k: v for k, v in DEFAULT_REPLAY_ENV.items() if k not in values})
    return {name: value for name, value in values.items() if value}


def missing(values: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """The placeholders to set: only variables the environment does not have, and none for a
    variable whose alternative is set or about to be."""
    chosen: dict[str, str] = {}
    for name, value in values.items():
        if env.get(name):
            continue
        others = _OTHERS.get(name)
        if others and any(env.get(other) or other in chosen for other in others):
            continue
        chosen[name] = value
    return chosen


#: Words of a variable name that say its value is a credential (not a region or a URL).
_CREDENTIAL_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")


#: Placeholders shorter than this are not looked for in requests (they would match by chance).
_MIN_PLACEHOLDER = 8


def placeholder_keys(setting: bool | Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """The placeholder values that stand for credentials, each with the variables that get
    it in replay mode (`AWS_DEFAULT_REGION`'s `us-east-1` is not one)."""
    found: dict[str, list[str]] = {}
    for name, value in replay_env_values(setting).items():
        if len(value) >= _MIN_PLACEHOLDER and any(w in name.upper() for w in _CREDENTIAL_WORDS):
            found.setdefault(value, []).append(name)
    return {value: tuple(names) for value, names in found.items()}


def placeholder_refusal(value: str, names: tuple[str, ...], url: str, mode: str) -> str:
    """Why a request that carries a replay placeholder as its credential is not sent to
    `url` (docs/design.md §7, "Keyless replay's placeholder"): a client made while replaying (a
    session-scoped fixture) keeps the placeholder into a test that records or runs live,
    and the upstream would answer 401 (or a recording would hold that answer)."""
    host = urlsplit(url).hostname or url
    labels = host.lower().split(".")
    own = [n for n in names if _provider_of(n.split("_", 1)[0].lower(), labels)]
    variables = own or list(names)
    shown = ", ".join(variables[:6]) + (", …" if len(variables) > 6 else "")
    which = variables[0] if len(variables) == 1 else f"the provider's key variable ({shown})"
    return (
        f"this request carries the replay placeholder {value!r} as its credential and was "
        f"not sent to {host} ({mode} mode). A client created while replaying (a "
        "session-scoped fixture, a module-level client) keeps the placeholder key that "
        f"keyless replay set. Set {which} to a real key before pytest starts, or create the "
        "client inside the test, then run the test again"
    )


def _provider_of(word: str, labels: list[str]) -> bool:
    """Whether a variable's first word names the host (`anthropic` in `api.anthropic.com`,
    `google` in `googleapis`; a two-letter word only as a whole label)."""
    return any(word == label or (len(word) > 2 and word in label) for label in labels)
