"""What recording costs a call, and the flush after the last one.

    python benchmarks/record_call.py [--calls 500] [--rounds 5] [--wait-ms 1.5]
        [--tree before=/path/to/old/src] [--tree after=src] [--dir DIR]

A write-behind record session (as the pytest plugin runs it) records `--calls` distinct
chat completions, each in its own test, from exchanges captured once from the fake
upstream of `tests/fakes/` (~1 KB plain answer; 52 SSE events streamed). Between calls the
caller waits `--wait-ms` without holding the GIL, as it waits for the next live answer (a
live call to the local fake takes 1.4-3 ms), so work left to the writer thread can overlap
with it. Reported per tree, medians over rounds:

- `record()` on the caller's path: µs per call (the wall time of `Session.record`);
- prepare + record: µs per call (`Session.decide` too: the request side of recording);
- CPU per call: the process's user+sys time over the whole run, every thread and the final
  flush included, minus the same loop without recording (the waits and the test bookkeeping);
- flush after the last call: ms until every file is on disk;
- peak memory: how far the process's peak RSS grew over the recorded calls and the flush
  (MB; with `--calls 2500`, what recording 2,500 files holds at most).

Each measurement is a fresh interpreter with `PYTHONPATH` set to the tree, trees interleaved
round by round. The files go under `--dir` (default `.hashreplay/` of this checkout).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))

from _trees import add_tree_option, interleaved, parse_trees, run_child

MODEL = "gpt-fake-1"
FILLER = (
    "You are a meticulous assistant for a logistics company. Answer with the shipment "
    "status, the carrier, and the next step. Keep it under two sentences. "
)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def request_body(i: int, stream: bool) -> bytes:
    messages = [
        {"role": "system", "content": FILLER * 10},
        {"role": "user", "content": f"Where is shipment {i:06d}? " + "context " * 20},
    ]
    return json.dumps({"model": MODEL, "messages": messages, "stream": stream}).encode()


def capture(stream: bool) -> tuple[int, list[tuple[str, str]], list[bytes]]:
    """One live answer of the fake upstream: status, headers, body chunks."""
    sys.path.insert(0, str(ROOT))
    import httpx2
    from tests.fakes.upstream import FakeUpstream

    with FakeUpstream() as fake, httpx2.Client() as client:
        r = client.post(
            f"{fake.url}/v1/chat/completions",
            content=request_body(0, stream),
            headers={"content-type": "application/json"},
        )
        chunks = [c + b"\n\n" for c in r.content.split(b"\n\n") if c] if stream else [r.content]
        return r.status_code, list(r.headers.items()), chunks


def measure(calls: int, stream: bool, wait: float, base: Path) -> dict[str, float]:
    """One run, in this process (the child side)."""
    from hashreplay.core.config import load_config
    from hashreplay.engine.http import IncomingRequest, LiveExchange
    from hashreplay.engine.session import Session

    status, headers, chunks = capture(stream)
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="bench-record-", dir=base))
    try:
        session = Session(load_config(root, env={}, mode="record"), write_behind=True)
        url = "http://127.0.0.1:9/v1/chat/completions"
        req_headers = [
            ("content-type", "application/json"),
            ("authorization", "Bearer sk-bench-0123456789abcdefghij"),
        ]
        incoming = [
            IncomingRequest("POST", url, req_headers, request_body(i, stream))
            for i in range(calls + 20)
        ]

        def bookkeeping(i: int) -> str:
            tid = f"tests/test_bench.py::test_call[{i}]"
            session.begin_test(tid)
            time.sleep(wait)  # the live call: the GIL is free
            return tid

        for i in range(20):  # warm up (imports, caches) in its own directory
            tid = bookkeeping(calls + i)
            session.record(
                session.decide(incoming[calls + i], test_id=tid).prep,
                LiveExchange(status, headers, chunks, chunked=stream),
            )
            session.end_test(tid)
        session.flush()

        cpu0 = cpu_seconds()
        for i in range(calls):  # the reference: the same loop, nothing recorded
            session.end_test(bookkeeping(i))
        reference = cpu_seconds() - cpu0

        on_path: list[float] = []
        with_prepare: list[float] = []
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        cpu0 = cpu_seconds()
        for i in range(calls):
            tid = bookkeeping(i)
            t0 = time.perf_counter()
            prep = session.decide(incoming[i], test_id=tid).prep
            exchange = LiveExchange(status, headers, chunks, chunked=stream)
            t1 = time.perf_counter()
            session.record(prep, exchange)
            t2 = time.perf_counter()
            session.end_test(tid)
            on_path.append(t2 - t1)
            with_prepare.append(t2 - t0)
        t_last = time.perf_counter()
        session.flush()
        flushed = time.perf_counter() - t_last
        cpu = cpu_seconds() - cpu0 - reference
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024  # KB on Linux
        session.close()
        written = [
            p for p in root.rglob("*.json") if ".hashreplay" not in p.relative_to(root).parts
        ]
        assert len(written) == calls + 20, len(written)
        return {
            "record_us": statistics.median(on_path) * 1e6,
            "prepare_record_us": statistics.median(with_prepare) * 1e6,
            "cpu_us": cpu / calls * 1e6,
            "flush_ms": flushed * 1e3,
            "peak_mb": peak,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_one(src: str, stream: bool, args: argparse.Namespace) -> dict[str, float]:
    extra = ("--stream",) if stream else ()
    result: dict[str, float] = run_child(
        HERE,
        src,
        *("--calls", str(args.calls), "--wait-ms", str(args.wait_ms), "--dir", str(args.dir)),
        *extra,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--wait-ms", type=float, default=1.5, help="the live call's wait between records"
    )
    parser.add_argument("--dir", type=Path, default=ROOT / ".hashreplay", help="where the files go")
    parser.add_argument("--stream", action="store_true", help=argparse.SUPPRESS)
    add_tree_option(parser)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.calls, args.stream, args.wait_ms / 1e3, args.dir)))
        return
    trees = parse_trees(args.tree, ROOT / "src")
    names = list(trees)
    print(
        f"{args.calls} recorded calls per run, {args.wait_ms} ms live wait between them, {args.rounds} rounds; median (min–max)"
    )
    for stream in (False, True):
        results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for _, name in interleaved(names, args.rounds):
            results[name].append(run_one(trees[name], stream, args))
        print()
        print(f"### {'streamed (52 SSE events)' if stream else 'plain'}")
        print()
        print(
            "| tree | record() on the caller's path, µs | prepare + record, µs | CPU per call (all threads, flush included), µs | flush after the last call, ms | peak memory growth, MB |"
        )
        print("| --- | --- | --- | --- | --- | --- |")
        for name, runs in results.items():
            cells = [name]
            for key in ("record_us", "prepare_record_us", "cpu_us", "flush_ms", "peak_mb"):
                values = [run[key] for run in runs]
                cells.append(
                    f"{statistics.median(values):.0f} ({min(values):.0f}–{max(values):.0f})"
                )
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
