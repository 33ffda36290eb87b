"""`hashreplay.core.store` and `hashreplay.core.format`: the store layout and file format (§4)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hashreplay.core.atomic import awrite_bytes_atomic, write_bytes_atomic
from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.constants import KEY_VERSION
from hashreplay.core.errors import RecordingError
from hashreplay.core.format import (
    RecordedException,
    RecordedRequest,
    RecordedResponse,
    Recording,
    new_recording,
)
from hashreplay.core.paths import RecordingsDirOutside
from hashreplay.core.store import (
    Store,
    dumps,
    parse_recording,
)
from hashreplay.core.streams import StreamFormat

HASH = "0123456789abcdef0123456789abcdef"
NODE = "tests/a/b/test_x.py::test_y[p]"


def make_recording(text: str = "hello", test_id: str | None = NODE, **extra: Any) -> Recording:
    request = RecordedRequest(
        method="POST",
        url="http://localhost:8000/v1/chat/completions",
        endpoint="/v1/chat/completions",
        headers={"content-type": "application/json"},
        body={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        model="m",
    )
    response = RecordedResponse(
        status=200,
        headers={"content-type": "application/json"},
        body={"id": "rec-0123456789ab", "choices": [{"message": {"content": text}}]},
    )
    return new_recording(
        test_id=test_id,
        request=request,
        responses=[response],
        id_mapping={"rec-0123456789ab": "response.body.id"},
        **extra,
    )


#: A store for files outside any project (these recordings are too small for blobs).
PLAIN = Store(Path("/nonexistent-project"), Path("/nonexistent-project/recordings"))


def write(path: Path, recording: Recording) -> None:
    """A recording written as the engine writes one (atomically, blobs first)."""
    write_bytes_atomic(path, PLAIN.dump(recording), PLAIN.temp_dir)


def valid_bytes() -> bytes:
    return dumps(make_recording().model_dump(mode="json"))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    return project.resolve()


@pytest.fixture
def store(root: Path) -> Store:
    return Store(root, root / "recordings")


# --- layout --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node_id", "relative"),
    [
        (NODE, "tests/a/b/recordings"),
        ("tests/test_x.py::TestClass::test_m", "tests/recordings"),
        ("tests/test_x.py::test[a::b]", "tests/recordings"),
        ("tests/test_x.py::test[a/b]", "tests/recordings"),
        ("tests/test_x.py::test[../../../etc]", "tests/recordings"),
        ("tests/ünï/test_x.py::t[é]", "tests/ünï/recordings"),
        ("tests/a/../b/test_x.py::t", "tests/b/recordings"),
        ("test_top.py::t", "recordings"),
    ],
)
def test_dir_for_node_ids(store: Store, root: Path, node_id: str, relative: str) -> None:
    assert store.dir_for(node_id) == root / relative


@pytest.mark.parametrize("node_id", [None, ""])
def test_dir_for_outside_tests_is_common(store: Store, node_id: str | None) -> None:
    assert store.dir_for(node_id) == store.common_dir


@pytest.mark.parametrize(
    "node_id",
    [
        "../outside/test_x.py::t",
        "../../test_x.py::t",
        "tests/../../test_x.py::t",
        "/etc/test_x.py::t",
        "/tmp/test_x.py::t",
        "tests/te\x00st.py::t",
        "::t",
        ".",
        "..",
    ],
)
def test_dir_for_escaping_ids_go_to_common(store: Store, node_id: str) -> None:
    assert store.dir_for(node_id) == store.common_dir


def test_dir_for_symlink_out_of_root_is_refused_naming_it(store: Store, root: Path) -> None:
    """A directory symlinked outside the root is an error, not ignored."""
    outside = root.parent / "outside"
    outside.mkdir()
    (root / "tests").mkdir()
    (root / "tests" / "link").symlink_to(outside, target_is_directory=True)
    with pytest.raises(RecordingError) as info:
        store.dir_for("tests/link/test_x.py::t")
    assert str(root / "tests" / "link" / "recordings") in str(info.value)
    assert f"resolves to {outside / 'recordings'}, outside the project root" in str(info.value)


def is_safe(store: Store, path: Path) -> bool:
    return path == store.common_dir or store.root in path.parents


segments = st.sampled_from(["..", ".", "tests", "a", "/", "", "x.py", "é", "\x00", "[a/b]"])
structured_ids = st.builds(
    lambda parts, tail: "/".join(parts) + tail,
    st.lists(segments, max_size=8),
    st.sampled_from(["", "::t", "::t[a::b]", "::t[../..]", "[/x]"]),
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text() | structured_ids)
def test_dir_for_never_leaves_the_root(store: Store, node_id: str) -> None:
    result = store.dir_for(node_id)
    assert result.is_absolute()
    assert is_safe(store, result)
    assert is_safe(store, store.path_for(node_id, HASH).parent)


def test_path_for(store: Store, root: Path) -> None:
    assert store.path_for(NODE, HASH) == root / "tests/a/b/recordings" / f"{HASH}.json"
    assert store.path_for(None, HASH) == root / "recordings" / f"{HASH}.json"


def found_path(store: Store, test_id: str | None, hash_hex: str) -> Path | None:
    found = store.read_first(test_id, hash_hex)
    return None if found is None else found[0]


def test_read_first_prefers_the_test_dir_then_common(store: Store) -> None:
    assert found_path(store, NODE, HASH) is None
    common = store.common_dir / f"{HASH}.json"
    write(common, make_recording("common", test_id=None))
    assert found_path(store, NODE, HASH) == common
    own = store.path_for(NODE, HASH)
    write(own, make_recording("own"))
    assert found_path(store, NODE, HASH) == own
    assert found_path(store, None, HASH) == common
    assert found_path(store, NODE, "f" * 32) is None


def test_read_first_refuses_a_directory_named_like_a_recording(store: Store) -> None:
    path = store.common_dir / f"{HASH}.json"
    path.mkdir(parents=True)
    with pytest.raises(RecordingError, match="cannot read the file: Is a directory") as info:
        store.read_first(None, HASH)
    assert str(path) in str(info.value)


def test_write_creates_directories(store: Store, root: Path) -> None:
    path = store.path_for(NODE, HASH)
    assert not (root / "tests").exists()
    write(path, make_recording())
    assert path.is_file()


def test_model_list_paths(store: Store) -> None:
    prefix = f"models-{HASH}-"
    store.common_dir.mkdir(parents=True)
    own_dir = store.dir_for(NODE)
    own_dir.mkdir(parents=True)
    for name in [f"{prefix}bbbbbbbb.json", f"{prefix}aaaaaaaa.json", f"{prefix}cccccccc.json"]:
        (store.common_dir / name).write_bytes(b"{}")
    (own_dir / f"{prefix}aaaaaaaa.json").write_bytes(b"{}")
    (own_dir / f"{prefix}dddddddd.json").write_bytes(b"{}")
    # Not model lists of this hash:
    (store.common_dir / f"models-{'f' * 32}-aaaaaaaa.json").write_bytes(b"{}")
    (store.common_dir / f".{prefix}eeeeeeee.json.x1.tmp").write_bytes(b"{")
    (store.common_dir / f"{HASH}.json").write_bytes(b"{}")

    assert store.model_list_paths(HASH, NODE) == [
        own_dir / f"{prefix}aaaaaaaa.json",
        store.common_dir / f"{prefix}bbbbbbbb.json",
        store.common_dir / f"{prefix}cccccccc.json",
        own_dir / f"{prefix}dddddddd.json",
    ]
    assert [p.name for p in store.model_list_paths(HASH)] == [
        f"{prefix}aaaaaaaa.json",
        f"{prefix}bbbbbbbb.json",
        f"{prefix}cccccccc.json",
    ]
    assert store.model_list_paths("0" * 32) == []


# --- round trip and determinism --------------------------------------------------------------


def test_write_read_round_trip(tmp_path: Path) -> None:
    recording = make_recording()
    path = tmp_path / "r" / f"{HASH}.json"
    write(path, recording)
    assert PLAIN.read(path) == recording


def test_round_trip_with_streams_exceptions_and_later_responses(tmp_path: Path) -> None:
    stream = RecordedResponse(
        status=200,
        headers={"content-type": "text/event-stream"},
        body=[{"data": {"x": 1}}, {"data": "[DONE]"}],
        is_streaming=True,
        stream_format=StreamFormat.SSE,
    )
    failure = RecordedResponse(
        status=None,
        is_exception=True,
        exception=RecordedException(type="httpx.ReadTimeout", message="timed out", args=["t"]),
    )
    binary = RecordedResponse(status=200, body="AAEC", body_encoding=BodyEncoding.BASE64)
    recording = make_recording().replace(response=stream, later_responses=[failure, binary])
    path = tmp_path / f"{HASH}.json"
    write(path, recording)
    back = PLAIN.read(path)
    assert back == recording
    assert back.responses == [stream, failure, binary]
    assert back.response.stream_format is StreamFormat.SSE
    assert back.later_responses[1].body_encoding is BodyEncoding.BASE64


def test_unknown_fields_are_kept(tmp_path: Path) -> None:
    data = orjson.loads(valid_bytes())
    data["note"] = "annotated by hand"
    data["request"]["future_field"] = [1, 2]
    path = tmp_path / f"{HASH}.json"
    path.write_bytes(dumps(data))
    back = PLAIN.read(path)
    assert orjson.loads(dumps(back.model_dump(mode="json"))) == data


def test_same_recording_same_bytes(tmp_path: Path) -> None:
    a = dumps(make_recording().model_dump(mode="json"))
    b = dumps(make_recording().model_dump(mode="json"))
    assert a == b
    path = tmp_path / f"{HASH}.json"
    write(path, make_recording())
    first = path.read_bytes()
    write(path, PLAIN.read(path))
    assert path.read_bytes() == first == a


def test_bytes_are_sorted_indented_with_trailing_newline() -> None:
    content = dumps(make_recording().model_dump(mode="json"))
    assert content.endswith(b"}\n")
    assert not content.endswith(b"\n\n")
    data = orjson.loads(content)
    assert content == orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    lines = content.decode().splitlines()
    assert lines[1].startswith('  "format_version"')
    assert list(data) == sorted(data)
    assert list(data["request"]) == sorted(data["request"])


def test_dumps_independent_of_insertion_order() -> None:
    assert dumps({"b": 1, "a": {"d": 2, "c": 3}}) == dumps({"a": {"c": 3, "d": 2}, "b": 1})
    assert dumps({"b": 1, "a": 2}) == b'{\n  "a": 2,\n  "b": 1\n}\n'


def test_file_holds_the_contract_fields() -> None:
    data = orjson.loads(valid_bytes())
    assert data["format_version"] == 1
    assert data["key_version"] == KEY_VERSION
    assert data["test_id"] == NODE
    assert set(data["request"]) >= {"method", "url", "endpoint", "headers", "body", "model"}
    assert set(data["response"]) >= {"status", "headers", "body", "is_streaming"}
    assert data["id_normalization_mapping"] == {"rec-0123456789ab": "response.body.id"}
    # Optional fields absent rather than null.
    assert "stream_format" not in data["response"]
    assert "exception" not in data["response"]
    assert "later_responses" not in data


async def test_async_write_round_trip(tmp_path: Path) -> None:
    """The event-loop write path (`Session.arecord`) writes the same bytes as the sync one."""
    recording = make_recording()
    path = tmp_path / "deep" / "dir" / f"{HASH}.json"
    await awrite_bytes_atomic(path, PLAIN.dump(recording), PLAIN.temp_dir)
    assert path.read_bytes() == dumps(recording.model_dump(mode="json"))
    assert PLAIN.read(path) == recording
    assert [p.name for p in path.parent.iterdir()] == [f"{HASH}.json"]


def test_read_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / f"{HASH}.json"
    path.write_bytes(b"")
    with pytest.raises(RecordingError) as info:
        PLAIN.read(path)
    assert str(path) in str(info.value)
    assert info.value.path == path


def test_read_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        PLAIN.read(tmp_path / "missing.json")


# --- reading fails closed --------------------------------------------------------------------


def with_data(**changes: Any) -> bytes:
    data = orjson.loads(valid_bytes())
    for key, value in changes.items():
        if value is _DROP:
            del data[key]
        else:
            data[key] = value
    return dumps(data)


_DROP = object()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "empty"),
        (b"  \n\n", "empty"),
        (valid_bytes()[: len(valid_bytes()) // 2], r"truncated.*line \d+ column \d+"),
        (valid_bytes()[:-3], r"truncated.*line \d+ column \d+"),
        (b'{"format_version": 1, "request": nope}', "not valid JSON"),
        (b"[1, 2, 3]\n", "expected a JSON object at the top level, found list"),
        (b'"text"\n', "found str"),
        (with_data(request=_DROP), r"request.*field required"),
        (with_data(response=_DROP), r"response.*field required"),
        (with_data(format_version=2), "format_version 2.*reads format_version 1"),
        (with_data(format_version=_DROP), "no format_version.*reads format_version 1"),
        (with_data(format_version="1"), "format_version '1'.*reads format_version 1"),
        (with_data(request={"method": "GET"}), r"request\.url.*field required"),
    ],
    ids=[
        "empty",
        "blank",
        "half",
        "cut-end",
        "invalid",
        "array",
        "string",
        "no-request",
        "no-response",
        "version-2",
        "no-version",
        "version-string",
        "request-incomplete",
    ],
)
def test_bad_files_raise_recording_error_naming_path(
    tmp_path: Path, content: bytes, expected: str
) -> None:
    path = tmp_path / "tests" / "recordings" / f"{HASH}.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    with pytest.raises(RecordingError, match=expected) as info:
        PLAIN.read(path)
    assert str(path) in str(info.value)
    assert info.value.path == path
    # Reading never repairs, rewrites or deletes a file.
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_parse_recording_without_path() -> None:
    with pytest.raises(RecordingError, match=r"^recording: the file is empty"):
        parse_recording(b"", None)


def test_reading_a_valid_file_does_not_modify_it(tmp_path: Path) -> None:
    path = tmp_path / f"{HASH}.json"
    # Valid but not in canonical form: unsorted keys, no indentation, no trailing newline.
    data = orjson.loads(valid_bytes())
    path.write_bytes(orjson.dumps(dict(reversed(list(data.items())))))
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    PLAIN.read(path)
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


# --- atomic writes ---------------------------------------------------------------------------


def leftovers(directory: Path, target: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p != target)


def test_exception_during_write_keeps_old_content_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / f"{HASH}.json"
    write(path, make_recording("old"))
    old = path.read_bytes()

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space left"):
        write(path, make_recording("new"))
    assert path.read_bytes() == old
    assert leftovers(tmp_path, path) == []


def test_exception_during_rename_keeps_old_content_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / f"{HASH}.json"
    write_bytes_atomic(path, b"old\n")

    def broken_replace(self: Path, target: Path) -> Path:
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "replace", broken_replace)
    with pytest.raises(KeyboardInterrupt):
        write_bytes_atomic(path, b"new\n")
    monkeypatch.undo()
    assert path.read_bytes() == b"old\n"
    assert leftovers(tmp_path, path) == []


async def test_async_exception_during_write_keeps_old_content_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / f"{HASH}.json"
    await awrite_bytes_atomic(path, PLAIN.dump(make_recording("old")))
    old = path.read_bytes()

    def broken_fsync(fd: int) -> None:
        raise OSError(5, "I/O error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="I/O error"):
        await awrite_bytes_atomic(path, PLAIN.dump(make_recording("new")))
    assert path.read_bytes() == old
    assert leftovers(tmp_path, path) == []


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path

    original = Path.replace

    def slow_replace(self, target):
        print("READY", flush=True)  # the temp file is written and fsynced
        time.sleep(30)
        return original(self, target)

    Path.replace = slow_replace

    from hashreplay.core.atomic import write_bytes_atomic

    write_bytes_atomic(Path(sys.argv[1]), b'{"big": "' + b"x" * 5_000_000 + b'"}\\n')
    print("DONE", flush=True)
    """
)


