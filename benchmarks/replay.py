"""Per-call replay cost.

    python benchmarks/replay.py [--tests 40] [--rounds 6]

The same openai chat call (~2 KB bodies, non-streamed and streamed) answered by:
hashreplay (one test per call: the plugin's per-test work, then the call), vcrpy and
cassetter with one cassette per test as their users do (pytest-recording opens one cassette
per test), vcrpy inside an already-loaded cassette, the SDK answered from memory by an
httpx2.MockTransport with the same bytes (the floor), and live against the local fake
upstream. Then hashreplay's record mode against live.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Any

import cassetter
import vcr
from _common import (
    Series,
    Variant,
    capture_bodies,
    chat,
    client_for,
    fake_upstream,
    floor_transport,
    interleave,
    machine,
)

from hashreplay import Mode
from hashreplay.adapters import httpx as adapter
from hashreplay.core.config import load_config
from hashreplay.core.context import set_process_test_id, test_context
from hashreplay.engine.session import Session


def test_id(i: int) -> str:
    return f"tests/test_bench.py::test_call[{i}]"


def hashreplay_call(session: Session, client: Any, stream: bool) -> Any:
    def call(i: int) -> str:
        tid = test_id(i)
        session.begin_test(tid)  # what the plugin does around every test
        set_process_test_id(tid)
        try:
            with test_context(tid):
                return chat(client, i, stream=stream)
        finally:
            set_process_test_id(None)
            session.end_test(tid)

    return call


def run(stream: bool, tests: int, rounds: int) -> tuple[dict[str, Series], dict[str, Series]]:
    work = Path(tempfile.mkdtemp(prefix="hashreplay-bench-"))
    try:
        with fake_upstream() as fake:
            base = f"{fake.url}/v1"
            live_client = client_for(base)
            answers = capture_bodies(fake, tests, stream=stream)

            # record every tool's store once, against the live fake
            record = Session(load_config(work / "hr", env={}, mode="record"))
            adapter.install(record)
            hashreplay_call(record, live_client, stream)(0)  # warm
            for i in range(tests):
                hashreplay_call(record, live_client, stream)(i)
            adapter.uninstall()

            vcr_dir = work / "vcr"
            my_vcr = vcr.VCR(cassette_library_dir=str(vcr_dir), record_mode="once")
            for i in range(tests):
                with my_vcr.use_cassette(f"test_call_{i}.yaml"):
                    chat(live_client, i, stream=stream)
            big = vcr.VCR(cassette_library_dir=str(vcr_dir), record_mode="once")
            with big.use_cassette("all.yaml", allow_playback_repeats=True):
                for i in range(tests):
                    chat(live_client, i, stream=stream)
            cas_dir = work / "cassetter"
            for i in range(tests):
                with cassetter.use_cassette(cas_dir / f"test_call_{i}.yaml", record_mode="once"):
                    chat(live_client, i, stream=stream)

            replay = Session(load_config(work / "hr", env={}, mode="replay"))
            replay_vcr = vcr.VCR(cassette_library_dir=str(vcr_dir), record_mode="none")
            loaded: list[Any] = []

            def vcr_per_test(i: int) -> str:
                with replay_vcr.use_cassette(f"test_call_{i}.yaml"):
                    return chat(live_client, i, stream=stream)

            def enter_loaded() -> None:
                cm = replay_vcr.use_cassette("all.yaml", allow_playback_repeats=True)
                cm.__enter__()
                loaded.append(cm)

            def leave_loaded() -> None:
                loaded.pop().__exit__(None, None, None)

            def cassetter_per_test(i: int) -> str:
                path = cas_dir / f"test_call_{i}.yaml"
                with cassetter.use_cassette(path, record_mode="none"):
                    return chat(live_client, i, stream=stream)

            floor_client = client_for(base, floor_transport(answers))
            variants = {
                "floor (MockTransport, same bytes)": Variant(
                    lambda i: chat(floor_client, i, stream=stream)
                ),
                "hashreplay (replay)": Variant(
                    hashreplay_call(replay, live_client, stream),
                    enter=lambda: adapter.install(replay),
                    leave=adapter.uninstall,
                ),
                "vcrpy, one cassette per test": Variant(vcr_per_test),
                "vcrpy, inside a loaded cassette": Variant(
                    lambda i: chat(live_client, i, stream=stream),
                    enter=enter_loaded,
                    leave=leave_loaded,
                ),
                "cassetter, one cassette per test": Variant(cassetter_per_test),
                "live (local fake upstream)": Variant(
                    lambda i: chat(live_client, i, stream=stream)
                ),
            }
            replay_series = interleave(variants, tests, rounds)
            assert replay.stats.missed == 0, replay.take_misses(test_id(0))

            rec_root = work / "hr-record"
            # as the pytest plugin runs it: write-behind, flushed when the session ends
            recorder = Session(
                load_config(rec_root, env={}, mode=Mode.RECORD.value), write_behind=True
            )
            record_variants = {
                "live (local fake upstream)": Variant(
                    lambda i: chat(live_client, i, stream=stream)
                ),
                "hashreplay (record)": Variant(
                    hashreplay_call(recorder, live_client, stream),
                    enter=lambda: adapter.install(recorder),
                    leave=lambda: (recorder.flush(), adapter.uninstall()),
                ),
            }
            record_series = interleave(record_variants, tests, rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return replay_series, record_series


def report(title: str, series: dict[str, Series], floor_name: str) -> list[str]:
    floor = series[floor_name]
    lines = [
        f"### {title}",
        "",
        f"| variant | median ms/call | min–max ms | above {floor_name.split(' ', maxsplit=1)[0]} | ratio |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [s.row(floor) for s in series.values()]
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tests", type=int, default=40, help="distinct tests (calls per round)")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    out = [
        f"Machine: {machine()}",
        f"Calls: {args.tests} per variant per round, {args.rounds} rounds",
        "",
    ]
    for stream in (False, True):
        kind = "streamed" if stream else "non-streamed"
        replay_series, record_series = run(stream, args.tests, args.rounds)
        out += report(
            f"Replay, {kind} chat completion", replay_series, "floor (MockTransport, same bytes)"
        )
        out += report(f"Record overhead, {kind}", record_series, "live (local fake upstream)")
    print("\n".join(out))


if __name__ == "__main__":
    main()
