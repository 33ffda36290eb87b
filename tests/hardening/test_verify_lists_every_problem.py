"""`hashreplay verify` lists every problem of a store before it exits non-zero (docs/cli.md,
"verify"): a symlinked `recordings/` leading out of the root (the common directory, and a
test's, given on the command line or not), a symlinked file beside it, and a file reached
through such a directory, which is refused without being read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hashreplay.cli import main

HASH = "b" * 32


def store(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "proj", tmp_path / "outside"
    (root / "tests" / "recordings").mkdir(parents=True)
    (root / "api").mkdir()
    (root / "pyproject.toml").write_text("[tool.hashreplay]\n")
    (outside / "common").mkdir(parents=True)
    (outside / "api").mkdir()
    (outside / "api" / ("c" * 32 + ".json")).write_text('{"secret": "outside"}\n')
    (outside / "x.json").write_text("{}\n")
    os.symlink(outside / "common", root / "recordings")  # the common directory
    os.symlink(outside / "api", root / "api" / "recordings")  # a test's directory
    os.symlink(outside / "x.json", root / "tests" / "recordings" / f"{HASH}.json")
    return root, outside


@pytest.mark.parametrize("given", [[], ["recordings", "api/recordings", "tests/recordings"]])
def test_every_problem_is_listed_then_the_exit_status_is_1(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    given: list[str],
) -> None:
    root, outside = store(tmp_path)
    monkeypatch.chdir(root)
    assert main(["verify", "--root", str(root), *given]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert any(
        line.startswith(f"recordings: symlink to {outside / 'common'} (outside the project root")
        for line in lines
    ), out
    assert any(
        line.startswith(f"api/recordings: symlink to {outside / 'api'} (outside the project root")
        for line in lines
    ), out
    beside = f"tests/recordings/{HASH}.json"
    assert any(line.startswith(f"{beside}: symlink to {outside / 'x.json'}") for line in lines)
    assert f"{beside}: refused: it resolves to {outside / 'x.json'}, outside the project" in out
    # a file through a symlinked directory is refused, never read
    assert "no format_version" not in out
    assert "Also: 3 symlinks or temp files in recordings directories" in out
