"""boto3 `bedrock-runtime` (botocore on urllib3) against the fake Bedrock: `converse` and
`converse_stream`, whose binary event stream must replay byte for byte (botocore checks its
CRCs)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hashreplay import Mode, test_context
from hashreplay.core.format import Ended, EndState, RecordedResponse
from hashreplay.core.normalise import new_id_registry
from hashreplay.core.normalise_response import normalise_response
from hashreplay.core.streams import EventStreamFrames, StreamFormat, decode_chunk, encode_chunk
from tests.fakes.bedrock import EVENTSTREAM, event_frame
from tests.fakes.upstream import FakeUpstream
from tests.integration.three_phases import TEST_ID, AllAdapters, adapters, three_phases
from tests.sdks import sdk

boto3 = sdk("boto3")
Config = sdk("botocore.config").Config
HTTPConnectionPool = sdk("urllib3.connectionpool").HTTPConnectionPool

__all__ = ["adapters"]

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"


def bedrock(url: str) -> Any:
    return boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=url,
        aws_access_key_id="AKIAIOSFODNN7EXAMPLE",
        aws_secret_access_key="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        config=Config(retries={"max_attempts": 1, "mode": "standard"}),
    )


def messages(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"text": text}]}]


def test_botocore_pools_go_through_the_urllib3_seam() -> None:
    from botocore.awsrequest import AWSHTTPConnectionPool, AWSHTTPSConnectionPool

    for pool in (AWSHTTPConnectionPool, AWSHTTPSConnectionPool):
        assert issubclass(pool, HTTPConnectionPool)
        assert "urlopen" not in vars(pool)  # inherited: the patched method is the one used


def test_converse_and_converse_stream(upstream: FakeUpstream, adapters: AllAdapters) -> None:
    def run(url: str) -> dict[str, Any]:
        client = bedrock(url)
        answer = client.converse(modelId=MODEL, messages=messages("hello bedrock"))
        streamed = client.converse_stream(modelId=MODEL, messages=messages("stream it to me"))
        events = list(streamed["stream"])
        return {
            "text": answer["output"]["message"]["content"][0]["text"],
            "stop": answer["stopReason"],
            "usage": answer["usage"],
            "event_names": [next(iter(e)) for e in events],
            "pieces": [
                e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e
            ],
            "stream_usage": events[-1]["metadata"]["usage"],
        }

    phases = three_phases(upstream, adapters, run)
    live = phases.live
    assert live["text"] == "echo: hello bedrock"
    assert live["stop"] == "end_turn"
    assert "".join(live["pieces"]) == "echo: stream it to me"
    assert len(live["pieces"]) > 1
    assert live["event_names"][0] == "messageStart"
    assert live["event_names"][-2:] == ["messageStop", "metadata"]
    assert phases.offline == live
    assert phases.fresh == live
    assert phases.recorded_files == phases.live_calls == 2


def test_eventstream_is_stored_as_raw_chunks_and_replayed_byte_exact(
    upstream: FakeUpstream, adapters: AllAdapters
) -> None:
    def raw_stream(url: str) -> list[bytes]:
        client = bedrock(url)
        streamed = client.converse_stream(modelId=MODEL, messages=messages("bytes please"))
        raw = streamed["stream"]._raw_stream  # the urllib3 response botocore reads
        return list(raw.stream())

    adapters.start(Mode.RECORD)
    with test_context(TEST_ID):
        live = raw_stream(upstream.url)
    stored = json.loads(adapters.files()[0].read_text())["response"]
    assert stored["is_streaming"] is True
    assert stored["stream_format"] == "chunks"
    assert stored["headers"]["content-type"] == EVENTSTREAM
    # one chunk per frame, as sent: start, two deltas, block stop, message stop, metadata
    assert len(stored["body"]) == len(live) == 6

    adapters.start(Mode.REPLAY)
    with test_context(TEST_ID):
        replayed = raw_stream(upstream.url)
    # byte for byte what the file holds: the live frames with their payloads normalised
    # (padding cleared, durations 0) and re-encoded with fresh lengths and CRCs
    assert replayed == [decode_chunk(chunk) for chunk in stored["body"]]
    live_frames = EventStreamFrames.parse(encode_chunk(c) for c in live)
    replayed_frames = EventStreamFrames.parse(encode_chunk(c) for c in replayed)
    assert live_frames.rest == replayed_frames.rest == b""
    assert [h for h, _ in replayed_frames.frames] == [h for h, _ in live_frames.frames]
    for was, now in zip(
        live_frames.payload_values(), replayed_frames.payload_values(), strict=True
    ):
        assert now == {**was, "p": ""} | ({"metrics": {"latencyMs": 0}} if "metrics" in was else {})
    assert len(upstream.calls) == 1


@pytest.mark.parametrize("operation", ["converse", "converse_stream"])
def test_bedrock_error_replays_as_the_same_client_error(
    upstream: FakeUpstream, adapters: AllAdapters, operation: str
) -> None:
    from botocore.exceptions import ClientError

    def run(url: str) -> tuple[str, str]:
        with pytest.raises(ClientError) as caught:
            getattr(bedrock(url), operation)(modelId=MODEL, messages=[])
        error = caught.value.response["Error"]
        return error["Code"], error["Message"]

    phases = three_phases(upstream, adapters, run)
    assert phases.live == ("ValidationException", "A conversation must start with a message.")
    assert phases.offline == phases.live == phases.fresh


def _record_twice(
    upstream: FakeUpstream, adapters: AllAdapters, run: Any
) -> tuple[list[bytes], list[bytes]]:
    """The recording's bytes after one `record` run and after a second one."""
    contents = []
    for _ in range(2):
        adapters.start(Mode.RECORD)
        with test_context(TEST_ID):
            run(upstream.url)
        contents.append([f.read_bytes() for f in adapters.files()])
    return contents[0], contents[1]


