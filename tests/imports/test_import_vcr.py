"""`hashreplay import vcr` on hand-made cassettes: layouts, encodings, filters, bad input."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any

import brotli
import orjson
import pytest
import yaml

from hashreplay.cli import main
from hashreplay.engine.import_vcr import layout_test_id, read_cassette
from hashreplay.engine.importing import UnreadableSource

URL = "https://api.example.com/v1/chat/completions"
ANSWER = {"id": "chatcmpl-9", "created": 1700000000, "choices": [{"message": {"content": "hi"}}]}


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # relative paths on the command line, as users type them


def interaction(
    *,
    uri: str = URL,
    request_body: Any = '{"model": "m", "messages": [{"role": "user", "content": "hey"}]}',
    body: Any = None,
    headers: dict[str, list[str]] | None = None,
    status: int = 200,
) -> dict[str, Any]:
    return {
        "request": {
            "body": request_body,
            "headers": {
                "Content-Type": ["application/json"],
                "Authorization": ["Bearer sk-live-abcdefghijklmnop0123"],
            },
            "method": "POST",
            "uri": uri,
        },
        "response": {
            "status": {"code": status, "message": "OK"},
            "headers": headers or {"Content-Type": ["application/json"]},
            "body": {"string": orjson.dumps(ANSWER).decode() if body is None else body},
        },
    }


def cassette(path: Path, *interactions: dict[str, Any], as_json: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"interactions": list(interactions), "version": 1}
    path.write_text(json.dumps(data) if as_json else yaml.safe_dump(data))
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`hashreplay import vcr`; these hand-made cassettes have no test modules, so the test
    ids come from the layout (tests/imports/test_import_vcr_names.py collects them)."""
    capsys.readouterr()
    code = main(["import", "vcr", "--no-collect", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def recordings(root: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(root.rglob("recordings/*.json"))]


# --- test ids -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("relative", "expected"),
    [
        ("tests/cassettes/test_app/test_chat.yaml", "tests/test_app.py::test_chat"),
        ("tests/cassettes/test_app/test_x[a-b].yaml", "tests/test_app.py::test_x[a-b]"),
        ("tests/cassettes/test_app/TestApi.test_y.yml", "tests/test_app.py::TestApi::test_y"),
        ("cassettes/test_top/test_z.json", "test_top.py::test_z"),
        ("tests/cassettes/test_app/test_v[1.5].yaml", "tests/test_app.py::test_v[1.5]"),
    ],
)
def test_test_ids_follow_pytest_recordings_layout(
    tmp_path: Path, relative: str, expected: str
) -> None:
    assert layout_test_id(tmp_path / relative, tmp_path) == expected


def test_a_cassette_outside_the_layout_or_the_root_needs_a_test_id(tmp_path: Path) -> None:
    with pytest.raises(UnreadableSource, match=r"not in pytest-recording's layout.*--test-id"):
        layout_test_id(tmp_path / "fixtures" / "chat.yaml", tmp_path)
    with pytest.raises(UnreadableSource, match="outside the project root"):
        layout_test_id(tmp_path / "cassettes" / "m" / "t.yaml", tmp_path / "project")


# --- what becomes of a cassette -------------------------------------------------------------


def test_an_interaction_is_redacted_normalised_and_stored_beside_its_test(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette(tmp_path / "tests/cassettes/test_app/test_chat.yaml", interaction())
    code, out, err = run(capsys, "--root", str(tmp_path), str(tmp_path / "tests"))
    assert code == 0, err
    (stored,) = recordings(tmp_path)
    assert stored["test_id"] == "tests/test_app.py::test_chat"
    assert stored["request"]["headers"]["authorization"] == "[secret removed]"
    assert stored["response"]["body"]["id"].startswith("rec-")
    assert stored["response"]["body"]["created"] == 0
    assert "Tests covered:\n  tests/test_app.py::test_chat" in out


@pytest.mark.parametrize(
    ("coding", "compress"),
    [("gzip", gzip.compress), ("deflate", zlib.compress), ("br", brotli.compress)],
)
def test_compressed_bodies_are_decoded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], coding: str, compress: Any
) -> None:
    headers = {"Content-Type": ["application/json"], "Content-Encoding": [coding]}
    body = compress(orjson.dumps(ANSWER))
    cassette(tmp_path / "c.yaml", interaction(body=body, headers=headers))
    code, _, err = run(capsys, "--root", str(tmp_path), "--test-id", "t.py::t", "c.yaml")
    assert code == 0, err
    (stored,) = recordings(tmp_path)
    assert stored["response"]["body"]["choices"] == ANSWER["choices"]
    assert "content-encoding" not in stored["response"]["headers"]


