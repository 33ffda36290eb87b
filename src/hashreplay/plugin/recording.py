"""pytest-recording's surface, answered by hashreplay in a project that opted in and where
pytest-recording is not installed (docs/usage.md, "Moving off pytest-recording"), so a suite
written for it runs unchanged: its markers (`vcr` and its keyword arguments, accepted and
ignored; `default_cassette`; `block_network`, which blocks the test's network as hashreplay's
guard does), the `vcr_config` and `vcr_cassette_dir` fixtures (defaults a conftest may
override; nothing of hashreplay asks for them), the `pytest_recording_configure` hook a
conftest implements (a hookspec that is never called: no vcrpy object exists to hand it), the
`--record-mode`, `--block-network` and `--allowed-hosts` options, and a `vcr` fixture that
answers what tests read from a vcrpy `Cassette` out of the test's exchanges.

Where pytest-recording is installed it keeps every one of these names: hashreplay registers
none of them, and its report header says once how to hand them over.

For `hashreplay import vcr`: where a suite's own code imports vcr (which hashreplay does not
stand in for: vcrpy stays installed), and the first lines of a failed collection's output.
Files are read, never imported: the suite's conftest files do not load in the CLI's process.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import sys
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from hashreplay.core.errors import ConfigError
from hashreplay.core.modes import Mode
from hashreplay.core.network import BlockNetwork

if TYPE_CHECKING:
    from hashreplay.engine.owner import Call
    from hashreplay.engine.session import Session

#: pytest-recording's `pytest11` entry point: `-p no:recording` turns it off.
RECORDING_PLUGIN = "recording"
#: The option group pytest-recording's options are shown under (`pytest --help`).
RECORDING_GROUP = "recording"

#: The report header line of an opted-in run where pytest-recording is installed.
RECORDING_INSTALLED = (
    "hashreplay: pytest-recording is installed, so the vcr marker and fixture, "
    "--record-mode and --block-network are its own (vcrpy replays cassettes); to let "
    "hashreplay answer them: pytest -p no:recording, or pip uninstall pytest-recording"
)


class RecordMode(str, Enum):
    """pytest-recording's `--record-mode`, each standing for a hashreplay mode."""

    NONE = "none"
    ONCE = "once"
    NEW_EPISODES = "new_episodes"
    ALL = "all"
    REWRITE = "rewrite"

    @property
    def mode(self) -> Mode:
        """`none` replays; `once` and `new_episodes` record what has no recording; `all` and
        `rewrite` record every call again."""
        if self is RecordMode.NONE:
            return Mode.REPLAY
        if self in (RecordMode.ONCE, RecordMode.NEW_EPISODES):
            return Mode.RECORD_IF_MISSING
        return Mode.RECORD

    @classmethod
    def parse(cls, value: str) -> RecordMode:
        for member in cls:
            if member.value == value.strip():
                return member
        valid = ", ".join(f"{m.value} ({m.mode.value})" for m in cls)
        msg = (
            f"--record-mode {value!r} is not one of pytest-recording's record modes: "
            f"{valid}; or give hashreplay's own --inference-mode"
        )
        raise ConfigError(msg)


def recording_installed(pluginmanager: pytest.PytestPluginManager) -> bool:
    """Whether pytest-recording takes part in this run, so its names are its own. Asked when
    options are added, perhaps before its entry point loaded: then it will load unless
    `-p no:recording` blocks it or plugin autoloading is off."""
    if pluginmanager.has_plugin(RECORDING_PLUGIN) or pluginmanager.has_plugin(
        "pytest_recording.plugin"
    ):
        return True
    if pluginmanager.is_blocked(RECORDING_PLUGIN) or os.environ.get(
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD"
    ):
        return False
    return importlib.util.find_spec("pytest_recording") is not None


