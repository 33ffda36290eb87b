"""`hashreplay init` (docs/design.md §16 Activation): it appends `[tool.hashreplay]` to
`pyproject.toml` keeping every byte already there, creates the file when there is none, is
idempotent, refuses a file that is not TOML, and runs git-setup; pytest then replays."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hashreplay.cli import build_parser
from hashreplay.cli.setup import TABLE
from tests.cli.conftest import Cli

#: Comments, blank lines, odd spacing, a table after the one init adds, no final newline.
ODD = (
    "# my project: keep this comment\n"
    "[project]\n"
    'name   =  "my-app"    # spaced out\n'
    "version='1.0'\n"
    "\n\n"
    "[tool.black]\n"
    "line-length=88\n"
    "  # an indented comment\n"
    "[tool.pytest.ini_options]\n"
    'addopts = "-q"'
)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "my-app"
    root.mkdir()
    monkeypatch.chdir(root)
    monkeypatch.delenv("HASHREPLAY_ROOT", raising=False)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    return root


def git_init(root: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)


def test_init_appends_the_table_keeping_every_byte(project: Path, cli: Cli) -> None:
    pyproject = project / "pyproject.toml"
    pyproject.write_bytes(ODD.encode())
    result = cli("init")
    assert result.code == 0, result.err
    after = pyproject.read_bytes()
    assert after.startswith(ODD.encode())  # byte for byte, the missing final newline too
    assert after == (ODD + "\n\n" + TABLE).encode()
    assert "pyproject.toml: added [tool.hashreplay]; plain `pytest` now replays" in result.out
    assert "not in a git repository: skipped git-setup" in result.out


def test_init_keeps_windows_line_endings(project: Path, cli: Cli) -> None:
    pyproject = project / "pyproject.toml"
    original = b'[project]\r\nname = "x"\r\n'
    pyproject.write_bytes(original)
    assert cli("init").code == 0
    after = pyproject.read_bytes()
    assert after == original + b"\r\n" + TABLE.replace("\n", "\r\n").encode()


def test_init_is_idempotent(project: Path, cli: Cli) -> None:
    pyproject = project / "pyproject.toml"
    pyproject.write_text(ODD)
    assert cli("init").code == 0
    once = pyproject.read_bytes()
    again = cli("init")
    assert again.code == 0
    assert pyproject.read_bytes() == once
    assert "pyproject.toml: already has [tool.hashreplay]; nothing changed" in again.out


def test_a_table_written_by_hand_counts(project: Path, cli: Cli) -> None:
    pyproject = project / "pyproject.toml"
    text = '[tool.hashreplay]\nrecordings_dir = "cassettes"\n\n[tool.black]\n'
    pyproject.write_text(text)
    result = cli("init")
    assert result.code == 0
    assert pyproject.read_text() == text
    assert "already has [tool.hashreplay]" in result.out


def test_init_creates_the_file_when_there_is_none(project: Path, cli: Cli) -> None:
    result = cli("init")
    assert result.code == 0, result.err
    assert (project / "pyproject.toml").read_text() == TABLE
    assert "pyproject.toml: created, with [tool.hashreplay]" in result.out


def test_init_refuses_a_file_that_is_not_toml(project: Path, cli: Cli) -> None:
    pyproject = project / "pyproject.toml"
    broken = b'[project]\nname = "x"\nversion = = 2\n'
    pyproject.write_bytes(broken)
    result = cli("init")
    assert result.code == 2
    assert str(pyproject) in result.err
    assert "line 3" in result.err
    assert "fix it, then run hashreplay init again (nothing was changed)" in result.err
    assert pyproject.read_bytes() == broken


def test_init_refuses_a_tool_inline_table_it_cannot_extend(project: Path, cli: Cli) -> None:
    pyproject = project / "pyproject.toml"
    text = "tool = { black = { line-length = 88 } }\n"
    pyproject.write_text(text)
    result = cli("init")
    assert result.code == 2
    assert "add `hashreplay = {}` to it by hand" in result.err
    assert pyproject.read_text() == text


def test_init_runs_git_setup_in_a_repository(project: Path, cli: Cli) -> None:
    git_init(project)
    result = cli("init")
    assert result.code == 0, result.err
    assert ".gitattributes: added" in result.out
    assert "diff.hashreplay.textconv" in result.out
    assert (project / ".gitattributes").is_file()
    again = cli("init")
    assert again.code == 0
    assert "already has [tool.hashreplay]; nothing changed" in again.out
    assert "already sends recordings to the hashreplay diff driver" in again.out


def test_init_from_a_subdirectory_writes_at_the_project_root(
    project: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    git_init(project)
    (project / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    inner = project / "tests" / "unit"
    inner.mkdir(parents=True)
    monkeypatch.chdir(inner)
    assert cli("init").code == 0
    assert "[tool.hashreplay]" in (project / "pyproject.toml").read_text()
    assert not (inner / "pyproject.toml").exists()


def test_init_is_listed_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    build_parser().print_help()
    assert "init" in capsys.readouterr().out


def test_after_init_plain_pytest_replays(
    pytester: pytest.Pytester, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table init writes is what the plugin looks for: plain `pytest` intercepts."""
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    monkeypatch.chdir(pytester.path)
    assert cli("init", "--root", str(pytester.path)).code == 0
    pytester.makepyfile(
        test_x="import httpx\n\ndef test_x():\n    httpx.get('http://127.0.0.1:9/v1/models')\n"
    )
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:asyncio"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["hashreplay: 0 replayed, 0 recorded, 1 missed (replay)"])


@pytest.mark.parametrize(
    "table",
    [TABLE, "[tool.hashreplay]\n", "[tool]\nhashreplay = {}\n"],
    ids=["init", "empty", "inline"],
)
def test_status_names_a_table_that_sets_nothing(project: Path, cli: Cli, table: str) -> None:
    """The table `init` writes holds only comments: status says it is there, not that there
    is no config (the project has opted in; every setting is at its default)."""
    (project / "pyproject.toml").write_text('[project]\nname = "app"\n\n' + table)
    result = cli("status")
    assert result.code == 0, result.err
    assert (
        "config: pyproject.toml ([tool.hashreplay] sets nothing: every setting at its default)"
        in result.lines
    )
    assert "mode source: default" in result.lines


def test_status_without_a_table_says_the_defaults_are_all_there_is(project: Path, cli: Cli) -> None:
    (project / "pyproject.toml").write_text('[project]\nname = "app"\n')
    result = cli("status", "--root", str(project))
    assert result.code == 0, result.err
    assert "config: none (defaults)" in result.lines
