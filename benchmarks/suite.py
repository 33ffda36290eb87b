"""What a user's suite pays in CPU: whole pytest processes, split into per run and per test.

    python benchmarks/suite.py [--tree old=/tmp/old-tree/src --tree new=src]
                               [--sizes 50,200,600] [--rounds 5] [--scenarios 1,5,1s]
                               [--record] [--json results.json]

Each scenario is a generated suite of N tests making K openai chat calls each (`1`, `5`;
`1s` = one streamed call), generated at each of the `--sizes`, and run as a whole `pytest`
process per variant:

- floor: the SDK answered from memory by an `httpx2.MockTransport` with the same bytes, no
  recorder loaded (`-p no:hashreplay -p no:recording -p no:cassetter`);
- hashreplay, once per `--tree NAME=SRC_DIR` (default: this checkout's `src`), with
  `PYTHONPATH=SRC_DIR`: replay from a store that tree recorded against the local fake
  upstream (stopped since);
- pytest-recording (vcrpy) and cassetter, if installed: `@pytest.mark.vcr`, one cassette per
  test, replayed with `--record-mode=none`.

With `--record` the record path is measured instead: "live" (no recorder) against the fake
upstream as the reference, and each recorder recording into an empty store.

Every variant has its own generated project per scenario and size (so no run reads
another's store); each is run once untimed first, with bytecode cached in a private
`PYTHONPYCACHEPREFIX` as on a user's machine. CPU is user+sys of the pytest process, from
`os.wait4`. Each round runs every size of every variant, variants in rotating order, so
machine noise hits them alike. Per variant a line is fitted (least squares) through the
median CPU at each size: its intercept is the cost per run (start-up, collection, what a
plugin does once) and its slope the marginal cost per test; the same fit of each single
round gives the spread.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from _common import FILLER, ROOT, capture_bodies, fake_upstream, machine
from _trees import interleaved, parse_trees

PLUGINS = ("hashreplay", "recording", "cassetter")
FLOOR = "floor (MockTransport)"
LIVE = "live (no recorder)"

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
            return httpx2.Response(200, content=body.encode(), headers={"content-type": ctype})

        http = httpx2.Client(transport=httpx2.MockTransport(handler))
    else:
        http = None
    return openai.OpenAI(base_url=os.environ["BENCH_URL"] + "/v1", api_key="sk-bench-0123456789abcdefghij",
                         max_retries=0, http_client=http)


@pytest.fixture(scope="module")
def vcr_config():
    return {"filter_headers": ["authorization"]}
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

#: `[tool.hashreplay]` opts the project in (docs/design.md §16 Activation); a tree from
#: before activation existed ignores the empty table. The unrelated plugins of the venv are
#: off: langsmith's alone costs ~2 s of CPU per process, the same for every variant, and
#: would only add noise.
PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:cacheprovider -p no:asyncio -p no:hypothesispytest -p no:xdist -p no:anyio -p no:langsmith_plugin"

[tool.hashreplay]
"""

#: Bytecode is cached as on a user's machine (in a private folder): with
#: PYTHONDONTWRITEBYTECODE set, as on some CI images, every run would compile every module of
#: a plugin's package again (pytest rewrites them), which is not what a suite pays.
BASE_ENV = {
    k: v
    for k, v in os.environ.items()
    if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "INFERENCE_MODE")
}


@dataclass(frozen=True)
class Scenario:
    calls: int
    stream: bool

    @property
    def label(self) -> str:
        kind = "streamed call" if self.stream else "call"
        return f"{self.calls} {kind}{'s' if self.calls > 1 else ''}/test"

    @property
    def slug(self) -> str:
        return f"s{self.calls}{'s' if self.stream else ''}"

    @staticmethod
    def parse(text: str) -> Scenario:
        return Scenario(int(text.rstrip("s")), text.endswith("s"))


@dataclass
class Variant:
    """One way of running the suite: its environment, its pytest arguments, and the store
    it clears before each timed run (recording into an empty store)."""

    name: str
    env: dict[str, str]
    args: tuple[str, ...]
    clear: str | None = None
    #: size -> CPU seconds of each round
    cpu: dict[int, list[float]] = field(default_factory=dict)


