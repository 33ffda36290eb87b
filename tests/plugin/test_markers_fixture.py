"""The `hashreplay` marker speaks the configuration's words (`record_timing`, `pace`,
`unconsumed`, `mode`; `timing` an alias) and refuses others; the `hashreplay` fixture offers
what a test needs from the module it shadows (`mode`, `test_id`, `conversation`)."""

from __future__ import annotations

import json

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.plugin.test_plugin import PYPROJECT

pytest_plugins = ["pytester"]

TESTS = """
import os
import httpx2, pytest
from hashreplay import Mode

URL = os.environ["FAKE_URL"] + "/v1/chat/completions"

def ask(text):
    return httpx2.post(URL, json={"model": "m", "messages": [{"role": "user", "content": text}]})

@pytest.mark.hashreplay(record_timing=True)
def test_config_name():
    assert ask("a").status_code == 200

@pytest.mark.hashreplay(timing=True)
def test_alias():
    assert ask("b").status_code == 200

def test_untimed():
    assert ask("c").status_code == 200

def test_fixture(hashreplay, request):
    assert hashreplay.test_id == request.node.nodeid
    assert hashreplay.mode is Mode(os.environ["EXPECT_MODE"])
    with hashreplay.conversation("agent-a"):
        assert ask("d").status_code == 200
    assert "test_fixture" in repr(hashreplay)

@pytest.mark.hashreplay("live")
def test_marked_mode(hashreplay):
    assert hashreplay.mode is Mode.LIVE
"""


@pytest.fixture
def project(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_app=TESTS)
    return pytester


def test_record_timing_and_its_alias_and_the_fixture(
    project: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXPECT_MODE", "record")
    project.runpytest("--inference-mode=record").assert_outcomes(passed=5)
    files = {
        data["test_id"]: data
        for data in (json.loads(p.read_text()) for p in project.path.rglob("recordings/*.json"))
    }
    assert "timing" in files["test_app.py::test_config_name"]["response"]
    assert "timing" in files["test_app.py::test_alias"]["response"]
    assert "timing" not in files["test_app.py::test_untimed"]["response"]
    assert files["test_app.py::test_fixture"]["request"]["conversation"] == "agent-a"

    upstream.stop()
    monkeypatch.setenv("EXPECT_MODE", "replay")
    project.runpytest("-k", "not marked_mode").assert_outcomes(passed=4, deselected=1)


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        (
            "record_timming=True",
            "*@pytest.mark.hashreplay has no keyword 'record_timming'; it takes mode=, "
            "record_timing=, pace=, unconsumed=, max_age=, stale=, ignore=, match_on=, repeat=, "
            "block_network=, allowed_hosts= (timing= is an alias of record_timing=)",
        ),
        (
            "timing=True, record_timing=False",
            "*@pytest.mark.hashreplay: record_timing is given twice*",
        ),
        ('"live", mode="record"', "*@pytest.mark.hashreplay: mode is given twice*"),
        (
            'record_timing="yes"',
            "*@pytest.mark.hashreplay record_timing='yes' must be True or False",
        ),
        ('"live", "record"', "*takes one positional argument (the mode), got 2"),
    ],
    ids=["unknown", "alias-and-name", "mode-twice", "not-a-bool", "two-positional"],
)
def test_a_marker_the_plugin_cannot_read_is_an_error_naming_it(
    project: pytest.Pytester, marker: str, message: str
) -> None:
    project.makepyfile(
        test_bad=f"import pytest\n\n@pytest.mark.hashreplay({marker})\ndef test_x():\n    pass\n"
    )
    result = project.runpytest("test_bad.py")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([message])
