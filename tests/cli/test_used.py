"""`hashreplay used`: per test id of the last run, the recordings it replayed or wrote, read
from the usage log (`.hashreplay/usage.json`, or the logs of CI shards with `--usage-log`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hashreplay.engine.usage import RunUsage, TestUsage, usage_path, write_usage
from tests.cli.conftest import Cli
from tests.cli.test_prune import TESTS, files_of, node, suite, write_suite

__all__ = ["suite"]  # the pytester project of test_prune, used here as a fixture


def test_used_lists_each_tests_recordings_from_a_real_run(suite: pytest.Pytester, cli: Cli) -> None:
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    recorded = files_of(suite.path)
    result = cli("used")
    assert result.code == 0, result.err
    expected: list[str] = []
    for name in ("alpha", "beta", "gamma", "models"):
        test_files = recorded.get(node(name)) or recorded["(shared)"]  # a model list is shared
        expected += [f"{node(name)} (passed, record)", f"  {test_files[0].relative_to(suite.path)}"]
    assert result.lines[:-1] == expected
    assert result.lines[-1].startswith("Summary: 4 tests, 4 recordings (last run: ")
    assert result.lines[-1].endswith(", record, full suite)")

    one = cli("used", "--test", "*beta")
    assert one.lines[:2] == expected[2:4]
    assert one.lines[-1].startswith("Summary: 1 test, 1 recording (last run: ")

    # a replayed run is logged the same way: what it replayed
    write_suite(suite, alpha=TESTS["alpha"])
    suite.runpytest().assert_outcomes(passed=1)
    replayed = cli("used")
    assert replayed.lines[:2] == [f"{node('alpha')} (passed, replay)", expected[1]]
    assert "partial" not in replayed.lines[-1]  # the run was the whole (new) suite


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("INFERENCE_MODE", "HASHREPLAY_ROOT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    (tmp_path / "pyproject.toml").write_text("[tool.hashreplay]\n")
    (tmp_path / "tests" / "recordings").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def a_run(root: Path, tests: dict[str, list[str]], **fields: object) -> RunUsage:
    passed = {"setup": "passed", "call": "passed", "teardown": "passed", "mode": "replay"}
    return RunUsage(
        root=str(root),
        collected=sorted(tests),
        tests={t: TestUsage(files=files, **passed) for t, files in tests.items()},  # type: ignore[arg-type]
        finished=1_700_000_000.0,
        full_suite=True,
        **fields,  # type: ignore[arg-type]
    )


def test_used_marks_a_file_gone_since_and_lists_files_outside_tests(
    project: Path, cli: Cli
) -> None:
    kept = project / "tests" / "recordings" / "a.json"
    kept.write_text("{}")
    tests = {"tests/test_a.py::test_a": ["tests/recordings/a.json", "tests/recordings/b.json"]}
    tests["tests/test_a.py::test_quiet"] = []
    write_usage(a_run(project, tests, outside_tests=["tests/recordings/c.json"]), project)
    result = cli("used")
    assert result.code == 0, result.err
    assert result.lines[:-1] == [
        "tests/test_a.py::test_a (passed, replay)",
        "  tests/recordings/a.json",
        "  tests/recordings/b.json (not there now: deleted or moved since the run)",
        "tests/test_a.py::test_quiet (passed, replay): no recordings",
        "(outside any test)",
        "  tests/recordings/c.json (not there now: deleted or moved since the run)",
    ]
    assert result.lines[-1].startswith("Summary: 3 tests, 3 recordings (last run: ")


def test_used_merges_the_logs_of_ci_shards(project: Path, cli: Cli) -> None:
    first, second = project / "shard-1.json", project / "shard-2.json"
    write_usage(a_run(project, {"tests/test_a.py::test_a": ["tests/recordings/a.json"]}), project)
    usage_path(project).rename(first)
    write_usage(a_run(project, {"tests/test_b.py::test_b": ["tests/recordings/b.json"]}), project)
    usage_path(project).rename(second)
    result = cli("used", "--usage-log", str(first), "--usage-log", str(second))
    assert result.code == 0, result.err
    assert [line for line in result.lines if not line.startswith(" ")][:2] == [
        "tests/test_a.py::test_a (passed, replay)",
        "tests/test_b.py::test_b (passed, replay)",
    ]
    assert "(last run: 2 usage logs, " in result.lines[-1]


def test_used_without_a_log_says_how_to_get_one(project: Path, cli: Cli) -> None:
    result = cli("used")
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        "error: no usage log at .hashreplay/usage.json: the pytest plugin writes it at the end "
        "of every run; run the tests (pytest), then hashreplay used again\n"
    )
    given = cli("used", "--usage-log", "shard-9.json")
    assert given.code == 1
    assert given.err.startswith("error: no usage log at --usage-log shard-9.json: check the path")


def test_used_with_a_corrupt_log_names_it_and_exits_1(project: Path, cli: Cli) -> None:
    log = usage_path(project)
    log.parent.mkdir()
    log.write_text('{"version": 1, "tests": {"t": {"files": 3}}')
    result = cli("used")
    assert (result.code, result.out) == (1, "")
    assert result.err.startswith("error: the usage log .hashreplay/usage.json is unreadable (")
    assert result.err.endswith("; run the test suite again\n")


def test_used_with_a_pattern_matching_no_test_says_so(project: Path, cli: Cli) -> None:
    write_usage(a_run(project, {"tests/test_a.py::test_a": []}), project)
    result = cli("used", "--test", "test_zzz")
    assert (result.code, result.out) == (1, "")
    assert result.err.startswith("error: no test id matches 'test_zzz' in the usage log (")
    assert result.err.endswith("without --test, hashreplay used lists every test id it has\n")
