"""Self-checks: the fake upstream works with the REAL openai / anthropic SDKs and raw clients."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest

from .apis import embedding_vector, split_pieces
from .upstream import FakeUpstream, Scripted

CHAT = "/v1/chat/completions"
USER_TEXT = "what is the weather like in Paris today"
WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Look up the weather",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}


@pytest.fixture
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as upstream:
        yield upstream


@pytest.fixture
def oai(fake: FakeUpstream) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="sk-test", max_retries=0)
    yield client
    client.close()


@pytest.fixture
def claude(fake: FakeUpstream) -> Iterator[anthropic.Anthropic]:
    client = anthropic.Anthropic(base_url=fake.url, api_key="sk-ant-test", max_retries=0)
    yield client
    client.close()


def user(text: str = USER_TEXT) -> Any:
    """A one-message conversation (typed ``Any`` to satisfy the SDKs' TypedDict params)."""
    return [{"role": "user", "content": text}]


# --------------------------------------------------------------------------- OpenAI chat


def test_openai_chat_non_stream(fake: FakeUpstream, oai: openai.OpenAI) -> None:
    messages: Any = [{"role": "system", "content": "be brief"}, *user()]
    completion = oai.chat.completions.create(model="gpt-fake-1", messages=messages)
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == "gpt-fake-1"
    assert completion.system_fingerprint and completion.system_fingerprint.startswith("fp_")
    choice = completion.choices[0]
    assert choice.message.content == f"echo: {USER_TEXT}"
    assert choice.finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == 2 + len(USER_TEXT.split())
    assert completion.usage.completion_tokens == 1 + len(USER_TEXT.split())
    assert fake.calls[-1].json()["messages"] == messages


def test_openai_chat_text_parts(oai: openai.OpenAI) -> None:
    content: Any = [{"type": "text", "text": "hello "}, {"type": "text", "text": "parts"}]
    completion = oai.chat.completions.create(
        model="gpt-fake-1",
        messages=[{"role": "user", "content": content}],
    )
    assert completion.choices[0].message.content == "echo: hello parts"


def test_openai_chat_stream(oai: openai.OpenAI) -> None:
    stream = oai.chat.completions.create(
        model="gpt-fake-1",
        messages=user(),
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    texts = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(texts) == f"echo: {USER_TEXT}"
    assert sum(1 for t in texts if t) >= 3
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 1 + len(USER_TEXT.split())
    assert all(getattr(c, "obfuscation", None) for c in chunks)


def test_openai_tool_call_and_tool_result(oai: openai.OpenAI) -> None:
    completion = oai.chat.completions.create(
        model="gpt-fake-1",
        messages=user(),
        tools=[WEATHER_TOOL],
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert choice.message.tool_calls is not None
    tool_call = choice.message.tool_calls[0]
    assert tool_call.id.startswith("call_")
    assert tool_call.function.name == "get_weather"
    assert json.loads(tool_call.function.arguments) == {"query": USER_TEXT}

    follow_up: Any = [
        *user(),
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": tool_call.id, "content": "sunny, 21C"},
    ]
    answer = oai.chat.completions.create(
        model="gpt-fake-1",
        messages=follow_up,
        tools=[WEATHER_TOOL],
    )
    assert answer.choices[0].message.content == "tool said: sunny, 21C"


def test_openai_tool_call_stream(oai: openai.OpenAI) -> None:
    stream = oai.chat.completions.create(
        model="gpt-fake-1",
        messages=user(),
        tools=[WEATHER_TOOL],
        stream=True,
    )
    deltas = [d for c in stream for d in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].id is not None and deltas[0].id.startswith("call_")
    assert deltas[0].function is not None and deltas[0].function.name == "get_weather"
    assert len(deltas) > 2 and all(d.index == 0 for d in deltas)
    arguments = "".join((d.function.arguments or "") for d in deltas if d.function)
    assert json.loads(arguments) == {"query": USER_TEXT}


# --------------------------------------------------------------------------- embeddings, models


def test_openai_embeddings_float_and_base64(fake: FakeUpstream, oai: openai.OpenAI) -> None:
    as_float = oai.embeddings.create(
        model="emb-fake", input=["alpha", "beta"], encoding_format="float"
    )
    default = oai.embeddings.create(model="emb-fake", input=["alpha", "beta"])
    assert fake.calls[-1].json()["encoding_format"] == "base64"  # the SDK's default
    assert [d.index for d in as_float.data] == [0, 1]
    for exact, decoded in zip(as_float.data, default.data, strict=True):
        assert len(exact.embedding) == 8
        assert all(-1 <= x <= 1 for x in exact.embedding)
        assert decoded.embedding == pytest.approx(exact.embedding, abs=1e-6)
    assert as_float.data[0].embedding == embedding_vector("alpha")
    assert as_float.data[0].embedding != as_float.data[1].embedding
    single = oai.embeddings.create(model="emb-fake", input="alpha", encoding_format="float")
    assert single.data[0].embedding == as_float.data[0].embedding
    assert single.usage.prompt_tokens == 1


def test_openai_models_list(fake: FakeUpstream, oai: openai.OpenAI) -> None:
    assert [m.id for m in oai.models.list()] == ["gpt-fake-1", "gpt-fake-2"]
    fake.models = ["only-one"]
    assert [m.id for m in oai.models.list()] == ["only-one"]
    assert oai.models.retrieve("only-one").owned_by == "fake"
    with pytest.raises(openai.NotFoundError):
        oai.models.retrieve("missing")


# --------------------------------------------------------------------------- Responses API


def test_responses_non_stream(oai: openai.OpenAI) -> None:
    response = oai.responses.create(model="gpt-fake-1", input="hello responses")
    assert response.id.startswith("resp_")
    assert response.status == "completed"
    assert response.output_text == "echo: hello responses"
    assert response.previous_response_id is None
    assert response.usage is not None and response.usage.output_tokens == 3
    items = oai.responses.create(
        model="gpt-fake-1",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "as parts"}]}],
    )
    assert items.output_text == "echo: as parts"


