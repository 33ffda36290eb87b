"""The network guard's rules (docs/design.md §12): which connections a replay-mode test may
open that no adapter handled. Pure: the audit hook that sees connections is an adapter."""

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
        self.allowed = {h.lower() for h in allowed_hosts} | passthrough_hosts(passthrough)

    def allows(self, port: int, *hosts: str) -> bool:
        """`hosts`: the address connected to and, when known, the name it was looked up as."""
        if self.block is BlockNetwork.OFF:
            return True
        for host in hosts:
            name = host.lower().strip("[]")
            if name in self.allowed or f"{name}:{port}" in self.allowed:
                return True
        return self.block is BlockNetwork.NON_LOOPBACK and any(is_loopback(h) for h in hosts)
