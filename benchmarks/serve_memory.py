"""Memory of a long-lived `hashreplay serve` over many distinct test ids.

    .venv/bin/python benchmarks/serve_memory.py --tests 10000 [--max-tests N]

Starts the test suite's fake upstream and `python -m hashreplay.server --mode record` on free
127.0.0.1 ports in a temporary project, sends one chat completion for each of N distinct test
ids (8 at a time), and prints the proxy's resident memory (VmRSS from /proc) at the start
and after every quarter. Bounded: N requests and `--time-limit` seconds; every process it
starts is stopped. Linux only (reads /proc). Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx2

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.serve_load import Proxy
from tests.fakes.upstream import FakeUpstream


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def send(url: str, first: int, count: int, deadline: float) -> int:
    errors = 0
    queue = list(range(first, first + count))
    async with httpx2.AsyncClient(base_url=url, timeout=30) as client:

        async def lane() -> None:
            nonlocal errors
            while queue and time.monotonic() < deadline:
                n = queue.pop()
                body = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": f"{n}"}]}
                headers = {"x-hashreplay-test-id": f"bench/test_mem.py::test_{n}"}
                answer = await client.post("/v1/chat/completions", json=body, headers=headers)
                errors += answer.status_code != 200

        await asyncio.gather(*(lane() for _ in range(8)))
    return errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=10_000)
    parser.add_argument("--max-tests", type=int, default=None)
    parser.add_argument("--time-limit", type=float, default=900.0)
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.time_limit
    extra = ["--max-tests", str(args.max_tests)] if args.max_tests else []
    with tempfile.TemporaryDirectory() as tmp, FakeUpstream() as fake:
        root = Path(tmp) / "project"
        root.mkdir()
        proxy = Proxy(root, "record", 1, fake.url, options=extra)
        try:
            proxy.wait_ready(deadline)
            print(f"hashreplay serve, record mode, {args.tests} distinct test ids, {extra or ''}")
            print(f"  start: {rss_mib(proxy.proc.pid):.0f} MiB")
            quarter = max(1, args.tests // 4)
            errors = 0
            for done in range(0, args.tests, quarter):
                count = min(quarter, args.tests - done)
                errors += asyncio.run(send(proxy.url, done, count, deadline))
                print(f"  after {done + count} test ids: {rss_mib(proxy.proc.pid):.0f} MiB")
            files = sum(1 for _ in root.rglob("*.json"))
            print(f"  errors: {errors}, files: {files}")
        finally:
            proxy.stop()
    return 1 if errors or time.monotonic() > deadline else 0


if __name__ == "__main__":
    raise SystemExit(main())