def test_responses_stream(oai: openai.OpenAI) -> None:
    with oai.responses.stream(model="gpt-fake-1", input="stream me a few words please") as stream:
        events = list(stream)
        final = stream.get_final_response()
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) >= 2
    assert "".join(deltas) == "echo: stream me a few words please"
    assert final.output_text == "echo: stream me a few words please"
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"

    raw = oai.responses.create(model="gpt-fake-1", input="raw events", stream=True)
    types = [event.type for event in raw]
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]


def test_responses_previous_response_id_chain(oai: openai.OpenAI) -> None:
    first = oai.responses.create(model="gpt-fake-1", input="first")
    second = oai.responses.create(model="gpt-fake-1", input="second", previous_response_id=first.id)
    third = oai.responses.create(model="gpt-fake-1", input="third", previous_response_id=second.id)
    assert first.output_text == "echo: first"
    assert second.output_text == "echo: second (turn 2)"
    assert third.output_text == "echo: third (turn 3)"
    assert third.previous_response_id == second.id
    with pytest.raises(openai.BadRequestError) as caught:
        oai.responses.create(model="gpt-fake-1", input="x", previous_response_id="resp_nope")
    assert caught.value.code == "previous_response_not_found"
    assert "resp_nope" in caught.value.message


def test_responses_function_tool(oai: openai.OpenAI) -> None:
    tool: Any = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    first = oai.responses.create(model="gpt-fake-1", input="find cats", tools=[tool])
    call = first.output[0]
    assert call.type == "function_call"
    assert call.name == "lookup" and call.call_id.startswith("call_")
    assert json.loads(call.arguments) == {"query": "find cats"}
    output: Any = {"type": "function_call_output", "call_id": call.call_id, "output": "3 cats"}
    second = oai.responses.create(
        model="gpt-fake-1",
        input=[output],
        previous_response_id=first.id,
        tools=[tool],
    )
    assert second.output_text == "tool said: 3 cats"
    with oai.responses.stream(model="gpt-fake-1", input="find dogs", tools=[tool]) as stream:
        final = stream.get_final_response()
    assert final.output[0].type == "function_call"
    assert json.loads(final.output[0].arguments) == {"query": "find dogs"}


# --------------------------------------------------------------------------- Anthropic


def test_anthropic_create(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="claude-fake",
        max_tokens=100,
        system="you are a fake",
        messages=[{"role": "user", "content": [{"type": "text", "text": "hi claude"}]}],
    )
    assert message.id.startswith("msg_")
    assert message.content[0].type == "text"
    assert message.content[0].text == "echo: hi claude"
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 6  # "you are a fake" + "hi claude"
    assert message.usage.output_tokens == 3


def test_anthropic_stream(claude: anthropic.Anthropic) -> None:
    text = "please stream this sentence back to me"
    with claude.messages.stream(model="claude-fake", max_tokens=100, messages=user(text)) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) >= 3
    assert "".join(pieces) == f"echo: {text}"
    assert final.content[0].text == f"echo: {text}"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 1 + len(text.split())


