"""`hashreplay prune` and `--hashreplay-prune` delete only what a pytest run knows is unused
(docs/design.md §13): recordings made through `hashreplay serve` or `install()` survive, and
nothing outside the store (a symlink, a file in the blob directory that is not a blob) is
ever deleted.

Real pytest sessions of a temporary project (the suite of `test_prune.py`), the real proxy
over loopback and `hashreplay.install()` in this process, against the fake upstream.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

import hashreplay
from hashreplay import test_context
from hashreplay.core.constants import TEST_ID_HEADER
from hashreplay.engine.prune import KEPT_FOREIGN, KEPT_MODELS, REASON_UNUSED
from tests.cli.conftest import Cli
from tests.cli.test_prune import TESTS, files_of, listed, node, suite, write_suite
from tests.fakes.upstream import FakeUpstream
from tests.server.conftest import Servers

__all__ = ["suite"]  # the fixture, shared with test_prune.py

SERVED = "checkout flow (e2e)"
INSTALLED = "tests/service/test_gateway.py::test_answers[one]"


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    running = Servers(tmp_path)
    try:
        yield running
    finally:
        running.stop_all()


def record_elsewhere(
    root: Path, upstream: FakeUpstream, servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> dict[str, list[Path]]:
    """Recordings that pytest never made: through the proxy (a test id from another
    suite's header, none at all, a model list) and through `install()` in a server."""
    proxy = servers.serve("--mode", "record", "--upstream", upstream.url, root=root)
    for headers in ({TEST_ID_HEADER: SERVED}, {}):
        answer = httpx2.post(proxy.url + "/echo", json={"q": "served"}, headers=headers)
        assert answer.status_code == 200, answer.text
    assert httpx2.get(proxy.url + "/v1/models", headers={TEST_ID_HEADER: SERVED}).is_success
    proxy.stop()
    with monkeypatch.context() as env:
        env.setenv("HASHREPLAY_ROOT", str(root))
        env.setenv("INFERENCE_MODE", "record")
        try:
            hashreplay.install()
            with test_context(INSTALLED):
                assert httpx2.post(upstream.url + "/echo", json={"q": "installed"}).is_success
        finally:
            hashreplay.uninstall()
    found = files_of(root)
    assert set(found) >= {SERVED, INSTALLED, "(shared)"}
    return found


def test_recordings_made_through_serve_or_install_survive_prune(
    suite: pytest.Pytester,
    upstream: FakeUpstream,
    servers: Servers,
    monkeypatch: pytest.MonkeyPatch,
    cli: Cli,
) -> None:
    root = suite.path
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    made_by_pytest = files_of(root)
    elsewhere = record_elsewhere(root, upstream, servers, monkeypatch)
    theirs = [*elsewhere[SERVED], *elsewhere[INSTALLED]]
    # the model list (the suite's, which the proxy's request reuses) and one with no test id
    shared = elsewhere["(shared)"]
    assert len(shared) == 2
    # the suite changes: alpha asks something new, gamma and the model-list test are gone
    write_suite(suite, alpha=TESTS["alpha"].replace("'alpha'", "'alpha v2'"), beta=TESTS["beta"])
    suite.runpytest("--inference-mode=record-if-missing").assert_outcomes(passed=2)
    for path in [*theirs, *shared]:
        os.utime(path, (1, 1))  # older than the run: only the log can keep them

    dry = cli("prune", "--dry-run")
    assert dry.code == 0, dry.err
    alpha_old = made_by_pytest[node("alpha")][0].relative_to(root)
    gamma = made_by_pytest[node("gamma")][0].relative_to(root)
    assert listed(dry.lines) == [f"Would prune: {alpha_old} ({REASON_UNUSED})"]
    kept = [line for line in dry.lines if line.startswith("Kept: ")]
    for path in [*theirs, root / gamma]:  # gamma's test is gone: no log tells it from a proxy's
        assert f"Kept: {path.relative_to(root)} ({KEPT_FOREIGN})" in kept
    for path in shared:  # model lists and files with no test id: other front ends' too
        assert any(line.startswith(f"Kept: {path.relative_to(root)} (") for line in kept)
    assert any(KEPT_MODELS in line for line in kept)
    assert (
        "Kept: 5 files not made by this pytest run (test ids it never collected: recorded "
        "through `hashreplay serve` or `install()`, or by a test that is gone); "
        "`hashreplay prune --dry-run` lists them: delete by hand those no longer needed"
    ) in dry.lines

    done = cli("prune")
    assert done.code == 0, done.err
    assert all(path.exists() for path in [*theirs, *shared, root / gamma])

    # the same through the plugin's option, at the end of a full run
    result = suite.runpytest("--hashreplay-prune")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["hashreplay: pruned 0 unused recordings (of 7)", "hashreplay: Kept: 5 files not made*"]
    )
    assert all(path.exists() for path in [*theirs, *shared])


