"""What a user's suite pays (issue 17, item 1): whole pytest processes of generated suites.

    python benchmarks/suite.py [--tests 500] [--rounds 3] [--scenarios 1,5,1s] [--before SRC]
                                [--replay-rounds N] [--no-record]

Each scenario is a generated suite of N tests making K openai chat calls each (`1`, `5`;
`1s` = one streamed call), run as a whole `pytest` process per variant:

- floor: the SDK answered from memory by an `httpx2.MockTransport` with the same bytes, no
  recorder loaded (`-p no:hashreplay -p no:recording -p no:cassetter`);
- hashreplay: replay from recordings made once against the local fake upstream (stopped);
- pytest-recording (vcrpy) and cassetter: `@pytest.mark.vcr`, one cassette per test, replayed
  with `--record-mode=none`;
- `--before SRC`: hashreplay from another source tree as one more variant (before/after);
- for recording: live (no recorder) against the fake, and each recorder recording into an
  empty store (`record` / `--record-mode=all`).

Rounds interleave the variants (rotating order) so machine noise hits them alike. Reported:
median CPU (user+sys of the pytest process) and wall time per run, and per test above the
reference (the floor for replay, live for record).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import ROOT, capture_bodies, fake_upstream, machine

PLUGINS = ("hashreplay", "recording", "cassetter")
#: the tree measured as "hashreplay" (the installed one may be another checkout)
SRC = str(ROOT / "src")

TESTS = """
import pytest
from _bench import ask

CALLS = {calls}
STREAM = {stream}

@pytest.mark.vcr
@pytest.mark.parametrize("i", range({tests}))
def test_call(i, client):
    for k in range(CALLS):
        assert ask(client, i * CALLS + k, stream=STREAM)
"""

CONFTEST = """
import json, os
from pathlib import Path

import httpx2
import openai
import pytest

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def client():
    # one client for the run, as applications hold one: a new httpx client per test would
    # cost every variant but the floor ~30 ms for its TLS context, and hide the recorders
    if os.environ.get("BENCH_FLOOR"):
        answers = json.loads((HERE / "answers.json").read_text())

        def handler(request):
            key = json.loads(request.content)["messages"][1]["content"]
            body, ctype = answers[key]
            return httpx2.Response(200, content=body.encode(), headers={{"content-type": ctype}})

        http = httpx2.Client(transport=httpx2.MockTransport(handler))
    else:
        http = None
    return openai.OpenAI(base_url=os.environ["BENCH_URL"] + "/v1", api_key="sk-bench-0123456789abcdefghij",
                         max_retries=0, http_client=http)


@pytest.fixture(scope="module")
def vcr_config():
    return {{"filter_headers": ["authorization"]}}
"""

BENCH = """
FILLER = {filler!r}

def prompt(i):
    return [
        {{"role": "system", "content": FILLER * 10}},
        {{"role": "user", "content": f"Where is shipment {{i:06d}}? " + "context " * 20}},
    ]

def ask(client, i, *, stream):
    if stream:
        chunks = client.chat.completions.create(model="gpt-fake-1", messages=prompt(i), stream=True)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    r = client.chat.completions.create(model="gpt-fake-1", messages=prompt(i))
    return r.choices[0].message.content or ""
"""

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:cacheprovider -p no:asyncio -p no:hypothesispytest -p no:xdist -p no:anyio"
"""


@dataclass
class Scenario:
    calls: int
    stream: bool

    @property
    def label(self) -> str:
        kind = "streamed call" if self.stream else "call"
        return f"{self.calls} {kind}{'s' if self.calls > 1 else ''}/test"

    @staticmethod
    def parse(text: str) -> Scenario:
        return Scenario(int(text.rstrip("s")), text.endswith("s"))


@dataclass
class Runs:
    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)


def make_project(where: Path, scenario: Scenario, tests: int) -> Path:
    from _common import FILLER

    where.mkdir(parents=True)
    (where / "pyproject.toml").write_text(PYPROJECT)
    (where / "tests").mkdir()
    (where / "tests" / "conftest.py").write_text(CONFTEST.format())
    (where / "tests" / "_bench.py").write_text(BENCH.format(filler=FILLER))
    (where / "tests" / "test_suite.py").write_text(
        TESTS.format(calls=scenario.calls, stream=scenario.stream, tests=tests)
    )
    return where


