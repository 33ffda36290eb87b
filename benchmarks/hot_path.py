"""The replay path per call, stage by stage, for two source trees in one run.

    python benchmarks/hot_path.py --tree before=/path/to/old/src --tree after=src \
        [--rounds 5] [--calls 200]

Each round starts one process per tree (rotating order) with `PYTHONPATH=<tree>`; the
process records `--calls` openai chat requests (plain and streamed) against the local fake
upstream, then measures, in thread CPU time (less disturbed by other processes than wall
time), the minimum over repeats of:

- `floor`: what any replay must do: `os.open`/`read` of the recording, `orjson.loads` of it
  and `xxh3_128` of the request body;
- `mock`: an `httpx2.MockTransport` answering the same request with the same bytes from
  memory (the floor of `benchmarks/replay.py`, at the transport);
- `adapter`: the httpx2 transport answering the SDK's request (`HTTPTransport.handle_request`
  patched by hashreplay, response read), with the plugin's per-test `begin_test`/`end_test`;
- `decide`: the engine's decision alone (key the request, find, read and check the file);
- `keying`: the request redacted, normalised and hashed;
- `read+parse`: the file read and validated.

With `--instructions N`, each tree's keying alone is counted instead, in instructions under
valgrind (deterministic, so untouched by the machine's load): one process per tree keys the
requests of `--calls` chat calls (captured from the openai SDK, no upstream) N times, one
keys them once; the difference over N·calls is a keying's count.

The table reports the median over rounds of each process's figure, per tree, and each
tree's `adapter` figure over the first tree's of the same round (median and range of the
ratios). `adapter` is a strict hit: the default rule, no `ignore` or `match_on`; each tree
makes its own recordings, so trees whose keys differ (`KEY_VERSION`) compare alike.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import openai
from _trees import add_tree_option, interleaved, parse_trees, run_child


def tid(i: int) -> str:
    return f"tests/test_bench.py::test_call[{i}]"


def recorded_store(calls: int, stream: bool) -> tuple[Path, list[Any]]:
    """A store of `calls` recorded chat calls, and the requests the SDK sends for them."""
    import httpx2
    from _common import chat, client_for, fake_upstream

    from hashreplay.adapters import httpx as adapter
    from hashreplay.core.config import load_config
    from hashreplay.core.context import test_context
    from hashreplay.engine.session import Session

    work = Path(tempfile.mkdtemp(prefix="hashreplay-hot-")) / "hr"
    with fake_upstream() as fake:
        client = client_for(f"{fake.url}/v1")
        rec = Session(load_config(work, env={}, mode="record"))
        adapter.install(rec)
        for i in range(calls):
            rec.begin_test(tid(i))
            with test_context(tid(i)):
                chat(client, i, stream=stream)
            rec.end_test(tid(i))
        rec.flush()
        adapter.uninstall()
        requests: list[Any] = []

        def capture(request: Any) -> Any:
            requests.append(request)
            raise httpx2.ConnectError("captured", request=request)

        capturing = client_for(f"{fake.url}/v1", transport=httpx2.MockTransport(capture))
        for i in range(calls):
            with contextlib.suppress(httpx2.ConnectError, openai.APIConnectionError):
                chat(capturing, i, stream=stream)
    return work, requests


def stages(work: Path, requests: list[Any]) -> dict[str, Callable[[int], None]]:
    """Each stage as a function of the call index, over a replay session of `work`."""
    import httpx2
    import orjson
    import xxhash

    from hashreplay.adapters import httpx as adapter
    from hashreplay.core.config import load_config
    from hashreplay.core.context import test_context
    from hashreplay.core.paths import read_contained
    from hashreplay.engine.http import IncomingRequest
    from hashreplay.engine.session import Session

    session = Session(load_config(work, env={}, mode="replay"))
    adapter.install(session)
    transport = httpx2.HTTPTransport()
    incoming = [
        IncomingRequest(r.method, str(r.url), r.headers.multi_items(), r.content) for r in requests
    ]
    paths = [
        session.store.path_for(tid(i), session.prepare(incoming[i], tid(i)).hash)
        for i in range(len(requests))
    ]
    assert all(p.exists() for p in paths), "every request must find its recording"
    bodies = [b"".join(session.decide(r, tid(i)).plan().chunks) for i, r in enumerate(incoming)]  # type: ignore[union-attr]
    by_request = {id(r): i for i, r in enumerate(requests)}
    mock_transport = httpx2.MockTransport(
        lambda request: httpx2.Response(
            200,
            headers={"content-type": "application/json"},
            content=bodies[by_request[id(request)]],
        )
    )

    def floor(i: int) -> None:
        fd = os.open(paths[i], os.O_RDONLY)
        try:
            orjson.loads(os.read(fd, 1 << 22))
        finally:
            os.close(fd)
        xxhash.xxh3_128_hexdigest(requests[i].content)

    def through_adapter(i: int) -> None:
        session.begin_test(tid(i))
        try:
            with test_context(tid(i)):
                transport.handle_request(requests[i]).read()
        finally:
            session.end_test(tid(i))

    def decide(i: int) -> None:
        session.begin_test(tid(i))
        try:
            decision = session.decide(incoming[i], tid(i))
            assert type(decision).__name__ == "Replay", decision
        finally:
            session.end_test(tid(i))

    return {
        "floor": floor,
        "mock": lambda i: mock_transport.handle_request(requests[i]).read(),
        "adapter": through_adapter,
        "decide": decide,
        "keying": lambda i: session.prepare(incoming[i], tid(i)),
        "read+parse": lambda i: session.store.parse(
            read_contained(paths[i], session.store.root), paths[i]
        ),
    }


def measure(calls: int, stream: bool) -> dict[str, float]:
    """Runs inside the child process: the figures for one tree, µs per call."""
    from hashreplay.adapters import httpx as adapter

    work, requests = recorded_store(calls, stream)
    out: dict[str, float] = {}
    for name, fn in stages(work, requests).items():
        for i in range(calls):  # warm
            fn(i)
        best = float("inf")
        for _ in range(7):
            start = time.thread_time()
            for i in range(calls):
                fn(i)
            best = min(best, (time.thread_time() - start) / calls)
        out[name] = best * 1e6
    adapter.uninstall()
    return out


def keyings(calls: int, repeats: int) -> None:
    """Runs inside valgrind: the captured requests keyed once (warm), then `repeats` times."""
    import httpx2
    from _common import chat, client_for

    from hashreplay.core.config import load_config
    from hashreplay.engine.http import IncomingRequest
    from hashreplay.engine.session import Session

    requests: list[Any] = []

    def capture(request: Any) -> Any:
        requests.append(request)
        raise httpx2.ConnectError("captured", request=request)

    capturing = client_for("http://127.0.0.1:9/v1", transport=httpx2.MockTransport(capture))
    for i in range(calls):
        with contextlib.suppress(httpx2.ConnectError, openai.APIConnectionError):
            chat(capturing, i, stream=False)
    work = Path(tempfile.mkdtemp(prefix="hashreplay-hot-")) / "hr"
    session = Session(load_config(work, env={}, mode="replay"))
    incoming = [
        IncomingRequest(r.method, str(r.url), r.headers.multi_items(), r.content) for r in requests
    ]
    ids = [tid(i) for i in range(calls)]
    for _ in range(1 + repeats):
        for i in range(calls):
            session.prepare(incoming[i], ids[i])


def instructions(trees: dict[str, str], calls: int, repeats: int) -> None:
    """Each tree's instructions per keying (valgrind, `PYTHONHASHSEED=0`)."""
    import re
    import subprocess

    def count(src: str, n: int) -> int:
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                sys.executable,
                __file__,
                "--keyings",
                str(n),
                "--calls",
                str(calls),
            ],
            env={**os.environ, "PYTHONPATH": src, "PYTHONHASHSEED": "0"},
            capture_output=True,
            text=True,
            check=True,
        )
        found = re.search(r"Collected : (\d+)", done.stderr)
        assert found is not None, done.stderr[-2000:]
        return int(found.group(1))

    print(f"Instructions per keying (plain chat request, {calls} requests × {repeats}):")
    for label, src in trees.items():
        per = (count(src, repeats) - count(src, 0)) / (calls * repeats)
        print(f"| {label} | {per:,.0f} |")


