"""The unconsumed-recordings warning shows file names as `hashreplay show` shows recorded
text: a control character in a name (an escape sequence, a newline) is printed escaped,
never sent raw to the terminal."""

from __future__ import annotations

import json

import pytest

from hashreplay.core.config import load_config
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.session import Session

pytest_plugins = ["pytester"]

TEST = "def test_it():\n    pass\n"
#: an OSC sequence that sets the terminal's title, a colour change, a fake new line
HOSTILE = "\x1b]0;owned\x07\x1b[31mred\nFAKE LINE"


def test_a_file_name_with_escapes_is_shown_escaped(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\naddopts = "-p no:hypothesispytest -p no:randomly"\n'
        "[tool.hashreplay]\n"
    )
    pytester.makepyfile(test_app=TEST)
    session = Session(load_config(pytester.path, env={}, mode="record"))
    prep = session.prepare(
        IncomingRequest("POST", "http://127.0.0.1:9/v1/chat", [], b'{"q": "never asked"}'),
        test_id="test_app.py::test_it",
    )
    path = session.record(prep, LiveExchange(200, [("content-type", "application/json")], [b"{}"]))
    assert path is not None
    hostile = path.with_name(f"{HOSTILE}.json")
    path.rename(hostile)
    assert json.loads(hostile.read_text())["test_id"] == "test_app.py::test_it"

    result = pytester.runpytest_subprocess("-p", "hashreplay", "-W", "always")
    out = result.stdout.str() + result.stderr.str()
    assert "left 1 recorded response(s) unused" in out, out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]0;owned\\x07\\x1b[31mred\\nFAKE LINE.json" in out
    assert "\nFAKE LINE" not in out
    assert hostile.exists()  # shown escaped, the file itself left as it is