def test_anthropic_keepalive_comment_in_raw_stream(fake: FakeUpstream) -> None:
    body = {"model": "c", "max_tokens": 5, "stream": True, "messages": user("a b c d e f g")}
    with httpx2.stream("POST", f"{fake.url}/v1/messages", json=body) as response:
        raw = response.read().decode()
    assert ": keepalive\n\n" in raw
    assert raw.index("event: ping") < raw.index(": keepalive") < raw.index("content_block_stop")


def test_anthropic_tool_use(claude: anthropic.Anthropic) -> None:
    tools: Any = [{"name": "search", "description": "s", "input_schema": {"type": "object"}}]
    message = claude.messages.create(
        model="claude-fake", max_tokens=100, messages=user("find it"), tools=tools
    )
    block = message.content[0]
    assert message.stop_reason == "tool_use"
    assert block.type == "tool_use" and block.id.startswith("toolu_")
    assert block.name == "search" and block.input == {"query": "find it"}
    result = [{"type": "tool_result", "tool_use_id": block.id, "content": "found"}]
    messages: Any = [
        *user("find it"),
        {"role": "assistant", "content": [block.model_dump()]},
        {"role": "user", "content": result},
    ]
    answer = claude.messages.create(
        model="claude-fake", max_tokens=100, messages=messages, tools=tools
    )
    assert answer.content[0].text == "tool said: found"
    with claude.messages.stream(
        model="claude-fake", max_tokens=100, messages=user("find it"), tools=tools
    ) as stream:
        final = stream.get_final_message()
    assert final.content[0].input == {"query": "find it"}


# --------------------------------------------------------------------------- async clients


def test_async_clients(fake: FakeUpstream) -> None:
    async def main() -> tuple[str, str]:
        async with (
            openai.AsyncOpenAI(base_url=f"{fake.url}/v1", api_key="k", max_retries=0) as oai,
            anthropic.AsyncAnthropic(base_url=fake.url, api_key="k", max_retries=0) as ant,
        ):
            stream = await oai.chat.completions.create(
                model="m", messages=user("async hello"), stream=True
            )
            text = "".join([c.choices[0].delta.content or "" async for c in stream])
            async with ant.messages.stream(
                model="c", max_tokens=10, messages=user("async claude")
            ) as astream:
                ant_text = "".join([t async for t in astream.text_stream])
            return text, ant_text

    assert asyncio.run(main()) == ("echo: async hello", "echo: async claude")


# --------------------------------------------------------------------------- Ollama


def test_ollama_chat_ndjson_stream_with_httpx(fake: FakeUpstream) -> None:
    body = {"model": "llama-fake:1b", "messages": user("stream from ollama now please")}
    lines = []
    with httpx.Client() as client, client.stream("POST", f"{fake.url}/api/chat", json=body) as r:
        assert r.headers["content-type"] == "application/x-ndjson"
        assert r.headers["transfer-encoding"] == "chunked"
        lines = [json.loads(line) for line in r.iter_lines() if line]
    assert len(lines) >= 3
    assert all(not line["done"] for line in lines[:-1])
    final = lines[-1]
    assert final["done"] is True and final["done_reason"] == "stop"
    assert "".join(line["message"]["content"] for line in lines) == (
        "echo: stream from ollama now please"
    )
    assert final["eval_count"] == 6 and final["prompt_eval_count"] == 5
    assert isinstance(final["total_duration"], int)
    assert final["created_at"].endswith("Z") and len(final["created_at"].split(".")[1]) == 10


def test_ollama_non_stream_generate_embed_tags(fake: FakeUpstream) -> None:
    with httpx2.Client(base_url=fake.url) as client:
        chat = client.post(
            "/api/chat", json={"model": "l", "messages": user("hi"), "stream": False}
        )
        assert chat.json()["message"] == {"role": "assistant", "content": "echo: hi"}
        generated = client.post("/api/generate", json={"model": "l", "prompt": "why sky blue"})
        lines = [json.loads(line) for line in generated.text.splitlines()]
        assert "".join(line["response"] for line in lines) == "echo: why sky blue"
        assert lines[-1]["done"] is True
        whole = client.post("/api/generate", json={"model": "l", "prompt": "p", "stream": False})
        assert whole.json()["response"] == "echo: p"
        embed = client.post("/api/embed", json={"model": "l", "input": ["a", "b"]}).json()
        assert embed["embeddings"] == [embedding_vector("a"), embedding_vector("b")]
        tags = client.get("/api/tags").json()
        assert [m["name"] for m in tags["models"]] == ["llama-fake:1b"]
        fake.ollama_models = ["x:1", "y:2"]
        assert [m["model"] for m in client.get("/api/ps").json()["models"]] == ["x:1", "y:2"]
        missing = client.post("/api/chat", json={"messages": []})
        assert missing.status_code == 400 and "error" in missing.json()


