"""Connections that no adapter handled (docs/design.md §12): in replay mode one outside the
allowed hosts fails its test; in the recording modes each is listed in the run's summary, so
nothing goes unrecorded in silence."""

from __future__ import annotations

from typing import NamedTuple

from hashreplay.core.config import Config
from hashreplay.core.errors import NetworkBlocked
from hashreplay.core.mode import Mode
from hashreplay.core.network import NetworkRules
from hashreplay.engine.state import Tests


class Connection(NamedTuple):
    """One connection as the guard saw it."""

    address: str
    port: int
    #: the name it was looked up as, when the guard saw the lookup
    name: str | None
    #: the module that opened it, and the first caller outside that library
    opener: str
    caller: str | None

    @property
    def label(self) -> str:
        host = self.name or self.address
        return f"{host}:{self.port}"

    @property
    def hosts(self) -> tuple[str, ...]:
        return (self.address,) if self.name is None else (self.name, self.address)


class Connections:
    def __init__(self, config: Config, tests: Tests) -> None:
        self.rules = NetworkRules(config.block_network, config.allowed_hosts, config.passthrough)
        self.tests = tests
        #: label → openers, of connections made in the recording modes that nothing recorded
        self.unrecorded: dict[str, set[str]] = {}

    def check(self, test_id: str | None, connection: Connection) -> NetworkBlocked | None:
        """The failure to raise for this connection, or None to let it through."""
        mode = self.tests.mode_for(test_id)
        if mode is Mode.LIVE or test_id is None:
            return None
        if self.rules.allows(connection.port, *connection.hosts):
            return None  # loopback (by default), allowed hosts, passthrough
        if mode is not Mode.REPLAY:
            with self.tests.lock:
                self.unrecorded.setdefault(connection.label, set()).add(
                    connection.opener.split(".", 1)[0]
                )
            return None
        failure = NetworkBlocked(blocked_report(test_id, connection), test_id=test_id)
        with self.tests.lock:
            self.tests.stats.missed += 1
            self.tests.state(test_id).misses.append(failure)
        return failure

    def summary(self) -> str | None:
        """`2 connections were not recorded: api.example.com:443 from aiohttp, …`, or None."""
        if not self.unrecorded:
            return None
        items = [
            f"{label} from {', '.join(sorted(openers))}"
            for label, openers in sorted(self.unrecorded.items())
        ]
        count = len(items)
        noun = "connection was" if count == 1 else "connections were"
        return f"{count} {noun} not recorded: {'; '.join(items)}"


def blocked_report(test_id: str, connection: Connection) -> str:
    where = connection.label
    if connection.name is not None:
        where += f" ({connection.address})"
    caller = f" at {connection.caller}" if connection.caller else ""
    allow = connection.name or connection.address
    return "\n".join(
        [
            f"hashreplay: blocked a connection to {where} in replay mode",
            f"  test:      {test_id}",
            f"  opened by: {connection.opener}{caller}",
            "  no adapter handled it: the library that opened it is not intercepted by "
            "hashreplay, so nothing is recorded for it and replay cannot answer it",
            f'  to allow it: add "{allow}" to allowed_hosts (or its URL to passthrough) in '
            '[tool.hashreplay], or set block_network = "off"',
        ]
    )
