"""Paths named on the command line: a directory gives the recordings inside it, whatever it
is called; a path holding none is a warning and exit status 1 (never a quiet `0/0`)."""

from __future__ import annotations

import shutil

import pytest

from tests.cli.conftest import CHAT, STREAM, Cli, Project
from tests.cli.test_normalize import edit, script


@pytest.fixture
def cassettes(project: Project) -> Project:
    """Two recordings copied into `old/cassettes/` (not a `recordings` directory), one with
    a volatile value back in its response, beside a JSON file that is not a recording."""
    target = project.root / "old" / "cassettes"
    target.mkdir(parents=True)
    chat, stream = project.one(CHAT), project.one(STREAM)
    for path in (chat, stream):
        shutil.copy(path, target)
    edit(target / chat.name, lambda d: d["response"]["body"].update(created=1))
    (project.root / "old" / "package.json").write_text('{"name": "not a recording"}\n')
    return project


def test_normalize_and_the_script_take_a_directory_of_any_name(
    cassettes: Project, cli: Cli
) -> None:
    root = cassettes.root
    name = next(p.name for p in cassettes.of_test(CHAT) if "cassettes" in p.parts)
    dry = script("--dry-run", "old/cassettes", cwd=root)
    assert (dry.code, dry.lines) == (
        0,
        [f"Would normalize: old/cassettes/{name}", "Summary: 1/2 files modified"],
    )
    assert cli("normalize", "--dry-run", "old").lines[-1] == "Summary: 1/2 files modified"
    verify = cli("verify", "old/cassettes")
    assert verify.lines[-1] == "Summary: 2/2 files with problems"  # unreachable there
    assert cli("rehash", "--dry-run", "old").lines[-1] == "Summary: 0/2 files re-keyed"


def test_paths_without_recordings_warn_and_fail(cassettes: Project, cli: Cli) -> None:
    root = cassettes.root
    (root / "docs").mkdir()
    (root / "docs" / "data.json").write_text("{}")
    for command in ("normalize", "verify", "rehash"):
        result = cli(command, "docs")
        assert result.code == 1, command
        assert "warning: docs: no recordings in it" in result.err
        assert result.lines[-1].startswith("Summary: 0/0 files")
    mixed = cli("normalize", "--dry-run", "docs", "old/cassettes")
    assert mixed.code == 1
    assert "Summary: 1/2 files modified" in mixed.lines
    empty = script("docs", cwd=root)
    assert empty.code == 1
    assert "warning: docs: no recordings in it" in empty.err


def test_status_paths_lists_every_directory_with_recordings(
    project: Project, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = cli("status", "--paths")
    assert (result.code, result.lines) == (
        0,
        ["recordings", "tests/llm/recordings", "tests/recordings"],
    )
    monkeypatch.chdir(project.root / "tests")  # the root is found; paths stay relative to here
    (project.root / ".git").mkdir()
    inner = cli("status", "--paths")
    # relative to here, the common directory too: `git add $(hashreplay status --paths)`
    assert inner.lines == ["../recordings", "llm/recordings", "recordings"]
