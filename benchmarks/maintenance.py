"""Throughput of the maintenance tools on a large store.

    python benchmarks/maintenance.py [--files 10000]

Builds a store of N real-shaped recordings (the engine records ~2 KB chat completions with
fresh ids, as an upstream would send them), then times, as users run them:
`scripts/normalize_recordings.py --dry-run`, the real run (nothing to change: every file is
read, re-normalised and compared), the same after hand-editing 1% of the files, and
`hashreplay verify`. Each command runs in its own process; times include start-up.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, machine, prompt

from hashreplay import test_context
from hashreplay.core.config import load_config
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.session import Session


def build_store(root: Path, files: int) -> Path:
    (root / "pyproject.toml").write_text("[tool.hashreplay]\n")
    session = Session(load_config(root, env={}, mode="record"), write_behind=True)
    rng = random.Random(7)
    for i in range(files):
        test_id = f"tests/suite/test_many.py::test_call[{i}]"
        session.begin_test(test_id)
        with test_context(test_id):
            body = json.dumps({"model": "gpt-fake-1", "messages": prompt(i)}).encode()
            incoming = IncomingRequest(
                "POST",
                "http://127.0.0.1:8000/v1/chat/completions",
                [("content-type", "application/json"), ("authorization", "Bearer sk-x")],
                body,
            )
            prep = session.prepare(incoming)
            reply = {
                "id": f"chatcmpl-{rng.getrandbits(96):x}",
                "object": "chat.completion",
                "created": 1_700_000_000 + i,
                "model": "gpt-fake-1",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "word " * 300},
                    }
                ],
                "usage": {"prompt_tokens": 400, "completion_tokens": 300, "total_tokens": 700},
            }
            session.record(
                prep,
                LiveExchange(
                    200, [("content-type", "application/json")], [json.dumps(reply).encode()]
                ),
            )
        session.end_test(test_id)
    session.flush()
    return root / "tests" / "suite" / "recordings"


def timed_run(cmd: list[str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    return elapsed, (out.stdout.strip().splitlines() or [""])[-1]


def hand_edit(directory: Path, share: float) -> int:
    paths = sorted(directory.glob("*.json"))
    edited = paths[: max(1, int(len(paths) * share))]
    for path in edited:
        data = json.loads(path.read_text())
        data["response"]["body"]["created"] = 1_733_000_000
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return len(edited)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=10_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hashreplay-maint-"))
    try:
        start = time.perf_counter()
        directory = build_store(work, args.files)
        built = time.perf_counter() - start
        script = [sys.executable, str(ROOT / "scripts" / "normalize_recordings.py")]
        cli = [sys.executable, "-m", "hashreplay"]
        rows = []
        for label, cmd in [
            ("normalize --dry-run", [*script, "--dry-run", str(directory)]),
            ("normalize (nothing to change)", [*script, str(directory)]),
        ]:
            elapsed, last = timed_run(cmd, work)
            rows.append((label, elapsed, last))
        edited = hand_edit(directory, 0.01)
        elapsed, last = timed_run([*script, str(directory)], work)
        rows.append((f"normalize ({edited} hand-edited files)", elapsed, last))
        elapsed, last = timed_run([*cli, "verify", str(directory)], work)
        rows.append(("hashreplay verify", elapsed, last))
        elapsed, last = timed_run([*cli, "--version"], work)
        startup = elapsed
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = [
        f"Machine: {machine()}",
        f"Store: {args.files:,} recordings (~3 KB each), built in {built:.1f} s",
        f"CLI start-up (`python -m hashreplay --version`): {startup * 1000:.0f} ms",
        "",
        "| command | wall time s | files/s | last line of output |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {label} | {t:.2f} | {args.files / t:,.0f} | {last} |" for label, t, last in rows]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
