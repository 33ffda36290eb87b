"""Unused recordings: the plugin's usage log (`.hashreplay/usage.json`) and `hashreplay prune`.

Real pytest sessions of a temporary project (pytester) whose tests call the fake upstream.
The inner test directory is `suite/`, not `tests/`, so its modules cannot clash with ours.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hashreplay.engine.prune import KEPT_FOREIGN, REASON_MODELS, REASON_UNUSED
from tests.cli.conftest import Cli
from tests.fakes.upstream import FakeUpstream

HEADER = """
import os, httpx2, pytest

URL = os.environ["FAKE_URL"]

def ask(q):
    r = httpx2.post(URL + "/echo", json={"q": q})
    assert r.status_code == 200, r.text
    return r.json()["received"]["q"]
"""

TESTS = {
    "alpha": "def test_alpha():\n    assert ask('alpha') == 'alpha'\n",
    "beta": "def test_beta():\n    assert ask('beta') == 'beta'\n",
    "gamma": "def test_gamma():\n    assert ask('gamma') == 'gamma'\n",
    "models": "def test_models():\n    assert httpx2.get(URL + '/v1/models').status_code == 200\n",
}
APP = "suite/test_app.py"
#: The hypothesis plugin would re-import hypothesis in every in-process run (~1 s each).
PYPROJECT = """
[tool.pytest.ini_options]
testpaths = ["suite"]
addopts = "-p no:hypothesispytest -p no:asyncio"

