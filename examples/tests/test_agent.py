"""The example suite: runs offline against its committed recordings.

INFERENCE_MODE=replay pytest -p hashreplay examples/   # what CI runs: no key, no network
python scripts/record_examples.py                       # re-record against the local fake
"""

from __future__ import annotations

import openai
import pytest
from agent import Agent, make_client, rank


@pytest.fixture
def client() -> openai.OpenAI:
    return make_client()


def test_agent_calls_the_weather_tool(client: openai.OpenAI) -> None:
    answer = Agent(client).ask("Paris")
    assert "sunny and 21 degrees in Paris" in answer


def test_agent_asked_twice_replays_in_order(client: openai.OpenAI) -> None:
    agent = Agent(client)
    assert agent.ask("Oslo") == agent.ask("Oslo")


def test_streamed_reply(client: openai.OpenAI) -> None:
    pieces = Agent(client).stream("tell me a short story")
    assert len(pieces) > 1
    assert "".join(pieces) == "echo: tell me a short story"


def test_retrieval_ranks_by_embedding(client: openai.OpenAI) -> None:
    docs = ["the cat sat on the mat", "stock prices fell", "a cat chased a mouse"]
    ranked = rank(client, "cats", docs)
    assert sorted(ranked) == sorted(docs)
    assert len(ranked) == 3


def test_models_are_listed(client: openai.OpenAI) -> None:
    models = [m.id for m in client.models.list()]
    assert "gpt-fake-1" in models
