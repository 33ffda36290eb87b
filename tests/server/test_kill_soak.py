"""kill -9 soak of the proxy. The proxy is killed while clients record concurrently,
restarted, killed again; afterwards every file parses, `verify` is clean and git would
stage no temp file. Bounded: 3 kills, 8 client threads, a time limit per round; only
127.0.0.1 is contacted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx2

from hashreplay.core.store import parse_recording
from tests.fakes.upstream import FakeUpstream
from tests.server.conftest import Servers

KILLS = 3
THREADS = 8
#: Answers to wait for before each kill, and the bound on waiting for them.
ANSWERS_BEFORE_KILL = 40
ROUND_LIMIT = 60.0


def clients(
    url: str, round_no: int, stop: threading.Event, answered: list[int]
) -> list[threading.Thread]:
    def lane(lane_no: int) -> None:
        with httpx2.Client(base_url=url, timeout=10) as client:
            n = 0
            while not stop.is_set() and n < 1000:
                n += 1
                body = {
                    "model": "gpt-fake-1",
                    "messages": [
                        {"role": "user", "content": f"round {round_no} lane {lane_no} #{n}"}
                    ],
                }
                headers = {"x-hashreplay-test-id": f"tests/test_soak.py::test_lane[{lane_no}]"}
                try:
                    answer = client.post("/v1/chat/completions", json=body, headers=headers)
                except httpx2.TransportError:
                    return  # the proxy was killed under us
                if answer.status_code == 200:
                    answered.append(1)

    threads = [threading.Thread(target=lane, args=(i,), daemon=True) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    return threads


def test_kill_9_during_concurrent_recording_leaves_a_clean_store(
    servers: Servers, upstream: FakeUpstream, tmp_path: Path
) -> None:
    root = tmp_path / "project"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    total = 0
    for round_no in range(KILLS):
        server = servers.serve("--mode", "record", "--upstream", upstream.url, root=root)
        stop, answered = threading.Event(), []
        threads = clients(server.url, round_no, stop, answered)
        deadline = time.monotonic() + ROUND_LIMIT
        while len(answered) < ANSWERS_BEFORE_KILL and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(answered) >= ANSWERS_BEFORE_KILL, server.log()
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(10)
        stop.set()
        for thread in threads:
            thread.join(15)
        total += len(answered)
    files = sorted(p for p in root.rglob("*.json") if ".hashreplay" not in p.parts)
    assert len(files) >= total  # every answered request has its file (some unanswered too)
    for path in files:
        parse_recording(
            path.read_bytes(), path
        )  # raises a RecordingError for a partial or corrupt file
    env = {**os.environ, "HASHREPLAY_ROOT": str(root), "NO_COLOR": "1"}
    env.pop("INFERENCE_MODE", None)
    verify = subprocess.run(
        [sys.executable, "-m", "hashreplay", "verify"],
        cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert verify.stdout.splitlines()[-1] == f"Summary: 0/{len(files)} files with problems"
    staged = subprocess.run(
        ["git", "add", "-A", "--dry-run"], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    assert ".tmp" not in staged
    assert sum(1 for line in staged.splitlines() if line.endswith(".json'")) == len(files)
