"""`scrub` patterns (`core/scrub.py`, docs/design.md §14): linear-time matching, refusal at
config time of what RE2 cannot run, and replacements read as `re` reads them."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from hashreplay.core.config import load_config
from hashreplay.core.errors import ConfigError
from hashreplay.core.scrub import ScrubPattern
from hashreplay.engine.hooks import Hooks


def test_a_backtracking_pattern_costs_no_more_than_any_other() -> None:
    """`(a+)+b` on 24 `a`s and no `b` backtracks for seconds under `re`; RE2 is linear."""
    hooks = Hooks((("(a+)+b", "X"),))
    text = "a" * 24 + "c"
    started = time.perf_counter()
    assert hooks._scrubbed({"body": [text] * 3}) == {"body": [text] * 3}
    assert time.perf_counter() - started < 0.2


def _write(root: Path, pattern: str, replace: str = "x") -> None:
    table = f"[tool.hashreplay]\nscrub = [{{pattern = '{pattern}', replace = '{replace}'}}]\n"
    (root / "pyproject.toml").write_text(table, encoding="utf-8")


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"(a)\1", r"invalid escape sequence: \1"),  # a backreference
        ("sess(?=-)", "invalid perl operator: (?="),  # a lookahead
        ("(?<!x)key", "invalid perl operator: (?<"),  # a lookbehind
        ("a{1001}", "invalid repetition size: {1001}"),
        ("user-(", "missing ): user-("),
    ],
)
def test_a_pattern_re2_cannot_run_is_refused_when_the_config_is_read(
    tmp_path: Path, pattern: str, why: str
) -> None:
    _write(tmp_path, pattern)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={})
    message = str(info.value)
    assert f"`scrub`: entry 1: pattern {pattern!r} (replace 'x') does not compile under RE2" in (
        message
    )
    assert why in message
    assert "no backreferences or lookarounds" in message


def test_a_replacement_naming_a_missing_group_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, "sess-([0-9]+)", r"sess-\2")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={})
    replace = repr("sess-\\2")
    assert (
        f"pattern 'sess-([0-9]+)' (replace {replace}) has a replacement that does not fit its "
        "1 group(s): invalid group reference 2"
    ) in str(info.value)


@pytest.mark.parametrize(
    ("pattern", "replace", "text"),
    [
        ("sess-([0-9]+)", r"sess-N\1", "é sess-12 ü sess-3"),
        ("(?P<user>[a-z]+)@example", r"\g<user>@[host]", "mail bob@example and al@example"),
        ("x", "é—😀", "axbxc"),
        ("tok-[0-9]+", r"[\n]\\", "tok-1 tok-22"),
        ("a(b)?c", r"<\1>", "ac abc"),
        ("é+", "e", "cafééé au lait"),
        ("nothing", "y", "no match here"),
    ],
)
def test_replacements_read_as_re_reads_them(pattern: str, replace: str, text: str) -> None:
    assert ScrubPattern(pattern, replace).sub(text) == re.sub(pattern, replace, text)


def test_text_with_a_lone_surrogate_is_scrubbed_and_kept_byte_for_byte() -> None:
    scrub = ScrubPattern("sess-[0-9]+", "sess-N")
    assert scrub.sub("a\ud83d sess-42 b\udc00") == "a\ud83d sess-N b\udc00"


def test_a_replacement_holding_the_stand_in_characters_stays_literal() -> None:
    """The group markers `_template` uses are chosen among characters the replacement lacks."""
    mark = chr(0xF0000)
    assert ScrubPattern("(k)-([0-9])", mark + r"\2\1").sub("k-7") == mark + "7k"
