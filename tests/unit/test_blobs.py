"""Blobs (docs/design.md §13): large values stored once, referenced, put back byte for byte."""

from __future__ import annotations

import base64
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hashreplay.core.blobs import (
    BlobRef,
    blob_digest,
    join_blobs,
    media_type_of,
    parse_ref,
    references,
    split_blobs,
)
from hashreplay.core.config import load_config
from hashreplay.core.diff import first_difference
from hashreplay.core.errors import BodyTooLarge, RecordingError
from hashreplay.core.hashing import request_hash
from hashreplay.core.store import Store, parse_recording
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.replay import Replay
from hashreplay.engine.session import Session

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
IMAGE = "data:image/png;base64," + base64.b64encode(PNG * 40).decode()  # about 110 KB
TEST = "tests/test_vision.py::test_describe"


def chat_request(image: str = IMAGE, text: str = "what is this?") -> IncomingRequest:
    body = {
        "model": "gpt-fake-1",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": text},
                    {"type": "image_url", "image_url": {"url": image}},
                ],
            }
        ],
    }
    return IncomingRequest(
        "POST",
        "http://127.0.0.1:9/v1/chat/completions",
        [("content-type", "application/json")],
        orjson.dumps(body),
    )


def reply(text: str = "a cat") -> LiveExchange:
    body = orjson.dumps({"id": "chatcmpl-1", "choices": [{"message": {"content": text}}]})
    return LiveExchange(200, [("content-type", "application/json")], [body])


def session(root: Path, **overrides: object) -> Session:
    return Session(load_config(root, env={}, mode="record", **overrides))


# --- the pure rules ---------------------------------------------------------------------------


def test_media_types_are_guessed_from_data_urls_and_base64_magic() -> None:
    assert media_type_of(IMAGE) == "image/png"
    assert media_type_of(base64.b64encode(b"%PDF-1.7 ...." * 10).decode()) == "application/pdf"
    wav = b"RIFF\x00\x00\x00\x00WAVEfmt " + bytes(40)
    assert media_type_of(base64.b64encode(wav).decode()) == "audio/wav"
    assert media_type_of(base64.b64encode(bytes(range(200))).decode()) == (
        "application/octet-stream"
    )
    assert media_type_of("just a long text " * 100) == "text/plain"


def test_split_and_join_round_trip_only_large_body_strings() -> None:
    big = "word " * 400
    data = {
        "test_id": big,  # not a body: never a blob
        "request": {"body": {"a": [big, "small"], "n": 1}},
        "response": {"body": big, "headers": {"h": big}},
        "later_responses": [{"body": [{"data": {"v": big}}]}],
    }
    stored, blobs = split_blobs(data, threshold=1000)
    digest = blob_digest(big.encode())
    assert blobs == {digest: big.encode()}
    ref = {"__blob__": digest, "size": 2000, "type": "text/plain"}
    assert stored["request"]["body"] == {"a": [ref, "small"], "n": 1}
    assert stored["response"] == {"body": ref, "headers": {"h": big}}
    assert stored["later_responses"] == [{"body": [{"data": {"v": ref}}]}]
    assert stored["test_id"] == big
    assert data["response"]["body"] == big  # the input is left alone
    assert references(stored) == [BlobRef(digest, 2000, "text/plain")] * 3
    assert join_blobs(stored, lambda ref: blobs[ref.digest].decode()) == data


def test_threshold_counts_utf8_bytes() -> None:
    text = "é" * 600  # 1200 bytes
    _, blobs = split_blobs({"response": {"body": text}}, threshold=1000)
    assert list(blobs.values()) == [text.encode()]
    same, none = split_blobs({"response": {"body": "e" * 1000}}, threshold=1000)
    assert none == {}
    assert same == {"response": {"body": "e" * 1000}}


def test_only_exact_references_are_references() -> None:
    good = {"__blob__": "a" * 32, "size": 3, "type": "text/plain"}
    assert parse_ref(good) == BlobRef("a" * 32, 3, "text/plain")
    assert parse_ref({**good, "extra": 1}) is None
    assert parse_ref({**good, "__blob__": "A" * 32}) is None
    assert parse_ref({**good, "size": "3"}) is None
    assert parse_ref({"__blob__": "a" * 32}) is None


def test_miss_report_differences_show_large_values_as_digest_size_and_type() -> None:
    other = IMAGE[:-8] + "AAAAAAA="
    difference = first_difference({"url": IMAGE}, {"url": other})
    assert difference is not None
    text = difference.describe()
    assert "image/png" in text
    assert f"{len(IMAGE)} bytes" in text
    assert IMAGE[40:200] not in text


# --- the store ---------------------------------------------------------------------------------


