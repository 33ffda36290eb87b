"""A suite split across CI machines (`prune --usage-log PATH`…) and the project root found
from a subdirectory. Real pytest sessions of a temporary project (see test_prune.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hashreplay.engine.prune import KEPT_FOREIGN, REASON_UNUSED
from tests.cli.conftest import Cli
from tests.cli.test_prune import TESTS, files_of, listed, node, suite, write_suite

__all__ = ["suite"]  # the fixture, shared with test_prune.py


def shard(pytester: pytest.Pytester, name: str, *args: str) -> Path:
    """Run one shard of the suite (replay) and keep its usage log as CI would upload it."""
    result = pytester.runpytest(*args)
    assert result.ret == 0, result.stdout.str()
    kept = pytester.path / "artifacts" / f"{name}.json"
    kept.parent.mkdir(exist_ok=True)
    shutil.copy(pytester.path / ".hashreplay" / "usage.json", kept)
    return kept


def test_merged_shard_logs_prune_only_what_neither_used(suite: pytest.Pytester, cli: Cli) -> None:
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    old = files_of(suite.path)
    write_suite(
        suite,
        alpha=TESTS["alpha"].replace("'alpha'", "'alpha v2'"),
        beta=TESTS["beta"],
        models=TESTS["models"],
    )  # alpha asks something new (its old file is unused), gamma is gone
    suite.runpytest("--inference-mode=record-if-missing").assert_outcomes(passed=3)
    first = shard(suite, "first", "--deselect", node("models"))  # alpha, beta
    second = shard(suite, "second", "-k", "models")  # models
    # the second shard ran on another machine: another root, file times say nothing there
    data = json.loads(second.read_text())
    data["root"] = "/builds/ci/project"
    second.write_text(json.dumps(data))

    alpha_old = old[node("alpha")][0].relative_to(suite.path)
    gamma = old[node("gamma")][0].relative_to(suite.path)
    alone = cli("prune", "--dry-run", "--usage-log", str(first))
    assert listed(alone.lines) == [f"Would prune: {alpha_old} ({REASON_UNUSED})"]
    assert "Note: the last run was not the full suite (--deselect" in alone.out

    both = cli("prune", "--dry-run", "--usage-log", str(first), "--usage-log", str(second))
    assert both.code == 0, both.err
    assert both.lines[0].startswith("Usage logs: 2 (together the full suite)")
    assert listed(both.lines) == [f"Would prune: {alpha_old} ({REASON_UNUSED})"]
    assert f"Kept: {gamma} ({KEPT_FOREIGN})" in both.lines  # its test is gone: never collected
    status = cli("status", "--usage-log", str(first), "--usage-log", str(second))
    pytest.LineMatcher(status.lines).fnmatch_lines(
        ["last run: 2 usage logs, *, replay, together the full suite, 3 tests ran; 1 recording*"]
    )

    done = cli("prune", "--usage-log", str(first), "--usage-log", str(second))
    assert listed(done.lines) == [f"Pruned: {alpha_old} ({REASON_UNUSED})"]
    assert sorted(files_of(suite.path)) == ["(shared)", node("alpha"), node("beta"), node("gamma")]
    suite.runpytest().assert_outcomes(passed=3)  # everything still needed is there


def test_logs_covering_part_of_the_suite_say_so(suite: pytest.Pytester, cli: Cli) -> None:
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    first = shard(suite, "first", "-k", "alpha or beta")
    second = shard(suite, "second", "-k", "models")  # nobody ran gamma
    status = cli("status", "--usage-log", str(first), "--usage-log", str(second))
    pytest.LineMatcher(status.lines).fnmatch_lines(
        ["last run: 2 usage logs, *, partial (not run in any log: 1 test), 3 tests ran; *"]
    )
    dry = cli("prune", "--dry-run", "--usage-log", str(first), "--usage-log", str(second))
    assert "the usage logs together are not the full suite (not run in any log: 1 test)" in (
        dry.out
    )


def test_an_unreadable_usage_log_is_named_and_nothing_is_deleted(
    suite: pytest.Pytester, cli: Cli
) -> None:
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    write_suite(suite, alpha=TESTS["alpha"].replace("'alpha'", "'alpha v2'"))
    suite.runpytest("--inference-mode=record-if-missing").assert_outcomes(passed=1)
    good = shard(suite, "good")
    before = sorted(suite.path.rglob("recordings/*.json"))
    broken = suite.path / "artifacts" / "broken.json"
    broken.write_text("{ not json")
    missing = suite.path / "artifacts" / "missing.json"
    for bad, words in ((broken, "is unreadable"), (missing, "no usage log at")):
        result = cli("prune", "--usage-log", str(good), "--usage-log", str(bad))
        assert result.code == 1
        shown = str(bad.relative_to(suite.path))  # relative to the working directory
        assert shown in result.err and words in result.err
        assert sorted(suite.path.rglob("recordings/*.json")) == before
    status = cli("status", "--usage-log", str(broken))
    assert status.code == 1
    assert f"the usage log {broken.relative_to(suite.path)} is unreadable" in status.err


# --- the root from a subdirectory -----------------------------------------------------------


@pytest.mark.parametrize("table", ["", "[tool.hashreplay]\n"])
def test_status_and_prune_from_a_subdirectory_find_the_root(
    suite: pytest.Pytester, cli: Cli, monkeypatch: pytest.MonkeyPatch, table: str
) -> None:
    pyproject = suite.path / "pyproject.toml"
    # the suite opts in through the mode given below, with or without the table
    pyproject.write_text(pyproject.read_text().replace("[tool.hashreplay]", table))
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    write_suite(
        suite,
        alpha=TESTS["alpha"].replace("'alpha'", "'alpha v2'"),
        **{k: TESTS[k] for k in ("beta", "gamma", "models")},
    )
    suite.runpytest("--inference-mode=record-if-missing").assert_outcomes(passed=4)
    inner = suite.path / "suite" / "sub"
    inner.mkdir()
    monkeypatch.chdir(inner)

    status = cli("status")
    assert status.code == 0, status.err
    why = "[tool.hashreplay]" if table else "pytest's rootdir marker"
    assert f"root: {suite.path} (from {pyproject} ({why}))" in status.lines
    assert "last run: none recorded" not in status.out
    dry = cli("prune", "--dry-run")
    assert dry.code == 0, dry.err
    assert len(listed(dry.lines)) == 1
    # relative to the working directory (suite/sub), so it can be pasted from there
    assert listed(dry.lines)[0].startswith("Would prune: ../recordings/")
