"""`recordings_dir` must name a directory inside the project root (docs/design.md §9, §13):
`"../victim2"` or an absolute path elsewhere is refused with the value, the root and what to
do, before any command reads, writes or prunes a file there; a directory inside the project
(nested, or given as an absolute path) is accepted. A symlink out of the root is refused
where the directory is used, as every recordings directory's is
(tests/hardening/test_verify_lists_every_problem.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hashreplay.cli import main
from hashreplay.core.config import load_config
from hashreplay.core.errors import ConfigError


def project(tmp_path: Path, recordings_dir: str) -> Path:
    root = tmp_path / "proj"
    root.mkdir(exist_ok=True)
    (root / "pyproject.toml").write_text(
        f"[tool.hashreplay]\nrecordings_dir = {recordings_dir!r}\n"
    )
    return root


def victim(tmp_path: Path) -> Path:
    directory = tmp_path / "victim2"
    directory.mkdir(exist_ok=True)
    (directory / "notes.txt").write_text("not a recording\n")
    (directory / ("a" * 32 + ".json")).write_text("{}\n")
    return directory


@pytest.mark.parametrize("value", ["../victim2", "{victim}", "sub/../../victim2"])
def test_a_recordings_dir_outside_the_root_is_refused(tmp_path: Path, value: str) -> None:
    outside = victim(tmp_path)
    root = project(tmp_path, value.format(victim=outside))
    with pytest.raises(ConfigError) as caught:
        load_config(root, env={})
    message = str(caught.value)
    assert f"recordings_dir {value.format(victim=outside)!r} is {outside}" in message
    assert f"outside the project root {root}" in message
    assert 'use a directory inside it (the default is "recordings")' in message


@pytest.mark.parametrize("command", [["prune"], ["prune", "--dry-run"], ["verify"], ["rehash"]])
def test_no_command_touches_a_directory_outside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    outside = victim(tmp_path)
    before = sorted((p.name, p.read_bytes()) for p in outside.iterdir())
    root = project(tmp_path, "../victim2")
    assert main([*command, "--root", str(root)]) == 2
    assert "outside the project root" in capsys.readouterr().err
    assert sorted((p.name, p.read_bytes()) for p in outside.iterdir()) == before


@pytest.mark.parametrize("value", ["data/recordings", "{root}/data/recordings", "."])
def test_a_recordings_dir_inside_the_root_is_accepted(tmp_path: Path, value: str) -> None:
    root = project(tmp_path, value.format(root=tmp_path / "proj"))
    config = load_config(root, env={})
    assert config.common_dir == (root / value.format(root=root)).resolve()
