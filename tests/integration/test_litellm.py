"""litellm against the fake upstream: `acompletion` runs on aiohttp (its default async
transport) for `openai/...` and `ollama/...` models; `completion` (sync) runs on httpx.
Three phases each; replayed text equals the recorded text."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from tests.sdks import sdk

# litellm fetches its model cost map from the internet at import time unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = sdk("litellm")

from tests.aiohttp_harness import AioRecorder, aio_recorder, three_phases  # noqa: E402

__all__ = ["aio_recorder"]  # the fixture, used by name

KEY = "sk-proj-litellmfakekey0123456789abcdefgh"


@pytest.fixture(autouse=True)
def _quiet_litellm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(litellm, "telemetry", False, raising=False)
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", False, raising=False)


def _text(response: Any) -> str:
    return str(response.choices[0].message.content)


def test_acompletion_openai_plain_and_stream(aio_recorder: AioRecorder) -> None:
    def run(url: str) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            common = {"model": "openai/gpt-fake-1", "api_base": f"{url}/v1", "api_key": KEY}
            one = await litellm.acompletion(
                messages=[{"role": "user", "content": "hello litellm"}], **common
            )
            stream = await litellm.acompletion(
                messages=[{"role": "user", "content": "stream some words for me"}],
                stream=True,
                **common,
            )
            pieces = [c.choices[0].delta.content async for c in stream if c.choices]
            return {"text": _text(one), "pieces": [p for p in pieces if p]}

        return asyncio.run(go())

    phases = three_phases(aio_recorder, run)
    assert phases.live["text"] == "echo: hello litellm"
    assert "".join(phases.live["pieces"]) == "echo: stream some words for me"
    assert phases.offline == phases.live
    assert phases.fresh == phases.live
    assert phases.live_calls == 2
    assert all(KEY not in f.read_text() for f in phases.files)


def test_acompletion_ollama(aio_recorder: AioRecorder) -> None:
    def run(url: str) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            common = {"model": "ollama/llama-fake:1b", "api_base": url}
            one = await litellm.acompletion(
                messages=[{"role": "user", "content": "hello ollama"}], **common
            )
            stream = await litellm.acompletion(
                messages=[{"role": "user", "content": "ollama streams words"}],
                stream=True,
                **common,
            )
            pieces = [c.choices[0].delta.content async for c in stream if c.choices]
            return {"text": _text(one), "pieces": "".join(p for p in pieces if p)}

        return asyncio.run(go())

    # litellm also asks Ollama's default address (localhost:11434/api/show) for the model's
    # details, whatever `api_base` says; nothing listens there, so that call gets no
    # response, which is recorded only under record_failures = "all" (docs/design.md §15):
    # without it, replay would miss it, as it must for a call never recorded
    phases = three_phases(aio_recorder, run, record_failures="all")
    # `ollama/` models go to /api/generate with litellm's prompt template around the text
    assert phases.live["text"].startswith("echo: ")
    assert "hello ollama" in phases.live["text"]
    assert "ollama streams words" in phases.live["pieces"]
    assert phases.offline == phases.live
    assert phases.fresh == phases.live


def test_completion_sync(aio_recorder: AioRecorder) -> None:
    def run(url: str) -> str:
        r = litellm.completion(
            model="openai/gpt-fake-1",
            api_base=f"{url}/v1",
            api_key=KEY,
            messages=[{"role": "user", "content": "hello sync litellm"}],
        )
        return _text(r)

    phases = three_phases(aio_recorder, run)
    assert phases.live == "echo: hello sync litellm"
    assert phases.offline == phases.fresh == phases.live
