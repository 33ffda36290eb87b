"""The network guard's rules (docs/design.md §2): which connections, datagrams, DNS lookups and
gRPC channels a test may make that no adapter handled. Pure: the audit hook that sees them is
an adapter."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
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


def passthrough_hosts(prefixes: Iterable[str]) -> set[str]:
    """`host` and `host:port` of each `passthrough` URL prefix."""
    hosts: set[str] = set()
    for prefix in prefixes:
        parts = urlsplit(prefix)
        if parts.hostname:
            hosts.add(parts.hostname.lower())
            if parts.port:
                hosts.add(f"{parts.hostname.lower()}:{parts.port}")
    return hosts


class NetworkRules:
    """Whether a connection that no adapter handled may be opened."""

    def __init__(
        self, block: BlockNetwork, allowed_hosts: Iterable[str], passthrough: Iterable[str]
    ) -> None:
        self.block = block
        self.allowed = {_bare(h) for h in allowed_hosts} | passthrough_hosts(passthrough)

    def listed(self, port: int, *hosts: str) -> bool:
        """Whether one of `hosts` (with or without `port`) is in `allowed_hosts` or
        `passthrough`: the user said it may be reached."""
        for host in hosts:
            name = _bare(host)
            if name in self.allowed or f"{name}:{port}" in self.allowed:
                return True
        return False

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
        `allowed_hosts` or `passthrough` names it, with any port."""
        if self.block is BlockNetwork.OFF:
            return True
        bare = _bare(name)
        return any(entry == bare or entry.startswith(f"{bare}:") for entry in self.allowed)


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
