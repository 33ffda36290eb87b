"""Bounded per-test state for long-lived servers (issue 13 item 9).

Inside pytest each test's state is dropped when the test ends. A proxy or a server under
test never sees tests end: it sees test ids in headers, so without a bound its memory grows
with every distinct test id (4,500 ids took a proxy from 45 to 251 MB). `TestStates` keeps
the states of the `limit` most recently active test ids and forgets the least recently used
one beyond that (its identical-request counters and id mappings: a test that comes back
after being evicted starts again from its first recorded response, as a new run does).
"""

from __future__ import annotations

from hashreplay.engine.session import Session

__all__ = ["touch_test"]


def touch_test(session: Session, test_id: str | None, limit: int) -> int:
    """Mark `test_id` as just used and evict the least recently used test states beyond
    `limit` (with what the session noted of their files); returns how many were evicted."""
    evicted = 0
    with session._lock:
        tests = session._tests
        state = tests.pop(test_id, None)
        if state is not None:
            tests[test_id] = state  # dicts keep insertion order: the end is the newest
        while len(tests) > limit:
            oldest = next(iter(tests))
            if oldest == test_id:
                break
            del tests[oldest]
            session.usage.pop(oldest, None)
            evicted += 1
        if len(session.usage) > limit:  # files of tests that never had a state (replay only)
            for stale in [t for t in session.usage if t not in tests][: len(session.usage) - limit]:
                del session.usage[stale]
    return evicted