def add_options(parser: pytest.Parser) -> None:
    """pytest-recording's options, under its own group name (as `pytest --help` showed them)."""
    group = parser.getgroup(RECORDING_GROUP, "pytest-recording's options, answered by hashreplay")
    modes = ", ".join(f"{m.value} → {m.mode.value}" for m in RecordMode)
    group.addoption(
        "--record-mode",
        dest="record_mode",
        default=None,
        metavar="MODE",
        help=f"pytest-recording's record mode as a hashreplay mode ({modes}); "
        "--inference-mode and INFERENCE_MODE win over it",
    )
    group.addoption(
        "--block-network",
        dest="block_network",
        action="store_true",
        default=False,
        help='block_network = "all" for this run: replay fails a test on any connection '
        "no adapter handled, loopback too, unless --allowed-hosts names it",
    )
    group.addoption(
        "--allow-private-ips",
        dest="allow_private_ips",
        action="store_true",
        default=False,
        help='with --block-network: block_network = "non-loopback" (loopback stays reachable)',
    )
    group.addoption(
        "--disable-recording",
        dest="disable_recording",
        action="store_true",
        default=False,
        help="live mode (nothing intercepted or written), below --inference-mode and "
        "INFERENCE_MODE as --record-mode is",
    )
    group.addoption(
        "--allowed-hosts",
        dest="allowed_hosts",
        default=None,
        metavar="HOSTS",
        help="host names (host or host:port), separated by commas, that tests may reach: "
        "allowed_hosts for this run",
    )


class Options:
    """What the run's pytest-recording options ask of the configuration."""

    def __init__(self, config: pytest.Config) -> None:
        record = config.getoption("record_mode", None)
        self.record_mode = None if record is None else RecordMode.parse(str(record))
        self.disabled = bool(config.getoption("disable_recording", False))
        private = bool(config.getoption("allow_private_ips", False))
        blocked = BlockNetwork.NON_LOOPBACK if private else BlockNetwork.ALL
        self.block_network = blocked if config.getoption("block_network", False) else None
        hosts = config.getoption("allowed_hosts", None)
        self.allowed_hosts = (
            None if hosts is None else host_names(str(hosts).split(","), "--allowed-hosts")
        )

    @property
    def given(self) -> list[str]:
        """The options given, as typed."""
        names = ("--record-mode", "--disable-recording", "--block-network", "--allowed-hosts")
        values = (self.record_mode, self.disabled or None, self.block_network, self.allowed_hosts)
        return [name for name, value in zip(names, values, strict=True) if value is not None]

    @property
    def mode(self) -> Mode | None:
        """The mode these options name (`--disable-recording` wins, as it did over
        `--record-mode`); None: none given."""
        if self.disabled:
            return Mode.LIVE
        return None if self.record_mode is None else self.record_mode.mode

    def overrides(self) -> dict[str, Any]:
        """Keyword arguments of `load_config` (None: the file's)."""
        return {"block_network": self.block_network, "allowed_hosts": self.allowed_hosts}


#: What a regular expression holds and a host name never does.
_PATTERN = re.compile(r"[\\^$*+?()\[\]{}|]")


def host_names(given: Any, source: str) -> tuple[str, ...]:
    """`allowed_hosts` as host names (`host` or `host:port`); a ConfigError for a pattern:
    pytest-recording's entries were regular expressions, hashreplay's are names, and a
    pattern read as a name would allow nothing it meant to."""
    items = [given] if isinstance(given, str) else given
    if not isinstance(items, (list, tuple)) or not all(isinstance(h, str) for h in items):
        msg = f"{source} must be a list of host names, got {given!r}"
        raise ConfigError(msg)
    hosts = tuple(h.strip() for h in items if h.strip())
    for host in hosts:
        if _PATTERN.search(host):
            msg = (
                f"{source}: {host!r} looks like a regular expression; allowed_hosts entries "
                "are host names (api.example.com, or api.example.com:8443): list each host"
            )
            raise ConfigError(msg)
    return hosts


#: The `markers` ini lines of pytest-recording's markers.
MARKER_LINES = (
    "vcr(*cassettes, **config): pytest-recording's marker, accepted and ignored by hashreplay "
    "(which records every call of an opted-in project); remove it at leisure",
    "default_cassette(name): pytest-recording's marker, accepted and ignored by hashreplay "
    "(a test's recordings are named by its id)",
    "block_network(allowed_hosts=None, allow_private_ips=False): fail this test in replay on "
    'any connection no adapter handled (hashreplay\'s block_network = "all"; '
    'allow_private_ips=True: "non-loopback"), except to allowed_hosts (host names)',
    "allowed_hosts(*hosts): pytest-recording's marker, accepted and ignored (give "
    "allowed_hosts= to block_network or hashreplay)",
)

