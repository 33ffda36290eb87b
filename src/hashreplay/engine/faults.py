"""Faults and hangs injected without editing recordings (docs/scenarios.md).

A `FaultSpec` is what `@pytest.mark.hashreplay_fault(...)` (or the proxy's
`X-HashReplay-Fault` header) asks for; `ActiveFault` counts the requests it matched within
one test (hanging requests: `engine/hangs.py`). No HTTP client is imported here: adapters
raise their own client's exceptions for the plan's `error_kind`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

from hashreplay.core.constants import FAULT_MARKER
from hashreplay.core.errors import ConfigError
from hashreplay.engine.http import BreakKind

#: The `error=` values a fault may name.
FAULT_ERRORS = (BreakKind.READ_TIMEOUT, BreakKind.CONNECT_ERROR, BreakKind.DISCONNECT)
_FIELDS = (
    "status",
    "headers",
    "body",
    "endpoint",
    "times",
    "call",
    "error",
    "after_chunks",
    "hang",
)
#: An HTTP header name (RFC 9110 §5.1: a token).
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"  # compiled on first use, not at import
FORMS = (
    "status=<int> [headers={...}] [body=...], error="
    + "|".join(f'"{e}"' for e in FAULT_ERRORS)
    + " [after_chunks=N], or hang=True; with optional endpoint=<path suffix>, "
    "times=<n>, call=<n>"
)


class FaultSpec(NamedTuple):
    """One fault: a response (`status`), a broken exchange (`error`) or a hang."""

    status: int | None = None
    headers: tuple[tuple[str, str], ...] = ()
    body: Any = None
    endpoint: str | None = None
    #: how many matching requests get it (None: every one)
    times: int | None = None
    #: only the n-th matching request (1-based)
    call: int | None = None
    error: BreakKind | None = None
    after_chunks: int | None = None
    hang: bool = False

    @classmethod
    def parse(cls, values: Mapping[str, Any], *, source: str = FAULT_MARKER) -> FaultSpec:
        """Validate fault arguments; a ConfigError naming `source` and the valid forms."""
        unknown = sorted(set(values) - set(_FIELDS))
        if unknown:
            _bad(source, f"unknown argument {unknown[0]!r}")
        status = values.get("status")
        error = values.get("error")
        hang = values.get("hang", False)
        kinds = [k for k, v in (("status", status), ("error", error), ("hang", hang)) if v]
        if len(kinds) != 1:
            _bad(source, "give exactly one of status, error or hang")
        if status is not None and not (isinstance(status, int) and 100 <= status <= 599):
            _bad(source, f"status {status!r} is not an HTTP status")
        if error is not None and error not in FAULT_ERRORS:
            _bad(source, f"unknown fault kind error={error!r}")
        if not isinstance(hang, bool):
            _bad(source, f"hang={hang!r} must be True or False")
        headers = values.get("headers") or {}
        if not isinstance(headers, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            _bad(source, "headers must be a dict of strings")
        for name, value in headers.items():  # a response header must be able to carry them
            if not re.fullmatch(_TOKEN, name):
                _bad(source, f"header name {name!r} is not an HTTP header name")
            if any(c in value for c in "\r\n\x00"):
                _bad(source, f"header {name!r}: value {value!r} holds CR, LF or NUL")
        body = values.get("body")
        if body is not None and not isinstance(body, (dict, list, str)):
            _bad(source, f"body must be a dict, a list or a str, got {type(body).__name__}")
        endpoint = values.get("endpoint")
        if endpoint is not None and not isinstance(endpoint, str):
            _bad(source, f"endpoint {endpoint!r} must be a path (suffix) string")
        for name in ("times", "call", "after_chunks"):
            value = values.get(name)
            low = 0 if name == "after_chunks" else 1
            if value is not None and not (
                isinstance(value, int) and not isinstance(value, bool) and value >= low
            ):
                _bad(source, f"{name}={value!r} must be an integer >= {low}")
        if values.get("after_chunks") is not None and error is None:
            _bad(source, "after_chunks needs error=...")
        if (status is not None or hang) and (values.get("headers") or body) and not status:
            _bad(source, "headers and body go with status=...")
        return cls(
            status=status,
            headers=tuple((k.lower(), v) for k, v in headers.items()),
            body=body,
            endpoint=endpoint,
            times=values.get("times"),
            call=values.get("call"),
            error=None if error is None else BreakKind(error),
            after_chunks=values.get("after_chunks"),
            hang=hang,
        )

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
        """Breaks the recorded response (after some chunks) rather than replacing it."""
        return self.error is not None and self.after_chunks is not None

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
            else f"error={str(self.error)!r}"
            + (f", after_chunks={self.after_chunks}" if self.after_chunks is not None else "")
        )
        for name in ("endpoint", "times", "call"):
            value = getattr(self, name)
            if value is not None:
                what += f", {name}={value!r}"
        return f"{FAULT_MARKER}({what})"


def _bad(source: str, problem: str) -> None:
    msg = f"{source}: {problem}; valid forms: {FORMS}"
    raise ConfigError(msg)


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
