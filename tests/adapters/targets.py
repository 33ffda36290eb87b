"""Call-layer targets used by test_callables.py (importable by dotted name)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

from pydantic import BaseModel

CALLS: list[str] = []


class Hit(BaseModel):
    title: str
    score: float


class Results(BaseModel):
    query: str
    hits: list[Hit]
    request_id: str


@dataclass
class Embedding:
    text: str
    vector: list[float]


class QuotaError(Exception):
    def __init__(self, used: int) -> None:
        super().__init__(f"quota exceeded: {used} tokens used")
        self.used = used


class Search:
    """A search tool client: a fresh request id per call, like a real API."""

    def __init__(self, region: str) -> None:
        self.region = region

    def query(self, text: str, limit: int = 2) -> Results:
        CALLS.append(f"query:{text}")
        hits = [Hit(title=f"{text} #{i}", score=1 / (i + 1)) for i in range(limit)]
        return Results(query=text, hits=hits, request_id=f"req_{random.getrandbits(64):x}")

    def fail(self, used: int) -> None:
        CALLS.append("fail")
        raise QuotaError(used)

    @staticmethod
    def version() -> str:
        CALLS.append("version")
        return "1.0"

    @classmethod
    def named(cls, name: str) -> dict[str, str]:
        CALLS.append("named")
        return {"class": cls.__name__, "name": name}


def embed(text: str) -> Embedding:
    CALLS.append(f"embed:{text}")
    return Embedding(text=text, vector=[len(text) / 10, 0.5])


def tokens(text: str) -> Iterator[str]:
    CALLS.append(f"tokens:{text}")
    yield from text.split()


async def astream(text: str) -> AsyncIterator[dict[str, object]]:
    CALLS.append(f"astream:{text}")
    for i, word in enumerate(text.split()):
        yield {"index": i, "word": word}


async def aanswer(question: str) -> Results:
    CALLS.append(f"aanswer:{question}")
    return Results(query=question, hits=[], request_id="req_async")