# the project opts in to hashreplay (docs/design.md §16 Activation)
[tool.hashreplay]
"""


def node(name: str) -> str:
    return f"{APP}::test_{name}"


@pytest.fixture
def suite(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    monkeypatch.delenv("HASHREPLAY_ROOT", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    (pytester.path / "suite").mkdir()
    write_suite(pytester, **TESTS)
    return pytester


def write_suite(pytester: pytest.Pytester, **tests: str) -> None:
    (pytester.path / APP).write_text(HEADER + "\n\n" + "\n\n".join(tests.values()))


def files_of(root: Path) -> dict[str, list[Path]]:
    """Recording files by the test id they store ("(shared)" for model lists)."""
    found: dict[str, list[Path]] = {}
    for path in sorted(root.rglob("recordings/*.json")):
        test_id = json.loads(path.read_text())["test_id"] or "(shared)"
        found.setdefault(test_id, []).append(path)
    return found


def usage(root: Path) -> dict[str, object]:
    data = json.loads((root / ".hashreplay" / "usage.json").read_text())
    assert isinstance(data, dict)
    return data


def listed(result_lines: list[str]) -> list[str]:
    return sorted(line for line in result_lines if line.startswith(("Would prune:", "Pruned:")))


def test_full_runs_find_unused_recordings_and_keep_a_removed_tests(
    suite: pytest.Pytester, cli: Cli
) -> None:
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    assert (suite.path / ".hashreplay" / ".gitignore").read_text() == "*\n"
    log = usage(suite.path)
    assert log["full_suite"] is True
    assert log["collected"] == [node("alpha"), node("beta"), node("gamma"), node("models")]
    tests = log["tests"]
    assert isinstance(tests, dict)
    assert tests[node("alpha")]["outcome"] == "passed"
    assert tests[node("alpha")]["completed"] is True
    old = files_of(suite.path)
    assert tests[node("alpha")]["files"] == [str(old[node("alpha")][0].relative_to(suite.path))]

    nothing = cli("prune", "--dry-run")
    assert nothing.code == 0
    assert listed(nothing.lines) == []
    assert nothing.lines[-1] == "Summary: 0/4 files pruned"

    write_suite(
        suite,
        alpha=TESTS["alpha"].replace("'alpha'", "'alpha v2'"),
        beta=TESTS["beta"],
        models=TESTS["models"],
    )  # alpha asks something new, gamma is gone
    suite.runpytest("--inference-mode=record-if-missing").assert_outcomes(passed=3)
    alpha_old = old[node("alpha")][0].relative_to(suite.path)
    gamma = old[node("gamma")][0].relative_to(suite.path)
    dry = cli("prune", "--dry-run")
    assert dry.code == 0
    # gamma's test is gone: its test id was not collected, which is all a proxy's test id
    # naming this file would show too, so it is kept and counted, never pruned
    assert listed(dry.lines) == [f"Would prune: {alpha_old} ({REASON_UNUSED})"]
    assert f"Kept: {gamma} ({KEPT_FOREIGN})" in dry.lines
    assert dry.lines[-1] == "Summary: 1/5 files pruned"
    status = cli("status")
    pytest.LineMatcher(status.lines).fnmatch_lines(
        [
            "last run: *, record-if-missing, full suite, 3 tests ran; 1 recording unused "
            "(hashreplay prune --dry-run lists them)"
        ]
    )
    assert all(p.exists() for paths in old.values() for p in paths)

    done = cli("prune")
    assert listed(done.lines) == [f"Pruned: {alpha_old} ({REASON_UNUSED})"]
    assert not (suite.path / alpha_old).exists()
    assert (suite.path / gamma).exists()
    suite.runpytest().assert_outcomes(passed=3)  # replay still finds everything it needs


def test_partial_run_lists_nothing_of_deselected_tests(suite: pytest.Pytester, cli: Cli) -> None:
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    old = files_of(suite.path)
    write_suite(
        suite,
        alpha=TESTS["alpha"].replace("'alpha'", "'alpha v2'"),
        beta=TESTS["beta"].replace("'beta'", "'beta v2'"),
        models=TESTS["models"],
    )  # gamma removed, beta changed: but neither runs below
    result = suite.runpytest("--inference-mode=record-if-missing", "-k", "alpha")
    result.assert_outcomes(passed=1, deselected=2)
    log = usage(suite.path)
    assert log["full_suite"] is False
    assert log["partial_reasons"] == ["-k 'alpha'", "deselected: 2 tests"]
    dry = cli("prune", "--dry-run")
    assert listed(dry.lines) == [
        f"Would prune: {old[node('alpha')][0].relative_to(suite.path)} ({REASON_UNUSED})"
    ]
    assert "beta" not in "\n".join(listed(dry.lines))
    assert dry.lines[-1].startswith("Note: the last run was not the full suite (-k 'alpha'; ")
    assert "): shared model lists were kept; run the whole suite" in dry.lines[-1]

    by_id = suite.runpytest(f"{APP}::test_beta")  # a node id: beta ran, nothing else
    by_id.assert_outcomes(failed=1)  # replay miss: beta asks something new
    assert usage(suite.path)["partial_reasons"] == ["paths or node ids given"]
    assert listed(cli("prune", "--dry-run").lines) == []  # failed: its files are kept


def test_failed_skipped_and_live_tests_keep_their_recordings(
    suite: pytest.Pytester, cli: Cli
) -> None:
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    write_suite(
        suite,
        alpha="def test_alpha():\n    ask('alpha v2')\n    assert False, 'boom'\n",
        beta="def test_beta():\n    pytest.skip('not today')\n",
        gamma="@pytest.mark.hashreplay(mode='live')\ndef test_gamma():\n    assert ask('gamma v2') == 'gamma v2'\n",
        models="@pytest.mark.xfail(strict=True)\ndef test_models():\n    assert False\n",
    )
    result = suite.runpytest("--inference-mode=record-if-missing")
    result.assert_outcomes(passed=1, failed=1, skipped=1, xfailed=1)
    tests = usage(suite.path)["tests"]
    assert isinstance(tests, dict)
    assert [tests[node(n)]["outcome"] for n in ("alpha", "beta", "gamma", "models")] == [
        "failed",
        "skipped",
        "passed",
        "skipped",
    ]
    assert tests[node("gamma")]["passthrough"] is True
    dry = cli("prune", "--dry-run")
    assert listed(dry.lines) == []  # and the model list: not every test ran to completion
    assert usage(suite.path)["full_suite"] is True


def test_model_lists_go_only_when_a_full_run_used_none(suite: pytest.Pytester, cli: Cli) -> None:
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    (models,) = files_of(suite.path)["(shared)"]
    write_suite(suite, alpha=TESTS["alpha"], beta=TESTS["beta"], gamma=TESTS["gamma"])
    suite.runpytest("-k", "not gamma").assert_outcomes(passed=2, deselected=1)
    assert listed(cli("prune", "--dry-run").lines) == []  # partial: model lists untouched
    suite.runpytest().assert_outcomes(passed=3)
    dry = cli("prune", "--dry-run")
    assert listed(dry.lines) == [f"Would prune: recordings/{models.name} ({REASON_MODELS})"]


def test_stopping_early_is_not_a_full_run(suite: pytest.Pytester, cli: Cli) -> None:
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    write_suite(
        suite,
        alpha="def test_alpha():\n    assert False\n",
        beta=TESTS["beta"],
        models=TESTS["models"],
    )  # gamma removed, but the run stops at alpha
    suite.runpytest("-x").assert_outcomes(failed=1)
    log = usage(suite.path)
    assert log["full_suite"] is False
    assert "did not run: 2 tests (stopped early, or a worker crashed)" in log["partial_reasons"]
    assert listed(cli("prune", "--dry-run").lines) == []


def test_xdist_workers_report_their_usage(suite: pytest.Pytester, cli: Cli) -> None:
    suite.runpytest("-n", "2", "-p", "xdist", "--inference-mode=record").assert_outcomes(passed=4)
    log = usage(suite.path)
    assert log["full_suite"] is True, log["partial_reasons"]
    tests = log["tests"]
    assert isinstance(tests, dict)
    assert sorted(tests) == [node("alpha"), node("beta"), node("gamma"), node("models")]
    assert all(t["completed"] and len(t["files"]) == 1 for t in tests.values())
    old = files_of(suite.path)
    write_suite(
        suite,
        alpha=TESTS["alpha"].replace("'alpha'", "'alpha v2'"),
        beta=TESTS["beta"],
        models=TESTS["models"],
    )
    suite.runpytest("-n", "2", "-p", "xdist", "--inference-mode=record-if-missing").assert_outcomes(
        passed=3
    )
    dry = cli("prune", "--dry-run")
    assert listed(dry.lines) == [
        f"Would prune: {old[node('alpha')][0].relative_to(suite.path)} ({REASON_UNUSED})"
    ]


def test_prune_option_prunes_at_the_end_of_the_run(suite: pytest.Pytester) -> None:
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    old = files_of(suite.path)
    write_suite(suite, alpha=TESTS["alpha"], beta=TESTS["beta"], models=TESTS["models"])
    result = suite.runpytest("--hashreplay-prune")
    result.assert_outcomes(passed=3)
    gamma = old[node("gamma")][0].relative_to(suite.path)
    result.stdout.fnmatch_lines(
        ["hashreplay: pruned 0 unused recordings (of 4)", "hashreplay: Kept: 1 file not made*"]
    )
    assert (suite.path / gamma).exists()  # its test is gone: never collected by this run
    write_suite(suite, alpha=TESTS["alpha"].replace("'alpha'", "'alpha v2'"), beta=TESTS["beta"])
    suite.runpytest("--inference-mode=record-if-missing").assert_outcomes(passed=2)
    alpha = old[node("alpha")][0].relative_to(suite.path)
    result = suite.runpytest("--hashreplay-prune")
    result.stdout.fnmatch_lines(
        ["hashreplay: pruned 1 unused recordings (of 5)", f"  {alpha} ({REASON_UNUSED})"]
    )
    assert not (suite.path / alpha).exists()
    partial = suite.runpytest("--hashreplay-prune", "-k", "beta")
    partial.stdout.fnmatch_lines(
        [
            "hashreplay: pruned 0 unused recordings (of 4)",
            "hashreplay: not the full suite (-k 'beta'; deselected: 1 test): only recordings "
            "of tests that ran to completion were considered",
        ]
    )


def test_files_newer_than_the_run_and_unreadable_files_are_kept(
    suite: pytest.Pytester, cli: Cli
) -> None:
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    write_suite(suite, alpha=TESTS["alpha"], beta=TESTS["beta"], models=TESTS["models"])
    suite.runpytest().assert_outcomes(passed=3)
    old = files_of(suite.path)
    (alpha,) = old[node("alpha")]
    (beta,) = old[node("beta")]
    # A colleague's new recording of alpha arrives after the run (git pull): alpha ran
    # without using it, but the run cannot have known it
    pulled = alpha.with_name("f" * 32 + ".json")
    shutil.copy(alpha, pulled)
    beta.write_text("{ broken")
    dry = cli("prune", "--dry-run")
    assert dry.code == 1
    assert listed(dry.lines) == []
    assert f"{beta.relative_to(suite.path)}: unreadable: the file is not valid JSON" in dry.err
    done = cli("prune")
    assert done.code == 1
    assert pulled.exists()
    assert beta.read_text() == "{ broken"


def test_prune_needs_a_usage_log_of_this_project(
    suite: pytest.Pytester, cli: Cli, tmp_path_factory: pytest.TempPathFactory
) -> None:
    missing = cli("prune", "--dry-run")
    assert missing.code == 1
    assert "no usage log at .hashreplay/usage.json: run the test suite first" in missing.err
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    elsewhere = tmp_path_factory.mktemp("moved")
    shutil.copytree(suite.path / ".hashreplay", elsewhere / ".hashreplay")
    moved = cli("prune", "--root", str(elsewhere))
    assert moved.code == 1
    assert f"was written for the project at {suite.path}, not {elsewhere}" in moved.err
    (suite.path / ".hashreplay" / "usage.json").write_text("[]")
    garbled = cli("prune")
    assert garbled.code == 1
    assert "is unreadable" in garbled.err
    assert "run the test suite again" in garbled.err


def test_a_module_that_fails_to_collect_keeps_its_recordings(
    suite: pytest.Pytester, cli: Cli
) -> None:
    other = suite.path / "suite" / "test_other.py"
    other.write_text(HEADER + "\n\ndef test_delta():\n    assert ask('delta') == 'delta'\n")
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=5)
    (delta,) = files_of(suite.path)["suite/test_other.py::test_delta"]
    other.write_text("def test_delta(:\n")  # a syntax error: its tests are not collected
    result = suite.runpytest("--continue-on-collection-errors")
    result.assert_outcomes(passed=4, errors=1)
    assert usage(suite.path)["partial_reasons"] == ["collection errors: 1"]
    assert listed(cli("prune", "--dry-run").lines) == []
    aborted = suite.runpytest()  # without the option pytest stops before running anything
    assert aborted.ret == pytest.ExitCode.INTERRUPTED
    assert "exit status INTERRUPTED" in usage(suite.path)["partial_reasons"]
    assert listed(cli("prune", "--dry-run").lines) == []
    assert delta.exists()
