"""The project root outside pytest (`core/paths.py`, docs/design.md §9)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hashreplay.core.config import load_config
from hashreplay.core.errors import ConfigError
from hashreplay.core.paths import find_root


def test_the_nearest_hashreplay_table_wins_over_nearer_pytest_markers(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text("[tool.hashreplay]\n")
    inner = tmp_path / "tests" / "sub"
    inner.mkdir(parents=True)
    (tmp_path / "tests" / "pytest.ini").write_text("[pytest]\n")
    found = find_root(env={}, start=inner)
    assert found.path == tmp_path
    assert found.reason == f"{tmp_path / 'pyproject.toml'} ([tool.hashreplay])"


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("pytest.ini", "[pytest]\n"),
        (".pytest.ini", ""),
        ("pyproject.toml", "[tool.pytest.ini_options]\naddopts = ''\n"),
        ("tox.ini", "[tox]\n[pytest]\naddopts = -q\n"),
        ("setup.cfg", "[metadata]\nname = x\n[tool:pytest]\n"),
    ],
)
def test_pytest_rootdir_markers(tmp_path: Path, name: str, content: str) -> None:
    (tmp_path / name).write_text(content)
    inner = tmp_path / "a" / "b"
    inner.mkdir(parents=True)
    found = find_root(env={}, start=inner)
    assert (found.path, found.reason) == (tmp_path, f"{tmp_path / name} (pytest's rootdir marker)")


def test_files_that_are_not_markers_are_passed_over(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    inner = tmp_path / "pkg"
    inner.mkdir()
    (inner / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (inner / "setup.cfg").write_text("[metadata]\nname = x\n")
    (inner / "tox.ini").write_text("[tox]\n")
    found = find_root(env={}, start=inner)
    assert (found.path, found.reason) == (tmp_path, f"{tmp_path / '.git'} (the git repository)")


def test_environment_and_explicit_roots_win(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.hashreplay]\n")
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert find_root(env={"HASHREPLAY_ROOT": str(other)}, start=tmp_path).reason == (
        "HASHREPLAY_ROOT"
    )
    assert find_root(other, env={"HASHREPLAY_ROOT": str(tmp_path)}).path == other


def test_no_marker_means_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    found = find_root(env={})
    if found.path != tmp_path:  # some ancestor of the temporary directory has a marker
        pytest.skip(f"{found.reason} lies above the temporary directory")
    assert found.reason.startswith("the working directory")
    config = load_config(env={})
    assert (config.root, config.root_reason) == (tmp_path, found.reason)


def test_a_broken_pyproject_on_the_way_is_named(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.hashreplay\n")
    with pytest.raises(ConfigError, match=r"cannot read .*pyproject.toml while looking"):
        find_root(env={}, start=tmp_path)


def test_load_config_from_a_subdirectory_reads_the_root_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `hashreplay.install()` and `hashreplay serve` get when started anywhere inside."""
    (tmp_path / "pyproject.toml").write_text('[tool.hashreplay]\nmode = "record"\n')
    inner = tmp_path / "services" / "api"
    inner.mkdir(parents=True)
    monkeypatch.chdir(inner)
    config = load_config(env={})
    assert config.root == tmp_path
    assert config.common_dir == tmp_path / "recordings"
    assert config.config_file == tmp_path / "pyproject.toml"
    assert config.mode.value == "record"
