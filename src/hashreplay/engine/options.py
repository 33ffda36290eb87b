"""Per-test scenario options (the `hashreplay` and `hashreplay_fault` markers, the proxy's
fault header): None means the session's configuration."""

from __future__ import annotations

from hashreplay.core.scenarios import Pace, Unconsumed
from hashreplay.engine.faults import ActiveFault


class TestOptions:
    __test__ = False  # not a pytest test class
    __slots__ = ("faults", "header_faults", "pace", "recorded_first", "timing", "unconsumed")

    def __init__(
        self,
        timing: bool | None = None,
        pace: Pace | None = None,
        unconsumed: Unconsumed | None = None,
        faults: list[ActiveFault] | None = None,
    ) -> None:
        self.timing = timing
        self.pace = pace
        self.unconsumed = unconsumed
        self.faults: list[ActiveFault] = [] if faults is None else faults
        #: proxy fault headers seen, by value, so repeats (an SDK's retries) share counters
        self.header_faults: dict[str, ActiveFault] = {}
        #: faults that matched a request with no recorded response to break in a recording
        #: mode: the request was recorded whole instead (their `describe()`, once each)
        self.recorded_first: list[str] = []