def test_a_test_id_pytest_never_collects_is_kept_even_when_its_file_is_gone(
    suite: pytest.Pytester, cli: Cli
) -> None:
    other = suite.path / "suite" / "test_other.py"
    other.write_text(
        (suite.path / "suite" / "test_app.py").read_text().split("\n\n\ndef test_")[0]
        + "\n\n\ndef test_delta():\n    assert ask('delta') == 'delta'\n"
    )
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=5)
    (delta,) = files_of(suite.path)["suite/test_other.py::test_delta"]
    other.unlink()  # a whole test file removed: pytest cannot tell it from a proxy's id
    suite.runpytest().assert_outcomes(passed=4)
    os.utime(delta, (1, 1))
    dry = cli("prune", "--dry-run")
    assert listed(dry.lines) == []
    assert f"Kept: {delta.relative_to(suite.path)} ({KEPT_FOREIGN})" in dry.lines
    assert delta.exists()


def test_a_proxy_test_id_naming_a_collected_test_file_is_never_pruned(
    suite: pytest.Pytester, cli: Cli
) -> None:
    """`suite/test_app.py::checkout flow` names a file pytest collects, and no test in it:
    only a test id the run that wrote the usage log collected is prunable by it."""
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    (alpha,) = files_of(suite.path)[node("alpha")]
    served = alpha.with_name("e" * 32 + ".json")  # as the proxy would write it
    data = json.loads(alpha.read_text())
    data["test_id"] = "suite/test_app.py::checkout flow"
    served.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    suite.runpytest().assert_outcomes(passed=4)  # the full suite, in replay
    os.utime(served, (1, 1))  # older than the run: only the log could keep it
    dry = cli("prune", "--dry-run")
    assert listed(dry.lines) == []
    assert f"Kept: {served.relative_to(suite.path)} ({KEPT_FOREIGN})" in dry.lines
    done = cli("prune")
    assert listed(done.lines) == []
    assert any(line.startswith("Kept: 1 file not made by this pytest run") for line in done.lines)
    assert served.exists()
    result = suite.runpytest("--hashreplay-prune")
    result.stdout.fnmatch_lines(["hashreplay: pruned 0 unused recordings*"])
    assert served.exists()


# --- nothing outside the store is deleted ---------------------------------------------------


