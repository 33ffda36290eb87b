"""A recording file that cannot be read is reported with what fixes it: re-recording its
test with `INFERENCE_MODE=record` (record-if-missing and `verify` meet the same file again),
or restoring or deleting it with git, named as the user types it from where they are."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import CHAT, STREAM, Cli, Project
from tests.fakes.upstream import FakeUpstream

pytest_plugins = ["pytester"]


def test_verify_and_list_name_the_command_that_replaces_an_unreadable_file(
    project: Project, cli: Cli
) -> None:
    newer = project.one(STREAM)  # parses, but a format this version does not read
    data = json.loads(newer.read_text())
    data["format_version"] = 99
    newer.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    cut = project.one(CHAT)  # cut off before its test id
    cut.write_bytes(cut.read_bytes()[:150])
    newer_shown = f"tests/recordings/{newer.name}"
    cut_shown = f"tests/recordings/{cut.name}"

    verify = cli("verify")
    assert verify.code == 1
    assert (
        f"{newer_shown}: unreadable: format_version 99, this hashreplay reads format_version 1; "
        "re-record it or upgrade hashreplay; to fix it: re-record it with INFERENCE_MODE=record "
        f"pytest {STREAM} (it replaces the file), or restore it with git (git checkout -- "
        f"{newer_shown}) or delete it (rm {newer_shown})"
    ) in verify.lines
    assert (
        f"{cut_shown}: unreadable: the file looks truncated: unexpected end of data at line "
    ) in verify.out
    assert (
        f"to fix it: restore it with git (git checkout -- {cut_shown}) or delete it "
        f"(rm {cut_shown}), then re-record the test that made it"
    ) in verify.out
    assert "hashreplay verify" not in verify.out  # never the command that just failed

    listing = cli("list")
    assert listing.code == 1
    assert (
        f"error: {newer_shown}: unreadable: format_version 99, this hashreplay reads "
        "format_version 1; re-record it or upgrade hashreplay; skipped, left unchanged; to fix "
        f"it: re-record it with INFERENCE_MODE=record pytest {STREAM} (it replaces the file)"
    ) in listing.err
    assert "hashreplay list" not in listing.err


def test_a_parametrised_test_id_is_quoted_for_the_shell(project: Project, cli: Cli) -> None:
    path = project.one(CHAT)
    data = json.loads(path.read_text())
    data["format_version"] = 0
    data["test_id"] = "tests/test_app.py::test_chat[a b]"
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    verify = cli("verify", str(path))
    assert "INFERENCE_MODE=record pytest 'tests/test_app.py::test_chat[a b]'" in verify.out


TESTS = """
import os, httpx2

def test_a():
    answer = httpx2.post(
        os.environ["FAKE_URL"] + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
    )
    assert answer.json()["choices"][0]["message"]["content"] == "echo: x"
"""


def test_the_miss_report_of_an_unreadable_file_names_a_command_that_fixes_it(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(
        '[tool.hashreplay]\n[tool.pytest.ini_options]\naddopts = "-p no:hypothesispytest"\n'
        'asyncio_default_fixture_loop_scope = "function"\n'
    )
    pytester.makepyfile(test_app=TESTS)
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    (path,) = pytester.path.rglob("recordings/*.json")
    good = path.read_bytes()
    path.write_bytes(good[:100])

    refused = pytester.runpytest("--inference-mode=record-if-missing")
    refused.assert_outcomes(failed=1)
    shown = f"recordings/{path.name}"
    refused.stdout.fnmatch_lines(
        [
            f"  unreadable recording: {shown}: the file looks truncated: *",
            "  the file was left untouched",
            "  to fix it: re-record it with INFERENCE_MODE=record pytest test_app.py::test_a (it"
            f" replaces the file), or restore it with git (git checkout -- {shown}) or delete it"
            f" (rm {shown})",
        ]
    )
    assert "to record it: INFERENCE_MODE=record-if-missing" not in refused.stdout.str()
    assert path.read_bytes() == good[:100]  # left untouched

    # the command it names does fix it
    monkeypatch.setenv("INFERENCE_MODE", "record")
    pytester.runpytest("test_app.py::test_a").assert_outcomes(passed=1)
    monkeypatch.delenv("INFERENCE_MODE")
    upstream.stop()
    pytester.runpytest().assert_outcomes(passed=1)
