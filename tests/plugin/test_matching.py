"""Matching that fits real code (docs/design.md §14): `ignore` paths and `match_on` from the
config and the marker, the configuration in charge of the files its rule made (a rule
removed: a miss naming `hashreplay rehash`), `repeat`, and the errors of each setting, all
through pytest runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.plugin.test_plugin import PYPROJECT

pytest_plugins = ["pytester"]

TESTS = """
import os
import httpx2, pytest

URL = os.environ["FAKE_URL"] + "/v1/chat/completions"
DRIFT = os.environ.get("DRIFT") == "1"

def ask(text, **extra):
    content = [{"type": "text", "text": text}]
    if not DRIFT:
        content[0]["cache_control"] = {"type": "ephemeral"}
    body = {"model": "m", "messages": [{"role": "user", "content": content}]}
    body["max_tokens"] = 99 if DRIFT else 10
    body.update(extra)
    ts = "2" if DRIFT else "1"
    response = httpx2.post(URL + "?ts=" + ts, json=body)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]

def test_drifting():
    assert ask("hi") == "echo: hi"
"""


def recordings(root: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(root.rglob("recordings/*.json"))]


@pytest.fixture
def project(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    monkeypatch.delenv("DRIFT", raising=False)
    return pytester


IGNORE = """ignore = ["body.max_tokens", "body.messages[*].content[*].cache_control", "query.ts"]
"""


def test_ignored_paths_drift_and_replay_while_the_project_keeps_the_rule(
    project: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makepyprojecttoml(PYPROJECT + IGNORE)
    project.makepyfile(test_app=TESTS)
    project.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    (data,) = recordings(project.path)
    assert data["match"] == {
        "from": "project",
        "ignore": [
            "body.max_tokens",
            "body.messages[*].content[*].cache_control",
            "query.ts",
        ],
        "match_on": ["method", "endpoint", "body"],
    }
    # the stored request is whole: only the key leaves the paths out
    assert data["request"]["body"]["max_tokens"] == 10  # type: ignore[index]

    upstream.stop()
    monkeypatch.setenv("DRIFT", "1")
    project.runpytest().assert_outcomes(passed=1)


def test_the_project_rule_removed_a_changed_field_misses_and_rehash_makes_it_strict(
    project: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The configuration stays in charge: with `ignore` gone, the file made under it no
    longer answers a request that differs in an ignored field; the miss says the rule
    changed and to run `hashreplay rehash`, which re-keys the file strict again."""
    project.makepyprojecttoml(PYPROJECT + IGNORE)
    project.makepyfile(test_app=TESTS)
    project.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    upstream.stop()
    project.makepyprojecttoml(PYPROJECT)

    monkeypatch.setenv("DRIFT", "1")
    drifted = project.runpytest()
    drifted.assert_outcomes(failed=1)
    out = drifted.stdout.str()
    assert "  differs:   endpoint: recorded '/v1/chat/completions?ts=1', incoming" in out
    assert (
        "  it matches this request under the project rule it was recorded with (ignore = "
        "['body.max_tokens', 'body.messages[*].content[*].cache_control', 'query.ts'], "
        "match_on = ['method', 'endpoint', 'body']), but the rule for this test is now the "
        "default: run `hashreplay rehash` to re-key the store to the current rule, then "
        "record what differs"
    ) in out
    monkeypatch.delenv("DRIFT")
    same = project.runpytest()  # the very request recorded: named by the rule now gone
    same.assert_outcomes(failed=1)
    same.stdout.fnmatch_lines(["*named by other rules (or an older key_version): run `hashr*"])

    rehashed = subprocess.run(
        [sys.executable, "-m", "hashreplay", "rehash"],
        cwd=project.path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert rehashed.returncode == 0, rehashed.stderr
    assert "Summary: 1/1 files re-keyed" in rehashed.stdout
    (data,) = recordings(project.path)
    assert "match" not in data  # strict again
    project.runpytest().assert_outcomes(passed=1)
    monkeypatch.setenv("DRIFT", "1")
    project.runpytest().assert_outcomes(failed=1)


def test_without_the_rule_a_drift_is_a_miss_and_strict_files_have_no_match_field(
    project: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makepyprojecttoml(PYPROJECT)
    project.makepyfile(test_app=TESTS)
    project.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    (data,) = recordings(project.path)
    assert "match" not in data
    upstream.stop()
    monkeypatch.setenv("DRIFT", "1")
    result = project.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no recording for POST*", "*differs:*"])


VCR_LIKE = """
import os
import httpx2

URL = os.environ["FAKE_URL"] + "/v1/chat/completions"
SUFFIX = os.environ.get("SUFFIX", "")

def ask(text):
    body = {"model": "m", "messages": [{"role": "user", "content": text + SUFFIX}]}
    return httpx2.post(URL, json=body).json()["choices"][0]["message"]["content"]

def test_in_order():
    assert ask("first") == "echo: first"
    assert ask("second") == "echo: second"
"""


def test_match_on_method_and_endpoint_answers_in_recorded_order(
    project: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makepyprojecttoml(PYPROJECT + 'match_on = ["method", "endpoint"]\n')
    project.makepyfile(test_app=VCR_LIKE)
    project.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    (data,) = recordings(project.path)  # one file: both calls share the key
    assert data["match"] == {"from": "project", "ignore": [], "match_on": ["method", "endpoint"]}
    assert len(data["later_responses"]) == 1  # type: ignore[arg-type]

    upstream.stop()
    # the bodies changed, yet the answers come back in the order they were recorded
    monkeypatch.setenv("SUFFIX", " (changed)")
    project.makepyfile(
        test_app=VCR_LIKE.replace('"echo: first"', '"echo: first"  # changed').replace(
            'ask("second") == "echo: second"', 'ask("other") == "echo: second"'
        )
    )
    project.runpytest().assert_outcomes(passed=1)
    # the project's rule, not the file, decides: without it the changed bodies miss
    project.makepyprojecttoml(PYPROJECT)
    project.runpytest().assert_outcomes(failed=1)


POLLING = """
import os
import httpx2, pytest

URL = os.environ["FAKE_URL"] + "/echo"
CALLS = int(os.environ.get("CALLS", "1"))

def test_polls():
    for _ in range(CALLS):
        assert httpx2.post(URL, json={"job": 1}).status_code == 200

@pytest.mark.hashreplay(repeat="last")
def test_polls_marked():
    for _ in range(CALLS):
        assert httpx2.post(URL, json={"job": 2}).status_code == 200
"""


def test_repeat_last_answers_past_the_end_and_strict_misses(
    project: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makepyprojecttoml(PYPROJECT)
    project.makepyfile(test_app=POLLING)
    project.runpytest("--inference-mode=record").assert_outcomes(passed=2)
    upstream.stop()
    monkeypatch.setenv("CALLS", "3")
    result = project.runpytest()  # strict by default; the marker says last
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_polls *", "*recorded once in this test; call 2*"])
    project.makepyprojecttoml(PYPROJECT + 'repeat = "last"\n')
    project.runpytest().assert_outcomes(passed=2)


MARKED = """
import os
import httpx2, pytest

URL = os.environ["FAKE_URL"] + "/v1/chat/completions"
TOKENS = int(os.environ.get("TOKENS", "10"))

def ask():
    body = {"model": "m", "max_tokens": TOKENS, "messages": [{"role": "user", "content": "x"}]}
    return httpx2.post(URL, json=body).status_code

@pytest.mark.hashreplay(ignore=["body.max_tokens"])
def test_marked():
    assert ask() == 200

def test_unmarked():
    assert ask() == 200
"""


def test_the_marker_narrows_one_test(
    project: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makepyprojecttoml(PYPROJECT)
    project.makepyfile(test_app=MARKED)
    project.runpytest("--inference-mode=record").assert_outcomes(passed=2)
    upstream.stop()
    monkeypatch.setenv("TOKENS", "20")
    result = project.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*FAILED*test_unmarked*"])


@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        (
            'ignore=["body.messages[x]"]',
            "@pytest.mark.hashreplay ignore: cannot parse 'body.messages[x]' at '[x]'; use `body.<key>`",
        ),
        (
            'ignore="body.max_tokens"',
            "@pytest.mark.hashreplay ignore: 'body.max_tokens' must be a list of request paths",
        ),
        (
            'ignore=["headers.x"]',
            "ignore: 'headers.x' does not start with `body.` or `query.`",
        ),
        (
            'match_on=["method", "uri"]',
            "@pytest.mark.hashreplay match_on: unknown request part 'uri'; the parts are "
            '"method", "endpoint", "path", "query", "body"',
        ),
        (
            'repeat="forever"',
            '@pytest.mark.hashreplay repeat: \'forever\' is not valid; use one of "strict", "last"',
        ),
    ],
)
def test_a_bad_marker_setting_fails_its_test_naming_it(
    project: pytest.Pytester, marker: str, expected: str
) -> None:
    project.makepyprojecttoml(PYPROJECT)
    project.makepyfile(
        test_app=f"import pytest\n\n@pytest.mark.hashreplay({marker})\ndef test_x():\n    pass\n"
    )
    result = project.runpytest()
    assert result.ret != 0
    assert expected in result.stdout.str()


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ('ignore = ["body..x"]', "`ignore`: cannot parse 'body..x' at '..x'; use `body.<key>`"),
        ('ignore = ["query.a.b"]', "`ignore`: 'query.a.b' must name one query parameter"),
        ('match_on = ["method", "host"]', "`match_on`: unknown request part 'host'"),
        ('repeat = "always"', '`repeat`: \'always\' is not valid; use one of "strict", "last"'),
    ],
)
def test_a_bad_config_setting_is_named(
    project: pytest.Pytester, setting: str, expected: str
) -> None:
    project.makepyprojecttoml(PYPROJECT + setting + "\n")
    project.makepyfile(test_app="def test_x():\n    pass\n")
    result = project.runpytest()
    assert result.ret != 0
    output = result.stdout.str() + result.stderr.str()
    assert "invalid [tool.hashreplay]" in output
    assert expected in output


def test_a_rule_change_misses_naming_rehash_which_re_keys_the_store(
    project: pytest.Pytester,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from hashreplay.cli import main

    project.makepyprojecttoml(PYPROJECT)
    project.makepyfile(test_app=TESTS)
    project.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    (strict,) = project.path.rglob("recordings/*.json")
    strict_bytes = strict.read_bytes()
    upstream.stop()
    project.makepyprojecttoml(PYPROJECT + IGNORE)
    monkeypatch.setenv("DRIFT", "1")
    missed = project.runpytest()
    missed.assert_outcomes(failed=1)
    missed.stdout.fnmatch_lines(["*named by other rules*run `hashreplay rehash`*"])

    assert main(["rehash", "--root", str(project.path)]) == 0
    assert "1/1 files re-keyed" in capsys.readouterr().out
    (narrowed,) = project.path.rglob("recordings/*.json")
    assert narrowed.name != strict.name
    assert json.loads(narrowed.read_text())["match"]["ignore"] == [
        "body.max_tokens",
        "body.messages[*].content[*].cache_control",
        "query.ts",
    ]
    project.runpytest().assert_outcomes(passed=1)
    # a second rehash changes nothing; without the setting the file is strict again, as
    # it was recorded, and the drifted request is a miss
    assert main(["rehash", "--root", str(project.path)]) == 0
    assert "0/1 files re-keyed" in capsys.readouterr().out
    project.makepyprojecttoml(PYPROJECT)
    assert main(["rehash", "--root", str(project.path)]) == 0
    assert "1/1 files re-keyed" in capsys.readouterr().out
    (again,) = project.path.rglob("recordings/*.json")
    assert (again.name, again.read_bytes()) == (strict.name, strict_bytes)
    project.runpytest().assert_outcomes(failed=1)
    monkeypatch.delenv("DRIFT")
    project.runpytest().assert_outcomes(passed=1)


INDEXED = """
import os
import httpx2

URL = os.environ["FAKE_URL"] + "/v1/chat/completions"

def test_indexed():
    messages = [
        {"role": "system", "content": os.environ.get("FIRST", "be brief")},
        {"role": "user", "content": "hi"},
        {"role": "user", "content": os.environ.get("LAST", "sent at 10:00")},
    ]
    assert httpx2.post(URL, json={"model": "m", "messages": messages}).status_code == 200
"""


@pytest.mark.parametrize(
    ("path", "ignored", "kept"),
    [("body.messages[-1].content", "LAST", "FIRST"), ("body.messages[0].content", "FIRST", "LAST")],
)
def test_an_index_in_an_ignore_path_leaves_out_that_element_only(
    project: pytest.Pytester,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    ignored: str,
    kept: str,
) -> None:
    project.makepyprojecttoml(PYPROJECT + f'ignore = ["{path}"]\n')
    project.makepyfile(test_app=INDEXED)
    project.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    (data,) = recordings(project.path)
    assert data["match"] == {
        "from": "project",
        "ignore": [path],
        "match_on": ["method", "endpoint", "body"],
    }
    upstream.stop()
    monkeypatch.setenv(ignored, "changed")  # the element the path names: still a hit
    project.runpytest().assert_outcomes(passed=1)
    monkeypatch.setenv(kept, "changed")  # any other element still counts
    missed = project.runpytest()
    missed.assert_outcomes(failed=1)
    missed.stdout.fnmatch_lines(["*no recording for POST*"])