def only(plugin: str | None) -> tuple[str, ...]:
    """`-p no:` for every recorder but `plugin`."""
    return tuple(a for p in PLUGINS if p != plugin for a in ("-p", f"no:{p}"))


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def make_project(where: Path, scenario: Scenario, tests: int) -> Path:
    (where / "tests").mkdir(parents=True)
    (where / "pyproject.toml").write_text(PYPROJECT)
    (where / "tests" / "conftest.py").write_text(CONFTEST)
    (where / "tests" / "_bench.py").write_text(BENCH.format(filler=FILLER))
    (where / "tests" / "test_suite.py").write_text(
        TESTS.format(calls=scenario.calls, stream=scenario.stream, tests=tests)
    )
    return where


def pytest_run(
    project: Path, env: dict[str, str], args: Sequence[str], expect: int, *, counting: bool = False
) -> float:
    """CPU seconds (user+sys, from `os.wait4`) of one whole pytest process; with `counting`,
    its user-space instructions in billions (callgrind, hash seed 0)."""
    command = [sys.executable, "-m", "pytest", "-q", "tests", *args]
    if counting:
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command]
        env = {**env, "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            command,
            cwd=project,
            env={**BASE_ENV, "PYTHONPYCACHEPREFIX": str(project.parents[2] / "pycache"), **env},
            stdout=out,
            stderr=err,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
        if proc.returncode != 0 or f"{expect} passed" not in stdout:
            print(stdout[-3000:], stderr[-3000:], file=sys.stderr)
            msg = f"pytest {' '.join(args)} in {project} failed ({proc.returncode})"
            raise RuntimeError(msg)
    if counting:
        found = re.search(r"Collected : (\d+)", stderr)
        if found is None:
            raise RuntimeError(f"valgrind printed no instruction count: {stderr[-2000:]}")
        return int(found.group(1)) / 1e9
    return usage.ru_utime + usage.ru_stime


def check_tree(name: str, src: str) -> None:
    """The hashreplay a `PYTHONPATH=src` process imports is the one in `src`."""
    found = subprocess.run(
        [sys.executable, "-c", "import hashreplay; print(hashreplay.__file__)"],
        env={**BASE_ENV, "PYTHONPATH": src},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(found).resolve().is_relative_to(Path(src).resolve()):
        raise SystemExit(f"--tree {name}={src}: hashreplay was imported from {found}")


def variants_for(trees: dict[str, str], *, record: bool, site: str | None = None) -> list[Variant]:
    """The variants measured: the reference first, then each hashreplay tree and the other
    recorders that are installed (in the interpreter, or in `site`: `--site`)."""
    others = {} if site is None else {"PYTHONPATH": site}
    mode = "record" if record else "replay"
    found: list[Variant] = [
        Variant(LIVE, {"INFERENCE_MODE": "live"}, only(None))
        if record
        else Variant(FLOOR, {"BENCH_FLOOR": "1"}, only(None))
    ]
    for name, src in trees.items():
        found.append(
            Variant(
                f"hashreplay {name}",
                {"INFERENCE_MODE": mode, "PYTHONPATH": src},
                only("hashreplay"),
                "tests/recordings",
            )
        )
    vcr_mode = "--record-mode=all" if record else "--record-mode=none"
    if installed("pytest_recording"):
        found.append(
            Variant("pytest-recording", others, (*only("recording"), vcr_mode), "tests/cassettes")
        )
    if installed("cassetter"):
        # loaded by name: the shared venv may have its pytest11 entry point removed so that it
        # does not load beside pytest-recording (both add --record-mode)
        args = (*only("cassetter"), "-p", "cassetter.pytest_plugin", vcr_mode)
        found.append(Variant("cassetter", others, args, "tests/cassettes"))
    return found


def prepare(
    work: Path, scenario: Scenario, sizes: Sequence[int], variants: list[Variant], *, record: bool
) -> tuple[dict[tuple[str, int], Path], str]:
    """One project per variant and size, its store recorded once against the fake upstream
    (replay), and one untimed run of each variant at the smallest size to warm the bytecode
    cache. Returns the projects and the upstream's URL (replayed with the upstream stopped:
    vcrpy matches host and port; with `record` the upstream is left to `measure`)."""
    projects: dict[tuple[str, int], Path] = {}
    with fake_upstream() as fake:
        answers = capture_bodies(fake, max(sizes) * scenario.calls, stream=scenario.stream)
        answers_json = json.dumps({k: (v[0].decode(), v[1]) for k, v in answers.items()})
        for size in sizes:
            for i, variant in enumerate(variants):
                project = make_project(work / scenario.slug / str(size) / f"v{i}", scenario, size)
                projects[variant.name, size] = project
                if variant.name == FLOOR:
                    (project / "tests" / "answers.json").write_text(answers_json)
                    continue
                if not record:  # the store to replay from
                    env = {**variant.env, "BENCH_URL": fake.url}
                    if variant.name.startswith("hashreplay"):
                        env["INFERENCE_MODE"] = "record"
                    args = [
                        a if a != "--record-mode=none" else "--record-mode=all"
                        for a in variant.args
                    ]
                    pytest_run(project, env, args, size)
        url = fake.url
        if record:
            return projects, url
    for variant in variants:  # the plugins' bytecode is shared by every size
        size = min(sizes)
        pytest_run(
            projects[variant.name, size], {**variant.env, "BENCH_URL": url}, variant.args, size
        )
    return projects, url


def measure(
    scenario: Scenario,
    sizes: Sequence[int],
    rounds: int,
    work: Path,
    variants: list[Variant],
    *,
    record: bool,
    instructions: bool = False,
) -> None:
    projects, url = prepare(work, scenario, sizes, variants, record=record)
    by_name = {v.name: v for v in variants}

    def run(name: str, size: int, base_url: str, *, counted: bool = instructions) -> float:
        variant = by_name[name]
        project = projects[name, size]
        if variant.clear is not None and record:
            shutil.rmtree(project / variant.clear, ignore_errors=True)
        env = {**variant.env, "BENCH_URL": base_url}
        return pytest_run(project, env, variant.args, size, counting=counted)

    if record:
        with fake_upstream() as fake:
            for v in variants:  # warm (never counted, as `prepare`'s runs)
                run(v.name, min(sizes), fake.url, counted=False)
            for _, name in interleaved(list(by_name), rounds):
                for size in sizes:
                    by_name[name].cpu.setdefault(size, []).append(run(name, size, fake.url))
    else:
        for _, name in interleaved(list(by_name), rounds):
            for size in sizes:
                by_name[name].cpu.setdefault(size, []).append(run(name, size, url))


def fit(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through (size, seconds)."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return my - slope * mx, slope


@dataclass
class Fit:
    per_run: float  # seconds
    per_test: float  # seconds
    per_test_low: float
    per_test_high: float
    per_run_low: float
    per_run_high: float

    @staticmethod
    def of(variant: Variant) -> Fit:
        sizes = sorted(variant.cpu)
        per_run, per_test = fit([(s, statistics.median(variant.cpu[s])) for s in sizes])
        rounds = min(len(variant.cpu[s]) for s in sizes)
        each = [fit([(s, variant.cpu[s][r]) for s in sizes]) for r in range(rounds)]
        return Fit(
            per_run,
            per_test,
            min(e[1] for e in each),
            max(e[1] for e in each),
            min(e[0] for e in each),
            max(e[0] for e in each),
        )


#: the units of a table: seconds of CPU, or (`--instructions`) billions of instructions
#: a table's units (per run, per test, total): seconds of CPU, or billions of instructions
Units = tuple[str, str, str]
CPU_UNITS: Units = ("ms", "µs", "CPU s")
INSTRUCTION_UNITS: Units = ("M instructions", "k instructions", "G instructions")


def table(variants: list[Variant], units: Units) -> tuple[list[str], dict[str, Fit]]:
    fits = {v.name: Fit.of(v) for v in variants}
    run_unit, test_unit, total_unit = units
    ref_name = variants[0].name
    ref = fits[ref_name]
    sizes = sorted(variants[0].cpu)
    lines = [
        f"| variant | per run, {run_unit} (rounds' min–max) | per test, {test_unit} (rounds'"
        f" min–max) | above the {ref_name.split(' (')[0]}: per run, per test | {total_unit} at "
        + ", ".join(map(str, sizes))
        + " tests (medians) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for v in variants:
        f = fits[v.name]
        above = (
            "—"
            if v.name == ref_name
            else f"{(f.per_run - ref.per_run) * 1e3:+,.0f} {run_unit},"
            f" {(f.per_test - ref.per_test) * 1e6:+,.0f} {test_unit}"
        )
        medians = ", ".join(f"{statistics.median(v.cpu[s]):.2f}" for s in sizes)
        lines.append(
            f"| {v.name} | {f.per_run * 1e3:,.0f} ({f.per_run_low * 1e3:,.0f}–{f.per_run_high * 1e3:,.0f})"
            f" | {f.per_test * 1e6:,.0f} ({f.per_test_low * 1e6:,.0f}–{f.per_test_high * 1e6:,.0f})"
            f" | {above} | {medians} |"
        )
    floor = variants[0]
    spread = "; ".join(
        f"{s} tests {min(floor.cpu[s]):.2f}–{max(floor.cpu[s]):.2f} {total_unit}" for s in sizes
    )
    lines.append(f"\nNoise: the {ref_name} ranged {spread} over {len(floor.cpu[sizes[0]])} rounds.")
    return lines, fits


def ratios(variants: list[Variant], fits: dict[str, Fit], units: Units) -> list[str]:
    """hashreplay's cost above the reference against the other recorders' and the trees'."""
    base = fits[variants[0].name]
    ms, us, _ = units

    def above(name: str) -> tuple[float, float]:
        return fits[name].per_run - base.per_run, fits[name].per_test - base.per_test

    ours = [n for n in fits if n.startswith("hashreplay ")]
    others = [n for n in fits if n in ("pytest-recording", "cassetter")]
    lines = []
    for mine in ours:
        run, test = above(mine)
        cells = [
            f"per test {test / above(o)[1]:.2f}× {o}'s, per run {run * 1e3:+,.0f} {ms} vs {above(o)[0] * 1e3:+,.0f} {ms}"
            for o in others
            if above(o)[1] > 0
        ]
        lines.append(f"- {mine}: " + "; ".join(cells))
    if len(ours) >= 2:
        first, last = ours[0], ours[-1]
        f_, l_ = fits[first], fits[last]
        # rounds are interleaved, so the two trees' fits of one round are a pair
        by_name = {v.name: v for v in variants}
        sizes = sorted(by_name[first].cpu)
        rounds = min(len(v.cpu[s]) for v in (by_name[first], by_name[last]) for s in sizes)
        paired = sorted(
            fit([(s, by_name[last].cpu[s][r]) for s in sizes])[1]
            - fit([(s, by_name[first].cpu[s][r]) for s in sizes])[1]
            for r in range(rounds)
        )
        lines.append(
            f"- {last} vs {first}: per test {(l_.per_test - f_.per_test) * 1e6:+,.0f} {us}"
            f" ({l_.per_test / f_.per_test - 1:+.1%} of the whole per-test CPU; per round,"
            f" paired: median {statistics.median(paired) * 1e6:+,.0f} {us}, min–max"
            f" {paired[0] * 1e6:+,.0f}…{paired[-1] * 1e6:+,.0f} {us}), per run"
            f" {(l_.per_run - f_.per_run) * 1e3:+,.0f} {ms}"
        )
    return lines


def per_call(slopes: dict[str, dict[str, float]], units: Units) -> list[str]:
    """What one more call in a test costs above the floor: the 5-call suite's slope less the
    1-call suite's, over 4, per variant."""
    one, five = slopes.get("1 call/test"), slopes.get("5 calls/test")
    if one is None or five is None:
        return []
    extra = {n: (five[n] - one[n]) / 4 for n in one if n in five}
    floor = extra.get(FLOOR)
    if floor is None:
        return []
    us = units[1]
    return [
        "### Per call (the 5-call suite's per-test CPU less the 1-call suite's, over 4)",
        f"| variant | per call, {us} | above the floor |",
        "| --- | --- | --- |",
        *(
            f"| {n} | {v * 1e6:,.0f} | {'—' if n == FLOOR else f'{(v - floor) * 1e6:+,.0f} {us}'} |"
            for n, v in extra.items()
        ),
    ]


def slopes_of(by_variant: dict[str, dict[int, list[float]]]) -> dict[str, float]:
    return {n: Fit.of(Variant(n, {}, (), cpu=cpu)).per_test for n, cpu in by_variant.items()}


def report(samples: dict[str, dict[str, dict[int, list[float]]]], kind: str, units: Units) -> None:
    """Print each scenario's table, the ratios, and the per-call costs."""
    slopes: dict[str, dict[str, float]] = {}
    for label, by_variant in samples.items():
        variants = [Variant(n, {}, (), cpu=cpu) for n, cpu in by_variant.items()]
        lines, fits = table(variants, units)
        print(f"### {kind}, {label}")
        print("\n".join(lines))
        print("\n".join(ratios(variants, fits, units)), "\n")
        slopes[label] = {n: f.per_test for n, f in fits.items()}
    if len(slopes) > 1:
        print("\n".join(per_call(slopes, units)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--tree", action="append", default=[], help="NAME=SRC_DIR of hashreplay (repeatable)"
    )
    parser.add_argument("--sizes", default="50,200,600")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scenarios", default="1,5,1s")
    parser.add_argument("--record", action="store_true", help="measure the record path instead")
    parser.add_argument("--json", type=Path, help="write every sample here")
    parser.add_argument(
        "--only-trees",
        action="store_true",
        help="measure the floor and the hashreplay trees, not pytest-recording and cassetter",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count each timed run's user-space instructions under valgrind instead of its CPU"
        " time: unmoved by the machine's load, blind to the kernel (one round is enough)",
    )
    parser.add_argument(
        "--site",
        help="a directory of the compared tools installed apart (`pip install --target DIR"
        " cassetter`): on their runs' PYTHONPATH, so that the shared venv keeps no second"
        " pytest11 plugin that adds --record-mode beside pytest-recording",
    )
    parser.add_argument(
        "--report",
        type=Path,
        nargs="+",
        help="print the tables of samples written by --json (one or more runs) and exit",
    )
    args = parser.parse_args()
    kind = "Record" if args.record else "Replay"
    units = INSTRUCTION_UNITS if args.instructions else CPU_UNITS
    if args.report:
        merged: dict[str, dict[str, dict[int, list[float]]]] = {}
        for path in args.report:
            for label, by_variant in json.loads(path.read_text()).items():
                merged[label] = {
                    n: {int(s): cpu for s, cpu in by_size.items()}
                    for n, by_size in by_variant.items()
                }
        report(merged, kind, units)
        return
    if args.site is not None:
        sys.path.insert(0, args.site)  # found by `installed`
    trees = parse_trees(args.tree, ROOT / "src")
    for name, src in trees.items():
        check_tree(name, src)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if len(sizes) < 2:
        raise SystemExit("--sizes: give at least two suite sizes to fit a line through")
    print(f"Machine: {machine()}")
    print(f"Trees: {', '.join(f'{n} = {s}' for n, s in trees.items())}")
    print(f"Suites of {', '.join(map(str, sizes))} tests, {args.rounds} interleaved rounds\n")
    work = Path(tempfile.mkdtemp(prefix="hashreplay-suite-"))
    samples: dict[str, dict[str, dict[int, list[float]]]] = {}
    try:
        for text in args.scenarios.split(","):
            scenario = Scenario.parse(text)
            variants = variants_for(trees, record=args.record, site=args.site)
            if args.only_trees:
                others = ("pytest-recording", "cassetter")
                variants = [v for v in variants if v.name not in others]
            measure(
                scenario,
                sizes,
                args.rounds,
                work,
                variants,
                record=args.record,
                instructions=args.instructions,
            )
            samples[scenario.label] = {v.name: v.cpu for v in variants}
            report({scenario.label: samples[scenario.label]}, kind, units)
            sys.stdout.flush()
            if args.json is not None:
                args.json.write_text(json.dumps(samples, indent=1))
        if len(samples) > 1:
            slopes = {label: slopes_of(s) for label, s in samples.items()}
            print("\n".join(per_call(slopes, units)))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