# --------------------------------------------------------------------------- noise vs content


def test_ids_and_noise_differ_between_identical_calls(fake: FakeUpstream) -> None:
    body = {"model": "m", "messages": user("same")}
    with httpx2.Client(base_url=fake.url) as client:
        first, second = (client.post(CHAT, json=body) for _ in range(2))
        assert first.json()["id"] != second.json()["id"]
        assert first.json()["choices"] == second.json()["choices"]
        for header in ("x-request-id", "set-cookie"):
            assert first.headers[header] != second.headers[header]
        assert first.headers["x-request-id"].startswith("req_")
        assert "date" in first.headers and "openai-processing-ms" in first.headers
        assert "x-ratelimit-remaining-requests" in first.headers
        ollama = {"model": "l", "messages": user("same"), "stream": False}
        one, two = (client.post("/api/chat", json=ollama).json() for _ in range(2))
        assert one["message"] == two["message"]
        assert one["created_at"] != two["created_at"]
        a, b = (client.post("/v1/responses", json={"model": "m", "input": "x"}) for _ in range(2))
        assert a.json()["id"] != b.json()["id"]
        assert a.json()["output"][0]["id"] != b.json()["output"][0]["id"]


def test_split_pieces_round_trips() -> None:
    for text in ["", "one", "  lead and trail  ", "a b c d e f g", "x\n\ny  z"]:
        assert "".join(split_pieces(text)) == text


# --------------------------------------------------------------------------- scripting


def test_scripted_429_then_normal_with_sdk_retry(fake: FakeUpstream) -> None:
    fake.script("POST", CHAT, Scripted(status=429, headers={"retry-after": "0"}))
    client = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="k", max_retries=2)
    completion = client.chat.completions.create(model="m", messages=user("retry"))
    assert completion.choices[0].message.content == "echo: retry"
    assert [c.path for c in fake.calls] == [CHAT, CHAT]
    client.close()


def test_scripted_json_order_and_reset(fake: FakeUpstream, oai: openai.OpenAI) -> None:
    fake.script(
        "post",
        CHAT,
        Scripted(status=500, json={"error": {"message": "boom", "type": "server_error"}}),
        Scripted(status=200, json={"custom": True}, headers={"x-extra": "1"}),
    )
    with httpx2.Client(base_url=fake.url) as client:
        first = client.post(CHAT, json={"model": "m", "messages": []})
        second = client.post(CHAT, json={"model": "m", "messages": []})
        third = client.post(CHAT, json={"model": "m", "messages": user("normal")})
        assert (first.status_code, first.json()["error"]["message"]) == (500, "boom")
        assert second.json() == {"custom": True} and second.headers["x-extra"] == "1"
        assert third.json()["choices"][0]["message"]["content"] == "echo: normal"
        fake.script("GET", "/plain", Scripted(body=b"raw", headers={"content-type": "text/x"}))
        fake.reset()
        assert fake.calls == []
        assert client.get("/plain").text == "hello from fake upstream"
    fake.script("POST", "/v1/messages", Scripted(status=529))
    claude = anthropic.Anthropic(base_url=fake.url, api_key="k", max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as caught:
        claude.messages.create(model="c", max_tokens=5, messages=user("x"))
    assert caught.value.status_code == 529
    assert caught.value.body["error"]["type"] == "overloaded_error"


def test_disconnect_after_chunks_breaks_stream(fake: FakeUpstream, oai: openai.OpenAI) -> None:
    body = {"model": "m", "stream": True, "messages": user("one two three four five six seven")}
    fake.script("POST", CHAT, Scripted(disconnect_after_chunks=2))
    received: list[str] = []
    with httpx2.Client() as client, client.stream("POST", f"{fake.url}{CHAT}", json=body) as r:
        assert r.status_code == 200
        with pytest.raises((httpx2.RemoteProtocolError, httpx2.ReadError)):
            received.extend(line for line in r.iter_lines() if line.startswith("data:"))
    assert len(received) == 2

    fake.script("POST", CHAT, Scripted(disconnect_after_chunks=2))
    chunks = []
    stream = oai.chat.completions.create(
        model="m", messages=user("one two three four five six"), stream=True
    )
    with pytest.raises(openai.APIConnectionError) as caught:
        chunks.extend(stream)
    assert len(chunks) == 2
    assert isinstance(caught.value.__cause__, (httpx2.RemoteProtocolError, httpx2.ReadError))


def test_close_without_response_and_delay(fake: FakeUpstream) -> None:
    fake.script("GET", "/plain", Scripted(close_without_response=True), Scripted(delay=2.0))
    with httpx2.Client(base_url=fake.url, timeout=0.3) as client:
        with pytest.raises(httpx2.RemoteProtocolError):
            client.get("/plain")
        with pytest.raises(httpx2.ReadTimeout):
            client.get("/plain")
        assert client.get("/plain").text == "hello from fake upstream"
    assert len(fake.calls) == 3


# --------------------------------------------------------------------------- compression


def test_compress_gzip_json_and_streams() -> None:
    with FakeUpstream(compress=True) as fake, httpx2.Client(base_url=fake.url) as client:
        response = client.post(CHAT, json={"model": "m", "messages": user("zip it")})
        assert response.headers["content-encoding"] == "gzip"
        assert response.json()["choices"][0]["message"]["content"] == "echo: zip it"
        with client.stream("GET", "/v1/models") as listed:
            raw_models = b"".join(listed.iter_raw())
            assert int(listed.headers["content-length"]) == len(raw_models)
            assert raw_models[:2] == b"\x1f\x8b"

        body = {"model": "m", "stream": True, "messages": user("zip the stream please now")}
        with client.stream("POST", CHAT, json=body) as streamed:
            assert streamed.headers["content-encoding"] == "gzip"
            raw = b"".join(streamed.iter_raw())
        assert raw[:2] == b"\x1f\x8b"

        oai = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="k", max_retries=0)
        chunks = oai.chat.completions.create(
            model="m", messages=user("zip the stream please now"), stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
        assert text == "echo: zip the stream please now"
        with (
            claude_client(fake) as claude,
            claude.messages.stream(model="c", max_tokens=9, messages=user("gzip claude")) as stream,
        ):
            assert stream.get_final_text() == "echo: gzip claude"
        plain = client.get("/plain", headers={"accept-encoding": "identity"})
        assert "content-encoding" not in plain.headers
        oai.close()


def claude_client(fake: FakeUpstream) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=fake.url, api_key="k", max_retries=0)


