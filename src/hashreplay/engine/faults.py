"""Faults and hangs injected without editing recordings (docs/scenarios.md).

A `FaultSpec` is what `@pytest.mark.hashreplay_fault(...)` (or the proxy's
`X-HashReplay-Fault` header) asks for; `ActiveFault` counts the requests it matched within
one test (hanging requests: `engine/faults.py`). No HTTP client is imported here: adapters
raise their own client's exceptions for the plan's `error_kind`.

Requests that hang (`hashreplay_fault(hang=True)`), per test: `wait_hanging` returns once
one is in flight, and the test's end releases them (docs/scenarios.md).

Per-test scenario options (the `hashreplay` and `hashreplay_fault` markers, the proxy's
fault header): None means the session's configuration.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from typing import Annotated, Any

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from hashreplay.core.age import MaxAge
from hashreplay.core.constants import FAULT_MARKER
from hashreplay.core.errors import ConfigError, HashReplayError
from hashreplay.core.matching import MatchRule, Repeat
from hashreplay.core.modes import Pace, Stale, Unconsumed
from hashreplay.core.network import NetworkRules
from hashreplay.engine.http import BreakKind

#: The `error=` values a fault may name.
FAULT_ERRORS = (BreakKind.READ_TIMEOUT, BreakKind.CONNECT_ERROR, BreakKind.DISCONNECT)


#: An HTTP header name (RFC 9110 §5.1: a token).
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"  # compiled on first use, not at import


FORMS = (
    "status=<int> [headers={...}] [body=...], error="
    + "|".join(f'"{e}"' for e in FAULT_ERRORS)
    + ' [after_chunks=N], or hang=True; for a WebSocket connection error="disconnect" '
    "after_frames=N (a drop) or close=<code> after_frames=N [reason=...] (a close); with "
    "optional endpoint=<path suffix>, times=<n>, call=<n>"
)

#: What a marker keyword or header field that is not of its type is told, in the user's
#: terms (`{value!r}` is what was given).
_WRONG: dict[str, str] = {
    "status": "status {value!r} is not an HTTP status",
    "error": "unknown fault kind error={value!r}",
    "hang": "hang={value!r} must be True or False",
    "headers": "headers must be a dict of strings",
    "endpoint": "endpoint {value!r} must be a path (suffix) string",
    "times": "times={value!r} must be an integer >= 1",
    "call": "call={value!r} must be an integer >= 1",
    "after_chunks": "after_chunks={value!r} must be an integer >= 0",
    "after_frames": "after_frames={value!r} must be an integer >= 0",
    "close": "close={value!r} is not a close code (1000-4999)",
    "reason": "reason={value!r} must be a string",
}


class FaultSpec(BaseModel):
    """One fault: a response (`status`), a broken exchange (`error`) or a hang; the
    keywords of `@pytest.mark.hashreplay_fault(...)` and the fields of the proxy's
    `X-HashReplay-Fault` header, one definition for both."""

    # the schema is built when a fault is first validated, not when this module loads
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    status: Annotated[StrictInt, Field(ge=100, le=599)] | None = None
    #: lower-cased names, in the order given
    headers: tuple[tuple[str, str], ...] = ()
    #: a JSON body: a dict, a list or a str
    body: Any = None
    #: a path suffix the request's path must end with
    endpoint: StrictStr | None = None
    #: how many matching requests get it (None: every one)
    times: Annotated[StrictInt, Field(ge=1)] | None = None
    #: only the n-th matching request (1-based)
    call: Annotated[StrictInt, Field(ge=1)] | None = None
    error: BreakKind | None = None
    after_chunks: Annotated[StrictInt, Field(ge=0)] | None = None
    hang: StrictBool = False
    #: a WebSocket connection broken after this many frames from the server (docs/scenarios.md,
    #: "WebSocket faults"): with error="disconnect" a drop, with close=<code> a close
    after_frames: Annotated[StrictInt, Field(ge=0)] | None = None
    #: the close code (and `reason`) the server sends after `after_frames` frames
    close: Annotated[StrictInt, Field(ge=1000, le=4999)] | None = None
    reason: StrictStr | None = None

    @field_validator("error", mode="before")
    @classmethod
    def _error(cls, value: object) -> object:
        if value is not None and value not in FAULT_ERRORS:
            msg = f"unknown fault kind error={value!r}"
            raise ValueError(msg)
        return value

    @field_validator("headers", mode="before")
    @classmethod
    def _headers(cls, value: object) -> tuple[tuple[str, str], ...]:
        if isinstance(value, tuple):
            return value  # already validated (a copy)
        if value is None:
            return ()
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise ValueError(_WRONG["headers"])
        for name, text in value.items():  # a response header must be able to carry them
            if not re.fullmatch(_TOKEN, name):
                msg = f"header name {name!r} is not an HTTP header name"
                raise ValueError(msg)
            if any(c in text for c in "\r\n\x00"):
                msg = f"header {name!r}: value {text!r} holds CR, LF or NUL"
                raise ValueError(msg)
        return tuple((k.lower(), v) for k, v in value.items())

    @field_validator("body", mode="before")
    @classmethod
    def _body(cls, value: object) -> object:
        if value is not None and not isinstance(value, (dict, list, str)):
            msg = f"body must be a dict, a list or a str, got {type(value).__name__}"
            raise ValueError(msg)
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> FaultSpec:
        kinds = [self.status is not None, self.error is not None, self.hang, self.close is not None]
        if kinds.count(True) != 1:
            msg = "give exactly one of status, error, hang or close"
            raise ValueError(msg)
        if self.after_frames is not None:
            if self.after_chunks is not None:
                msg = "after_chunks (HTTP) and after_frames (WebSocket) do not go together"
                raise ValueError(msg)
            if self.error not in (None, BreakKind.DISCONNECT):
                msg = 'after_frames goes with error="disconnect" (a drop) or close=<code>'
                raise ValueError(msg)
            if self.error is None and self.close is None:
                msg = 'after_frames needs error="disconnect" or close=<code>'
                raise ValueError(msg)
        if self.close is not None and self.after_frames is None:
            msg = "close=<code> needs after_frames=N (the frames delivered before it)"
            raise ValueError(msg)
        if self.reason is not None and self.close is None:
            msg = "reason goes with close=<code>"
            raise ValueError(msg)
        if self.after_chunks is not None and self.error is None:
            msg = "after_chunks needs error=..."
            raise ValueError(msg)
        if self.status is None and (self.headers or self.body is not None):
            msg = "headers and body go with status=..."
            raise ValueError(msg)
        return self

    @classmethod
    def parse(cls, values: Mapping[str, Any], *, source: str = FAULT_MARKER) -> FaultSpec:
        """Validate fault arguments; a ConfigError naming `source`, the keyword or header
        field in error, the value given and the valid forms."""
        try:
            return cls.model_validate(dict(values))
        except ValidationError as exc:
            raise ConfigError(f"{source}: {_problem(exc)}; valid forms: {FORMS}") from None

    @classmethod
    def from_header(cls, value: str, *, source: str) -> FaultSpec:
        """A fault from the JSON object of the proxy's fault header."""
        try:
            data = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            msg = f"{source}: not a JSON object ({exc}); valid forms: {FORMS}"
            raise ConfigError(msg) from None
        if not isinstance(data, dict):
            msg = f"{source}: must be a JSON object; valid forms: {FORMS}"
            raise ConfigError(msg)
        return cls.parse(data, source=source)

    @property
    def breaks_recorded(self) -> bool:
        """Breaks the recorded response (after some chunks or frames) rather than replacing it."""
        if self.after_frames is not None:
            return True
        return self.error is not None and self.after_chunks is not None

    @property
    def for_connections(self) -> bool:
        """A WebSocket fault (`after_frames`): only handshakes (ws://, wss://) get it."""
        return self.after_frames is not None

    def nothing_to_break(self, test_id: str | None) -> str:
        """Why a fault that breaks a recorded response is a miss in replay mode when the
        request has no recording left to break, and the command that records it."""
        command = f": INFERENCE_MODE=record-if-missing pytest {test_id}" if test_id else ""
        return (
            f"{self.describe()} breaks a recorded response, and this request has none left to "
            "break: record it first in record-if-missing mode (the fault applies from the next "
            f"replay){command}"
        )

    def describe(self) -> str:
        what = (
            f"status={self.status}"
            if self.status is not None
            else "hang=True"
            if self.hang
            else f"close={self.close}"
            if self.close is not None
            else f"error={str(self.error)!r}"
            + (f", after_chunks={self.after_chunks}" if self.after_chunks is not None else "")
        )
        if self.after_frames is not None:
            what += f", after_frames={self.after_frames}"
        if self.reason is not None:
            what += f", reason={self.reason!r}"
        for name in ("endpoint", "times", "call"):
            value = getattr(self, name)
            if value is not None:
                what += f", {name}={value!r}"
        return f"{FAULT_MARKER}({what})"


