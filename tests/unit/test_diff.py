"""`hashreplay.core.diff.first_difference`: the first differing field of two requests (§6)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hashreplay.core.diff import Difference, first_difference


def chat(*contents: str) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "user", "content": c} for c in contents],
    }


def test_nested_change_reports_path_and_both_values() -> None:
    recorded = {"body": chat("a", "b", "echo:hi")}
    incoming = {"body": chat("a", "b", "echo:bye")}
    diff = first_difference(recorded, incoming)
    assert diff == Difference("body.messages[2].content", "echo:hi", "echo:bye", "value")


def test_design_example_text() -> None:
    diff = first_difference(chat("a", "b", "echo:hi"), chat("a", "b", "echo:bye"), "body")
    assert diff is not None
    assert diff.describe() == "body.messages[2].content: recorded 'echo:hi', incoming 'echo:bye'"


@pytest.mark.parametrize(
    "value",
    [None, 1, 1.5, "x", True, [], {}, [1, {"a": [None]}], {"b": {"c": [1, 2]}}],
)
def test_equal_is_none(value: Any) -> None:
    assert first_difference(value, copy.deepcopy(value)) is None


def test_int_and_equal_float_are_equal() -> None:
    assert first_difference({"t": 1}, {"t": 1.0}) is None


def test_dict_keys_in_sorted_order() -> None:
    recorded = {"z": 1, "b": 1, "m": 1, "a": 1}
    incoming = {"z": 2, "m": 2, "b": 2, "a": 1}
    diff = first_difference(recorded, incoming)
    assert diff is not None
    assert (diff.path, diff.recorded, diff.incoming) == ("b", 1, 2)


def test_list_by_index() -> None:
    diff = first_difference([1, 2, 3, 4], [1, 2, 9, 8])
    assert diff == Difference("[2]", 3, 9, "value")


def test_extra_list_element_is_added() -> None:
    diff = first_difference({"l": [1]}, {"l": [1, {"x": 2}]})
    assert diff == Difference("l[1]", None, {"x": 2}, "added")
    assert diff.describe() == "l[1]: not in the recording, incoming {'x': 2}"


def test_missing_list_element() -> None:
    diff = first_difference({"l": [1, 2]}, {"l": [1]})
    assert diff == Difference("l[1]", 2, None, "missing")
    assert diff.describe() == "l[1]: recorded 2, incoming has no such field"


def test_missing_key() -> None:
    diff = first_difference({"a": 1, "stop": ["\n"]}, {"a": 1})
    assert diff == Difference("stop", ["\n"], None, "missing")
    assert diff.describe() == "stop: recorded ['\\n'], incoming has no such field"


def test_added_key() -> None:
    diff = first_difference({"a": 1}, {"a": 1, "seed": 7})
    assert diff == Difference("seed", None, 7, "added")
    assert diff.describe() == "seed: not in the recording, incoming 7"


def test_none_value_is_not_a_missing_key() -> None:
    diff = first_difference({"a": None}, {})
    assert diff is not None
    assert diff.kind == "missing"
    assert first_difference({"a": None}, {"a": None}) is None


@pytest.mark.parametrize(
    ("recorded", "incoming", "text"),
    [
        (1, "1", "x: recorded number 1, incoming string '1'"),
        ({"a": 1}, [1], "x: recorded object {'a': 1}, incoming array [1]"),
        (True, 1, "x: recorded boolean True, incoming number 1"),
        (None, 0, "x: recorded null None, incoming number 0"),
    ],
)
def test_type_change(recorded: Any, incoming: Any, text: str) -> None:
    diff = first_difference({"x": recorded}, {"x": incoming})
    assert diff is not None
    assert diff.kind == "type"
    assert (diff.path, diff.recorded, diff.incoming) == ("x", recorded, incoming)
    assert diff.describe() == text


def test_top_level_value_path() -> None:
    diff = first_difference("a", "b")
    assert diff == Difference("(value)", "a", "b", "value")


def test_value_text_for_numbers() -> None:
    diff = first_difference({"temperature": 0.2}, {"temperature": 0.7}, "body")
    assert diff is not None
    assert diff.describe() == "body.temperature: recorded 0.2, incoming 0.7"


def test_long_strings_shortened_around_first_difference() -> None:
    prefix = "You are a helpful assistant. " * 20
    recorded = prefix + "The secret word is APPLE. " + "Thanks. " * 20
    incoming = prefix + "The secret word is BANANA. " + "Thanks. " * 20
    diff = first_difference({"content": recorded}, {"content": incoming})
    assert diff is not None
    text = diff.describe()
    rec_part, inc_part = text.removeprefix("content: recorded ").split(", incoming ")
    assert "APPLE" in rec_part
    assert "BANANA" in inc_part
    # Cut at both ends, marked by an ellipsis; much shorter than the strings.
    for part in (rec_part, inc_part):
        assert part.startswith("…")
        assert part.endswith("…")
        assert len(part) < 120
    assert len(text) < 300


def test_long_strings_differing_at_the_start_not_cut_at_start() -> None:
    recorded = "A" + "x" * 500
    incoming = "B" + "x" * 500
    diff = first_difference(recorded, incoming)
    assert diff is not None
    text = diff.describe()
    assert "recorded 'Ax" in text
    assert "incoming 'Bx" in text
    assert text.count("…") == 2


def test_long_non_string_values_shortened() -> None:
    diff = first_difference({"a": 1}, {"a": 1, "tools": [{"name": "t" * 200}]})
    assert diff is not None
    text = diff.describe()
    assert text.endswith("…")
    assert len(text) < 150
