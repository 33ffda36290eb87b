"""A renamed test keeps its recordings (docs/design.md §14): the miss report of a real pytest
run names the renamed test's recording and the `hashreplay mv` command; running that
command as printed makes the next run replay with the upstream gone, and `prune` keeps
what moved."""

from __future__ import annotations

import re
import shlex
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

URL = os.environ["FAKE_URL"] + "/echo"

def ask(q):
    response = httpx2.post(URL, json={"q": q})
    assert response.status_code == 200, response.text
    return response.json()["received"]["q"]

def test_NAME():
    assert ask("hello") == "hello"

@pytest.mark.parametrize("q", ["a", "b"])
def test_PNAME(q):
    assert ask(q) == q

def test_untouched():
    assert ask("stays") == "stays"
"""


def write_tests(pytester: pytest.Pytester, name: str, pname: str) -> None:
    source = TESTS.replace("test_NAME", f"test_{name}").replace("test_PNAME", f"test_{pname}")
    (pytester.path / "tests" / "test_app.py").write_text(source)


def recordings(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("recordings/*.json")}


def hashreplay(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hashreplay", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_miss_report_names_the_renamed_tests_recording_and_its_mv_command(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    monkeypatch.delenv("HASHREPLAY_ROOT", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    (pytester.path / "tests").mkdir()
    write_tests(pytester, "x", "p")
    recorded = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--inference-mode=record")
    recorded.assert_outcomes(passed=4)
    before = recordings(pytester.path)
    assert len(before) == 4

    upstream.stop()  # from here on, no network
    write_tests(pytester, "y", "q")  # both tests renamed in the file
    missed = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    missed.assert_outcomes(passed=1, failed=3)
    out = missed.stdout.str()
    assert re.search(
        r"tests/recordings/[0-9a-f]{32}\.json holds exactly this request, recorded by test "
        r"tests/test_app\.py::test_x, which its test file, collected by this run, no longer "
        r"has: if that test was renamed or moved, keep its recordings with",
        out,
    ), out
    commands = sorted(set(re.findall(r"^ +(hashreplay mv .+)$", out, re.MULTILINE)))
    assert commands == [
        "hashreplay mv 'tests/test_app.py::test_p' 'tests/test_app.py::test_q'",
        "hashreplay mv 'tests/test_app.py::test_x' 'tests/test_app.py::test_y'",
    ]
    assert recordings(pytester.path) == before  # a replay run writes nothing

    for command in commands:  # as the user pastes them into a shell
        done = hashreplay(*shlex.split(command)[1:], cwd=pytester.path)
        assert done.returncode == 0, done.stderr
    after = recordings(pytester.path)
    assert len(after) == 4
    assert sorted(after.values()) != sorted(before.values())  # the test ids changed inside

    replayed = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    replayed.assert_outcomes(passed=4)

    # the last run used every moved file: prune keeps them all
    pruned = hashreplay("prune", cwd=pytester.path)
    assert pruned.returncode == 0, pruned.stderr
    assert "Summary: 0/4 files pruned" in pruned.stdout
    assert recordings(pytester.path) == after
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=4)


def test_a_test_file_moved_to_another_directory_is_offered_its_old_recordings(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`git mv tests/old/test_app.py tests/new/`: the old directory keeps another test file
    (so its `recordings/` still serves this run), and the moved tests' misses name their old
    files and the `mv` command; the same requests of the tests that stayed are never named."""
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    monkeypatch.delenv("HASHREPLAY_ROOT", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    old, new = pytester.path / "tests" / "old", pytester.path / "tests" / "new"
    old.mkdir(parents=True)
    new.mkdir()
    source = TESTS.replace("test_NAME", "test_x").replace("test_PNAME", "test_p")
    (old / "test_app.py").write_text(source)
    (old / "test_stays.py").write_text(source.replace("test_untouched", "test_kept"))
    recorded = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--inference-mode=record")
    recorded.assert_outcomes(passed=8)

    upstream.stop()
    (old / "test_app.py").rename(new / "test_app.py")
    missed = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    missed.assert_outcomes(passed=4, failed=4)
    out = missed.stdout.str()
    assert "tests/old/test_app.py::test_x, whose test file no longer exists" in out, out
    commands = sorted(set(re.findall(r"^ +(hashreplay mv .+)$", out, re.MULTILINE)))
    assert commands == [
        "hashreplay mv 'tests/old/test_app.py::test_p' 'tests/new/test_app.py::test_p'",
        "hashreplay mv 'tests/old/test_app.py::test_untouched' "
        "'tests/new/test_app.py::test_untouched'",
        "hashreplay mv 'tests/old/test_app.py::test_x' 'tests/new/test_app.py::test_x'",
    ]
    assert "test_stays.py::" not in out  # its tests exist: the same requests are theirs
