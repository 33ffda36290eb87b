"""Network use that no adapter handled (docs/design.md §2), as the network guard reports it:
TCP connections, UDP datagrams, DNS lookups and gRPC channels. In replay mode one outside
the allowed hosts fails its test (`blocked_report` says which and how to allow it); in the
recording modes each is listed in the run's summary (loopback included), so nothing goes
unrecorded in silence.
"""

from __future__ import annotations

import threading
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple

from hashreplay.core.config import Config
from hashreplay.core.errors import NetworkBlocked
from hashreplay.core.modes import Mode
from hashreplay.core.network import NetworkRules

if TYPE_CHECKING:
    from hashreplay.engine.owner import Owners


class Reach(str, Enum):
    """How a test reached for the network."""

    CONNECTION = "connection"
    DATAGRAM = "UDP datagram"
    LOOKUP = "DNS lookup"
    GRPC = "gRPC channel"


#: What a summary label of a lookup ends with (`api.example.com (DNS lookup)`).
_LOOKUP_SUFFIX = f" ({Reach.LOOKUP.value})"


class Connection(NamedTuple):
    """One use of the network as the guard saw it."""

    #: the address connected or sent to; for a lookup or a gRPC target, the name itself
    address: str
    #: 0 for a lookup made without a port
    port: int
    #: the name `address` was really resolved from, when the guard saw that resolution
    name: str | None
    #: the module that opened it, and the first caller outside that library
    opener: str
    caller: str | None
    reach: Reach = Reach.CONNECTION

    @property
    def label(self) -> str:
        """`api.example.com:443`, `8.8.8.8:53 (UDP)`, `api.example.com (DNS lookup)`."""
        host = self.name or self.address
        if ":" in host:
            host = f"[{host}]"  # an IPv6 address
        if self.reach is Reach.LOOKUP:
            return f"{host}{_LOOKUP_SUFFIX}"
        where = f"{host}:{self.port}"
        if self.reach is Reach.DATAGRAM:
            return f"{where} (UDP)"
        if self.reach is Reach.GRPC:
            return f"{where} (gRPC)"
        return where


class Connections:
    def __init__(self, config: Config, owners: Owners) -> None:
        self.rules = NetworkRules(config.block_network, config.allowed_hosts, config.passthrough)
        self.owners = owners
        #: label → openers, of network use in the recording modes that nothing recorded
        self.unrecorded: dict[str, set[str]] = {}
        self._lock = threading.Lock()  # `unrecorded`: connections open on many threads

    def check(self, test_id: str | None, connection: Connection) -> NetworkBlocked | None:
        """The failure to raise for this connection, or None to let it through."""
        mode = self.owners.mode_for(test_id)
        if mode is Mode.LIVE or test_id is None:
            return None
        if mode is not Mode.REPLAY:
            # listed unless the user allowed it on purpose: loopback too, since a local
            # server reached through a client no adapter covers records nothing either
            if not self._allowed(connection, explicitly=True, test_id=test_id):
                with self._lock:
                    self.unrecorded.setdefault(connection.label, set()).add(
                        connection.opener.split(".", 1)[0]
                    )
            return None
        if self._allowed(connection, explicitly=False, test_id=test_id):
            return None  # loopback (by default), allowed hosts, passthrough
        failure = NetworkBlocked(blocked_report(test_id, connection), test_id=test_id)
        self.owners.tally.missed()
        self.owners.owner(test_id).fail(failure)
        return failure

    def _allowed(self, connection: Connection, *, explicitly: bool, test_id: str) -> bool:
        owner = self.owners.get(test_id)  # a test's marker may have its own rules
        rules = (owner.network() if owner is not None else None) or self.rules
        if connection.reach is Reach.LOOKUP:  # a name: no port to it, nothing is sent there
            return rules.allows_name(connection.address)
        port, address, name = connection.port, connection.address, connection.name
        if explicitly:
            return rules.explicitly_allows(port, address, name)
        return rules.allows(port, address, name)

    def summary(self) -> str | None:
        """`2 connections were not recorded: api.example.com:443 from aiohttp, …`, or None.
        A DNS lookup is left out when a connection to the same name is listed."""
        if not self.unrecorded:
            return None
        hosts = {
            label.split(" (", 1)[0].rsplit(":", 1)[0]
            for label in self.unrecorded
            if not label.endswith(_LOOKUP_SUFFIX)
        }
        items = [
            f"{label} from {', '.join(sorted(openers))}"
            for label, openers in sorted(self.unrecorded.items())
            if not (label.endswith(_LOOKUP_SUFFIX) and label[: -len(_LOOKUP_SUFFIX)] in hosts)
        ]
        count = len(items)
        noun = "connection was" if count == 1 else "connections were"
        return f"{count} {noun} not recorded: {'; '.join(items)}"


def blocked_report(test_id: str, connection: Connection) -> str:
    reach = connection.reach
    if reach is Reach.LOOKUP:
        what = f"a DNS lookup of {connection.address}"
    else:
        where = f"{connection.label.split(' (', 1)[0]}"
        if connection.name is not None:
            where += f" ({connection.address})"
        what = f"a {reach.value} to {where}"
    caller = f" at {connection.caller}" if connection.caller else ""
    allow = connection.name or connection.address
    return "\n".join(
        [
            f"hashreplay: blocked {what} in replay mode",
            f"  test:      {test_id}",
            f"  opened by: {connection.opener}{caller}",
            "  no adapter handled it: the library that opened it is not intercepted by "
            "hashreplay, so nothing is recorded for it and replay cannot answer it",
            f'  to allow it: add "{allow}" to allowed_hosts (or its URL to passthrough) in '
            '[tool.hashreplay], or set block_network = "off"',
        ]
    )
