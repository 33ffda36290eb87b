"""`volatile_patterns`: random ids and clock values in prompts hash stably."""

from __future__ import annotations

import datetime as dt
import time
import uuid

import pytest

from hashreplay.core.hashing import request_hash
from hashreplay.core.normalise import RequestRules, compile_patterns, normalise_request_body

RULES = RequestRules(volatile=compile_patterns(["uuid", "iso-timestamp", "unix-ms"]))


def prompt() -> dict[str, object]:
    now = dt.datetime.now(dt.timezone.utc)
    session = str(uuid.uuid4())
    return {
        "model": "m",
        "messages": [
            {"role": "system", "content": f"session {session} started at {now.isoformat()}"},
            {"role": "user", "content": f"again {session}, ts={int(time.time() * 1000)}"},
            {"role": "user", "content": f"another {uuid.uuid4()}"},
        ],
    }


def test_prompt_with_uuid_and_timestamp_hashes_the_same_every_run() -> None:
    hashes = set()
    for _ in range(3):
        body = normalise_request_body(prompt(), RULES)
        hashes.add(request_hash("POST", "/v1/chat/completions", body, "t::t"))
        time.sleep(0.002)
    assert len(hashes) == 1


def test_placeholders_are_numbered_in_order_of_first_appearance() -> None:
    body = normalise_request_body(prompt(), RULES)
    messages = body["messages"]
    assert messages[0]["content"] == "session <uuid:1> started at <iso-timestamp:1>"
    assert messages[1]["content"] == "again <uuid:1>, ts=<unix-ms:1>"
    assert messages[2]["content"] == "another <uuid:2>"


def test_without_patterns_nothing_is_replaced() -> None:
    # (a uuid in a body is a client-generated id, numbered by default: tests/unit/test_hashing.py)
    value = {"content": "order 12345 placed 2026-12-01T10:00:00Z by run 7"}
    assert normalise_request_body(value) == value


def test_custom_regex_and_idempotence() -> None:
    rules = RequestRules(volatile=compile_patterns([r"ORD-\d+"]))
    once = normalise_request_body({"a": "ORD-123 and ORD-9 and ORD-123"}, rules)
    assert once == {"a": "<volatile:1> and <volatile:2> and <volatile:1>"}
    assert normalise_request_body(once, rules) == once


def test_timestamp_fraction_is_not_rerendered_as_a_decimal_first() -> None:
    body = normalise_request_body({"t": "at 2025-01-02T03:04:05.123456Z"}, RULES)
    assert body == {"t": "at <iso-timestamp:1>"}


@pytest.mark.parametrize("bad", ["(", "x*"])
def test_bad_patterns_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match=repr(bad).replace("*", r"\*").replace("(", r"\(")):
        compile_patterns([bad])