# --------------------------------------------------------------------------- generic, errors


def test_generic_endpoints(fake: FakeUpstream) -> None:
    with httpx2.Client(base_url=fake.url) as client:
        plain = client.get("/plain")
        assert plain.text == "hello from fake upstream"
        assert plain.headers["content-type"].startswith("text/plain")
        binary = client.get("/binary")
        assert binary.content == bytes(range(256))
        assert binary.headers["content-type"] == "application/octet-stream"
        echoed = client.post("/echo?x=1", json={"a": [1, 2]}, headers={"X-Custom": "yes"}).json()
        assert echoed["received"] == {"a": [1, 2]}
        assert echoed["headers"]["x-custom"] == "yes"
        assert fake.calls[-1].query == "x=1"
        with client.stream("GET", "/stream/bytes") as streamed:
            assert b"".join(streamed.iter_bytes()) == b"".join(
                f"chunk {i}\n".encode() for i in range(5)
            )


def test_error_shapes(fake: FakeUpstream, oai: openai.OpenAI) -> None:
    with httpx2.Client(base_url=fake.url) as client:
        bad = client.post(CHAT, content=b"{not json", headers={"content-type": "application/json"})
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
        no_model = client.post(CHAT, json={"messages": user()})
        assert no_model.status_code == 400 and no_model.json()["error"]["param"] == "model"
        unknown = client.get("/v1/nowhere")
        assert unknown.status_code == 404 and "error" in unknown.json()
        anthropic_bad = client.post("/v1/messages", json={"messages": []})
        assert anthropic_bad.json()["type"] == "error"
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model="", messages=user())


# --------------------------------------------------------------------------- lifecycle


def test_stop_refuses_connections_and_is_idempotent() -> None:
    fake = FakeUpstream().start()
    url = fake.url
    assert url.startswith("http://127.0.0.1:") and not url.endswith("/")
    port = int(url.rsplit(":", 1)[1])
    with httpx2.Client() as client:
        assert client.get(f"{url}/plain").status_code == 200  # leaves a kept-alive connection
        fake.stop()
        fake.stop()
        # stop() ended the serving thread despite the kept-alive connection (its join did not
        # give up on a thread still serving), whatever the machine's speed
        serving = [t for t in threading.enumerate() if t.name == f"fake-upstream-{port}"]
        assert serving == []
        with pytest.raises(httpx2.ConnectError):
            httpx2.get(f"{url}/plain")
        with pytest.raises(httpx2.TransportError):
            client.get(f"{url}/plain")
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port)):
        pass