@pytest.mark.parametrize("with_previous", [True, False], ids=["overwrite", "first-write"])
def test_killed_writer_leaves_previous_content(tmp_path: Path, with_previous: bool) -> None:
    root = tmp_path / "project"
    store = Store(root, root / "recordings")
    path = store.path_for(NODE, HASH)
    old = b""
    if with_previous:
        write(path, make_recording("old"))
        old = path.read_bytes()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line == b"READY\n", child.stderr.read() if child.stderr else b""
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=10)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
    assert child.returncode == -signal.SIGKILL
    if with_previous:
        assert path.read_bytes() == old
        assert PLAIN.read(path) == make_recording("old")
        assert found_path(store, NODE, HASH) == path
    else:
        assert not path.exists()
        assert found_path(store, NODE, HASH) is None
    # Any leftover is a hidden temp file that no lookup ever matches.
    rest = leftovers(path.parent, path)
    assert all(name.startswith(".") and name.endswith(".tmp") for name in rest)
    assert sorted(p.name for p in path.parent.glob("*.json")) == (
        [path.name] if with_previous else []
    )
    assert store.model_list_paths(HASH, NODE) == []


def test_trailing_garbage_is_not_called_truncated(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(b'{"format_version": 1}}')
    with pytest.raises(RecordingError, match="not valid JSON") as info:
        parse_recording(path.read_bytes(), path)
    assert "truncated" not in str(info.value)


@pytest.mark.parametrize("version", ["true", "1.0", '"1"'])
def test_format_version_must_be_the_integer(tmp_path: Path, version: str) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"format_version": ' + version + "}")
    with pytest.raises(RecordingError, match="this hashreplay reads format_version 1"):
        parse_recording(path.read_bytes(), path)


def test_new_recordings_get_ordinary_permissions(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    write_bytes_atomic(target, b"{}\n")
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask
    target.chmod(0o640)
    write_bytes_atomic(target, b"{}\n")
    assert target.stat().st_mode & 0o777 == 0o640  # a replaced file keeps its mode


@pytest.mark.parametrize(
    ("node_id", "inside"),
    [
        ("recordings/test_x.py::t", "recordings"),  # would be recordings/recordings/
        ("recordings/blobs/test_x.py::t", "recordings"),  # would be among the blobs
        ("tests/recordings/test_x.py::t", "tests/recordings"),
        ("tests/recordings/sub/test_x.py::t[p]", "tests/recordings"),
        ("tests/a/../recordings/test_x.py::t", "tests/recordings"),
        ("tests\\recordings\\test_x.py::t", "tests/recordings"),
    ],
)
def test_a_test_file_inside_a_recordings_directory_is_refused_naming_it(
    store: Store, root: Path, node_id: str, inside: str
) -> None:
    """Its recordings would nest inside a store, where the tools take them for the files
    of that store: refused, before anything is read or written there."""
    with pytest.raises(RecordingsDirOutside) as info:
        store.dir_for(node_id)
    message = str(info.value)
    assert f"lies inside the recordings directory {root / inside}" in message
    assert f"move the test file out of {root / inside}" in message
    assert not (root / inside / "recordings").exists()


def test_a_test_file_inside_a_configured_common_directory_is_refused(root: Path) -> None:
    store = Store(root, root / "tests" / "data")
    with pytest.raises(RecordingsDirOutside) as info:
        store.dir_for("tests/data/test_x.py::t")
    assert f"inside the recordings directory {root / 'tests' / 'data'}" in str(info.value)
    assert store.dir_for("tests/test_x.py::t") == root / "tests" / "recordings"


@pytest.mark.parametrize(
    "node_id", ["recordings_helpers/test_x.py::t", "tests/my_recordings/test_x.py::t[recordings]"]
)
def test_a_directory_only_named_like_recordings_is_no_store(
    store: Store, root: Path, node_id: str
) -> None:
    expected = root / node_id.split("::", 1)[0]
    assert store.dir_for(node_id) == expected.parent / "recordings"