_BLOCK_KEYWORDS = ("allowed_hosts", "allow_private_ips")


def block_network_options(mark: pytest.Mark) -> dict[str, Any]:
    """`@pytest.mark.block_network(...)` as the `hashreplay` marker's `block_network` and
    `allowed_hosts`; a ConfigError for what pytest-recording did not accept either."""
    source = "@pytest.mark.block_network"
    unknown = sorted(set(mark.kwargs) - set(_BLOCK_KEYWORDS))
    if mark.args or unknown:
        msg = (
            f"{source} takes only the keywords {', '.join(f'{k}=' for k in _BLOCK_KEYWORDS)}; "
            f"got {mark.args!r} and {unknown or 'no other keyword'}"
        )
        raise ConfigError(msg)
    private = bool(mark.kwargs.get("allow_private_ips"))
    options: dict[str, Any] = {
        "block_network": BlockNetwork.NON_LOOPBACK if private else BlockNetwork.ALL
    }
    hosts = mark.kwargs.get("allowed_hosts")
    if hosts is not None:
        given = hosts.split(",") if isinstance(hosts, str) else hosts
        options["allowed_hosts"] = host_names(given, f"{source} allowed_hosts")
    return options


class RecordingHooks:
    """pytest-recording's hook, for a conftest that implements it."""

    @staticmethod
    @pytest.hookspec
    def pytest_recording_configure(config: pytest.Config, vcr: Any) -> None:
        """pytest-recording called it with each cassette's `VCR` object (to register
        matchers and persisters). hashreplay makes no VCR object, so it never calls it: a
        custom matcher becomes `match_on`/`ignore` or the `pytest_hashreplay_request`
        hook, a persister the `pytest_hashreplay_before_record` hook or `scrub`."""


class VcrRequest:
    """A request of the test as a vcrpy `Request` reads: `method`, `uri`/`url` (the
    endpoint: path and query, as keyed; hashreplay keys no host), `path`, `query` (sorted
    pairs), `body` (bytes: JSON as sent, redacted)."""

    def __init__(self, call: Call) -> None:
        self.method = call.method
        self.uri = self.url = call.endpoint
        parts = urlsplit(call.endpoint)
        self.path = parts.path
        self.query = sorted(parse_qsl(parts.query, keep_blank_values=True))
        self.body = _bytes(call.body)

    def __repr__(self) -> str:
        return f"<Request ({self.method}) {self.uri}>"


def _bytes(body: object) -> bytes | None:
    if body is None or isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


class VcrCassette:
    """What the `vcr` fixture gives a test in place of pytest-recording's vcrpy `Cassette`,
    read from the test's exchanges so far (the `hashreplay` fixture's `calls`): `requests`
    (`VcrRequest`s), `responses` (dicts with `status.code`, as vcrpy's; the body is not
    kept), `data` (request, response pairs), `play_count` (responses replayed), `play_counts`,
    `all_played` (no recorded response left unused so far), `write_protected` (replay mode)
    and `len()`."""

    def __init__(self, session: Session, test_id: str) -> None:
        self._session = session
        self._test_id = test_id

    def _calls(self) -> list[Call]:
        return self._session.calls(self._test_id)

    @property
    def data(self) -> list[tuple[VcrRequest, dict[str, Any]]]:
        return [(VcrRequest(call), _response(call)) for call in self._calls()]

    @property
    def requests(self) -> list[VcrRequest]:
        return [request for request, _ in self.data]

    @property
    def responses(self) -> list[dict[str, Any]]:
        return [response for _, response in self.data]

    @property
    def play_counts(self) -> dict[int, int]:
        """How often each exchange (by its index in `data`) was answered from a recording."""
        return {i: 1 for i, call in enumerate(self._calls()) if call.source == "replayed"}

    @property
    def play_count(self) -> int:
        return sum(self.play_counts.values())

    @property
    def all_played(self) -> bool:
        _, unused, _ = self._session.leftovers(self._test_id)
        return not unused

    @property
    def write_protected(self) -> bool:
        return self._session.mode_for(self._test_id) is Mode.REPLAY

    @property
    def rewound(self) -> bool:
        return False

    def __len__(self) -> int:
        return len(self._calls())

    def __repr__(self) -> str:
        return f"<Cassette containing {len(self)} recorded response(s)>"


