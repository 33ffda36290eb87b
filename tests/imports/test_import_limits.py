"""`hashreplay import vcr|ogx` keep memory bounded and never crash on hostile input: a YAML
"billion laughs" cassette, compression bombs and bodies nested too deep are refused with an
error naming the file, the limit and (for nesting) the field path (docs/design.md §13)."""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import brotli
import pytest
import yaml

from hashreplay.core.bodies import MAX_NESTING
from hashreplay.core.constants import DEFAULT_MAX_BODY_BYTES
from tests.imports.test_import_ogx import CHAT as OGX_CHAT
from tests.imports.test_import_ogx import ogx, run_cli
from tests.imports.test_import_vcr import cassette, interaction, recordings

MiB = 1024 * 1024

#: The classic: nine levels of nine aliases, 9**9 (387 million) "lol"s once expanded.
BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
interactions:
- request:
    body: '{"model": "m"}'
    headers: {Content-Type: [application/json], X-Laugh: *i}
    method: POST
    uri: https://api.example.com/v1/chat/completions
  response:
    body: {string: '{"ok": true}'}
    headers: {Content-Type: [application/json]}
    status: {code: 200, message: OK}
version: 1
"""


def peak_during(action: Callable[[], Any]) -> tuple[Any, int]:
    """What `action` returned and the peak bytes Python allocated while it ran."""
    tracemalloc.start()
    try:
        result = action()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def vcr(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> tuple[int, str, str]:
    return run_cli(capsys, "import", "vcr", "--no-collect", "--root", str(root), *args)


def test_a_billion_laughs_cassette_is_refused_in_bounded_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tests/cassettes/test_app/test_laughs.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(BILLION_LAUGHS)
    assert path.stat().st_size < 1200
    (code, out, err), peak = peak_during(lambda: vcr(capsys, tmp_path, str(path)))
    assert code == 1
    assert (
        f"skipped: {path}: its YAML aliases expand it to more than max_body_bytes "
        f"({DEFAULT_MAX_BODY_BYTES}) beyond the file's own {path.stat().st_size} bytes "
        '(a "billion laughs" cassette?); not imported: raise max_body_bytes in '
        "[tool.hashreplay] if it is genuine"
    ) in err
    assert "0 imported from 1 files" in out
    assert peak < 16 * MiB, peak
    assert not recordings(tmp_path)


def test_an_alias_that_contains_itself_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tests/cassettes/test_app/test_loop.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(BILLION_LAUGHS.replace("X-Laugh: *i", "X-Loop: &loop [*loop]"))
    code, _, err = vcr(capsys, tmp_path, str(path))
    assert code == 1
    assert f"skipped: {path}: " in err


def test_ordinary_aliases_still_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """PyYAML writes an anchor for an object a cassette holds twice (vcrpy's headers)."""
    shared = {"Content-Type": ["application/json"]}
    first, second = interaction(), interaction(request_body='{"model": "m", "n": 2}')
    first["response"]["headers"] = second["response"]["headers"] = shared
    path = tmp_path / "tests/cassettes/test_app/test_twice.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump({"interactions": [first, second], "version": 1}))
    assert "&id001" in path.read_text()
    code, out, err = vcr(capsys, tmp_path, str(path))
    assert code == 0, err
    assert "2 imported from 1 files" in out


@pytest.mark.parametrize(
    ("coding", "compress"),
    [("gzip", gzip.compress), ("deflate", zlib.compress), ("br", brotli.compress)],
)
def test_a_compression_bomb_is_refused_in_bounded_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], coding: str, compress: Any
) -> None:
    (tmp_path / "pyproject.toml").write_text(f"[tool.hashreplay]\nmax_body_bytes = {MiB}\n")
    bomb = compress(b"\0" * (64 * MiB))  # 64 MiB of answer in well under 1 MiB of cassette
    assert len(bomb) < MiB // 4
    path = cassette(
        tmp_path / "tests/cassettes/test_app/test_bomb.yaml",
        interaction(body=bomb, headers={"Content-Encoding": [coding]}),
    )
    (code, out, err), peak = peak_during(lambda: vcr(capsys, tmp_path, str(path)))
    assert code == 1
    assert (
        f"skipped: {path}: interaction 1: the {coding} body decodes to more than {MiB} bytes, "
        f"over max_body_bytes ({MiB}) (a compression bomb?); not imported: raise "
        "max_body_bytes in [tool.hashreplay] if the body is genuine"
    ) in err
    assert peak < 12 * MiB, peak
    assert "0 imported from 1 files" in out
    assert not recordings(tmp_path)
    # within the limit the same coding decodes as before
    path.unlink()
    cassette(
        tmp_path / "tests/cassettes/test_app/test_fine.yaml",
        interaction(body=compress(b'{"ok": true}'), headers={"Content-Encoding": [coding]}),
    )
    code, _, err = vcr(capsys, tmp_path, str(tmp_path / "tests"))
    assert code == 0, err
    (stored,) = recordings(tmp_path)
    assert stored["response"]["body"] == {"ok": True}


