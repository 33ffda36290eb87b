"""A recordings directory that is a symlink leading outside the project root fails its tests
with an error naming the directory, where it leads and what to do (docs/design.md §4: the
store lies inside the project), in every mode; never an INTERNALERROR."""

from __future__ import annotations

import shutil

import pytest

from tests.fakes.upstream import FakeUpstream

pytest_plugins = ["pytester"]

TESTS = """
import os, httpx2

def test_asks():
    r = httpx2.post(os.environ["FAKE_URL"] + "/echo", json={"q": "hi"})
    assert r.status_code == 200, r.text

def test_asks_nothing():
    pass  # makes no call: it fails only through its recordings directory
"""
PYPROJECT = """
[tool.hashreplay]
unconsumed = "warn"

[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest -p no:asyncio"
"""


@pytest.fixture
def project(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    monkeypatch.delenv("HASHREPLAY_ROOT", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    pytester.makepyprojecttoml(PYPROJECT)
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_app.py").write_text(TESTS)
    return pytester


def test_a_recordings_dir_linked_outside_the_root_fails_its_tests_by_name(
    project: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory
) -> None:
    project.runpytest("-p", "hashreplay", "--inference-mode=record").assert_outcomes(passed=2)
    recordings = project.path / "tests" / "recordings"
    outside = tmp_path_factory.mktemp("shared") / "recordings"
    shutil.move(recordings, outside)
    recordings.symlink_to(outside, target_is_directory=True)
    expected = (
        f"the recordings directory {recordings} of tests/test_app.py resolves to {outside}, "
        f"outside the project root {project.path} ({recordings} is a symlink to {outside}): "
        "recordings are only read and written inside the project; replace the link with a "
        "directory holding the recordings (move them into the project)"
    )
    before = sorted(outside.iterdir())

    for mode in ("replay", "record-if-missing", "record"):
        result = project.runpytest("-p", "hashreplay", f"--inference-mode={mode}")
        out = result.stdout.str()
        assert "INTERNALERROR" not in out, out
        if mode == "record":  # nothing is read at a test's end: only the recording test fails
            result.assert_outcomes(failed=1, passed=1)
        else:  # the unconsumed check reads the directory at the end of each test
            result.assert_outcomes(failed=2)
        for test in ("test_asks", "test_asks_nothing")[: 1 if mode == "record" else 2]:
            result.stdout.fnmatch_lines([f"*_ {test} _*", f"*{expected}*"])
    assert sorted(outside.iterdir()) == before  # nothing written or removed through the link
