"""How old a recorded response is, and whether that makes it stale (docs/recordings.md, "Age").

The day ages are measured from (`today`: the clock's UTC day or `HASHREPLAY_TODAY`), the age
settings (`MaxAge`, parsed once for `max_age`, the marker and `status --older-than`), the age
of a recorded day (`age_in_days`), the one decision on staleness (`stale_age`) and what a
test notes when it used a stale response (`StaleUse`). Pure: no I/O but the environment.
"""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from hashreplay.core.constants import TODAY_ENV
from hashreplay.core.errors import ConfigError
from hashreplay.core.modes import Stale

MAX_AGE_FORMS = '"<days>d" or "<weeks>w" (e.g. "180d", "26w")'
_AGE = re.compile(r"(\d+)\s*([dw])")

#: The longest age a recording can have: from the first day a date can name to the last
#: (about 9,999 years). A longer `max_age` could never be reached, so it is refused.
LONGEST_AGE_DAYS = (datetime.date.max - datetime.date.min).days


class MaxAge(NamedTuple):
    """An age in whole days (`max_age`, `status --older-than`); a response is older than it
    when more than `days` days passed since the day it was recorded."""

    days: int

    @classmethod
    def parse(cls, value: object, *, source: str = "max_age") -> MaxAge:
        """`<n>d` or `<n>w`; a ConfigError naming `source` and the valid forms otherwise
        (months and years vary in length, so they are not accepted), or naming the longest
        age for one past it."""
        if isinstance(value, MaxAge):
            return value
        given = value.strip() if isinstance(value, str) else None
        found = None if given is None else _AGE.fullmatch(given.lower())
        if found is None:
            msg = f"{source}: {value!r} is not an age; use {MAX_AGE_FORMS}"
            raise ConfigError(msg)
        count = int(found.group(1))
        days = count * 7 if found.group(2) == "w" else count
        if days > LONGEST_AGE_DAYS:
            weeks = f" ({days} days)" if found.group(2) == "w" else ""
            msg = (
                f"{source}: {given!r}{weeks} is longer than any recording can be old: the "
                f"longest age is {LONGEST_AGE_DAYS}d ({LONGEST_AGE_DAYS // 7}w, about 9,999 "
                f"years); to never treat a recording as stale, leave {source} out"
            )
            raise ConfigError(msg)
        return cls(days)

    def __str__(self) -> str:
        return f"{self.days}d"


def parse_day(value: str) -> datetime.date:
    """A UTC day written `YYYY-MM-DD` (a ValueError otherwise)."""
    if len(value) != 10:
        msg = f"expected a day written YYYY-MM-DD, found {value!r}"
        raise ValueError(msg)
    try:
        return datetime.date.fromisoformat(value)
    except ValueError:
        msg = f"expected a day written YYYY-MM-DD, found {value!r}"
        raise ValueError(msg) from None


def today(env: Mapping[str, str] | None = None) -> datetime.date:
    """The UTC day it is: `HASHREPLAY_TODAY` when set (a supported setting: reproducible age
    checks in CI, and tests of ages that never depend on the clock; docs/usage.md, "Age"),
    else the system clock's. A ConfigError names a value that is not a day."""
    given = (os.environ if env is None else env).get(TODAY_ENV)
    if not given:
        return datetime.datetime.now(datetime.timezone.utc).date()
    try:
        return parse_day(given.strip())
    except ValueError as exc:
        msg = (
            f"{TODAY_ENV}: {exc}; set it to a day such as 2025-06-01, or unset it to use "
            "today's UTC date"
        )
        raise ConfigError(msg) from None


def age_in_days(recorded_on: str | None, day: datetime.date) -> int | None:
    """Days from `recorded_on` to `day` (negative for a day after `day`); None when the day
    is unknown (a response recorded before hashreplay kept days) or unreadable."""
    if recorded_on is None:
        return None
    try:
        return (day - parse_day(recorded_on)).days
    except ValueError:
        return None


def stale_age(recorded_on: str | None, max_age: MaxAge | None, day: datetime.date) -> int | None:
    """The one decision on a recording's age: its age in days when a response recorded on
    `recorded_on` is stale on `day` under `max_age`, else None (no limit, or no day, so no
    age). A day after `day` (a clock that went back, a `HASHREPLAY_TODAY` before the
    recording, an edited file) is stale too: its age cannot be trusted, so it is reported
    (as a negative age) rather than replayed as fresh for ever."""
    if max_age is None:
        return None
    age = age_in_days(recorded_on, day)
    if age is None or 0 <= age <= max_age.days:
        return None
    return age


class StaleUse(NamedTuple):
    """A recorded response older than `max_age` that a test used (docs/recordings.md, "Age")."""

    path: Path
    recorded_on: str
    #: days since `recorded_on`; negative: recorded after today
    age: int
    max_age: MaxAge
    #: what the test's `stale` setting does with it (the marker's, else the config's)
    policy: Stale = Stale.WARN

    def describe(self, root: Path) -> str:
        """`<file>: recorded on <day>, <n> days ago (max_age <age>)`, the file relative to
        `root` when inside it."""
        try:
            shown: Path | str = self.path.relative_to(root)
        except ValueError:
            shown = self.path
        if self.age < 0:
            later = "1 day" if self.age == -1 else f"{-self.age} days"
            age = f"{later} after today, so its age is unknown (max_age {self.max_age})"
        else:
            age = f"{self.age} days ago (max_age {self.max_age})"
        return f"{shown}: recorded on {self.recorded_on}, {age}"

    def refusal(self, root: Path) -> str:
        """Why `stale = "fail"` refuses it where no test end would fail the test (the
        proxy, `install()`): the failure its request gets."""
        return (
            f"its recording is older than max_age: {self.describe(root)}, and "
            'stale = "fail" refuses it; to renew it, make this request in record-if-missing '
            'mode with stale = "refresh" (or record it again in record mode)'
        )


def recorded_day(value: Any) -> str | None:
    """The UTC day of an interaction's `recorded_at` (docs/recordings.md, "Age"): an HTTP
    date as Ruby's VCR writes it (`Tue, 01 Nov 2011 04:58:44 GMT`), an ISO 8601 day or
    time (a time without an offset is taken as UTC), or a YAML timestamp; None when absent.
    A ValueError names a value that is none of these."""
    if value is None:
        return None
    when: datetime.date | None = value if isinstance(value, datetime.date) else None
    if when is None and isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            import email.utils  # only imports read it: kept off the plugin's start-up

            try:
                when = email.utils.parsedate_to_datetime(text)
            except (TypeError, ValueError, IndexError):
                when = None
    if when is None:
        msg = (
            f"recorded_at {value!r} is not a date (expected an HTTP date like 'Tue, 01 Nov "
            "2011 04:58:44 GMT' or ISO 8601 like '2011-11-01T04:58:44Z')"
        )
        raise ValueError(msg)
    if isinstance(when, datetime.datetime):
        if when.tzinfo is not None:
            when = when.astimezone(datetime.timezone.utc)
        when = when.date()
    return when.isoformat()