def nested_json(levels: int) -> str:
    return '{"x": ' + "[" * (levels - 1) + "]" * (levels - 1) + "}"


@pytest.mark.parametrize("levels", [MAX_NESTING + 1, 300, 5000])
def test_a_vcr_response_nested_too_deep_is_refused_by_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], levels: int
) -> None:
    path = cassette(
        tmp_path / "tests/cassettes/test_app/test_deep.yaml", interaction(body=nested_json(levels))
    )
    code, _, err = vcr(capsys, tmp_path, str(path))
    assert code == 1
    problem = f"nested more than {MAX_NESTING} levels deep, deeper than hashreplay stores or reads"
    # past the 1,024 levels a JSON parser goes, the field path ends at the body
    where = "response.body.x[0][0][0][0]…" if levels < 1000 else "response.body"
    assert f"skipped: {path}#1: {where}: {problem}; not recorded" in err
    assert not recordings(tmp_path)


@pytest.mark.parametrize("levels", [MAX_NESTING + 1, 300])
def test_a_vcr_request_nested_too_deep_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], levels: int
) -> None:
    path = cassette(
        tmp_path / "tests/cassettes/test_app/test_deep.yaml",
        interaction(request_body=nested_json(levels)),
    )
    code, _, err = vcr(capsys, tmp_path, str(path))
    assert code == 1
    assert f"skipped: {path}#1: POST /v1/chat/completions: the body is nested more than" in err


def test_a_yaml_cassette_nested_too_deep_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tests/cassettes/test_app/test_deep.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("interactions: " + "[" * 5000 + "]" * 5000 + "\nversion: 1\n")
    code, _, err = vcr(capsys, tmp_path, str(path))
    assert code == 1
    assert f"skipped: {path}: " in err
    assert f"nested more than {MAX_NESTING} levels deep" in err


@pytest.mark.parametrize(
    ("field", "levels", "where"),
    [
        ("response", 300, "response.body.__data__.choices[0].message…"),
        ("response", 5000, "line 1 column"),
        ("request", 300, "request.body.messages[0].content[0]…"),
    ],
)
def test_an_ogx_file_nested_too_deep_is_refused_by_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, levels: int, where: str
) -> None:
    raw = ogx(OGX_CHAT)
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    if field == "response":
        raw["response"]["body"]["__data__"]["choices"][0]["message"] = value
    else:
        raw["request"]["body"]["messages"][0]["content"] = value
    source = tmp_path / "deep.json"
    source.write_text(json.dumps(raw) if levels < 900 else _dumps_deep(raw))
    root = tmp_path / "project"
    root.mkdir()
    code, _, err = run_cli(capsys, "import", "ogx", "--root", str(root), str(source))
    assert code == 1
    assert f"skipped: {source}: {where}" in err
    assert f"nested more than {MAX_NESTING} levels deep" in err
    assert not list(root.rglob("*.json"))


def _dumps_deep(value: Any) -> str:
    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)
    try:
        return json.dumps(value)
    finally:
        sys.setrecursionlimit(limit)
