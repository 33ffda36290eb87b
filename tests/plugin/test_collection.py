"""pytest does not walk a recordings directory (docs/design.md §4) in an opted-in project:
it holds one file per recorded call and no test. A directory of that name that holds a
Python file is still collected, and a project that has not opted in is left alone (§16)."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

#: records every file pytest offers to collectors, so a test can see what was walked
CONFTEST = """
import os

def pytest_collect_file(file_path, parent):
    with open(os.environ["VISITED"], "a") as out:
        out.write(f"{file_path}\\n")
"""

TESTS = "def test_one():\n    pass\n"


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in ("INFERENCE_MODE", "HASHREPLAY_ROOT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VISITED", str(pytester.path / "visited.txt"))
    pytester.makeconftest(CONFTEST)
    tests = pytester.mkpydir("tests")
    (tests / "test_a.py").write_text(TESTS)
    for where in (tests / "recordings", pytester.path / "recordings"):
        where.mkdir()
        for n in range(3):
            (where / f"{n:032x}.json").write_text("{}")
    return pytester


def visited(pytester: pytest.Pytester) -> list[str]:
    path = pytester.path / "visited.txt"
    names = path.read_text().split() if path.exists() else []
    return sorted(str(p).removeprefix(f"{pytester.path}/") for p in names)


def test_an_opted_in_run_does_not_walk_recordings_directories(project: pytest.Pytester) -> None:
    project.makepyprojecttoml("[tool.hashreplay]\n")
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "--collect-only", "-q")
    result.assert_outcomes()
    result.stdout.fnmatch_lines(["tests/test_a.py::test_one"])
    assert not [p for p in visited(project) if "recordings" in p]
    assert "tests/test_a.py" in visited(project)


def test_a_test_package_named_recordings_is_still_collected(project: pytest.Pytester) -> None:
    project.makepyprojecttoml("[tool.hashreplay]\n")
    (project.path / "tests" / "recordings" / "test_inside.py").write_text(TESTS)
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=2)
    assert "tests/recordings/test_inside.py" in visited(project)


def test_a_project_that_has_not_opted_in_is_walked_as_pytest_walks_it(
    project: pytest.Pytester,
) -> None:
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "--collect-only", "-q")
    result.assert_outcomes()
    assert "tests/recordings/00000000000000000000000000000000.json" in visited(project)
    assert "recordings/00000000000000000000000000000000.json" in visited(project)


def test_ignore_still_leaves_out_a_test_package_named_recordings(project: pytest.Pytester) -> None:
    # the plugin has no say over a directory that holds tests: pytest's --ignore still counts
    project.makepyprojecttoml("[tool.hashreplay]\n")
    (project.path / "tests" / "recordings" / "test_inside.py").write_text(TESTS)
    result = project.runpytest_subprocess(
        "-p", "no:cacheprovider", "-q", "--ignore=tests/recordings"
    )
    result.assert_outcomes(passed=1)
    assert "tests/recordings/test_inside.py" not in visited(project)
