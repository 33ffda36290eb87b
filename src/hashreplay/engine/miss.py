"""What a client receives on a replay miss (docs/design.md §6): a prompt error
response that carries the report and that no SDK retries (`x-should-retry: false`, a 4xx that
plain clients do not retry either)."""

from __future__ import annotations

from hashreplay.core.constants import MISS_HEADER, MISS_STATUS
from hashreplay.core.errors import ReplayMiss, error_body
from hashreplay.engine.http import ReplayPlan


def miss_plan(miss: ReplayMiss, *, hint: str | None = None) -> ReplayPlan:
    """The error response of a miss; `hint` adds the next step for a caller with no pytest
    (the proxy's clients)."""
    extra: dict[str, str | None] = {"hash": miss.request_hash, "test_id": miss.test_id}
    if hint is not None:
        extra["hint"] = hint
    body = error_body(miss.report, "hashreplay_miss", "hashreplay_miss", **extra)
    headers = [
        ("content-type", "application/json"),
        ("x-should-retry", "false"),
        (MISS_HEADER, "1"),
        ("content-length", str(len(body))),
    ]
    return ReplayPlan(MISS_STATUS, headers, [body], False)