def test_symlinked_recordings_are_refused_not_deleted(
    suite: pytest.Pytester, cli: Cli, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = suite.path
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    old = files_of(root)
    alpha_v2 = TESTS["alpha"].replace("'alpha'", "'alpha v2'")
    write_suite(suite, alpha=alpha_v2, beta=TESTS["beta"], models=TESTS["models"])
    suite.runpytest("--inference-mode=record-if-missing").assert_outcomes(passed=3)
    (gamma,) = old[node("alpha")]  # unused now: alpha asks something new
    outside = tmp_path_factory.mktemp("outside") / "alpha.json"
    shutil.move(gamma, outside)
    gamma.symlink_to(outside)  # the unused recording is a link to a file outside the store
    os.utime(gamma, (1, 1), follow_symlinks=False)

    dry = cli("prune", "--dry-run")
    assert dry.code == 1
    assert "error: cannot delete " in dry.err
    assert (
        f"/{gamma.name}: is a symlink to {outside}: prune deletes "
        "nothing through a link; replace the link with the file it points to, or delete the "
        "link yourself"
    ) in dry.err
    done = cli("prune")
    assert done.code == 1
    assert gamma.is_symlink() and outside.exists()

    # a recordings directory that is a link: the files it reaches are not deleted either
    recordings = root / "suite" / "recordings"
    moved = tmp_path_factory.mktemp("shared") / "recordings"
    shutil.move(recordings, moved)
    recordings.symlink_to(moved, target_is_directory=True)
    done = cli("prune")
    assert done.code == 1
    assert "cannot delete " in done.err
    assert (
        f"its recordings directory suite/recordings is a symlink to {moved}: prune deletes "
        "nothing through a link; replace the link with a directory, or delete the file "
        "yourself"
    ) in done.err
    assert len(list(moved.iterdir())) == 4  # alpha v2, beta, gamma and the link to alpha


def test_prune_leaves_what_is_not_a_blob(
    suite: pytest.Pytester, cli: Cli, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = suite.path
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    suite.runpytest().assert_outcomes(passed=4)  # the usage log
    blobs = root / "recordings" / "blobs"
    blobs.mkdir()
    unused_blob = blobs / ("0" * 32)
    unused_blob.write_bytes(b"no recording refers to me")
    notes = blobs / "README"
    notes.write_text("the team's notes")
    precious = tmp_path_factory.mktemp("home") / "thesis.pdf"
    precious.write_bytes(b"%PDF-")
    link = blobs / ("1" * 32)
    link.symlink_to(precious)
    hidden = blobs / ".gitkeep"
    hidden.write_bytes(b"")
    for path in (unused_blob, notes, hidden):
        os.utime(path, (1, 1))
    os.utime(link, (1, 1), follow_symlinks=False)

    done = cli("prune")
    assert done.code == 1
    assert f"Pruned: {unused_blob.relative_to(root)} (no recording refers to this blob)" in (
        done.lines
    )
    assert (
        f"will not touch {notes.relative_to(root)}: is not a blob (a blob is a file named by "
        f"the 32 hex digits of its xxh3): prune leaves it; move it out of recordings/blobs"
    ) in done.err
    assert (
        f"/{link.name}: is a symlink to {precious}, not a blob: "
        "prune deletes nothing through a link"
    ) in done.err
    assert not unused_blob.exists()
    assert notes.read_text() == "the team's notes"
    assert link.is_symlink() and precious.read_bytes() == b"%PDF-"
    assert hidden.exists()


def test_a_blob_directory_that_is_a_symlink_is_refused_whole(
    suite: pytest.Pytester, cli: Cli, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = suite.path
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=4)
    elsewhere = tmp_path_factory.mktemp("downloads")
    keep = elsewhere / ("2" * 32)  # named like a blob, referenced by nothing
    keep.write_bytes(b"someone's file")
    os.utime(keep, (1, 1))
    blobs = root / "recordings" / "blobs"
    blobs.symlink_to(elsewhere, target_is_directory=True)
    suite.runpytest().assert_outcomes(passed=4)

    for command in (["prune", "--dry-run"], ["prune"]):
        result = cli(*command)
        assert result.code == 1
        assert (
            f"/blobs: is a symlink to {elsewhere}: prune "
            "deletes no blobs through a link; replace the link with the directory it points to"
        ) in result.err
    plugin = suite.runpytest("--hashreplay-prune")
    plugin.stdout.fnmatch_lines(
        [f"hashreplay: will not touch *recordings/blobs: is a symlink to {elsewhere}*"]
    )
    assert keep.read_bytes() == b"someone's file"
    assert json.loads((root / ".hashreplay" / "usage.json").read_text())["full_suite"]
