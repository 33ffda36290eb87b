"""Shared pieces of the benchmarks: the interaction, the floor, timing and reporting.

Every benchmark drives the same interaction through the real openai SDK: a chat completion
with ~2 KB of request and response body, non-streamed and streamed. Times are per call;
rounds interleave the variants so machine noise hits them alike. Results are reported as
medians with min–max and ratios; absolute times are not comparable between runs.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.fakes: the fake upstream

import httpx2
import openai
from tests.fakes.upstream import FakeUpstream

MODEL = "gpt-fake-1"
FILLER = (
    "You are a meticulous assistant for a logistics company. Answer with the shipment "
    "status, the carrier, and the next step. Keep it under two sentences. "
)


def prompt(i: int) -> list[dict[str, str]]:
    """~2 KB of messages, distinct per test index."""
    return [
        {"role": "system", "content": FILLER * 10},
        {"role": "user", "content": f"Where is shipment {i:06d}? " + "context " * 20},
    ]


def chat(client: openai.OpenAI, i: int, *, stream: bool) -> str:
    if stream:
        chunks = client.chat.completions.create(model=MODEL, messages=prompt(i), stream=True)  # type: ignore[arg-type]
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    r = client.chat.completions.create(model=MODEL, messages=prompt(i))  # type: ignore[arg-type]
    return r.choices[0].message.content or ""


def client_for(base_url: str, transport: Any = None) -> openai.OpenAI:
    http = httpx2.Client(transport=transport) if transport is not None else None
    return openai.OpenAI(
        base_url=base_url, api_key="sk-bench-0123456789abcdefghij", max_retries=0, http_client=http
    )


def capture_bodies(fake: FakeUpstream, n: int, *, stream: bool) -> dict[str, tuple[bytes, str]]:
    """The fake's live answers to each prompt (bytes + content type), for the floor."""
    answers: dict[str, tuple[bytes, str]] = {}
    with httpx2.Client() as c:
        for i in range(n):
            body = {"model": MODEL, "messages": prompt(i), "stream": stream}
            r = c.post(f"{fake.url}/v1/chat/completions", json=body)
            answers[prompt(i)[1]["content"]] = (r.content, r.headers["content-type"])
    return answers


def floor_transport(answers: dict[str, tuple[bytes, str]]) -> httpx2.MockTransport:
    """The SDK answered from memory with the same bytes: what no recorder can beat."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        key = json.loads(request.content)["messages"][1]["content"]
        content, ctype = answers[key]
        return httpx2.Response(200, content=content, headers={"content-type": ctype})

    return httpx2.MockTransport(handler)


@dataclass
class Series:
    name: str
    samples: list[float] = field(default_factory=list)  # seconds per call

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    def row(self, floor: Series | None, reference: Series | None = None) -> str:
        ms = 1000
        cells = [
            self.name,
            f"{self.median * ms:.3f}",
            f"{min(self.samples) * ms:.3f}–{max(self.samples) * ms:.3f}",
        ]
        if floor is not None:
            cells.append(f"{(self.median - floor.median) * 1e6:+.0f} µs")
            cells.append(f"{self.median / floor.median:.2f}×")
        if reference is not None:
            cells.append(f"{self.median / reference.median:.2f}×")
        return "| " + " | ".join(cells) + " |"


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@dataclass
class Variant:
    """One way of answering the call: `call(i)` per call, `enter`/`leave` around each block
    of calls (installing or removing a recorder's patches, which are per session)."""

    call: Callable[[int], Any]
    enter: Callable[[], Any] = lambda: None
    leave: Callable[[], Any] = lambda: None


def interleave(
    variants: dict[str, Variant], calls: int, rounds: int, warmup: int = 20
) -> dict[str, Series]:
    """Run `calls` calls of every variant per round, variants in rotating order."""
    series = {name: Series(name) for name in variants}
    names = list(variants)
    for name in names:
        variants[name].enter()
        for i in range(warmup):
            variants[name].call(i % calls)
        variants[name].leave()
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            variant = variants[name]
            variant.enter()
            gc.collect()
            for i in range(calls):
                series[name].samples.append(timed(lambda v=variant, i=i: v.call(i)))
            variant.leave()
    return series


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, {cpu}; "
        f"Python {platform.python_version()}; openai {openai.__version__}, "
        f"httpx2 {httpx2.__version__}"
    )


@contextmanager
def fake_upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        yield fake
