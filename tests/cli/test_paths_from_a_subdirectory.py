"""Every path the CLI prints is relative to the working directory, also when that is a
subdirectory of the project (`../../recordings/x.json`), so it can be pasted into the next
command from there; paths outside the project stay absolute (docs/cli.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.cli.conftest import CHAT, CLAUDE, STREAM, Cli, Project


@pytest.fixture
def deep(project: Project, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The project with its `[tool.hashreplay]` table, the CLI run from `tests/llm`."""
    (project.root / "pyproject.toml").write_text('[tool.hashreplay]\nmode = "replay"\n')
    here = project.root / "tests" / "llm"
    monkeypatch.chdir(here)
    return here


def _paths(text: str) -> list[str]:
    return re.findall(r"(?:\.\./)*[\w./-]*recordings(?:/[\w.-]+)?", text)


def test_status_list_and_show_print_paths_relative_to_here(
    project: Project, cli: Cli, deep: Path
) -> None:
    status = cli("status")
    assert status.code == 0, status.err
    assert f"root: {project.root} (from " in status.out  # which project: absolute
    assert "config: ../../pyproject.toml" in status.lines
    assert "mode source: config (../../pyproject.toml)" in status.lines
    assert "common directory: ../../recordings" in status.lines
    shown = [line.split("\t")[0].removeprefix("recordings: ") for line in status.lines]
    assert {"../../recordings", "recordings", "../recordings"} <= set(shown)
    assert sorted(cli("status", "--paths").lines) == [
        "../../recordings",
        "../recordings",
        "recordings",
    ]

    listing = cli("list")
    files = [line.split("\t")[-1] for line in listing.lines]
    assert len(files) == len(project.files())
    for file in files:
        assert not file.startswith("/"), file
        assert (deep / file).resolve() in project.files()  # it names the file from here
    chat = next(f for f in files if f.startswith("../recordings/"))
    # what `list` printed is what `show` takes, from here
    shown_file = cli("show", chat)
    assert shown_file.code == 0, shown_file.err
    assert f"file:      {chat}" in shown_file.lines
    claude = project.one(CLAUDE)
    assert cli("show", claude.name[:12]).lines[0] == f"file:      recordings/{claude.name}"


def test_verify_rehash_and_normalize_print_paths_relative_to_here(
    project: Project, cli: Cli, deep: Path
) -> None:
    chat = project.one(CHAT)
    data = json.loads(chat.read_text())
    data["response"]["body"]["id"] = "chatcmpl-not-normalised"
    chat.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    stream = project.one(STREAM)
    misnamed = stream.with_name("0" * 32 + ".json")
    stream.rename(misnamed)
    models = next(p for p in project.files() if p.name.startswith("models-"))

    verify = cli("verify")
    named = {line.split(": ", 1)[0] for line in verify.lines if ": " in line}
    assert f"../recordings/{misnamed.name}" in named
    for path in named - {"Summary"}:
        assert (deep / path).resolve().exists(), path

    rehash = cli("rehash", "--dry-run")
    assert any(
        line.startswith(f"Would rename: ../recordings/{misnamed.name} -> ") for line in rehash.lines
    ), rehash.out
    normalize = cli("normalize", "--dry-run")
    assert f"Would normalize: ../recordings/{chat.name}" in normalize.lines
    everything = verify.out + verify.err + rehash.out + rehash.err + normalize.out
    assert str(project.root) not in everything
    assert f"../../recordings/{models.name}" not in verify.out  # a clean file is not listed


def test_errors_show_paths_relative_to_here(project: Project, cli: Cli, deep: Path) -> None:
    broken = project.one(CLAUDE)
    broken.write_text("{")
    listing = cli("list")
    assert listing.code == 1
    assert f"error: recordings/{broken.name}: unreadable: " in listing.err
    prune = cli("prune", "--dry-run")
    assert prune.code == 1
    assert "no usage log at ../../.hashreplay/usage.json: run the test suite first" in prune.err
    assert str(project.root) not in listing.err + prune.err


def test_paths_outside_the_project_stay_absolute(
    project: Project, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    listing = cli("list", "--root", str(project.root))
    assert listing.code == 0, listing.err
    assert all(line.split("\t")[-1].startswith(str(project.root)) for line in listing.lines)
    assert _paths(listing.out)
