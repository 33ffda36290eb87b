"""Replay cost as the store grows.

    python benchmarks/scaling.py [--sizes 10,1000,10000,100000] [--calls 200]

hashreplay: per-call replay time with 10 … 100,000 recordings in the suite directory (the
calls replay real recordings; the rest of the directory is filled with recordings of other
tests). vcrpy: per-call time when each test opens one cassette of 10, 100, 1,000 interactions.
Peak memory: a fresh process replays 10,000 calls and reports its peak RSS.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import vcr
from _common import Series, Variant, chat, client_for, fake_upstream, interleave, machine
from replay import hashreplay_call

from hashreplay.adapters import httpx as adapter
from hashreplay.core.config import load_config
from hashreplay.engine.session import Session


def fill(directory: Path, template: bytes, count: int) -> None:
    """`count` other tests' recordings (valid files, other hashes) in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        (directory / f"{n:032x}.json").write_bytes(template)


def hashreplay_scaling(sizes: list[int], calls: int) -> dict[str, Series]:
    variants: dict[str, Variant] = {}
    work = Path(tempfile.mkdtemp(prefix="hashreplay-scale-"))
    with fake_upstream() as fake:
        client = client_for(f"{fake.url}/v1")
        roots = {}
        for size in sizes:
            root = work / str(size)
            record = Session(load_config(root, env={}, mode="record"))
            adapter.install(record)
            for i in range(min(calls, size)):
                hashreplay_call(record, client, False)(i)
            adapter.uninstall()
            suite = root / "tests" / "recordings"
            template = next(suite.glob("*.json")).read_bytes()
            fill(suite, template, size - min(calls, size))
            roots[size] = root
        for size, root in roots.items():
            session = Session(load_config(root, env={}, mode="replay"))
            n = min(calls, size)
            variants[f"{size:,} recordings"] = Variant(
                lambda i, s=session, n=n: hashreplay_call(s, client, False)(i % n),
                enter=lambda s=session: adapter.install(s),
                leave=adapter.uninstall,
            )
        result = interleave(variants, calls, rounds=4)
    shutil.rmtree(work, ignore_errors=True)
    return result


def vcr_scaling(sizes: list[int], calls: int) -> dict[str, Series]:
    work = Path(tempfile.mkdtemp(prefix="vcr-scale-"))
    variants: dict[str, Variant] = {}
    with fake_upstream() as fake:
        client = client_for(f"{fake.url}/v1")
        for size in sizes:
            rec = vcr.VCR(cassette_library_dir=str(work), record_mode="once")
            with rec.use_cassette(f"c{size}.yaml"):
                for i in range(size):
                    chat(client, i, stream=False)
            play = vcr.VCR(
                cassette_library_dir=str(work),
                record_mode="none",
                match_on=["method", "path", "body"],
            )

            def call(i: int, play: vcr.VCR = play, size: int = size) -> str:
                with play.use_cassette(f"c{size}.yaml", allow_playback_repeats=True):
                    return chat(client, i % size, stream=False)

            variants[f"vcrpy, cassette of {size:,}"] = Variant(call)
        result = interleave(variants, min(calls, 100), rounds=3, warmup=3)
    shutil.rmtree(work, ignore_errors=True)
    return result


MEMORY_CHILD = r"""
import resource, sys, time
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from _common import chat, client_for
from hashreplay.engine.session import Session
from hashreplay.core.config import load_config
from hashreplay.adapters import httpx as adapter
from replay import hashreplay_call
root, n = Path(sys.argv[1]), int(sys.argv[3])
client = client_for("http://127.0.0.1:9/v1")
session = Session(load_config(root, env={}, mode="replay"))
adapter.install(session)
call = hashreplay_call(session, client, False)
call(0)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
for i in range(n):
    call(i)
elapsed = time.perf_counter() - start
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
assert session.stats.missed == 0
print(before, after, elapsed)
"""


def peak_memory(n: int) -> tuple[int, int, float]:
    work = Path(tempfile.mkdtemp(prefix="hashreplay-mem-"))
    with fake_upstream() as fake:
        client = client_for(f"{fake.url}/v1")
        record = Session(load_config(work, env={}, mode="record"), write_behind=True)
        adapter.install(record)
        for i in range(n):
            hashreplay_call(record, client, False)(i)
        record.flush()
        adapter.uninstall()
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_CHILD, str(work), str(Path(__file__).parent), str(n)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    shutil.rmtree(work, ignore_errors=True)
    return int(out[0]), int(out[1]), float(out[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10,1000,10000,100000")
    parser.add_argument("--vcr-sizes", default="10,100,1000")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--memory-calls", type=int, default=10000)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    lines = [f"Machine: {machine()}", ""]
    hr = hashreplay_scaling(sizes, args.calls)
    smallest = hr[f"{sizes[0]:,} recordings"]
    lines += [
        "### hashreplay: replay per call by store size",
        "",
        "| store | median ms/call | min–max ms | vs smallest |",
        "| --- | --- | --- | --- |",
    ]
    lines += [s.row(None, smallest) for s in hr.values()]
    vsizes = [int(s) for s in args.vcr_sizes.split(",")]
    vc = vcr_scaling(vsizes, args.calls)
    first = vc[f"vcrpy, cassette of {vsizes[0]:,}"]
    lines += [
        "",
        "### vcrpy: one cassette per test, by cassette size",
        "",
        "| cassette | median ms/call | min–max ms | vs smallest |",
        "| --- | --- | --- | --- |",
    ]
    lines += [s.row(None, first) for s in vc.values()]
    before, after, elapsed = peak_memory(args.memory_calls)
    lines += [
        "",
        f"### Peak memory of a {args.memory_calls:,}-call replay session",
        "",
        f"peak RSS {after / 1024:.1f} MiB (after the first call: {before / 1024:.1f} MiB; "
        f"growth over {args.memory_calls:,} calls: {(after - before) / 1024:.1f} MiB); "
        f"{elapsed:.1f} s, {elapsed / args.memory_calls * 1000:.3f} ms/call",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
