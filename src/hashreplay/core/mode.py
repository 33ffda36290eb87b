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
        """Return the mode named by `value`, or raise a ConfigError that lists the four modes."""
        if isinstance(value, Mode):
            return value
        text = str(value).strip().lower() if isinstance(value, str) else value
        for mode in cls:
            if mode.value == text:
                return mode
        valid = ", ".join(m.value for m in cls)
        msg = f"invalid {source} {value!r}: expected one of {valid}"
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
