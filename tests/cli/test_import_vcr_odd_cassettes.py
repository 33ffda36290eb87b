"""`hashreplay import vcr` over a directory holding one odd cassette among good ones (docs/cli.md,
"import"): an empty or comment-only file, a YAML scalar or list, a URI no parser takes
(`http://[::1`), a URI without a host. Each is skipped with its name and why, every good
cassette is imported, and the exit status is 1 because some were skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.imports.test_import_vcr import cassette, in_tmp, interaction, recordings, run

__all__ = ["in_tmp"]

NOT_A_MAPPING = "unknown shape: no `interactions` list"
ODD = {
    "empty": ("", f"{NOT_A_MAPPING} (empty, or comments only: not a vcrpy cassette?)"),
    "comments only": ("# by hand\n# nothing here\n", f"{NOT_A_MAPPING} (empty, or comments only"),
    "a scalar": ("just words\n", f"{NOT_A_MAPPING} (a str: not a vcrpy cassette?)"),
    "a number": ("42\n", f"{NOT_A_MAPPING} (a int: not a vcrpy cassette?)"),
    "a list": ("- 1\n- 2\n", f"{NOT_A_MAPPING} (a list: not a vcrpy cassette?)"),
}
BAD_URIS = {
    "http://[::1": "interaction 1 is unreadable: ValueError: Invalid IPv6 URL",
    "http://[::1]:99999/x": "interaction 1 is unreadable: ValueError: Port out of range",
    "/v1/relative": "interaction 1 is unreadable: ValueError: uri '/v1/relative' is not an",
}


def _good(root: Path) -> None:
    cassette(root / "tests/cassettes/test_a/test_good.yaml", interaction())
    cassette(root / "tests/cassettes/test_z/test_last.yaml", interaction())


def _imported(root: Path) -> list[str]:
    return sorted(r["test_id"] for r in recordings(root))


@pytest.mark.parametrize("case", ODD)
def test_an_odd_cassette_is_skipped_and_the_rest_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    _good(tmp_path)
    content, reason = ODD[case]
    odd = tmp_path / "tests/cassettes/test_m/test_odd.yaml"
    odd.parent.mkdir(parents=True)
    odd.write_text(content)
    code, out, err = run(capsys, "--root", str(tmp_path), str(tmp_path / "tests"))
    assert code == 1
    assert f"skipped: {odd.relative_to(tmp_path)}: {reason}" in err
    assert "Traceback" not in err
    assert _imported(tmp_path) == ["tests/test_a.py::test_good", "tests/test_z.py::test_last"]
    assert "1 skipped" in out


@pytest.mark.parametrize("uri", BAD_URIS)
def test_a_cassette_with_a_uri_no_parser_takes_is_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], uri: str
) -> None:
    _good(tmp_path)
    odd = cassette(tmp_path / "tests/cassettes/test_m/test_uri.yaml", interaction(uri=uri))
    code, out, err = run(capsys, "--root", str(tmp_path), str(tmp_path / "tests"))
    assert code == 1
    assert f"skipped: {odd.relative_to(tmp_path)}#1: " in err or (
        f"skipped: {odd.relative_to(tmp_path)}: " in err
    )
    assert BAD_URIS[uri] in err
    assert _imported(tmp_path) == ["tests/test_a.py::test_good", "tests/test_z.py::test_last"]
    assert "1 skipped" in out


def test_every_odd_cassette_at_once_is_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _good(tmp_path)
    for i, (content, _) in enumerate(ODD.values()):
        (tmp_path / f"tests/cassettes/test_m/test_odd{i}.yaml").parent.mkdir(
            parents=True, exist_ok=True
        )
        (tmp_path / f"tests/cassettes/test_m/test_odd{i}.yaml").write_text(content)
    code, out, err = run(capsys, "--root", str(tmp_path), str(tmp_path / "tests"))
    assert code == 1
    assert err.count("skipped: ") == len(ODD)
    assert f"{len(ODD)} skipped" in out
    assert _imported(tmp_path) == ["tests/test_a.py::test_good", "tests/test_z.py::test_last"]
