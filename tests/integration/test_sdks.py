"""SDKs on httpx/httpx2 (the `sdks` extra) through the three phases (tests/integration/phases.py):
mistralai, cohere v2, groq, ollama and langchain-openai, each plain and streamed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream
from tests.integration.phases import three_phases
from tests.sdks import sdk

KEY = "sk-abcdefghijklmnopqrstuvwxyz0123456789"


def stored_bodies(phases: Any) -> list[Any]:
    return [json.loads(p.read_text())["response"]["body"] for p in phases.files]


def test_mistralai_chat_and_stream(upstream: FakeUpstream, recorder: Recorder) -> None:
    sdk("mistralai")
    from mistralai.client import Mistral

    def run(url: str) -> dict[str, Any]:
        client = Mistral(api_key=KEY, server_url=f"{url}/mistral")
        messages: Any = [{"role": "user", "content": "bonjour mistral"}]
        reply = client.chat.complete(model="mistral-fake", messages=messages)
        stream = client.chat.stream(
            model="mistral-fake", messages=[{"role": "user", "content": "stream me a story"}]
        )
        events = [event.data for event in stream]
        return {
            "text": reply.choices[0].message.content,
            "usage": reply.usage.total_tokens,
            "pieces": [e.choices[0].delta.content for e in events],
            "finish": events[-1].choices[0].finish_reason,
            "stream_usage": events[-1].usage.total_tokens if events[-1].usage else None,
        }

    phases = three_phases(upstream, recorder, run)
    assert phases.live["text"] == "echo: bonjour mistral"
    assert "".join(phases.live["pieces"]) == "echo: stream me a story"
    assert phases.live["finish"] == "stop"
    assert phases.live["stream_usage"] == 9
    assert KEY not in "".join(p.read_text() for p in phases.files)


def test_mistralai_async(upstream: FakeUpstream, recorder: Recorder) -> None:
    sdk("mistralai")
    from mistralai.client import Mistral

    def run(url: str) -> tuple[str, list[str]]:
        async def go() -> tuple[str, list[str]]:
            client = Mistral(api_key=KEY, server_url=f"{url}/mistral")
            reply = await client.chat.complete_async(
                model="mistral-fake", messages=[{"role": "user", "content": "async hi"}]
            )
            stream = await client.chat.stream_async(
                model="mistral-fake", messages=[{"role": "user", "content": "async stream"}]
            )
            pieces = [str(e.data.choices[0].delta.content) async for e in stream]
            return str(reply.choices[0].message.content), pieces

        return asyncio.run(go())

    phases = three_phases(upstream, recorder, run)
    assert phases.live[0] == "echo: async hi"
    assert "".join(phases.live[1]) == "echo: async stream"


def test_cohere_v2_chat_and_chat_stream(upstream: FakeUpstream, recorder: Recorder) -> None:
    cohere = sdk("cohere")

    def run(url: str) -> dict[str, Any]:
        client = cohere.ClientV2(api_key=KEY, base_url=url)
        reply = client.chat(model="command-fake", messages=[{"role": "user", "content": "hi co"}])
        events = list(
            client.chat_stream(
                model="command-fake", messages=[{"role": "user", "content": "stream to me co"}]
            )
        )
        return {
            "text": reply.message.content[0].text,
            "finish": reply.finish_reason,
            "billed": reply.usage.billed_units.output_tokens,
            "types": [e.type for e in events],
            "pieces": [e.delta.message.content.text for e in events if e.type == "content-delta"],
            "end": events[-1].delta.finish_reason,
        }

    phases = three_phases(upstream, recorder, run)
    assert phases.live["text"] == "echo: hi co"
    assert phases.live["finish"] == "COMPLETE"
    assert "".join(phases.live["pieces"]) == "echo: stream to me co"
    assert phases.live["types"][0] == "message-start"
    assert phases.live["types"][-1] == "message-end"
    assert phases.live["end"] == "COMPLETE"
    stream_events = next(b for b in stored_bodies(phases) if isinstance(b, list))
    assert [e["event"] for e in stream_events] == phases.live["types"]


def test_cohere_v2_async_stream(upstream: FakeUpstream, recorder: Recorder) -> None:
    cohere = sdk("cohere")

    def run(url: str) -> list[str]:
        async def go() -> list[str]:
            client = cohere.AsyncClientV2(api_key=KEY, base_url=url)
            stream = client.chat_stream(
                model="command-fake", messages=[{"role": "user", "content": "async co"}]
            )
            return [e.delta.message.content.text async for e in stream if e.type == "content-delta"]

        return asyncio.run(go())

    phases = three_phases(upstream, recorder, run)
    assert "".join(phases.live) == "echo: async co"


def test_groq_chat_and_stream(upstream: FakeUpstream, recorder: Recorder) -> None:
    groq = sdk("groq")

    def run(url: str) -> dict[str, Any]:
        client = groq.Groq(api_key=KEY, base_url=url, max_retries=0)
        reply = client.chat.completions.create(
            model="llama-fake", messages=[{"role": "user", "content": "hi groq"}]
        )
        chunks = list(
            client.chat.completions.create(
                model="llama-fake",
                messages=[{"role": "user", "content": "stream groq stream"}],
                stream=True,
            )
        )
        final = chunks[-1].x_groq
        return {
            "text": reply.choices[0].message.content,
            "tokens": reply.usage.total_tokens if reply.usage else None,
            "pieces": [c.choices[0].delta.content for c in chunks if c.choices],
            "final_usage": final.usage.total_tokens if final and final.usage else None,
        }

    phases = three_phases(upstream, recorder, run)
    assert phases.live["text"] == "echo: hi groq"
    assert "".join(p or "" for p in phases.live["pieces"]) == "echo: stream groq stream"
    assert phases.live["final_usage"] == 7
    assert all(c.path == "/openai/v1/chat/completions" for c in upstream.calls)


def test_ollama_chat_stream_and_generate(upstream: FakeUpstream, recorder: Recorder) -> None:
    ollama = sdk("ollama")

    def run(url: str) -> dict[str, Any]:
        client = ollama.Client(host=url)
        chat = client.chat(
            model="llama-fake:1b", messages=[{"role": "user", "content": "hi llama"}], stream=False
        )
        parts = client.chat(
            model="llama-fake:1b",
            messages=[{"role": "user", "content": "one two three four five"}],
            stream=True,
        )
        pieces = [(p.message.content, p.done) for p in parts]
        generated = client.generate(model="llama-fake:1b", prompt="complete me")
        streamed = [
            g.response
            for g in client.generate(model="llama-fake:1b", prompt="a b c d", stream=True)
        ]
        return {
            "chat": chat.message.content,
            "pieces": pieces,
            "generate": generated.response,
            "generate_stream": streamed,
        }

    phases = three_phases(upstream, recorder, run)
    assert phases.live["chat"] == "echo: hi llama"
    assert "".join(p for p, _ in phases.live["pieces"]) == "echo: one two three four five"
    assert phases.live["pieces"][-1][1] is True
    assert phases.live["generate"] == "echo: complete me"
    assert "".join(phases.live["generate_stream"]) == "echo: a b c d"
    ndjson = [b for b in stored_bodies(phases) if isinstance(b, list)]
    assert len(ndjson) == 2  # the two streams are stored line by line


def test_ollama_async_stream(upstream: FakeUpstream, recorder: Recorder) -> None:
    ollama = sdk("ollama")

    def run(url: str) -> list[str]:
        async def go() -> list[str]:
            client = ollama.AsyncClient(host=url)
            parts = await client.chat(
                model="llama-fake:1b",
                messages=[{"role": "user", "content": "async llama"}],
                stream=True,
            )
            return [p.message.content async for p in parts]

        return asyncio.run(go())

    phases = three_phases(upstream, recorder, run)
    assert "".join(phases.live) == "echo: async llama"


def test_langchain_openai_invoke_and_stream(upstream: FakeUpstream, recorder: Recorder) -> None:
    sdk("langchain_openai")
    from langchain_openai import ChatOpenAI

    def run(url: str) -> dict[str, Any]:
        model = ChatOpenAI(model="gpt-fake-1", base_url=f"{url}/v1", api_key=KEY, max_retries=0)
        reply = model.invoke("hi langchain")
        chunks = list(model.stream("stream langchain please"))
        return {
            "text": reply.content,
            "usage": reply.usage_metadata,
            "pieces": [c.content for c in chunks],
        }

    phases = three_phases(upstream, recorder, run)
    assert phases.live["text"] == "echo: hi langchain"
    assert "".join(phases.live["pieces"]) == "echo: stream langchain please"
    assert phases.live["usage"]["total_tokens"] == 5


def _mistral_error(url: str) -> None:
    from mistralai.client import Mistral

    Mistral(api_key=KEY, server_url=f"{url}/mistral").chat.complete(
        model="mistral-fake", messages=[{"role": "user", "content": "too many"}]
    )


def _cohere_error(url: str) -> None:
    import cohere

    cohere.ClientV2(api_key=KEY, base_url=url).chat(
        model="command-fake",
        messages=[{"role": "user", "content": "too many"}],
        request_options={"max_retries": 0},
    )


def _groq_error(url: str) -> None:
    import groq

    groq.Groq(api_key=KEY, base_url=url, max_retries=0).chat.completions.create(
        model="llama-fake", messages=[{"role": "user", "content": "too many"}]
    )


def _ollama_error(url: str) -> None:
    import ollama

    ollama.Client(host=url).chat(
        model="llama-fake:1b", messages=[{"role": "user", "content": "too many"}], stream=False
    )


@pytest.mark.parametrize(
    ("package", "path", "call", "status"),
    [
        ("mistralai", "/mistral/v1/chat/completions", _mistral_error, 429),
        ("cohere", "/v2/chat", _cohere_error, 429),
        ("groq", "/openai/v1/chat/completions", _groq_error, 401),
        ("ollama", "/api/chat", _ollama_error, 500),
    ],
    ids=["mistralai", "cohere", "groq", "ollama"],
)
def test_error_statuses_replay_as_the_sdks_own_exceptions(
    package: str, path: str, call: Any, status: int, upstream: FakeUpstream, recorder: Recorder
) -> None:
    sdk(package)
    from tests.fakes.upstream import Scripted

    upstream.script("POST", path, Scripted(status=status))

    def run(url: str) -> tuple[str, int, str]:
        with pytest.raises(Exception) as info:
            call(url)
        error: Any = info.value
        body = getattr(error, "body", None)
        if isinstance(body, str):
            body = json.loads(body)  # mistralai keeps the text
        if body is None:
            body = {"error": error.error}  # ollama keeps only the message
        message = body.get("message") or body.get("error")
        if isinstance(message, dict):
            message = message.get("message")
        return type(error).__name__, error.status_code, message

    phases = three_phases(upstream, recorder, run)
    assert phases.live[1] == status
    assert phases.live[2]  # the API's own error message, the same after replay
