"""Load test of `hashreplay serve` on loopback: record, check every file, then replay.

    .venv/bin/python benchmarks/serve_load.py --requests 2000 --concurrency 16

1. starts the fake OpenAI-shaped upstream of the test suite (tests/fakes) and
   `python -m hashreplay.server --mode record` on free 127.0.0.1 ports, in a temporary project;
2. sends N distinct chat completions, `concurrency` at a time: lane i of the concurrency
   carries the test id `bench/test_load.py::test_lane[i]`, so the files spread over tests;
3. checks that no write was lost: one file per distinct request, every file parses, no
   temporary file is left;
4. stops the recorder and the upstream, starts the proxy in replay mode and sends the same
   N requests again: every answer must be the recorded one.

It prints requests/s of both phases and exits non-zero on any error. Every loop is bounded
(N requests, `--time-limit` seconds for the whole run) and every process it starts is
stopped. Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx2

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fakes.upstream import FakeUpstream

from hashreplay.core.errors import RecordingError
from hashreplay.core.store import parse_recording

CHAT = "/v1/chat/completions"


@dataclass
class Phase:
    name: str
    ok: int = 0
    errors: int = 0
    seconds: float = 0.0
    first_errors: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0

    def fail(self, message: str) -> None:
        self.errors += 1
        if len(self.first_errors) < 5:
            self.first_errors.append(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Proxy:
    """`python -m hashreplay.server` in a subprocess, logging to a file."""

    def __init__(
        self, root: Path, mode: str, workers: int, *upstreams: str, options: Sequence[str] = ()
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root.parent / f"serve-{mode}.log"
        argv = [
            sys.executable, "-m", "hashreplay.server", "--mode", mode, "--root", str(root),
            "--port", str(self.port), "--workers", str(workers), "--no-access-log",
            "--log-level", "warning",
        ]  # fmt: skip
        for upstream in upstreams:
            argv += ["--upstream", upstream]
        argv += list(options)
        env = {k: v for k, v in os.environ.items() if k != "INFERENCE_MODE"}
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def wait_ready(self, deadline: float) -> None:
        while time.monotonic() < min(deadline, time.monotonic() + 30):
            if self.proc.poll() is not None:
                raise SystemExit(f"hashreplay serve exited:\n{self.log.read_text()}")
            try:
                httpx2.get(self.url + "/__hashreplay/health", timeout=1.0)
                return
            except httpx2.TransportError:
                time.sleep(0.05)
        raise SystemExit(f"hashreplay serve not ready:\n{self.log.read_text()}")

    def stats(self) -> dict[str, Any]:
        data: dict[str, Any] = httpx2.get(self.url + "/__hashreplay/stats", timeout=5).json()
        return data

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(15)


def lane_test_id(lane: int) -> str:
    return f"bench/test_load.py::test_lane[{lane}]"


def prompt(k: int) -> str:
    return f"load request {k}"


async def drive(url: str, phase: Phase, requests: int, concurrency: int, deadline: float) -> None:
    """`concurrency` lanes; lane i sends requests i, i+concurrency, ... one after another."""
    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx2.AsyncClient(base_url=url, limits=limits, timeout=30.0) as client:

        async def lane(i: int) -> None:
            headers = {"x-hashreplay-test-id": lane_test_id(i), "x-hashreplay-run": phase.name}
            for k in range(i, requests, concurrency):
                if time.monotonic() > deadline:
                    phase.fail(f"time limit reached before request {k}")
                    continue
                body = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": prompt(k)}]}
                try:
                    response = await client.post(CHAT, json=body, headers=headers)
                    text = response.json()["choices"][0]["message"]["content"]
                except (httpx2.HTTPError, ValueError, KeyError, IndexError) as exc:
                    phase.fail(f"request {k}: {type(exc).__name__}: {exc}")
                    continue
                if response.status_code == 200 and text == f"echo: {prompt(k)}":
                    phase.ok += 1
                else:
                    phase.fail(f"request {k}: {response.status_code} {response.text[:200]}")

        started = time.monotonic()
        await asyncio.gather(*(lane(i) for i in range(concurrency)))
        phase.seconds = time.monotonic() - started


def check_files(root: Path, requests: int) -> dict[str, Any]:
    files = sorted(p for p in root.rglob("*.json") if ".hashreplay" not in p.parts)
    unreadable: list[str] = []
    prompts: set[str] = set()
    for path in files:
        try:
            recording = parse_recording(path.read_bytes(), path)
        except (RecordingError, OSError) as exc:
            unreadable.append(str(exc))
            continue
        body = recording.request.body
        if isinstance(body, dict):
            prompts.add(body["messages"][0]["content"])
    expected = {prompt(k) for k in range(requests)}
    return {
        "files": len(files),
        "parsed": len(files) - len(unreadable),
        "missing": len(expected - prompts),
        "temp_files": len(list(root.rglob("*.tmp"))),
        "unreadable": unreadable[:5],
    }


FAKE_PROCESS = """
import sys
sys.path.insert(0, sys.argv[1])
from tests.fakes.upstream import FakeUpstream
fake = FakeUpstream().start()
print(fake.url, flush=True)
sys.stdin.read()
fake.stop()
"""


def direct_rate(requests: int, concurrency: int, deadline: float) -> Phase:
    """The same client against the fake upstream in a process of its own, as the proxy
    runs: the baseline the proxy's replay throughput is compared with."""
    phase = Phase("direct")
    child = subprocess.Popen(
        [sys.executable, "-c", FAKE_PROCESS, str(REPO)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        asyncio.run(drive(url, phase, requests, concurrency, deadline))
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=10)
    return phase


def run(requests: int, concurrency: int, time_limit: float, workers: int) -> dict[str, Any]:
    deadline = time.monotonic() + time_limit
    record, replay = Phase("record"), Phase("replay")
    direct = direct_rate(requests, concurrency, deadline)
    with tempfile.TemporaryDirectory(prefix="hashreplay-load-") as tmp:
        root = Path(tmp) / "project"
        root.mkdir()
        with FakeUpstream() as upstream:
            recorder = Proxy(root, "record", workers, upstream.url)
            try:
                recorder.wait_ready(deadline)
                asyncio.run(drive(recorder.url, record, requests, concurrency, deadline))
            finally:
                recorder.stop()
        files = check_files(root, requests)
        replayer = Proxy(root, "replay", workers)
        try:
            replayer.wait_ready(deadline)
            asyncio.run(drive(replayer.url, replay, requests, concurrency, deadline))
            stats = replayer.stats() if workers == 1 else {}
        finally:
            replayer.stop()
    ok = (
        record.errors == replay.errors == direct.errors == 0
        and files["files"] == files["parsed"] == requests
        and files["missing"] == files["temp_files"] == 0
    )
    return {
        "ok": ok,
        "requests": requests,
        "concurrency": concurrency,
        "workers": workers,
        "direct": {**asdict(direct), "requests_per_s": round(direct.rate, 1)},
        "replay_vs_direct": round(replay.rate / direct.rate, 2) if direct.rate else None,
        "record": {**asdict(record), "requests_per_s": round(record.rate, 1)},
        "replay": {**asdict(replay), "requests_per_s": round(replay.rate, 1)},
        "files": files,
        "replay_stats": {k: stats.get(k) for k in ("replayed", "missed", "errors")}
        if stats
        else {},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1, help="hashreplay serve --workers")
    parser.add_argument("--time-limit", type=float, default=300.0, metavar="SECONDS")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = run(args.requests, args.concurrency, args.time_limit, args.workers)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"hashreplay serve on 127.0.0.1: {result['requests']} requests, "
            f"{result['concurrency']} concurrent, {result['workers']} worker(s)"
        )
        for name in ("direct", "record", "replay"):
            phase = result[name]
            print(
                f"  {name}: {phase['ok']} ok, {phase['errors']} errors in "
                f"{phase['seconds']:.2f} s = {phase['requests_per_s']} requests/s"
            )
            for error in phase["first_errors"]:
                print(f"    {error}")
        files = result["files"]
        print(
            f"  files: {files['files']} written, {files['parsed']} parse, "
            f"{files['missing']} requests without a file, {files['temp_files']} temporary files"
        )
        print(f"  replay through the proxy / direct to the upstream: {result['replay_vs_direct']}x")
        if result["replay_stats"]:
            print(f"  replay server stats: {result['replay_stats']}")
        print("  OK" if result["ok"] else "  FAILED")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
