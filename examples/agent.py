"""A toy tool-calling agent and a tiny retrieval helper, built on the openai SDK.

The code knows nothing about hashreplay: the pytest plugin records and replays the HTTP
calls the SDK makes underneath it. Point it at any OpenAI-compatible server with
`OPENAI_BASE_URL` and `OPENAI_API_KEY`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import openai

MODEL = "gpt-4o-mini"
EMBEDDING_MODEL = "text-embedding-3-small"
SYSTEM = "You are a concise assistant. Use the tools when they help."

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "lookup_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "the city"}},
                "required": ["query"],
            },
        },
    }
]


def lookup_weather(query: str) -> str:
    """The local tool the model may call (deterministic, no network)."""
    return f"sunny and 21 degrees in {query}"


TOOL_FUNCTIONS: dict[str, Callable[..., str]] = {"lookup_weather": lookup_weather}


def make_client() -> openai.OpenAI:
    # The key comes from OPENAI_API_KEY; in replay mode hashreplay sets a placeholder when it
    # is unset (no request leaves the process), so CI needs no key at all.
    return openai.OpenAI(max_retries=2)


class Agent:
    """Answers a question, calling tools until the model replies with text."""

    def __init__(self, client: openai.OpenAI, model: str = MODEL, max_turns: int = 5) -> None:
        self.client = client
        self.model = model
        self.max_turns = max_turns

    def ask(self, question: str) -> str:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": question},
        ]
        for _ in range(self.max_turns):
            reply = self.client.chat.completions.create(
                model=self.model,
                messages=messages,  # type: ignore[arg-type]
                tools=TOOLS,  # type: ignore[arg-type]
            )
            message = reply.choices[0].message
            if not message.tool_calls:
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                function = TOOL_FUNCTIONS[call.function.name]  # type: ignore[union-attr]
                arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": function(**arguments)}
                )
        msg = f"no answer after {self.max_turns} turns"
        raise RuntimeError(msg)

    def stream(self, prompt: str) -> list[str]:
        """The reply as the pieces a chat UI would show while it streams."""
        stream = self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": prompt}], stream=True
        )
        return [c.choices[0].delta.content or "" for c in stream if c.choices]


def rank(client: openai.OpenAI, query: str, documents: Sequence[str]) -> list[str]:
    """Documents ordered by cosine similarity of their embeddings to the query."""
    result = client.embeddings.create(model=EMBEDDING_MODEL, input=[query, *documents])
    vectors = [d.embedding for d in result.data]
    q = vectors[0]
    scored = sorted(zip(documents, vectors[1:], strict=True), key=lambda dv: -_cosine(q, dv[1]))
    return [doc for doc, _ in scored]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)) or 1.0)
