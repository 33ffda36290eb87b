"""`hashreplay import vcr` keeps the cassette's matching (docs/design.md §14): a cassette
vcrpy itself recorded replays after import with no configuration even when the test's
request drifts (a new `max_tokens`, reordered content parts), as it did under vcrpy; a
`vcr_config` fixture's `match_on` is read without importing the conftest; `--match-on body`
makes the import strict."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from hashreplay.cli import main
from tests.fakes.upstream import FakeUpstream
from tests.imports.test_import_vcr_e2e import PYPROJECT

pytest_plugins = ["pytester"]

APP_TESTS = """
import os
import openai
import pytest

DRIFT = os.environ.get("DRIFT") == "1"

def client():
    return openai.OpenAI(base_url=os.environ["FAKE_URL"] + "/v1", api_key="sk-test-000000000000",
                         max_retries=0)

def chat(text):
    parts = [{"type": "text", "text": text}, {"type": "text", "text": "please"}]
    r = client().chat.completions.create(
        model="gpt-fake-1",
        messages=[{"role": "user", "content": parts[::-1] if DRIFT else parts}],
        max_tokens=64 if DRIFT else 16,
    )
    return r.choices[0].message.content

@pytest.mark.vcr
def test_two_calls():
    print("TEXT:", chat("hello"), "|", chat("bye"))
"""


def _texts(result: pytest.RunResult) -> list[str]:
    return [line[line.index("TEXT:") :] for line in result.outlines if "TEXT:" in line]


@pytest.fixture
def recorded(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    for name in ("INFERENCE_MODE", "HASHREPLAY_ROOT", "DRIFT"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_app.py").write_text(APP_TESTS)
    return pytester


def _import(root: str, *options: str) -> int:
    return main(["import", "vcr", "--root", root, *options, f"{root}/tests"])


def test_an_imported_cassette_replays_a_drifted_request_as_vcrpy_did(
    recorded: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    vcr_run = recorded.runpytest("-p", "no:hashreplay", "--record-mode=once", "-s")
    vcr_run.assert_outcomes(passed=1)
    upstream.stop()
    monkeypatch.setenv("DRIFT", "1")
    # vcrpy itself replays the drifted requests (its default: method + URI)
    recorded.runpytest("-p", "no:hashreplay", "--record-mode=none", "-s").assert_outcomes(passed=1)

    assert _import(str(recorded.path)) == 0
    (file,) = (recorded.path / "tests" / "recordings").glob("*.json")
    data = json.loads(file.read_text())
    assert data["match"] == {"from": "import", "ignore": [], "match_on": ["method", "endpoint"]}
    assert data["test_id"] == "tests/test_app.py::test_two_calls"

    # no [tool.hashreplay] matching settings at all: the file says how it matches
    replayed = recorded.runpytest("-p", "hashreplay", "-p", "no:recording", "-s")
    replayed.assert_outcomes(passed=1)
    assert _texts(replayed) == _texts(vcr_run) == ["TEXT: echo: helloplease | echo: byeplease"]

    # `--match-on body` makes the import strict: the drift is a miss naming the field
    shutil.rmtree(recorded.path / "tests" / "recordings")
    assert _import(str(recorded.path), "--match-on", "body") == 0
    files = list((recorded.path / "tests" / "recordings").glob("*.json"))
    assert len(files) == 2
    assert all("match" not in json.loads(f.read_text()) for f in files)
    strict = recorded.runpytest("-p", "hashreplay", "-p", "no:recording")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*no recording for POST*", "*differs:   body.m*"])
    monkeypatch.delenv("DRIFT")
    recorded.runpytest("-p", "hashreplay", "-p", "no:recording").assert_outcomes(passed=1)


CONFTEST = """
import pytest

@pytest.fixture(scope="module")
def vcr_config():
    return {"filter_headers": ["authorization"], "match_on": ["method", "path", "body"]}
