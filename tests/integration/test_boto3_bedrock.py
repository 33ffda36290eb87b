"""boto3 `bedrock-runtime` (botocore on urllib3) against the fake Bedrock: `converse` and
`converse_stream`, whose binary event stream must replay byte for byte (botocore checks its
CRCs)."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.config import Config
from urllib3.connectionpool import HTTPConnectionPool

from hashreplay import Mode, test_context
from tests.fakes.bedrock import EVENTSTREAM
from tests.fakes.upstream import FakeUpstream
from tests.integration.three_phases import TEST_ID, AllAdapters, adapters, three_phases

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
    assert replayed == live
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
