"""The values of the scenario options (docs/scenarios.md): `pace` and `unconsumed`.

Pure parsing, shared by the config file, `HASHREPLAY_PACE` and the pytest marker, so every
source names itself and lists the valid forms the same way.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

from hashreplay.core.errors import ConfigError

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


INSTANT = Pace()


class Unconsumed(str, Enum):
    """What to do about recorded responses a replayed test did not use."""

    WARN = "warn"
    FAIL = "fail"
    IGNORE = "ignore"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: object, *, source: str = "unconsumed") -> Unconsumed:
        if isinstance(value, Unconsumed):
            return value
        if isinstance(value, str):
            try:
                return cls(value.strip().lower())
            except ValueError:
                pass
        valid = ", ".join(f'"{u.value}"' for u in cls)
        msg = f"{source}: {value!r} is not valid; use one of {valid}"
        raise ConfigError(msg)
