"""`import ogx` of an exchange that got no HTTP response: like a live call, it is no answer
(docs/design.md, "Only answers are recorded"), so it is skipped with the reason and the fix,
unless `record_failures = "all"`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hashreplay.cli import main
from tests.imports.test_import_ogx import ERROR, FIXTURES


def no_response_source(tmp_path: Path) -> Path:
    data = json.loads((FIXTURES / ERROR).read_text())
    data["response"]["exception_data"] = {"type": "ConnectError", "message": "connection refused"}
    data["response"]["exception_message"] = "connection refused"
    sources = tmp_path / "sources"
    sources.mkdir()
    (sources / ERROR).write_text(json.dumps(data))
    return sources


def test_a_no_response_entry_is_skipped_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sources = no_response_source(tmp_path)
    root = tmp_path / "project"
    root.mkdir()
    capsys.readouterr()
    code = main(["import", "ogx", "--root", str(root), str(sources)])
    out, err = capsys.readouterr()
    assert code == 1
    assert (
        "it holds a call that got no HTTP response (ConnectError: connection refused), and "
        "hashreplay records only answers; re-record that test with the upstream reachable, "
        'or set record_failures = "all" in [tool.hashreplay] to import it as it is'
    ) in err
    assert "0 imported" in out
    assert list(root.rglob("*.json")) == []


def test_record_failures_all_imports_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sources = no_response_source(tmp_path)
    root = tmp_path / "project"
    root.mkdir()
    (root / "pyproject.toml").write_text('[tool.hashreplay]\nrecord_failures = "all"\n')
    assert main(["import", "ogx", "--root", str(root), str(sources)]) == 0
    (path,) = [p for p in root.rglob("*.json") if ".hashreplay" not in p.parts]
    response = json.loads(path.read_text())["response"]
    assert response["status"] is None
    assert response["exception"]["message"] == "connection refused"