#: Bytecode is cached as on a user's machine (in a private folder): with
#: PYTHONDONTWRITEBYTECODE set, as on some CI images, every run would compile every module of
#: a plugin's package again (pytest rewrites them), which is not what a suite pays.
BASE_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def pytest_run(project: Path, env: dict[str, str], *args: str, expect: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one whole pytest process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "tests", *args],
        cwd=project,
        env={**BASE_ENV, "PYTHONPYCACHEPREFIX": str(project.parent / "pycache"), **env},
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or f"{expect} passed" not in done.stdout:
        print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
        msg = f"pytest {' '.join(args)} in {project} failed"
        raise RuntimeError(msg)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def only(plugin: str | None) -> tuple[str, ...]:
    """`-p no:` for every recorder but `plugin`."""
    return tuple(a for p in PLUGINS if p != plugin for a in ("-p", f"no:{p}"))


def answers_file(project: Path, fake_url_answers: dict[str, tuple[bytes, str]]) -> None:
    data = {k: (v[0].decode(), v[1]) for k, v in fake_url_answers.items()}
    (project / "tests" / "answers.json").write_text(json.dumps(data))


def run_scenario(
    scenario: Scenario,
    tests: int,
    rounds: int,
    work: Path,
    before: str | None = None,
    *,
    replay_rounds: int | None = None,
    record: bool = True,
) -> tuple[dict[str, Runs], dict[str, Runs]]:
    project = make_project(
        work / f"s{scenario.calls}{'s' if scenario.stream else ''}", scenario, tests
    )
    total = tests * scenario.calls
    replay: dict[str, Runs] = {}
    record_runs: dict[str, Runs] = {}
    with fake_upstream() as fake:
        env = {"BENCH_URL": fake.url, "INFERENCE_MODE": "record"}
        answers_file(project, capture_bodies(fake, total, stream=scenario.stream))
        # the stores to replay from, recorded once
        pytest_run(project, {**env, "PYTHONPATH": SRC}, *only("hashreplay"), expect=tests)
        pytest_run(project, env, *only("recording"), "--record-mode=all", expect=tests)
        shutil.copytree(project / "tests" / "cassettes", project / "cassettes-vcr")
        shutil.rmtree(project / "tests" / "cassettes")
        pytest_run(project, env, *only("cassetter"), "--record-mode=all", expect=tests)
        shutil.copytree(project / "tests" / "cassettes", project / "cassettes-cassetter")

        def clear_stores() -> None:
            shutil.rmtree(project / "tests" / "recordings", ignore_errors=True)
            shutil.rmtree(project / "tests" / "cassettes", ignore_errors=True)

        recorders = {
            "live (no recorder)": (clear_stores, {"INFERENCE_MODE": "live"}, only(None)),
            "hashreplay (record)": (
                clear_stores,
                {"INFERENCE_MODE": "record", "PYTHONPATH": SRC},
                only("hashreplay"),
            ),
            "pytest-recording (record)": (
                clear_stores,
                {},
                (*only("recording"), "--record-mode=all"),
            ),
            "cassetter (record)": (clear_stores, {}, (*only("cassetter"), "--record-mode=all")),
        }
        if before is not None:
            recorders["hashreplay before (record)"] = (
                clear_stores,
                {"INFERENCE_MODE": "record", "PYTHONPATH": before},
                only("hashreplay"),
            )
        for r in range(rounds if record else 0):
            names = list(recorders)
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                prepare, extra, args = recorders[name]
                prepare()
                cpu, wall = pytest_run(project, {**env, **extra}, *args, expect=tests)
                runs = record_runs.setdefault(name, Runs())
                runs.cpu.append(cpu)
                runs.wall.append(wall)

    # replay with the upstream gone (same URL: vcrpy matches on host and port): a request
    # that escapes fails the run
    env = {"BENCH_URL": env["BENCH_URL"], "INFERENCE_MODE": "replay"}
    variants = {
        "floor (MockTransport)": ({"BENCH_FLOOR": "1"}, only(None), None),
        "hashreplay (replay)": ({"PYTHONPATH": SRC}, only("hashreplay"), None),
        "pytest-recording (replay)": (
            {},
            (*only("recording"), "--record-mode=none"),
            "cassettes-vcr",
        ),
        "cassetter (replay)": (
            {},
            (*only("cassetter"), "--record-mode=none"),
            "cassettes-cassetter",
        ),
    }
    if before is not None:
        variants["hashreplay before (replay)"] = ({"PYTHONPATH": before}, only("hashreplay"), None)
    # the record rounds each started from an empty store: record hashreplay's once more
    # (against a new fake: the host and port are not part of hashreplay's key)
    with fake_upstream() as fake:
        shutil.rmtree(project / "tests" / "recordings", ignore_errors=True)
        pytest_run(
            project,
            {"BENCH_URL": fake.url, "INFERENCE_MODE": "record", "PYTHONPATH": SRC},
            *only("hashreplay"),
            expect=tests,
        )
    for r in range(rounds if replay_rounds is None else replay_rounds):
        names = list(variants)
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            extra, args, cassettes = variants[name]
            if cassettes is not None:
                shutil.rmtree(project / "tests" / "cassettes", ignore_errors=True)
                shutil.copytree(project / cassettes, project / "tests" / "cassettes")
            cpu, wall = pytest_run(project, {**env, **extra}, *args, expect=tests)
            runs = replay.setdefault(name, Runs())
            runs.cpu.append(cpu)
            runs.wall.append(wall)
    return replay, record_runs