def _response(call: Call) -> dict[str, Any]:
    return {"status": {"code": call.status, "message": ""}}


#: The engine's session of a run that answers pytest-recording's names (`plug_in`).
SESSION_KEY = pytest.StashKey["Session"]()


# This module is registered as a plugin for these fixtures, so a conftest's own win.


@pytest.fixture
def vcr(request: pytest.FixtureRequest) -> VcrCassette:
    """pytest-recording's cassette, as hashreplay answers it (`VcrCassette`)."""
    return VcrCassette(request.config.stash[SESSION_KEY], request.node.nodeid)


@pytest.fixture
def vcr_config() -> dict[str, Any]:
    """pytest-recording's default (a conftest's overrides it); hashreplay reads none."""
    return {}


@pytest.fixture(scope="module")
def vcr_cassette_dir(request: pytest.FixtureRequest) -> str:
    """pytest-recording's default cassette directory of the module; hashreplay's
    recordings sit in `recordings/` beside the test file instead."""
    module = Path(request.node.path)
    return str(module.parent / "cassettes" / module.stem)


def plug_in(config: pytest.Config, session: Session | None) -> None:
    """Register pytest-recording's names for this run: its markers, its hook, and (given the
    engine's session; not in `hashreplay import vcr`'s collection) its fixtures."""
    for line in MARKER_LINES:
        config.addinivalue_line("markers", line)
    config.pluginmanager.add_hookspecs(RecordingHooks)
    if session is not None:
        config.stash[SESSION_KEY] = session
        config.pluginmanager.register(sys.modules[__name__], "hashreplay-recording")


# --- `hashreplay import vcr`: what a suite needs beyond this surface, why collecting failed ---

#: Directories no test suite lives in.
_NOT_TESTS = frozenset({"node_modules", "site-packages", "__pycache__", "cassettes", "recordings"})


def vcr_importers(root: Path) -> list[str]:
    """`path:line` of each `import vcr` / `from vcr… import` in the project's conftest and test
    files (read with `ast`, never imported): code that needs vcrpy itself, which hashreplay
    does not stand in for, so vcrpy must stay installed when pytest-recording goes."""
    found: list[str] = []
    top = root.resolve()
    for directory, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _NOT_TESTS)
        for name in sorted(files):
            if not (name == "conftest.py" or (name.startswith("test") and name.endswith(".py"))):
                continue
            path = Path(directory, name)
            try:
                source = path.read_bytes()
                tree = ast.parse(source) if b"vcr" in source else None
            except (OSError, SyntaxError, ValueError):
                continue
            for node in ast.walk(tree) if tree is not None else ():
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    names = [node.module or ""]
                else:
                    continue
                if any(n == "vcr" or n.startswith("vcr.") for n in names):
                    found.append(f"{path.relative_to(top).as_posix()}:{node.lineno}")
    return found


def keep_vcrpy_note(importers: list[str]) -> str:
    """What `hashreplay import vcr` says when the suite imports vcr itself."""
    more = len(importers) - 5
    shown = ", ".join(importers[:5]) + (f" and {more} more" if more > 0 else "")
    return (
        f"the suite imports vcr itself ({shown}): keep vcrpy installed when you "
        "`pip uninstall pytest-recording` (hashreplay answers pytest-recording's markers, "
        "fixtures, hook and options, not vcrpy's module), or remove those imports"
    )


#: How many lines of a failed collection's output the import shows.
COLLECTION_LINES = 12


def collection_failure(output: str, ids: Iterable[str] = ()) -> list[str]:
    """The first lines of what `pytest --collect-only -q` printed when it failed (a conftest
    that does not import, a module with an error), without the test ids it listed, its
    banners and blank lines."""
    listed = set(ids)
    lines: list[str] = []
    for line in output.splitlines():
        text = line.rstrip()
        core = text.strip().strip("=_- ")  # a banner's words, without its rule
        if core and core not in _BANNERS and text.strip() not in listed:
            lines.append(core if core != text.strip() else text)
    return lines[:COLLECTION_LINES]


#: pytest's banners that say nothing about the failure itself.
_BANNERS = frozenset({"ERRORS", "short test summary info"})