def _problem(exc: ValidationError) -> str:
    """The first problem of a fault, in the user's terms: an unknown keyword first, then
    the first keyword in error with the value given."""
    errors = exc.errors()
    error = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    field = str(error["loc"][0]) if error["loc"] else ""
    if error["type"] == "extra_forbidden":
        return f"unknown argument {field!r}"
    if error["type"] == "value_error":  # a validator's own sentence
        return str(error["ctx"]["error"])
    value = error["input"]
    return _WRONG[field].format(value=value) if field in _WRONG else error["msg"]


class ActiveFault:
    """A fault within one test, with the requests it matched so far."""

    __slots__ = ("applied", "matched", "spec")

    def __init__(self, spec: FaultSpec) -> None:
        self.spec = spec
        self.matched = 0
        self.applied = 0

    def take(self, path: str) -> bool:
        """Whether this request (its URL path) gets the fault; counts it."""
        spec = self.spec
        if spec.endpoint is not None and not path.endswith(spec.endpoint):
            return False
        self.matched += 1
        if spec.call is not None and self.matched != spec.call:
            return False
        if spec.times is not None and self.applied >= spec.times:
            return False
        self.applied += 1
        return True


class HangTimeout(HashReplayError, TimeoutError):
    """`wait_hanging(timeout)` saw no hanging request in time."""


