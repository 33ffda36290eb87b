"""`hashreplay status` on a project whose `[tool.hashreplay]` is invalid: with a mode given
it reports what it can (each setting in error at its default) and names every problem; with
the mode itself unknown it is the usage error every other command gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import Cli

MODES = "replay, record-if-missing, record, live"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("INFERENCE_MODE", "HASHREPLAY_ROOT", "HASHREPLAY_PACE"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.hashreplay]\nmode = "Record"\nrecordings_dir = "llm"\npace = 3\n',
        encoding="utf-8",
    )
    (tmp_path / "llm").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_status_with_a_mode_given_reports_and_names_every_problem(
    project: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFERENCE_MODE", "replay")
    result = cli("status")
    assert result.code == 2  # the config still needs fixing
    pytest.LineMatcher(result.lines).fnmatch_lines(
        [
            "mode: replay",
            "mode source: env (INFERENCE_MODE)",
            "config: pyproject.toml is invalid: each setting in error takes its "
            "default here (the problems are listed at the end)",
            "common directory: llm",  # a valid setting still counts
            "total: 0 files*",
        ]
    )
    assert "invalid [tool.hashreplay] in pyproject.toml:" in result.err  # relative to here
    assert f"  mode: invalid mode 'Record': expected one of {MODES}" in result.err
    assert "(modes are lower-case: 'record')" in result.err
    assert "  `pace`: 3 is not a pace" in result.err


def test_status_without_a_mode_is_a_usage_error_naming_every_problem(
    project: Path, cli: Cli
) -> None:
    result = cli("status")
    assert result.code == 2
    assert result.out == ""
    assert "mode: invalid mode 'Record'" in result.err
    assert "`pace`: 3 is not a pace" in result.err


def test_other_commands_still_refuse_an_invalid_config(
    project: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFERENCE_MODE", "replay")
    result = cli("list")
    assert result.code == 2
    assert result.out == ""
    assert "mode: invalid mode 'Record'" in result.err