def test_sse_and_ndjson_bodies_become_streams_and_json_cassettes_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sse = 'data: {"choices": [{"delta": {"content": "a"}}]}\n\ndata: [DONE]\n\n'
    ndjson = '{"response": "a", "done": false}\n{"response": "b", "done": true}\n'
    cassette(
        tmp_path / "tests/cassettes/test_s/test_streams.json",
        interaction(body=sse, headers={"Content-Type": ["text/event-stream"]}),
        interaction(
            uri="http://127.0.0.1:11434/api/generate",
            body=ndjson,
            headers={"Content-Type": ["application/x-ndjson"]},
        ),
        as_json=True,
    )
    code, _, err = run(capsys, "--root", str(tmp_path), str(tmp_path / "tests"))
    assert code == 0, err
    formats = sorted(r["response"]["stream_format"] for r in recordings(tmp_path))
    assert formats == ["ndjson", "sse"]
    by_format = {
        r["response"]["stream_format"]: r["response"]["body"] for r in recordings(tmp_path)
    }
    assert by_format["ndjson"] == [
        {"done": False, "response": "a"},
        {"done": True, "response": "b"},
    ]


def test_identical_requests_become_one_sequence_in_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = interaction(body='{"n": 1}')
    second = interaction(body='{"n": 2}')
    cassette(tmp_path / "c.yaml", first, second)
    assert run(capsys, "--root", str(tmp_path), "--test-id", "t.py::t", "c.yaml")[0] == 0
    (stored,) = recordings(tmp_path)
    assert stored["response"]["body"] == {"n": 1}
    assert [r["body"] for r in stored["later_responses"]] == [{"n": 2}]


def test_the_old_httpx_layout_reads(tmp_path: Path) -> None:
    path = tmp_path / "old.yaml"
    old = {
        "request": {"method": "GET", "uri": "https://api.example.com/v1/models", "body": None},
        "response": {
            "status_code": 200,
            "headers": {"content-type": ["application/json"]},
            "content": '{"object": "list", "data": [{"id": "m1"}]}',
        },
    }
    path.write_text(yaml.safe_dump({"interactions": [old], "version": 1}))
    (entry,) = read_cassette(path, "t.py::t").entries
    assert entry.exchange is not None
    assert entry.exchange.status == 200
    assert entry.exchange.chunks == [b'{"object": "list", "data": [{"id": "m1"}]}']


def test_hosts_outside_host_are_filtered_without_failing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette(
        tmp_path / "c.yaml",
        interaction(),
        interaction(uri="https://telemetry.example.org/v1/events"),
    )
    code, out, _ = run(
        capsys,
        "--root",
        str(tmp_path),
        "--test-id",
        "t.py::t",
        "--host",
        "api.example.com",
        "c.yaml",
    )
    assert code == 0
    assert (
        "Filtered: c.yaml#2: host telemetry.example.org is not one of --host api.example.com" in out
    )
    assert len(recordings(tmp_path)) == 1


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("interactions: [oops", "not readable YAML"),
        ("- 1\n- 2\n", "unknown shape: no `interactions` list"),
        ("interactions: []\nversion: 2\n", "cassette format version 2"),
        ("!!python/object/apply:os.system ['true']\n", "not readable YAML"),
        (
            "interactions:\n- request: {method: GET}\n  response: {status: {code: 200}}\n",
            "interaction 1 is unreadable: KeyError: 'uri'",
        ),
    ],
)
def test_an_unreadable_cassette_is_skipped_with_the_reason_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, reason: str
) -> None:
    good = cassette(tmp_path / "tests/cassettes/test_a/test_good.yaml", interaction())
    bad = good.with_name("test_bad.yaml")
    bad.write_text(content)
    code, out, err = run(capsys, "--root", str(tmp_path), str(tmp_path / "tests"))
    assert code == 1
    assert f"skipped: {bad.relative_to(tmp_path)}: {reason}" in err  # relative to here
    assert [r["test_id"] for r in recordings(tmp_path)] == ["tests/test_a.py::test_good"]
    assert "1 skipped" in out


def test_an_undecodable_body_skips_its_whole_cassette(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = interaction(
        body=b"not gzip at all",
        headers={"Content-Type": ["application/json"], "Content-Encoding": ["gzip"]},
    )
    cassette(tmp_path / "c.yaml", interaction(), broken)
    code, _, err = run(capsys, "--root", str(tmp_path), "--test-id", "t.py::t", "c.yaml")
    assert code == 1
    assert "interaction 2 is unreadable: ValueError: the gzip body does not decode" in err
    assert recordings(tmp_path) == []


def test_a_second_cassette_of_the_same_test_is_a_duplicate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette(tmp_path / "tests/cassettes/test_a/test_x.json", interaction(), as_json=True)
    cassette(tmp_path / "tests/cassettes/test_a/test_x.yaml", interaction())
    code, _, err = run(capsys, "--root", str(tmp_path), str(tmp_path / "tests"))
    assert code == 1
    assert "test_x.yaml: duplicate: test tests/test_a.py::test_x was imported from" in err
    (stored,) = recordings(tmp_path)
    assert "later_responses" not in stored


def test_test_id_takes_exactly_one_cassette(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette(tmp_path / "a.yaml", interaction())
    cassette(tmp_path / "b.yaml", interaction())
    code, _, err = run(capsys, "--root", str(tmp_path), "--test-id", "t.py::t", str(tmp_path))
    assert code == 1
    assert "--test-id names the test of one cassette, and 2 files were given" in err
    assert recordings(tmp_path) == []


def test_dry_run_and_a_missing_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cassette(tmp_path / "c.yaml", interaction())
    code, out, _ = run(
        capsys, "--dry-run", "--root", str(tmp_path), "--test-id", "t.py::t", "c.yaml"
    )
    assert code == 0
    assert "Would import: c.yaml#1 -> " in out
    assert recordings(tmp_path) == []
    code, _, err = run(capsys, "--root", str(tmp_path), str(tmp_path / "nope.yaml"))
    assert code == 1
    assert "no such file or directory" in err


# --- the recorded day (docs/recordings.md, "Age") ------------------------------------------


def dated(recorded_at: Any, text: str = "hey") -> dict[str, Any]:
    item = interaction(
        request_body=json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]})
    )
    item["recorded_at"] = recorded_at
    return item


