"""The plugin's markers and fixture (docs/scenarios.md): the `hashreplay` marker's per-test
options, `hashreplay_fault` markers, the `hashreplay` fixture, and the end-of-test report of
unconsumed recordings and faults that matched nothing. The marker's keywords are the
configuration's names (`record_timing`, `pace`, `unconsumed`, `mode`), so a setting reads the
same in `[tool.hashreplay]` and on a test; `timing` stays as an alias of `record_timing`.

The hooks a project implements in its `conftest.py` (docs/design.md §14; docs/usage.md,
"Hooks"), and how the plugin hands them to the engine. The plugin registers these
specifications (`pytest_addhooks`); the engine never imports pytest, so it gets plain
callables (`engine/keys.py`) that look the implementations up at each request: conftest
files load while tests are collected, after the run starts. Every implementation runs, the
last-registered first as pytest orders hooks, each seeing what the one before it left; an
implementation may change its argument in place (and return None) or return the changed
dict. One that raises, or returns anything else, fails the test it ran for with an error
naming the hook and where it is defined.

`collect_test_ids`: the test ids of the project's suite, for `hashreplay import vcr`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from hashreplay.core.age import MaxAge
from hashreplay.core.constants import FAULT_MARKER, RECORD_HOOK, REQUEST_HOOK
from hashreplay.core.context import conversation
from hashreplay.core.errors import ConfigError, HashReplayWarning, RecordingError
from hashreplay.core.matching import DEFAULT_MATCH_ON, MatchRule, Repeat, RuleSource
from hashreplay.core.modes import Mode, Pace, Stale, Unconsumed
from hashreplay.core.network import BlockNetwork
from hashreplay.plugin import recording

if TYPE_CHECKING:  # the engine loads when a project opts in, not with the plugin
    from hashreplay.engine.hooks import HookImpls, Hooks
    from hashreplay.engine.owner import Call
    from hashreplay.engine.session import Session


MARKER = "hashreplay"


_MODES = ", ".join(m.value for m in Mode)


#: The `hashreplay` marker's keywords: the `[tool.hashreplay]` names, and `timing`, the
#: alias of `record_timing` that suites written before the names matched still use.
MARKER_KEYWORDS = (
    "mode",
    "record_timing",
    "pace",
    "unconsumed",
    "max_age",
    "stale",
    "ignore",
    "match_on",
    "repeat",
    "block_network",
    "allowed_hosts",
)


_ALIASES = {"timing": "record_timing"}


#: The `markers` ini lines: what `pytest --markers` shows.
MARKER_LINES = (
    f"{MARKER}(mode=None, record_timing=None, pace=None, unconsumed=None, max_age=None, "
    f"stale=None, ignore=None, match_on=None, repeat=None, block_network=None, "
    f"allowed_hosts=None): run this test in another "
    f"hashreplay mode ({_MODES}), record timing (alias: timing=), pace its replay "
    '("instant", "recorded", "fixed:<ms>"), treat unused recordings ("warn", "fail", '
    '"ignore") and recordings older than max_age ("180d", "26w") ("warn", "fail", "refresh"), '
    'leave request paths out of the key (ignore=["body.max_tokens"]), key on fewer parts '
    '(match_on=["method", "endpoint"]), answer calls past a recorded sequence with its last '
    'response (repeat="last"), guard its network on its own terms (block_network="all", '
    'allowed_hosts=["db.internal"])',
    f"{FAULT_MARKER}(status=None, headers=None, body=None, endpoint=None, times=None, "
    "call=None, error=None, after_chunks=None, hang=False, after_frames=None, close=None, "
    "reason=None): answer matching requests with a fault instead of their recording (error: "
    '"read_timeout", "connect_error", "disconnect"; a WebSocket dropped or closed after '
    "after_frames=N frames)",
)


def marker_options(marker: pytest.Mark | None) -> dict[str, Any]:
    """The closest `hashreplay` marker's keywords under their configuration names (the
    positional argument is the mode); a ConfigError names a keyword it does not know."""
    if marker is None:
        return {}
    source = f"@pytest.mark.{MARKER}"
    if len(marker.args) > 1:
        msg = f"{source} takes one positional argument (the mode), got {len(marker.args)}"
        raise ConfigError(msg)
    options: dict[str, Any] = {"mode": marker.args[0]} if marker.args else {}
    for given, value in marker.kwargs.items():
        name = _ALIASES.get(given, given)
        if name not in MARKER_KEYWORDS:
            msg = (
                f"{source} has no keyword {given!r}; it takes "
                + ", ".join(f"{k}=" for k in MARKER_KEYWORDS)
                + " (timing= is an alias of record_timing=)"
            )
            raise ConfigError(msg)
        if name in options:
            msg = f"{source}: {name} is given twice ({given}= and {name}=, or positionally)"
            raise ConfigError(msg)
        options[name] = value
    return options


def apply_markers(
    item: pytest.Item,
    session: Session,
    marker: pytest.Mark | None,
    *,
    answers_recording: bool = False,
) -> Mode | None:
    """Hand the test's scenario options (its closest `hashreplay` marker, its fault markers,
    and with `answers_recording` pytest-recording's `block_network` marker, which the `hashreplay`
    marker's keywords override) to the engine and return the marker's mode (None: the
    run's); a ConfigError names the marker."""
    options = marker_options(marker)
    blocking = item.get_closest_marker("block_network") if answers_recording else None
    if blocking is not None:
        options = {**recording.block_network_options(blocking), **options}
    source = f"@pytest.mark.{MARKER}"
    mode = options.get("mode")
    timing = options.get("record_timing")
    if timing is not None and not isinstance(timing, bool):
        msg = f"{source} record_timing={timing!r} must be True or False"
        raise ConfigError(msg)
    pace = options.get("pace")
    unconsumed = options.get("unconsumed")
    max_age, stale = options.get("max_age"), options.get("stale")
    fault_marks = list(item.iter_markers(FAULT_MARKER))
    faults = []
    if fault_marks:
        from hashreplay.engine.faults import FaultSpec  # loaded with the engine already

        faults = [
            FaultSpec.parse(m.kwargs, source=f"@pytest.mark.{FAULT_MARKER}")
            for m in reversed(fault_marks)
        ]
    match = None
    if "ignore" in options or "match_on" in options:  # each not given: the config's
        match = MatchRule.parse(
            options.get("ignore", session.config.ignore),
            options.get("match_on", session.config.match_on or DEFAULT_MATCH_ON),
            source=source,
            origin=RuleSource.MARKER,
        )
    repeat = options.get("repeat")
    if repeat is not None:
        repeat = Repeat.parse(repeat, source=f"{source} repeat")
    block, hosts = options.get("block_network"), options.get("allowed_hosts")
    if block is not None:
        try:
            block = BlockNetwork.parse(block)
        except ValueError as exc:
            raise ConfigError(f"{source} block_network={block!r} {exc}") from None
    if hosts is not None:
        hosts = recording.host_names(hosts, f"{source} allowed_hosts")
    given = (timing, pace, unconsumed, max_age, stale, match, repeat, block, hosts)
    if faults or any(value is not None for value in given):
        session.set_test_options(
            item.nodeid,
            timing=timing,
            pace=None if pace is None else Pace.parse(pace, source=f"{source} pace"),
            unconsumed=None
            if unconsumed is None
            else Unconsumed.parse(unconsumed, source=f"{source} unconsumed"),
            faults=faults,
            max_age=None if max_age is None else MaxAge.parse(max_age, source=f"{source} max_age"),
            stale=None if stale is None else Stale.parse(stale, source=f"{source} stale"),
            match=match,
            repeat=repeat,
            block_network=block,
            allowed_hosts=hosts,
        )
    return None if mode is None else Mode.parse(mode, source=f"{source} mode")


def report_leftovers(item: pytest.Item, session: Session, report: pytest.TestReport) -> int:
    """Warn about (or fail the test for) what it left unused, and say which faults had
    nothing to break yet; returns how many responses were left unused."""
    _report_recorded_first(item, session, report)
    try:
        policy, unused, faults = session.leftovers(item.nodeid)
    except RecordingError as exc:  # its recordings directory cannot be read (a symlink out)
        if report.passed:
            report.outcome = "failed"
            report.longrepr = f"hashreplay: {item.nodeid}: {exc}"
        return 0
    if not unused and not faults:
        return 0
    root = session.config.root
    lines = [u.describe(root) for u in unused] + faults
    count = sum(u.count for u in unused)
    head = f"hashreplay: {item.nodeid} left {count} recorded response(s) unused" + (
        f" and {len(faults)} fault(s) unmatched" if faults else ""
    )
    # file names and test ids are shown as `hashreplay show` shows recorded text: a control
    # character in one (a file named with an escape sequence) never acts on the terminal
    from hashreplay.core.transcript import printable  # only a run with leftovers needs it

    shown = [printable(line).replace("\n", "\\n") for line in (head, *lines)]
    text = "\n".join([shown[0], *(f"  {line}" for line in shown[1:])])
    hint = (
        "\n  (the test makes fewer calls than were recorded: re-record it with "
        'INFERENCE_MODE=record, or set unconsumed = "ignore")'
    )
    if policy is Unconsumed.FAIL and report.passed:
        report.outcome = "failed"
        report.longrepr = text + hint
    elif policy is not Unconsumed.IGNORE:
        item.warn(HashReplayWarning(text))
    return count


def report_stale(item: pytest.Item, session: Session, report: pytest.TestReport) -> list[str]:
    """Fail the test (`stale = "fail"`) for the recorded responses older than its `max_age`
    that it used, naming each file and its age; returns a summary line for each (the run
    lists them under `warn` and `refresh`)."""
    policy, used = session.stale_used(item.nodeid)
    if not used:
        return []
    root = session.config.root
    lines = [
        f"{_shown(root, u.path)}: recorded on {u.recorded_on}, {u.age} days ago "
        f"(max_age {u.max_age}), used by {item.nodeid}"
        for u in used
    ]
    if policy is Stale.FAIL and report.passed:
        head = (
            f"hashreplay: {item.nodeid} used {len(used)} recording(s) older than max_age "
            f'{used[0].max_age} (stale = "fail")'
        )
        fix = (
            f"  to renew them: INFERENCE_MODE=record-if-missing pytest {item.nodeid} with "
            'stale = "refresh" (in [tool.hashreplay] or @pytest.mark.hashreplay(stale="refresh"))'
        )
        report.outcome = "failed"
        report.longrepr = "\n".join([head, *(f"  {line}" for line in lines), fix])
    return lines


def _shown(root: Path, path: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _report_recorded_first(item: pytest.Item, session: Session, report: pytest.TestReport) -> None:
    """A fault that breaks a recorded response found none in a recording mode, so the call
    was recorded whole: the test did not see the fault this time. Its failure (likely, as
    it expects the fault) says why; a pass gets a warning."""
    faults = session.recorded_first(item.nodeid)
    if not faults:
        return
    text = "\n".join(
        f"hashreplay: {item.nodeid}: {fault} had no recorded response to break, so the "
        "call was made live and recorded whole; the fault applies from the next replay: "
        f"pytest {item.nodeid}"
        for fault in faults
    )
    if report.failed and report.longrepr is not None:
        report.longrepr = f"{report.longrepr}\n\n{text}"
    else:
        item.warn(HashReplayWarning(text))


class HashReplayFixture:
    """What the `hashreplay` fixture gives a test. Inside a test the fixture's name shadows
    the `hashreplay` module, so it offers what a test needs from the module too
    (`conversation`)."""

    def __init__(self, session: Session, test_id: str) -> None:
        self._session = session
        self._test_id = test_id

    def __repr__(self) -> str:
        return f"<hashreplay fixture of {self._test_id} ({self.mode.value})>"

    @property
    def test_id(self) -> str:
        """The id this test's calls are recorded under (its pytest node id)."""
        return self._test_id

    @property
    def mode(self) -> Mode:
        """The mode this test runs in: the run's, or its marker's."""
        return self._session.mode_for(self._test_id)

    @property
    def calls(self) -> list[Call]:
        """This test's exchanges so far, in order: each with `method`, `endpoint`, `body`
        (the request body as keyed: parsed JSON when JSON, redacted), `status` (None without
        one: no response, a call-layer target) and `source` ("replayed", "recorded" or
        "live"), for assertions like respx's `calls`."""
        return self._session.calls(self._test_id)

    @staticmethod
    def conversation(name: str) -> AbstractContextManager[None]:
        """`hashreplay.conversation(name)`: run a block as conversation `name`, so identical
        requests of concurrent conversations keep their own recorded sequences."""
        return conversation(name)

    def wait_hanging(self, timeout: float | None = 5.0) -> Any:
        """Return once a request of this test hangs (`hashreplay_fault(hang=True)`); a
        HangTimeout after `timeout` seconds (None: no limit). Inside a running event loop it
        returns an awaitable instead: `await hashreplay.wait_hanging()`."""
        asyncio = sys.modules.get("asyncio")  # no event loop runs unless asyncio is loaded
        if asyncio is None or asyncio.events._get_running_loop() is None:
            self._session.wait_hanging(self._test_id, timeout)
            return None
        return self._await_hanging(timeout)

    def _await_hanging(self, timeout: float | None) -> Coroutine[Any, Any, None]:
        from hashreplay.engine.faults import check_timeout, hang_timeout  # loaded already

        check_timeout(timeout)  # at the call, not when awaited
        hangs, test_id = self._session.hangs, self._test_id

        async def wait() -> None:
            import asyncio  # loaded already: a coroutine runs in its loop

            deadline = None if timeout is None else time.monotonic() + timeout
            while not hangs.hanging(test_id):
                if deadline is not None and time.monotonic() >= deadline:
                    assert timeout is not None  # a deadline comes from a timeout
                    # the timeout the test gave, not the poll's own zero wait
                    raise hang_timeout(test_id, timeout)
                await asyncio.sleep(0.005)

        return wait()


@pytest.hookspec
def pytest_hashreplay_request(request: dict[str, Any]) -> dict[str, Any] | None:
    """Change a request before hashreplay keys it, in every mode (record and replay alike,
    so the two agree). `request` holds `method`, `endpoint` (the URL path), `query` (a dict),
    `headers` (lower-cased names) and `body` (parsed JSON where the body is JSON), before
    redaction; what you leave is redacted, scrubbed and normalised as any request, and the
    live request itself is sent unchanged.

    Example, a `conftest.py` that keys requests without the prompt's date line::

        def pytest_hashreplay_request(request):
            for message in request["body"].get("messages", []):
                if message["role"] == "system":
                    message["content"] = message["content"].split("\\nToday is")[0]
    """


@pytest.hookspec
def pytest_hashreplay_before_record(recording: dict[str, Any]) -> dict[str, Any] | None:
    """Change what a recording file holds before it is written: `recording` is the file's
    JSON (`test_id`, `request`, `response`, `later_responses`, …) after redaction.
    Redaction and the `scrub` patterns run again afterwards, so a hook cannot write a
    secret; what it leaves must still be a valid recording, and replay serves it as it is.
    Change responses and headers here; a change to `request.body` or `request.endpoint`
    leaves the file under a name its request no longer hashes to (`hashreplay verify`
    reports it): change the keyed request in `pytest_hashreplay_request` instead.

    Example, a `conftest.py` that drops a noisy response header::

        def pytest_hashreplay_before_record(recording):
            recording["response"]["headers"].pop("x-request-id", None)
            return recording
    """


def plug_in(config: pytest.Config, hooks: Hooks) -> None:
    """Hand the engine the project's implementations of both hooks."""
    hooks.request = _implementations(config, REQUEST_HOOK)
    hooks.before_record = _implementations(config, RECORD_HOOK)


def _implementations(config: pytest.Config, name: str) -> HookImpls:
    caller = getattr(config.hook, name)

    def current() -> Sequence[tuple[str, Callable[..., object]]]:
        # get_hookimpls lists them in registration order; pytest calls the last one first
        return [
            (_where(impl.plugin_name, impl.function), _bind(impl.function, impl.argnames))
            for impl in reversed(caller.get_hookimpls())
            if not (impl.hookwrapper or impl.wrapper)
        ]

    return current


def _bind(function: Callable[..., object], argnames: Sequence[str]) -> Callable[..., object]:
    """The implementation as a function of the one dict (it may leave its argument out)."""
    return lambda value: function(**dict.fromkeys(argnames, value))


def _where(plugin_name: str, function: Callable[..., object]) -> str:
    """Where an implementation is defined: its file and line (a conftest.py, a plugin)."""
    code = getattr(function, "__code__", None)
    if code is None:
        return f"in plugin {plugin_name}"
    return f"in {code.co_filename}:{code.co_firstlineno}"


# --- `hashreplay import vcr`: the suite's test ids ------------------------------------------


class _CollectProbe:
    """Stands in for the hashreplay plugin in a `--collect-only` run that must write nothing
    (no usage log, no placeholders): registers the markers and hookspecs the project may use
    (so `--strict-markers` and its conftest hooks still load; pytest-recording's too where it
    is not installed) and keeps the collected ids."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.rootdir = ""

    def pytest_addhooks(self, pluginmanager: pytest.PytestPluginManager) -> None:
        pluginmanager.add_hookspecs(sys.modules[__name__])  # this module's hookspecs

    def pytest_configure(self, config: pytest.Config) -> None:
        for line in MARKER_LINES:
            config.addinivalue_line("markers", line)
        if not recording.recording_installed(config.pluginmanager):
            recording.plug_in(config, None)  # its markers and hook, as a replay run has them

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.ids = [item.nodeid for item in session.items]
        self.rootdir = str(session.config.rootpath)


def collect_test_ids(out: str) -> int:
    """Collect the suite of the current directory's project with the hashreplay plugin off
    and write `{"rootdir", "ids", "exit"}` to `out` (run by `hashreplay import vcr` in a
    subprocess: the project's conftest files never load in the CLI's process)."""
    import json

    probe = _CollectProbe()
    args = ["--collect-only", "-q", "-p", "no:hashreplay", "-p", "no:cacheprovider"]
    code = pytest.main(args, plugins=[probe])
    result = {"rootdir": probe.rootdir, "ids": probe.ids, "exit": int(code)}
    Path(out).write_text(json.dumps(result), encoding="utf-8")
    return 0
