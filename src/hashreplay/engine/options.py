"""Per-test scenario options (the `hashreplay` and `hashreplay_fault` markers, the proxy's
fault header): None means the session's configuration."""

from __future__ import annotations

from dataclasses import dataclass, field

from hashreplay.core.scenarios import Pace, Unconsumed
from hashreplay.engine.faults import ActiveFault


@dataclass
class TestOptions:
    __test__ = False  # not a pytest test class

    timing: bool | None = None
    pace: Pace | None = None
    unconsumed: Unconsumed | None = None
    faults: list[ActiveFault] = field(default_factory=list)
    #: proxy fault headers seen, by value, so repeats (an SDK's retries) share counters
    header_faults: dict[str, ActiveFault] = field(default_factory=dict)