def test_recording_a_large_image_writes_one_blob_and_a_small_file(tmp_path: Path) -> None:
    engine = session(tmp_path)
    prep = engine.prepare(chat_request(), test_id=TEST)
    path = engine.record(prep, reply())
    content = path.read_bytes()
    assert len(content) < 4096
    blobs = sorted((tmp_path / "recordings" / "blobs").iterdir())
    assert len(blobs) == 1
    assert blobs[0].read_bytes() == IMAGE.encode()
    assert blobs[0].name == blob_digest(IMAGE.encode())
    stored = orjson.loads(content)
    part = stored["request"]["body"]["messages"][0]["content"][1]["image_url"]["url"]
    assert part == {"__blob__": blobs[0].name, "size": len(IMAGE), "type": "image/png"}
    # the key is computed on the full value, so the name is the hash of the full body
    body = orjson.loads(chat_request().content)
    assert path.name == f"{request_hash('POST', '/v1/chat/completions', body, TEST)}.json"
    # reading puts the value back
    assert engine.store.read(path).request.body == body


def test_replay_is_byte_identical_for_a_large_response(tmp_path: Path) -> None:
    engine = session(tmp_path, blob_threshold=1024)
    audio = base64.b64encode(bytes(range(256)) * 64).decode()
    body = orjson.dumps({"audio": {"data": audio}, "id": "x"})
    prep = engine.prepare(chat_request(image="small"), test_id=TEST)
    path = engine.record(prep, LiveExchange(200, [("content-type", "application/json")], [body]))
    assert b'"__blob__"' in path.read_bytes()
    replayer = Session(load_config(tmp_path, env={}, mode="replay", blob_threshold=1024))
    decision = replayer.decide(chat_request(image="small"), test_id=TEST)
    assert isinstance(decision, Replay)
    plan = decision.plan()
    assert orjson.loads(b"".join(plan.chunks))["audio"]["data"] == audio


def test_recording_twice_gives_the_same_bytes_and_one_blob(tmp_path: Path) -> None:
    first = session(tmp_path)
    path = first.record(first.prepare(chat_request(), test_id=TEST), reply())
    content = path.read_bytes()
    second = session(tmp_path)
    assert second.record(second.prepare(chat_request(), test_id=TEST), reply()) == path
    assert path.read_bytes() == content
    other = session(tmp_path)
    other.record(other.prepare(chat_request(), test_id="tests/test_other.py::test_it"), reply())
    assert len(list((tmp_path / "recordings" / "blobs").iterdir())) == 1


def test_a_missing_or_changed_blob_is_a_recording_error_naming_it(tmp_path: Path) -> None:
    engine = session(tmp_path)
    path = engine.record(engine.prepare(chat_request(), test_id=TEST), reply())
    (blob,) = (tmp_path / "recordings" / "blobs").iterdir()
    blob.write_bytes(blob.read_bytes()[:-1] + b"A")
    with pytest.raises(RecordingError, match="does not match its name") as info:
        engine.store.read(path)
    assert str(blob) in str(info.value)
    blob.unlink()
    with pytest.raises(RecordingError, match="is missing") as info:
        engine.store.read(path)
    assert str(blob) in str(info.value)
    assert str(path) in str(info.value)
    with pytest.raises(RecordingError, match="no blob directory"):
        parse_recording(path.read_bytes(), path)


def test_a_body_over_max_body_bytes_is_not_recorded(tmp_path: Path) -> None:
    engine = session(tmp_path, max_body_bytes=50_000)
    prep = engine.prepare(chat_request(), test_id=TEST)
    with pytest.raises(BodyTooLarge) as info:
        engine.record(prep, reply())
    message = str(info.value)
    assert TEST in message
    assert "http://localhost/v1/chat/completions" in message  # the stored URL (no port)
    assert "request body of" in message
    assert "over max_body_bytes (50000)" in message
    assert "max_body_bytes = 131072" in message
    assert not list(tmp_path.rglob("*.json"))
    assert not (tmp_path / "recordings" / "blobs").exists()


def test_a_file_is_read_whatever_its_size_and_a_blob_over_the_limit_is_refused(
    tmp_path: Path,
) -> None:
    """Limits apply to each body as it is written, never to a whole file (docs/design.md, "A
    file it wrote is a file it reads"); a blob is one value, so a larger one is refused."""
    engine = session(tmp_path, blob_threshold=1 << 30)  # one file, no blobs
    path = engine.record(engine.prepare(chat_request(), test_id=TEST), reply())
    assert path is not None
    assert not (tmp_path / "recordings" / "blobs").exists()
    small = Store(tmp_path, tmp_path / "recordings", max_body_bytes=1)
    assert small.read(path) == engine.store.read(path)
    engine = session(tmp_path)  # large values to blobs
    path = engine.record(engine.prepare(chat_request(), test_id=TEST), reply())
    assert path is not None
    blob_limit = Store(tmp_path, tmp_path / "recordings", max_body_bytes=10_000)
    with pytest.raises(RecordingError, match=r"blob .* the blob is \d+ bytes, over max_body"):
        blob_limit.read(path)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=12,
)


@given(body=_json, response=_json)
def test_split_then_join_gives_back_any_body(body: object, response: object) -> None:
    data = {"request": {"body": body}, "response": {"body": response}, "test_id": "t"}
    stored, blobs = split_blobs(data, threshold=8)
    assert all(len(raw) > 8 for raw in blobs.values())
    assert join_blobs(stored, lambda ref: blobs[ref.digest].decode()) == data