"""


def test_the_match_on_of_vcr_config_is_kept_without_importing_the_conftest(
    recorded: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded.runpytest("-p", "no:hashreplay", "--record-mode=once").assert_outcomes(passed=1)
    # importing the conftest would fail: it is read with `ast` only
    (recorded.path / "tests" / "conftest.py").write_text(CONFTEST + "\nraise SystemExit(3)\n")
    assert _import(str(recorded.path)) == 0
    files = list((recorded.path / "tests" / "recordings").glob("*.json"))
    assert len(files) == 2  # the bodies differ, and vcrpy matched on them
    for f in files:
        assert json.loads(f.read_text())["match"] == {
            "from": "import",
            "ignore": [],
            "match_on": ["method", "path", "body"],
        }
    (recorded.path / "tests" / "conftest.py").write_text(CONFTEST)
    upstream.stop()
    replayed = recorded.runpytest("-p", "hashreplay", "-p", "no:recording")
    replayed.assert_outcomes(passed=1)
    monkeypatch.setenv("DRIFT", "1")  # as under vcrpy, a changed body is a miss
    recorded.runpytest("-p", "hashreplay", "-p", "no:recording").assert_outcomes(failed=1)


def test_an_unknown_match_on_part_is_named(
    recorded: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    (recorded.path / "tests" / "cassettes").mkdir()
    assert _import(str(recorded.path), "--match-on", "bodyy") != 0
    err = capsys.readouterr().err
    assert "--match-on: unknown request part 'bodyy'; the parts are" in err


TOOL_TESTS = """
import os
import uuid
import openai
import pytest

def ask(text):
    client = openai.OpenAI(base_url=os.environ["FAKE_URL"] + "/v1", api_key="sk-test-000000000000",
                           max_retries=0)
    call_id = "call_" + uuid.uuid4().hex  # a fresh client-generated id on every run
    messages = [
        {"role": "user", "content": text},
        {"role": "assistant", "tool_calls": [{"id": call_id, "type": "function",
            "function": {"name": "lookup", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "42"},
    ]
    r = client.chat.completions.create(model="gpt-fake-1", messages=messages, max_tokens=8,
                                       metadata={"request": str(uuid.uuid4())})
    return r.choices[0].message.content

@pytest.mark.vcr
def test_tool_round():
    print("TEXT:", ask("first"), "|", ask("first"), "|", ask("second"))
"""


def test_a_reimport_after_rehash_is_unchanged_byte_for_byte(
    recorded: pytest.Pytester, upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    """Import and rehash agree on every key input (client-generated ids numbered alike,
    the file's `match`, the project's `ignore`): importing again after a rehash finds every
    file unchanged and git sees no difference."""
    root = recorded.path
    (root / "pyproject.toml").write_text(PYPROJECT + 'ignore = ["body.max_tokens"]\n')
    for where, conftest in (("loose", None), ("strict", CONFTEST)):
        directory = root / "tests" / where
        directory.mkdir()
        (directory / f"test_{where}.py").write_text(TOOL_TESTS)
        if conftest is not None:
            (directory / "conftest.py").write_text(conftest)
    (root / "tests" / "test_app.py").unlink()
    recorded.runpytest("-p", "no:hashreplay", "--record-mode=once").assert_outcomes(passed=2)

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
        return done.stdout

    git("init", "-q")
    git(
        "-c",
        "user.email=t@example.com",
        "-c",
        "user.name=t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "start",
    )
    assert _import(str(root)) == 0
    files = sorted((root / "tests").rglob("recordings/*.json"))
    assert len(files) == 3  # loose: one for the endpoint, a sequence of 3; strict: one per body
    stored = "".join(f.read_text() for f in files)
    assert '"match_on": [\n      "method",\n      "path",\n      "body"' in stored
    assert '"call_<id:1>"' in stored  # client-generated ids numbered, the same in every file
    assert re.search("[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-", stored) is None
    git("add", "-A")
    git("-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q", "-m", "imported")
    capsys.readouterr()

    assert main(["rehash", "--root", str(root)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "Summary: 0/3 files re-keyed"
    assert git("status", "--porcelain", "--", "tests") == ""

    assert _import(str(root)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == (
        "Summary: 6 imported from 2 files into 3 recordings (0 new, 3 unchanged, "
        "0 overwritten, 0 kept), 0 blobs, 0 skipped"
    )
    assert git("status", "--porcelain", "--", "tests") == ""
    assert git("diff", "HEAD", "--stat") == ""

    # the project's `ignore` changes: rehash keeps each imported file's own rule, and so
    # does a re-import (it finds the rule the earlier import left)
    (root / "pyproject.toml").write_text(PYPROJECT + 'ignore = ["body.metadata"]\n')
    assert main(["rehash", "--root", str(root)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "Summary: 0/3 files re-keyed"
    assert _import(str(root)) == 0
    assert "(0 new, 3 unchanged, 0 overwritten, 0 kept)" in capsys.readouterr().out
    assert git("status", "--porcelain", "--", "tests") == ""