def test_rerecording_converse_stream_is_a_zero_diff(
    upstream: FakeUpstream, adapters: AllAdapters
) -> None:
    """The fake pads every frame with random `p` and reports a fresh `latencyMs` per call,
    as Bedrock does: the stored frames are normalised and re-encoded, so both runs write
    the same bytes, and botocore still accepts the re-encoded frames' CRCs on replay."""

    def run(url: str) -> list[dict[str, Any]]:
        streamed = bedrock(url).converse_stream(modelId=MODEL, messages=messages("same again"))
        return list(streamed["stream"])

    first, second = _record_twice(upstream, adapters, run)
    assert len(first) == 1
    assert first == second
    stored = json.loads(first[0])["response"]
    assert len(stored["body"]) == 6  # one chunk per frame

    adapters.start(Mode.REPLAY)
    with test_context(TEST_ID):
        events = run(upstream.url)  # botocore checks both CRCs of every frame
    assert events[-1]["metadata"]["metrics"] == {"latencyMs": 0}
    assert (
        "".join(e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e)
        == "echo: same again"
    )
    assert len(upstream.calls) == 2


def test_rerecording_converse_is_a_zero_diff(upstream: FakeUpstream, adapters: AllAdapters) -> None:
    def run(url: str) -> dict[str, Any]:
        answer: dict[str, Any] = bedrock(url).converse(
            modelId=MODEL, messages=messages("once more")
        )
        return answer

    first, second = _record_twice(upstream, adapters, run)
    assert first == second
    assert json.loads(first[0])["response"]["body"]["metrics"] == {"latencyMs": 0}


def test_a_stream_cut_mid_frame_keeps_the_cut_bytes_as_they_came() -> None:
    """Whole frames are normalised; the bytes of a frame the stream broke inside stay as
    they arrived (a client sees there what it saw live), and `after_chunks` counts the
    chunks as stored."""

    frames = [event_frame("messageStart", {"role": "assistant"})]
    frames.append(event_frame("metadata", {"metrics": {"latencyMs": 812}}))
    cut = event_frame("messageStop", {"stopReason": "end_turn"})[:9]
    joined = b"".join(frames) + cut  # arrived as one read, broken inside the third frame
    response = RecordedResponse(
        status=200,
        headers={"content-type": EVENTSTREAM},
        body=[encode_chunk(joined)],
        is_streaming=True,
        stream_format=StreamFormat.CHUNKS,
        ended=Ended(state=EndState.ERROR, after_chunks=1),
    )
    normalised = normalise_response(response, new_id_registry("0" * 32))
    assert normalised.ended is not None and normalised.ended.after_chunks == 3
    again = normalise_response(normalised, new_id_registry("0" * 32))
    assert again.body == normalised.body  # idempotent
    parsed = EventStreamFrames.parse(normalised.body)
    assert parsed.payload_values() == [
        {"role": "assistant", "p": ""},
        {"metrics": {"latencyMs": 0}, "p": ""},
    ]
    assert parsed.rest == cut
    assert decode_chunk(normalised.body[-1]) == cut


def test_a_frame_whose_checksum_fails_is_kept_as_it_came() -> None:

    good = event_frame("metadata", {"metrics": {"latencyMs": 5}})
    bad = bytearray(event_frame("metadata", {"metrics": {"latencyMs": 7}}))
    bad[-1] ^= 0xFF  # a corrupt message CRC: botocore refuses it live, and so on replay
    response = RecordedResponse(
        status=200,
        headers={"Content-Type": EVENTSTREAM},
        body=[encode_chunk(good), encode_chunk(bytes(bad))],
        is_streaming=True,
        stream_format=StreamFormat.CHUNKS,
    )
    body = normalise_response(response, new_id_registry("0" * 32)).body
    assert decode_chunk(body[1]) == bytes(bad)
    assert b'"latencyMs":0' in decode_chunk(body[0])


