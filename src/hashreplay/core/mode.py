"""The four modes (docs/design.md §1) as a closed set whose parse error lists the valid values."""

from __future__ import annotations

from enum import Enum

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
