"""`hashreplay.core.modes.Mode`: the four modes (docs/design.md §1)."""

from __future__ import annotations

import pytest

from hashreplay.core.errors import ConfigError
from hashreplay.core.modes import Mode

MODES_LISTED = "replay, record-if-missing, record, live"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("replay", Mode.REPLAY),
        ("record-if-missing", Mode.RECORD_IF_MISSING),
        ("record", Mode.RECORD),
        ("live", Mode.LIVE),
        ("  record-if-missing ", Mode.RECORD_IF_MISSING),
        ("\trecord\n", Mode.RECORD),
        (Mode.RECORD, Mode.RECORD),
    ],
)
def test_parse_accepts_the_four_modes(text: str | Mode, expected: Mode) -> None:
    assert Mode.parse(text) is expected


def test_values_are_the_contract_strings() -> None:
    assert [m.value for m in Mode] == ["replay", "record-if-missing", "record", "live"]
    assert str(Mode.RECORD_IF_MISSING) == "record-if-missing"


@pytest.mark.parametrize(
    "value",
    ["", "recording", "record_if_missing", "replay-only", "off", "none", 1, None, True],
)
def test_parse_rejects_others_listing_all_four(value: object) -> None:
    with pytest.raises(ConfigError) as info:
        Mode.parse(value)
    message = str(info.value)
    assert MODES_LISTED in message
    assert repr(value) in message


@pytest.mark.parametrize("value", ["Record", "REPLAY", " Record-If-Missing\n", "Live"])
def test_parse_refuses_another_case_and_names_the_spelling(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        Mode.parse(value, source="INFERENCE_MODE")
    message = str(info.value)
    assert f"invalid INFERENCE_MODE {value!r}: expected one of {MODES_LISTED}" in message
    assert f"(modes are lower-case: {value.strip().lower()!r})" in message


def test_parse_error_names_its_source() -> None:
    with pytest.raises(ConfigError, match="INFERENCE_MODE 'x'"):
        Mode.parse("x", source="INFERENCE_MODE")


@pytest.mark.parametrize(
    ("mode", "may_replay", "may_record", "intercepts"),
    [
        (Mode.REPLAY, True, False, True),
        (Mode.RECORD_IF_MISSING, True, True, True),
        (Mode.RECORD, False, True, True),
        (Mode.LIVE, False, False, False),
    ],
)
def test_mode_properties(mode: Mode, may_replay: bool, may_record: bool, intercepts: bool) -> None:
    assert mode.may_replay is may_replay
    assert mode.may_record is may_record
    assert mode.intercepts is intercepts