def test_recorded_at_becomes_each_responses_day_and_a_reimport_keeps_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HASHREPLAY_TODAY", "2026-03-01")  # never the import's day
    path = cassette(
        tmp_path / "tests/cassettes/test_app/test_chat.yaml",
        dated("Tue, 01 Nov 2011 04:58:44 GMT", "one"),  # Ruby VCR's form
        dated("2024-12-31T23:30:00-02:00", "two"),  # ISO 8601: the UTC day is the next
        dated("2025-02-03", "three"),
        dated("PLACEHOLDER", "four"),
        dated(None, "five"),  # absent: no day
    )
    # unquoted, YAML loads a timestamp as a datetime
    text = path.read_text()
    assert "recorded_at: PLACEHOLDER" in text
    path.write_text(text.replace("PLACEHOLDER", "2025-06-07 10:00:00"))
    code, _, err = run(capsys, "--root", str(tmp_path), str(tmp_path / "tests"))
    assert code == 0, err
    # vcrpy matches on method and URI: one sequence of five, each response with its day
    (stored,) = recordings(tmp_path)
    responses = [stored["response"], *stored["later_responses"]]
    assert [r.get("recorded_on") for r in responses] == [
        "2011-11-01",
        "2025-01-01",
        "2025-02-03",
        "2025-06-07",
        None,
    ]
    before = {p: p.read_bytes() for p in tmp_path.rglob("recordings/*.json")}

    # the cassette dated again (re-saved by another tool): the answers are the same, so
    # the file is left as it is, days included
    path.write_text(path.read_text().replace("2025-02-03", "2025-09-09"))
    code, out, err = run(capsys, "--root", str(tmp_path), str(tmp_path / "tests"))
    assert code == 0, err
    assert "(0 new, 1 unchanged, 0 overwritten, 0 kept)" in out
    assert {p: p.read_bytes() for p in tmp_path.rglob("recordings/*.json")} == before
    # --overwrite takes the source's days
    code, out, err = run(capsys, "--overwrite", "--root", str(tmp_path), str(tmp_path / "tests"))
    assert code == 0, err
    assert "(0 new, 0 unchanged, 1 overwritten, 0 kept)" in out
    (stored,) = recordings(tmp_path)
    assert stored["later_responses"][1]["recorded_on"] == "2025-09-09"


def test_an_undated_cassette_imports_with_no_day_on_any_day(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = cassette(tmp_path / "tests/cassettes/test_app/test_chat.yaml", interaction())
    monkeypatch.setenv("HASHREPLAY_TODAY", "2026-03-01")
    assert run(capsys, "--root", str(tmp_path), str(tmp_path / "tests"))[0] == 0
    (stored,) = recordings(tmp_path)
    assert "recorded_on" not in stored["response"]  # no age: neither today nor the mtime
    before = [p.read_bytes() for p in tmp_path.rglob("recordings/*.json")]
    source.touch()
    monkeypatch.setenv("HASHREPLAY_TODAY", "2026-09-01")
    code, out, _ = run(capsys, "--root", str(tmp_path), str(tmp_path / "tests"))
    assert code == 0
    assert "(0 new, 1 unchanged, 0 overwritten, 0 kept)" in out
    assert [p.read_bytes() for p in tmp_path.rglob("recordings/*.json")] == before
    code, out, _ = run_status(capsys, tmp_path)
    assert out.splitlines()[-1] == (
        "0 of 1 recording(s) older than 1d (today 2026-09-01); 1 response(s) have no "
        "recorded day (recorded before days were kept)"
    )


def run_status(capsys: pytest.CaptureFixture[str], root: Path) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["status", "--root", str(root), "--older-than", "1d"])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("value", ["yesterday", "", 20250101, "2025-13-01"])
def test_a_recorded_at_that_is_not_a_date_skips_its_cassette_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: object
) -> None:
    cassette(tmp_path / "tests/cassettes/test_app/test_chat.yaml", dated(value))
    code, _, err = run(capsys, "--root", str(tmp_path), str(tmp_path / "tests"))
    assert code == 1
    assert (
        f"interaction 1 is unreadable: ValueError: recorded_at {value!r} is not a date "
        "(expected an HTTP date like 'Tue, 01 Nov 2011 04:58:44 GMT' or ISO 8601 like "
        "'2011-11-01T04:58:44Z')"
    ) in err
    assert recordings(tmp_path) == []