def table(results: dict[str, Runs], reference: str, tests: int) -> list[str]:
    ref = results[reference]
    ref_cpu, ref_wall = statistics.median(ref.cpu), statistics.median(ref.wall)
    lines = [
        "| variant | CPU s/run (median, min–max) | wall s/run | per test above the reference:"
        " CPU, wall |",
        "| --- | --- | --- | --- |",
    ]
    for name, runs in results.items():
        cpu, wall = statistics.median(runs.cpu), statistics.median(runs.wall)
        above = (
            f"{(cpu - ref_cpu) / tests * 1e6:+,.0f} µs, {(wall - ref_wall) / tests * 1e6:+,.0f} µs"
        )
        lines.append(
            f"| {name} | {cpu:.2f} ({min(runs.cpu):.2f}–{max(runs.cpu):.2f}) | {wall:.2f} | "
            f"{'—' if name == reference else above} |"
        )
    ours = next((n for n in results if n.startswith("hashreplay (")), None)
    if ours is not None:
        mine = statistics.median(results[ours].cpu) - ref_cpu
        ratios = [
            f"{mine / (statistics.median(runs.cpu) - ref_cpu):.2f}× {name.split(' (')[0]}'s"
            for name, runs in results.items()
            if name.startswith(("pytest-recording", "cassetter"))
            and statistics.median(runs.cpu) > ref_cpu
        ]
        lines.append(f"\nhashreplay's CPU overhead per test: {', '.join(ratios)}.")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tests", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scenarios", default="1,5,1s")
    parser.add_argument(
        "--before", help="another hashreplay src tree, measured beside this one (PYTHONPATH)"
    )
    parser.add_argument(
        "--replay-rounds",
        type=int,
        help="rounds of the replay variants (default: --rounds); they are cheap, and this VM "
        "needs many to give stable medians",
    )
    parser.add_argument("--no-record", action="store_true", help="measure the replay variants only")
    args = parser.parse_args()
    print(f"Machine: {machine()}")
    print(f"Suites of {args.tests} tests, {args.rounds} interleaved rounds per variant\n")
    work = Path(tempfile.mkdtemp(prefix="hashreplay-suite-"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        for text in args.scenarios.split(","):
            scenario = Scenario.parse(text)
            replay, record = run_scenario(
                scenario,
                args.tests,
                args.rounds,
                work,
                args.before,
                replay_rounds=args.replay_rounds,
                record=not args.no_record,
            )
            print(f"### Replay, {scenario.label}")
            print("\n".join(table(replay, "floor (MockTransport)", args.tests)), "\n")
            if record:
                print(f"### Record, {scenario.label}")
                print("\n".join(table(record, "live (no recorder)", args.tests)), "\n")
            sys.stdout.flush()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