class Hangs:
    """Requests that hang, per test: `wait_hanging` watches them, the test's end frees them."""

    __slots__ = ("cond", "in_flight", "released")

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.in_flight: dict[str | None, int] = {}
        self.released: dict[str | None, threading.Event] = {}

    def hang(self, test_id: str | None) -> Hang:
        with self.cond:
            event = self.released.setdefault(test_id, threading.Event())
        return Hang(self, test_id, event)

    def enter(self, test_id: str | None) -> None:
        with self.cond:
            self.in_flight[test_id] = self.in_flight.get(test_id, 0) + 1
            self.cond.notify_all()

    def leave(self, test_id: str | None) -> None:
        with self.cond:
            self.in_flight[test_id] = self.in_flight.get(test_id, 1) - 1

    def hanging(self, test_id: str | None) -> bool:
        """Whether a request of the test hangs now."""
        with self.cond:
            return self.in_flight.get(test_id, 0) > 0

    def wait_hanging(self, test_id: str | None, timeout: float | None) -> None:
        """Return once a request of the test hangs; a HangTimeout after `timeout` s (None:
        no limit)."""
        check_timeout(timeout)
        with self.cond:
            if not self.cond.wait_for(lambda: self.in_flight.get(test_id, 0) > 0, timeout):
                assert timeout is not None  # without one, wait_for returns only when true
                raise hang_timeout(test_id, timeout)

    def release(self, test_id: str | None) -> None:
        """The test ended: every request it left hanging returns (with its error)."""
        with self.cond:
            event = self.released.pop(test_id, None)
            self.in_flight.pop(test_id, None)
        if event is not None:
            event.set()


def check_timeout(timeout: object) -> None:
    """`wait_hanging`'s timeout must be a number of seconds >= 0, or None (no limit)."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
        msg = (
            f"wait_hanging(timeout={timeout!r}): the timeout must be a number of seconds >= 0 "
            "(or None: no limit)"
        )
        raise TypeError(msg)


def hang_timeout(test_id: str | None, timeout: float) -> HangTimeout:
    """The error of a `wait_hanging(timeout)` that saw no hanging request: it names the
    timeout it waited, as given (`0.5 s`, `5 s`)."""
    shown = f"{timeout:g}"
    if float(shown) != timeout:  # more digits than %g shows: the exact value
        shown = repr(float(timeout))
    msg = (
        f"no request of test {test_id!r} was hanging within {shown} s (the timeout "
        "given to wait_hanging): does the test's hashreplay_fault(hang=True) marker match "
        "the request it makes, and does the request start before the timeout?"
    )
    return HangTimeout(msg)


class Hang:
    """One hanging request. `wait` / `await_` return when `timeout` (the client's own,
    None: none) elapses or the test ends; a cancelled task stops waiting at once."""

    POLL = 0.005

    def __init__(self, hangs: Hangs, test_id: str | None, event: threading.Event) -> None:
        self._hangs = hangs
        self._test_id = test_id
        self._event = event

    def wait(self, timeout: float | None) -> None:
        self._hangs.enter(self._test_id)
        try:
            self._event.wait(timeout)
        finally:
            self._hangs.leave(self._test_id)

    async def await_(self, timeout: float | None) -> None:
        import asyncio  # loaded already: a coroutine runs in its loop

        self._hangs.enter(self._test_id)
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while not self._event.is_set():
                if deadline is not None and time.monotonic() >= deadline:
                    return
                await asyncio.sleep(self.POLL)
        finally:
            self._hangs.leave(self._test_id)


class TestOptions:
    __test__ = False  # not a pytest test class
    __slots__ = (
        "faults",
        "header_faults",
        "match",
        "max_age",
        "network",
        "pace",
        "recorded_first",
        "repeat",
        "stale",
        "timing",
        "unconsumed",
    )

    def __init__(
        self,
        timing: bool | None = None,
        pace: Pace | None = None,
        unconsumed: Unconsumed | None = None,
        faults: list[ActiveFault] | None = None,
        *,
        max_age: MaxAge | None = None,
        stale: Stale | None = None,
        match: MatchRule | None = None,
        repeat: Repeat | None = None,
        network: NetworkRules | None = None,
    ) -> None:
        #: the test's network guard rules (its marker's block_network, allowed_hosts)
        self.network = network
        #: the marker's `max_age` and `stale` (None: the configuration's)
        self.max_age = max_age
        self.stale = stale
        #: the test's matching rule and repeat policy (docs/design.md §14); None: the config's
        self.match = match
        self.repeat = repeat
        self.timing = timing
        self.pace = pace
        self.unconsumed = unconsumed
        self.faults: list[ActiveFault] = [] if faults is None else faults
        #: proxy fault headers seen, by value, so repeats (an SDK's retries) share counters
        self.header_faults: dict[str, ActiveFault] = {}
        #: faults that matched a request with no recorded response to break in a recording
        #: mode: the request was recorded whole instead (their `describe()`, once each)
        self.recorded_first: list[str] = []