def child(calls: int) -> None:
    result = {
        "plain": measure(calls, stream=False),
        "streamed": measure(calls, stream=True),
    }
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--instructions", type=int, metavar="N", help="count keying (valgrind)")
    parser.add_argument("--keyings", type=int, help=argparse.SUPPRESS)
    add_tree_option(parser)
    args = parser.parse_args()
    if args.child:
        child(args.calls)
        return
    if args.keyings is not None:
        keyings(args.calls, args.keyings)
        return
    trees = parse_trees(args.tree, HERE.parent / "src")
    if args.instructions:
        instructions(trees, args.calls, args.instructions)
        return
    results: dict[str, list[dict[str, dict[str, float]]]] = {label: [] for label in trees}
    labels = list(trees)
    for r, label in interleaved(labels, args.rounds):
        results[label].append(run_child(Path(__file__), trees[label], "--calls", str(args.calls)))
        print(f"round {r + 1}/{args.rounds}: {label} done", file=sys.stderr)
    print(f"Calls: {args.calls} per stage per process, {args.rounds} rounds; µs per call")
    for kind in ("plain", "streamed"):
        print(f"\n### Replay, {kind} chat completion\n")
        print("| stage | " + " | ".join(labels) + " |")
        print("| --- | " + " | ".join("---" for _ in labels) + " |")
        stages = list(results[labels[0]][0][kind])
        for stage in stages:
            cells = [
                f"{statistics.median(run[kind][stage] for run in results[label]):,.1f}"
                for label in labels
            ]
            print(f"| {stage} | " + " | ".join(cells) + " |")
        cells = []
        for label in labels:
            above = [run[kind]["adapter"] - run[kind]["floor"] for run in results[label]]
            cells.append(f"+{statistics.median(above):,.1f}")
        print("| adapter above floor | " + " | ".join(cells) + " |")
        cells = []
        for label in labels:
            above = [run[kind]["adapter"] - run[kind]["mock"] for run in results[label]]
            cells.append(f"+{statistics.median(above):,.1f}")
        print("| adapter above mock | " + " | ".join(cells) + " |")
        cells = []
        for label in labels:  # rounds are interleaved: each round's processes are a pair
            paired = sorted(
                run[kind]["adapter"] / first[kind]["adapter"]
                for run, first in zip(results[label], results[labels[0]], strict=True)
            )
            cells.append(f"{statistics.median(paired):.2f}× ({paired[0]:.2f}–{paired[-1]:.2f})")
        print(f"| adapter ÷ {labels[0]}'s, paired by round | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
