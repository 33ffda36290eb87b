"""The closed sets users choose from, each parsed with an error that lists the valid values: the
four modes (docs/design.md §1), `record_failures`, the scenario options `pace` and
`unconsumed` (docs/scenarios.md), and `stale` (what a stale recording does; ages themselves
are `core/age.py`).

Pure parsing, shared by the config file, `HASHREPLAY_PACE` and the pytest marker, so every
source names itself and lists the valid forms the same way.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import NamedTuple, TypeVar

from hashreplay.core.errors import ConfigError


class Mode(str, Enum):
    REPLAY = "replay"
    RECORD_IF_MISSING = "record-if-missing"
    RECORD = "record"
    LIVE = "live"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: object, *, source: str = "mode") -> Mode:
        """Return the mode named by `value` (spelled exactly, surrounding blanks aside), or
        raise a ConfigError that lists the four modes. The same for every source: the file,
        `INFERENCE_MODE`, `--inference-mode`, a marker."""
        if isinstance(value, Mode):
            return value
        text = value.strip() if isinstance(value, str) else value
        for mode in cls:
            if mode.value == text:
                return mode
        valid = ", ".join(m.value for m in cls)
        hint = ""
        if isinstance(text, str) and text.lower() in {m.value for m in cls}:
            hint = f" (modes are lower-case: {text.lower()!r})"
        msg = f"invalid {source} {value!r}: expected one of {valid}{hint}"
        raise ConfigError(msg)

    @property
    def intercepts(self) -> bool:
        return self is not Mode.LIVE

    @property
    def may_replay(self) -> bool:
        return self in (Mode.REPLAY, Mode.RECORD_IF_MISSING)

    @property
    def may_record(self) -> bool:
        return self in (Mode.RECORD, Mode.RECORD_IF_MISSING)


_C = TypeVar("_C", bound="Choice")


class Choice(str, Enum):
    """A closed set a user picks from by name (lower case; blanks around it ignored), whose
    parse error names the setting and every valid value."""

    def __str__(self) -> str:
        return str(self.value)

    @classmethod
    def hint(cls) -> str:
        """What the values mean, after the list of them in an error (empty: nothing)."""
        return ""

    @classmethod
    def parse(cls: type[_C], value: object, *, source: str = "") -> _C:
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            try:
                return cls(value.strip().lower())
            except ValueError:
                pass
        valid = ", ".join(f'"{member.value}"' for member in cls)
        name = source or re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()
        msg = f"{name}: {value!r} is not valid; use one of {valid}{cls.hint()}"
        raise ConfigError(msg)


class RecordFailures(str, Enum):
    """What a recording mode writes of a call that got no HTTP response (docs/design.md,
    "Only answers are recorded"): `responses` nothing (the default), `all` the transport
    error too."""

    RESPONSES = "responses"
    ALL = "all"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: object, *, source: str = "record_failures") -> RecordFailures:
        """The setting named by `value`, or a ConfigError that lists the valid values."""
        if isinstance(value, RecordFailures):
            return value
        for member in cls:
            if member.value == value:
                return member
        valid = ", ".join(f'"{m.value}"' for m in cls)
        msg = f"{source}: {value!r} is not valid; use one of {valid}"
        raise ConfigError(msg)


PACE_FORMS = '"instant", "recorded" or "fixed:<ms>" (e.g. "fixed:50")'


class Pace(NamedTuple):
    """How replay spaces a response out in time."""

    #: "instant" (no waiting), "recorded" (the stored offsets) or "fixed" (`fixed_ms`).
    kind: str = "instant"
    fixed_ms: float = 0.0

    @classmethod
    def parse(cls, value: object, *, source: str = "pace") -> Pace:
        """`instant`, `recorded` or `fixed:<ms>`; a ConfigError naming `source` otherwise."""
        if isinstance(value, Pace):
            return value
        text = value.strip().lower() if isinstance(value, str) else None
        if text in ("instant", "recorded"):
            return cls(text)
        if text is not None and text.startswith("fixed:"):
            try:
                ms = float(text.removeprefix("fixed:"))
            except ValueError:
                ms = -1.0
            if 0 <= ms < float("inf"):
                return cls("fixed", ms)
        msg = f"{source}: {value!r} is not a pace; use {PACE_FORMS}"
        raise ConfigError(msg)

    @property
    def instant(self) -> bool:
        return self.kind == "instant" or (self.kind == "fixed" and self.fixed_ms == 0)

    def __str__(self) -> str:
        return f"fixed:{self.fixed_ms:g}" if self.kind == "fixed" else self.kind


class Unconsumed(Choice):
    """What to do about recorded responses a replayed test did not use."""

    WARN = "warn"
    FAIL = "fail"
    IGNORE = "ignore"


class Stale(Choice):
    """What a test does with a recorded response older than `max_age`."""

    #: list it in the run's summary
    WARN = "warn"
    #: fail the test that used it, naming the file and its age
    FAIL = "fail"
    #: in record-if-missing, record it again as if it were missing (its day is renewed);
    #: in replay mode, list it as `warn` does
    REFRESH = "refresh"
