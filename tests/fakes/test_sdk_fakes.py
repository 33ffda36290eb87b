"""The fake Mistral, Cohere v2 and Groq APIs answer the real SDKs as the real APIs would, in
shape: fresh ids and timings on every call, their own stream framing, and their own errors."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import httpx
import pytest

from tests.sdks import sdk

from .upstream import FakeUpstream, Scripted

KEY = "sk-test-key-0123456789"
ASK = [{"role": "user", "content": "hello fake"}]
TOOLS_OPENAI = [
    {
        "type": "function",
        "function": {"name": "search", "parameters": {"type": "object", "properties": {}}},
    }
]

mistral_client = sdk("mistralai.client")
cohere = sdk("cohere")
groq = sdk("groq")


@pytest.fixture(scope="module")
def fake() -> Any:
    with FakeUpstream() as upstream:
        yield upstream


def post(fake: FakeUpstream, path: str, body: Any, **headers: str) -> httpx.Response:
    auth = {"authorization": f"Bearer {KEY}"}
    return httpx.post(f"{fake.url}{path}", json=body, headers={**auth, **headers})


def sse_data(text: str) -> list[str]:
    return [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]


# --------------------------------------------------------------------------- Mistral


def mistral(fake: FakeUpstream) -> Any:
    return mistral_client.Mistral(api_key=KEY, server_url=f"{fake.url}/mistral")


def test_mistral_chat_shape_and_fresh_ids(fake: FakeUpstream) -> None:
    first, second = (
        post(fake, "/mistral/v1/chat/completions", {"model": "m", "messages": ASK}).json()
        for _ in range(2)
    )
    assert first["id"] != second["id"]
    assert re.fullmatch(r"[0-9a-f]{32}", first["id"])
    assert first["object"] == "chat.completion"
    assert first["choices"][0]["message"] == {
        "role": "assistant",
        "content": "echo: hello fake",
        "tool_calls": None,
        "prefix": False,
    }
    assert first["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    assert "system_fingerprint" not in first


def test_mistral_stream_framing(fake: FakeUpstream) -> None:
    body = {"model": "m", "messages": ASK, "stream": True}
    data = sse_data(post(fake, "/mistral/v1/chat/completions", body).text)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"]["total_tokens"] == 5  # unasked, as Mistral does
    assert all("usage" not in c for c in chunks[:-1])
    assert len({c["id"] for c in chunks}) == 1


def test_mistral_tool_calls_parse(fake: FakeUpstream) -> None:
    client = mistral(fake)
    reply = client.chat.complete(model="m", messages=ASK, tools=TOOLS_OPENAI)  # type: ignore[arg-type]
    call = reply.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert (call.function.name, call.function.arguments) == ("search", '{"query": "hello fake"}')
    assert reply.choices[0].finish_reason == "tool_calls"
    events = list(client.chat.stream(model="m", messages=ASK, tools=TOOLS_OPENAI))  # type: ignore[arg-type]
    streamed = [
        e.data.choices[0].delta.tool_calls for e in events if e.data.choices[0].delta.tool_calls
    ]
    assert streamed[0][0].function.name == "search"  # type: ignore[index]


def test_mistral_errors(fake: FakeUpstream) -> None:
    url = f"{fake.url}/mistral/v1/chat/completions"
    unauthorized = httpx.post(url, json={"model": "m", "messages": ASK})
    assert unauthorized.status_code == 401
    assert unauthorized.json()["message"] == "Unauthorized"
    invalid = post(fake, "/mistral/v1/chat/completions", {"messages": ASK})
    assert invalid.status_code == 422
    assert invalid.json()["detail"][0]["loc"] == ["body", "model"]
    wrong_method = httpx.get(url)
    assert wrong_method.status_code == 405
    assert wrong_method.json()["object"] == "error"
    fake.script("POST", "/mistral/v1/chat/completions", Scripted(status=429))
    with pytest.raises(mistral_client.errors.SDKError) as info:
        mistral(fake).chat.complete(model="m", messages=ASK)  # type: ignore[arg-type]
    assert info.value.status_code == 429
    assert json.loads(info.value.body)["type"] == "rate_limited"


# --------------------------------------------------------------------------- Cohere v2


def co(fake: FakeUpstream) -> Any:
    return cohere.ClientV2(api_key=KEY, base_url=fake.url)


def test_cohere_chat_shape_and_fresh_ids(fake: FakeUpstream) -> None:
    first, second = (
        post(fake, "/v2/chat", {"model": "c", "messages": ASK}).json() for _ in range(2)
    )
    assert first["id"] != second["id"]
    uuid.UUID(first["id"])
    assert first["message"] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "echo: hello fake"}],
    }
    assert first["finish_reason"] == "COMPLETE"
    assert first["usage"]["billed_units"] == {"input_tokens": 2, "output_tokens": 3}


def test_cohere_stream_events(fake: FakeUpstream) -> None:
    text = post(fake, "/v2/chat", {"model": "c", "messages": ASK, "stream": True}).text
    names = [line[len("event: ") :] for line in text.splitlines() if line.startswith("event: ")]
    assert names[:2] == ["message-start", "content-start"]
    assert names[-2:] == ["content-end", "message-end"]
    assert set(names[2:-2]) == {"content-delta"}
    payloads = [json.loads(d) for d in sse_data(text)]
    assert [p["type"] for p in payloads] == names  # each data repeats its event name
    uuid.UUID(payloads[0]["id"])
    assert payloads[-1]["delta"]["finish_reason"] == "COMPLETE"


def test_cohere_tool_calls_parse(fake: FakeUpstream) -> None:
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    reply = co(fake).chat(model="c", messages=ASK, tools=tools)
    assert reply.finish_reason == "TOOL_CALL"
    assert reply.message.tool_plan
    call = reply.message.tool_calls[0]
    assert call.id.startswith("search_")
    assert call.function.arguments == '{"query": "hello fake"}'
    events = list(co(fake).chat_stream(model="c", messages=ASK, tools=tools))
    types = [e.type for e in events]
    assert "tool-plan-delta" in types and "tool-call-start" in types
    arguments = "".join(
        e.delta.message.tool_calls.function.arguments for e in events if e.type == "tool-call-delta"
    )
    assert json.loads(arguments) == {"query": "hello fake"}
    result = [
        *ASK,
        {"role": "assistant", "tool_calls": [call.dict()], "tool_plan": reply.message.tool_plan},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    assert co(fake).chat(model="c", messages=result).message.content[0].text == "tool said: sunny"


def test_cohere_errors(fake: FakeUpstream) -> None:
    with pytest.raises(cohere.UnauthorizedError) as unauthorized:
        cohere.ClientV2(api_key="", base_url=fake.url).chat(model="c", messages=ASK)
    assert unauthorized.value.body["message"] == "invalid api token"
    with pytest.raises(cohere.BadRequestError) as bad:
        co(fake).chat(model="", messages=ASK)
    assert bad.value.body["message"].startswith("invalid request: ")
    fake.script("POST", "/v2/chat", Scripted(status=429))
    with pytest.raises(cohere.TooManyRequestsError) as limited:
        co(fake).chat(model="c", messages=ASK, request_options={"max_retries": 0})
    assert set(limited.value.body) == {"id", "message"}


# --------------------------------------------------------------------------- Groq


def gq(fake: FakeUpstream) -> Any:
    return groq.Groq(api_key=KEY, base_url=fake.url, max_retries=0)


def test_groq_chat_shape_and_fresh_ids(fake: FakeUpstream) -> None:
    first, second = (
        post(fake, "/openai/v1/chat/completions", {"model": "g", "messages": ASK}).json()
        for _ in range(2)
    )
    assert first["id"] != second["id"] and first["id"].startswith("chatcmpl-")
    assert first["x_groq"]["id"] != second["x_groq"]["id"]
    assert re.fullmatch(r"req_[0-9a-z]{26}", first["x_groq"]["id"])
    usage = first["usage"]
    assert {"queue_time", "prompt_time", "completion_time", "total_time"} <= set(usage)
    assert usage["total_tokens"] == 5
    assert first["service_tier"] == "on_demand"
    assert "refusal" not in first["choices"][0]["message"]


def test_groq_stream_framing(fake: FakeUpstream) -> None:
    body = {"model": "g", "messages": ASK, "stream": True}
    data = sse_data(post(fake, "/openai/v1/chat/completions", body).text)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert "x_groq" in chunks[0] and "usage" not in chunks[0]["x_groq"]
    assert chunks[-1]["x_groq"]["usage"]["total_tokens"] == 5
    assert all("obfuscation" not in c for c in chunks)


def test_groq_errors(fake: FakeUpstream) -> None:
    unauthorized = httpx.post(f"{fake.url}/openai/v1/chat/completions", json={"model": "g"})
    assert unauthorized.status_code == 401
    assert unauthorized.json()["error"]["code"] == "invalid_api_key"
    fake.script("POST", "/openai/v1/chat/completions", Scripted(status=401))
    with pytest.raises(groq.AuthenticationError) as denied:
        gq(fake).chat.completions.create(model="g", messages=ASK)  # type: ignore[arg-type]
    assert denied.value.body["error"]["message"] == "Invalid API Key"  # type: ignore[index]
    with pytest.raises(groq.BadRequestError):
        gq(fake).chat.completions.create(model="", messages=ASK)  # type: ignore[arg-type]
    fake.script("POST", "/openai/v1/chat/completions", Scripted(status=429))
    with pytest.raises(groq.RateLimitError) as limited:
        gq(fake).chat.completions.create(model="g", messages=ASK)  # type: ignore[arg-type]
    assert limited.value.body["error"]["code"] == "rate_limit_exceeded"  # type: ignore[index]