def test_normalize_brings_an_older_event_stream_recording_to_the_normalised_form(
    upstream: FakeUpstream,
    adapters: AllAdapters,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stream recorded before frames were normalised (raw padding and latency inside
    the frames) is rewritten by `hashreplay normalize` to what a re-record writes now."""
    from hashreplay.cli import main

    def run(url: str) -> list[dict[str, Any]]:
        streamed = bedrock(url).converse_stream(modelId=MODEL, messages=messages("old file"))
        return list(streamed["stream"])

    adapters.start(Mode.RECORD)
    with test_context(TEST_ID):
        run(upstream.url)
    (path,) = adapters.files()
    now = path.read_bytes()
    data = json.loads(now)
    frames = [
        event_frame("messageStart", {"role": "assistant"}),
        event_frame("metadata", {"metrics": {"latencyMs": 1234}}),
    ]
    data["response"]["body"] = [encode_chunk(b"".join(frames))]  # as one read, unnormalised
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")

    monkeypatch.chdir(adapters.root)
    monkeypatch.setenv("NO_COLOR", "1")
    capsys.readouterr()
    assert main(["normalize", "--root", str(adapters.root)]) == 0
    out = capsys.readouterr().out
    assert "Summary: 1/1 files modified" in out
    body = json.loads(path.read_text())["response"]["body"]
    values = EventStreamFrames.parse(body).payload_values()
    assert values == [{"role": "assistant", "p": ""}, {"metrics": {"latencyMs": 0}, "p": ""}]
    assert len(body) == 2  # one chunk per frame
    assert main(["normalize", "--root", str(adapters.root)]) == 0  # idempotent
    assert "Summary: 0/1 files modified" in capsys.readouterr().out


def _invoke_body(text: str) -> str:
    return json.dumps(
        {
            "anthropic_version": "bedrock-2023-05-31",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": text}],
        }
    )


def test_rerecording_invoke_model_with_response_stream_is_a_zero_diff(
    upstream: FakeUpstream, adapters: AllAdapters
) -> None:
    """InvokeModelWithResponseStream carries each model event base64-encoded in a `chunk`
    frame's `{"bytes": …}`, with a fresh `msg_bdrk_…` id and latencies per call: the events
    inside are normalised too, so two recordings are the same bytes and replay decodes."""

    def run(url: str) -> list[dict[str, Any]]:
        streamed = bedrock(url).invoke_model_with_response_stream(
            modelId=MODEL, body=_invoke_body("stream it")
        )
        return [json.loads(event["chunk"]["bytes"]) for event in streamed["body"]]

    first, second = _record_twice(upstream, adapters, run)
    assert len(first) == 1
    assert first == second

    adapters.start(Mode.REPLAY)
    with test_context(TEST_ID):
        events = run(upstream.url)  # botocore checks both CRCs of every frame
    start = events[0]["message"]
    assert start["id"].startswith("rec-")
    metrics = events[-1]["amazon-bedrock-invocationMetrics"]
    assert metrics["invocationLatency"] == metrics["firstByteLatency"] == 0
    assert metrics["outputTokenCount"] > 0  # counts are content, kept
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    assert text == "echo: stream it"
    assert len(upstream.calls) == 2


def test_rerecording_invoke_model_is_a_zero_diff(
    upstream: FakeUpstream, adapters: AllAdapters
) -> None:
    def run(url: str) -> dict[str, Any]:
        answer = bedrock(url).invoke_model(modelId=MODEL, body=_invoke_body("plain"))
        decoded: dict[str, Any] = json.loads(answer["body"].read())
        return decoded

    first, second = _record_twice(upstream, adapters, run)
    assert first == second
    adapters.start(Mode.REPLAY)
    with test_context(TEST_ID):
        answer = run(upstream.url)
    assert answer["id"].startswith("rec-")
    assert answer["content"][0]["text"] == "echo: plain"


def test_a_chunk_payload_that_is_not_base64_json_is_kept_as_it_came() -> None:
    """Only a `bytes` value that decodes to a JSON event is opened; any other is left as
    it came (and the frame still re-encodes with valid CRCs)."""
    frames = [
        event_frame("chunk", {"bytes": "not base64!"}),
        event_frame("chunk", {"bytes": "aGVsbG8="}),  # base64 of b"hello": not JSON
    ]
    response = RecordedResponse(
        status=200,
        headers={"content-type": EVENTSTREAM},
        body=[encode_chunk(frame) for frame in frames],
        is_streaming=True,
        stream_format=StreamFormat.CHUNKS,
    )
    body = normalise_response(response, new_id_registry("0" * 32)).body
    assert EventStreamFrames.parse(body).payload_values() == [
        {"bytes": "not base64!", "p": ""},
        {"bytes": "aGVsbG8=", "p": ""},
    ]
