"""Keying (`engine/keys.py`, docs/design.md §3, §14): `check_name` warns when a file found by
its name holds another request than the name hashes, under every matching rule; keying a
live request and re-keying its stored form (`rehash`, `verify`) give one hash."""

from __future__ import annotations

import warnings
from pathlib import Path

import orjson
import pytest

from hashreplay.core.config import load_config
from hashreplay.core.constants import FORMAT_VERSION, KEY_VERSION
from hashreplay.core.errors import HashReplayWarning
from hashreplay.core.format import RecordedRequest, RecordedResponse, Recording
from hashreplay.core.matching import MatchRule
from hashreplay.core.modes import Mode
from hashreplay.core.normalise import normalise_request_body
from hashreplay.engine.files import Rules
from hashreplay.engine.http import IncomingRequest
from hashreplay.engine.keys import Prepared, check_name

TEST = "tests/test_a.py::test_x"
PATH = Path("tests/recordings/0123.json")
NARROW = MatchRule(ignore=["body.temperature"])


def request(conversation: str | None = "left", temperature: float = 0.1) -> RecordedRequest:
    return RecordedRequest(
        method="POST",
        url="http://localhost/v1/chat",
        endpoint="/v1/chat",
        body={"model": "m", "temperature": temperature},
        conversation=conversation,
    )


def recording(stored: RecordedRequest) -> Recording:
    return Recording(
        format_version=FORMAT_VERSION,
        key_version=KEY_VERSION,
        test_id=TEST,
        request=stored,
        response=RecordedResponse(status=200, body={"ok": True}),
    )


def prepared(live: RecordedRequest, rule: MatchRule | None) -> Prepared:
    return Prepared(TEST, Mode.REPLAY, "0123", False, live, shown_test_id=TEST, rule=rule)


def warned(stored: RecordedRequest, live: RecordedRequest, rule: MatchRule | None) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_name(PATH, recording(stored), prepared(live, rule), rule)
    return [str(w.message) for w in caught if issubclass(w.category, HashReplayWarning)]


@pytest.mark.parametrize("rule", [None, NARROW], ids=["default rule", "narrower rule"])
def test_a_file_of_another_conversation_is_warned_about(rule: MatchRule | None) -> None:
    (message,) = warned(request("right"), request("left"), rule)
    assert f"recording {PATH} no longer matches its name" in message
    assert "it stores conversation 'right', not 'left'" in message


@pytest.mark.parametrize("rule", [None, NARROW], ids=["default rule", "narrower rule"])
def test_a_file_of_the_same_request_is_not_warned_about(rule: MatchRule | None) -> None:
    assert warned(request(), request(), rule) == []


def test_under_a_narrower_rule_only_what_it_keys_on_has_to_agree() -> None:
    assert warned(request(temperature=0.9), request(temperature=0.1), NARROW) == []
    (message,) = warned(request(temperature=0.9), request(temperature=0.1), None)
    assert "its stored request differs (body.temperature" in message


def test_under_a_narrower_rule_a_keyed_difference_is_named() -> None:
    stored = request().replace(body={"model": "other", "temperature": 0.9})
    (message,) = warned(stored, request(), NARROW)
    assert "its stored request differs (body.model" in message


# --- one order for live keying and re-keying ----------------------------------------------

#: 22 hex digits, then `0` and ten digits before a decimal point: 33 characters, no client id;
#: re-rendered (`0123….123456` → `123….12346`) the run is 32 hex digits, a client id
MADE_AN_ID_BY_THE_DECIMAL = "abcdef0123456789abcdef01234567891.123456"


@pytest.mark.parametrize(
    "text",
    [
        MADE_AN_ID_BY_THE_DECIMAL,
        "call_0123456789abcdef0123456789abcdef at 2.7182818",  # an id and a decimal
        "-0.0000004 and 99.999999 and 9c1185a5-c5e9-4e6e-8a1a-2f4c3e9b7d00",
        "plain text",
    ],
)
def test_a_live_key_and_the_key_of_its_stored_form_agree(tmp_path: Path, text: str) -> None:
    """What `rehash` and `verify` compute from a file (`Rules.renormalised_body`) is the
    hash the live request was stored under."""
    (tmp_path / "pyproject.toml").write_text("[tool.hashreplay]\n")
    rules = Rules(load_config(tmp_path, env={}, mode="replay"))
    keyer = rules.engine.keyer
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": text}]})
    incoming = IncomingRequest(
        "POST", "http://127.0.0.1:9/v1/chat", [("content-type", "application/json")], body
    )
    stored, _, _ = keyer.request(incoming, None)
    live_hash = keyer.key_of(stored, TEST)[0]
    again = stored.replace(body=normalise_request_body(stored.body, keyer.rules))
    assert again.body == stored.body
    assert keyer.key_of(again, TEST)[0] == live_hash
