"""The session-end flush of queued recordings.

    python benchmarks/flush.py [--files 2500] [--size 3000] [--dirs 25] [--rounds 5]
        [--tree before=/path/to/old/src] [--tree after=src] [--dir DIR]

Queues `--files` files of about `--size` bytes, spread over `--dirs` recording directories,
on a write-behind `BackgroundWriter` as fast as the engine can hand them over (the writer
thread starts on the first), then calls `flush()`, as the pytest plugin does after the last
test. Reported per tree: the time from the last submit to the end of the flush (what a run
waits for after its last test), the whole time from the first submit, and the CPU time of
the process (every thread), and how far its peak RSS grew meanwhile (the writer's queue
is bounded: submitting waits for room once `MAX_QUEUED` files wait). Each measurement is a fresh interpreter with `PYTHONPATH` set to
the tree, the trees interleaved round by round; every file is checked afterwards (content,
no temp file left). The last column is the floor no writer avoids: creating as many empty
files in a fresh directory beside them (one new inode each). The files go under `--dir` (default: `.hashreplay/` of this checkout,
on the project's disk; on the machine of docs/benchmarks.md, creating a file under `/tmp`
costs up to 20 times as much CPU as on the same disk elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

from _trees import add_tree_option, interleaved, parse_trees, run_child


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def create_floor(directory: Path, files: int) -> float:
    """Seconds to create (and close) `files` empty files in `directory`: the kernel's part
    that no writer avoids, one new inode per file (it varies tenfold between directories of
    one disk on the machine of docs/benchmarks.md)."""
    directory.mkdir()
    start = time.perf_counter()
    for i in range(files):
        os.close(os.open(directory / f"{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    return time.perf_counter() - start


def measure(files: int, size: int, dirs: int, base: Path) -> dict[str, float]:
    """One flush, in this process (the child side)."""
    from hashreplay.core.writer import BackgroundWriter

    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="bench-flush-", dir=base))
    try:
        temp_dir = root / ".hashreplay" / "tmp"
        temp_dir.mkdir(parents=True)
        jobs = []
        for i in range(files):
            directory = root / "tests" / "recordings" / f"test_mod_{i % dirs}"
            body = os.urandom(size // 2).hex()  # ~size bytes of JSON
            jobs.append((directory / f"{i:032x}.json", json.dumps({"n": i, "b": body}).encode()))
        writer = BackgroundWriter(temp_dir)
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        for path, content in jobs:
            writer.submit(path, content)
        t1 = time.perf_counter()
        writer.flush()
        t2, cpu1 = time.perf_counter(), cpu_seconds()
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024  # KB on Linux
        writer.close()
        for path, content in jobs:
            assert path.read_bytes() == content, path
        assert not any(temp_dir.iterdir()), "temp files left behind"
        return {
            "after_last_ms": (t2 - t1) * 1e3,
            "total_ms": (t2 - t0) * 1e3,
            "cpu_ms": (cpu1 - cpu0) * 1e3,
            "peak_mb": peak,
            "create_ms": create_floor(root / "floor", files) * 1e3,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_one(src: str, args: argparse.Namespace) -> dict[str, float]:
    result: dict[str, float] = run_child(
        HERE,
        src,
        *("--files", str(args.files), "--size", str(args.size)),
        *("--dirs", str(args.dirs), "--dir", str(args.dir)),
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=2500)
    parser.add_argument("--size", type=int, default=3000)
    parser.add_argument("--dirs", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--dir", type=Path, default=HERE.parent.parent / ".hashreplay", help="where the files go"
    )
    add_tree_option(parser)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.files, args.size, args.dirs, args.dir)))
        return
    trees = parse_trees(args.tree, HERE.parent.parent / "src")
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    names = list(trees)
    for _, name in interleaved(names, args.rounds):
        results[name].append(run_one(trees[name], args))
    print(
        f"{args.files} files of ~{args.size} bytes in {args.dirs} directories, {args.rounds} rounds; median (min–max)"
    )
    print()
    print(
        "| tree | flush after the last submit, ms | first submit to flushed, ms | CPU, ms "
        "| peak memory growth, MB | creating as many empty files there, ms |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, runs in results.items():
        cells = [name]
        for key in ("after_last_ms", "total_ms", "cpu_ms", "peak_mb", "create_ms"):
            values = [run[key] for run in runs]
            cells.append(f"{statistics.median(values):.0f} ({min(values):.0f}–{max(values):.0f})")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
