"""google-genai against a fake Gemini API: the sync client (httpx) and `client.aio`, which
runs on aiohttp whenever aiohttp is installed. Three phases each; replayed text equals the
recorded text, and the API key is not in the files."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.sdks import sdk

genai = sdk("google.genai")
types = sdk("google.genai.types")

from tests.aiohttp_harness import AioRecorder, aio_recorder, three_phases  # noqa: E402

__all__ = ["aio_recorder"]  # the fixture, used by name

KEY = "AIzaSyFAKE-abcdefghijklmnopqrstuvwxyz012"
MODEL = "gemini-fake-flash"


def client(url: str) -> Any:
    options = types.HttpOptions(base_url=url, api_version="v1beta")
    return genai.Client(api_key=KEY, http_options=options)


def test_sync_generate_and_stream(aio_recorder: AioRecorder) -> None:
    def run(url: str) -> dict[str, Any]:
        c = client(url)
        one = c.models.generate_content(model=MODEL, contents="hello gemini")
        pieces = [
            chunk.text
            for chunk in c.models.generate_content_stream(
                model=MODEL, contents="stream five words to me"
            )
        ]
        c.close()
        return {
            "text": one.text,
            "usage": one.usage_metadata.total_token_count if one.usage_metadata else None,
            "pieces": pieces,
        }

    phases = three_phases(aio_recorder, run)
    assert phases.live["text"] == "echo: hello gemini"
    assert "".join(phases.live["pieces"]) == "echo: stream five words to me"
    assert len(phases.live["pieces"]) > 1
    assert phases.offline == phases.live
    assert phases.fresh == phases.live
    assert all(KEY not in f.read_text() for f in phases.files)


def test_aio_runs_on_aiohttp_and_replays(aio_recorder: AioRecorder) -> None:
    def run(url: str) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            c = client(url)
            assert c._api_client._use_aiohttp(), "google-genai did not pick aiohttp"
            one = await c.aio.models.generate_content(model=MODEL, contents="hello async gemini")
            stream = await c.aio.models.generate_content_stream(
                model=MODEL, contents="an async stream of words"
            )
            pieces = [chunk.text async for chunk in stream]
            await c.aio.aclose()
            return {"text": one.text, "pieces": pieces}

        return asyncio.run(go())

    phases = three_phases(aio_recorder, run)
    assert phases.live["text"] == "echo: hello async gemini"
    assert "".join(phases.live["pieces"]) == "echo: an async stream of words"
    assert len(phases.live["pieces"]) > 1
    assert phases.offline == phases.live
    assert phases.fresh == phases.live
    assert phases.live_calls == 2
    assert len(phases.files) == 2
    assert all(KEY not in f.read_text() for f in phases.files)
