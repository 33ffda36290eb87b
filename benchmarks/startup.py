"""What a run pays before its first test: import, activation, collection.

    python benchmarks/startup.py [--rev before=/work/before17] [--rev after=.] [--rounds 15]

Each `--rev NAME=TREE` is a source tree of hashreplay; its subprocesses run with
`PYTHONPATH=TREE/src` in front (the script checks that `hashreplay` resolves there), with the
Python running this script (it needs pytest and openai, and hashreplay installed so that the
`pytest11` entry point exists). Several revisions are measured in ONE run, rounds
interleaved (rotating order) so machine noise hits them alike, and printed side by side. Every measurement is a fresh Python process, with
bytecode cached in a private `PYTHONPYCACHEPREFIX` (warmed first), as a user's machine has:

- import: `import hashreplay.plugin` after `import pytest, openai` (CPU time in the
  process), and the modules it loads;
- activation: what the plugin's `pytest_configure` and `pytest_sessionstart` do (load the
  configuration, build the Session, install the adapters, start the usage log), on a real
  `pytest.Config` of the generated project, plugin already imported;
- usage log: a 500-test replay run's usage log fed (one file per test), finished and written;
- collect-only: `pytest --collect-only -q` of a generated 500-test suite (20 files importing
  openai) with the plugin and with `-p no:hashreplay`: CPU (user+sys of the process,
  `RUSAGE_CHILDREN`) and wall.

Import, activation and the usage log are CPU time of the probe's process (`time.process_time`,
user+sys), so other jobs on a shared machine do not inflate them as they inflate wall time.
Reported: median and minimum of each measure per revision; the collect-only overhead is the
median of the per-round ratios (plugin on and off run back to back in each round).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = 20

#: Run in the generated project; prints one JSON line of timings (seconds).
PROBE = r"""
import json, sys, time
from pathlib import Path
from types import SimpleNamespace
import pytest, openai
before = set(sys.modules)
t0 = time.process_time()
import hashreplay.plugin as plugin
t1 = time.process_time()
imported = sorted(m for m in set(sys.modules) - before)
from _pytest.config import _prepareconfig  # a real Config without running pytest (benchmark only)
config = _prepareconfig(["-q", "-p", "no:cacheprovider", "tests"])
loaded = set(sys.modules)
t2 = time.process_time()
plugin.pytest_configure(config)
run = config.stash[plugin.RUN_KEY] if hasattr(plugin, "RUN_KEY") else None  # plugin/ package
if run is not None:
    run.sessionstart(SimpleNamespace(config=config))
else:  # a tree from before the plugin was a package: six stash keys
    plugin.pytest_sessionstart(SimpleNamespace(config=config))
t3 = time.process_time()
activated = sorted(set(sys.modules) - loaded)
if run is not None:
    collector, session = run.usage, run.session
else:
    collector = config.stash[plugin.USAGE_KEY]
    session = config.stash[plugin.SESSION_KEY]
root = session.config.root
tests = [f"tests/test_m{i % 20:02d}.py::test_{i:03d}" for i in range(int(sys.argv[1]))]
files = {t: {root / "tests" / "recordings" / f"{i:03d}.json"} for i, t in enumerate(tests)}
t4 = time.process_time()
collector.note_collected(tests)
for t in tests:
    collector.note_start(t, 0)
    for when in ("setup", "call", "teardown"):
        collector.note_report(t, when, "passed")
    collector.note_finish(t, 0, session.config.mode)
collector.add_files(files, root)
ended = SimpleNamespace(config=config, shouldstop=False, shouldfail=False, exitstatus=0)
if run is not None:  # as pytest_sessionfinish does
    from hashreplay.plugin.run import finish_usage
    finish_usage(ended, session, collector)
else:
    from hashreplay.pytest_usage import finish_usage
    finish_usage(ended, plugin.SESSION_KEY, plugin.USAGE_KEY)
t5 = time.process_time()
assert (root / ".hashreplay" / "usage.json").stat().st_size > len(tests) * 100
if run is not None:
    run.unconfigure()
else:
    plugin.pytest_unconfigure(config)
print(json.dumps({"file": plugin.__file__, "import": t1 - t0, "activation": t3 - t2,
                  "usage": t5 - t4, "imported": imported, "activated": activated}))
"""

TEST_FILE = """
import openai
import pytest


@pytest.fixture
def client():
    return openai.OpenAI(api_key="sk-never-used")

{tests}
"""

TEST = """
def test_{i:03d}(client):
    assert client.chat.completions.create(model="m", messages=[{{"role": "user", "content": "{i}"}}])
"""

PYPROJECT = """
[project]
name = "startup-bench"
version = "0"

[tool.pytest.ini_options]
testpaths = ["tests"]
# an unrelated plugin of the shared venv (langchain's langsmith): ~2 s of CPU per process,
# on and off alike, that would dilute the plugin's share of collect-only
addopts = "-p no:langsmith_plugin"

[tool.hashreplay]
"""


@dataclass
class Series:
    samples: list[float] = field(default_factory=list)

    def cell(self, scale: float, unit: str, digits: int) -> str:
        if not self.samples:
            return "—"
        med = statistics.median(self.samples) * scale
        low = min(self.samples) * scale
        return f"{med:,.{digits}f} {unit} (min {low:,.{digits}f})"


@dataclass
class Rev:
    name: str
    tree: Path
    env: dict[str, str] = field(default_factory=dict)
    series: dict[str, Series] = field(default_factory=dict)
    imported: list[str] = field(default_factory=list)
    activated: list[str] = field(default_factory=list)

    def add(self, key: str, value: float) -> None:
        self.series.setdefault(key, Series()).samples.append(value)


def make_project(where: Path, tests: int) -> Path:
    (where / "tests").mkdir(parents=True)
    (where / "pyproject.toml").write_text(PYPROJECT)
    (where / "tests" / "conftest.py").write_text("")
    per_file = tests // FILES
    for f in range(FILES):
        body = "".join(TEST.format(i=f * per_file + i) for i in range(per_file))
        (where / "tests" / f"test_m{f:02d}.py").write_text(TEST_FILE.format(tests=body))
    return where


def run(
    cmd: list[str], project: Path, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """The finished process, its CPU seconds (user+sys) and wall seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
        msg = f"{' '.join(cmd)} in {project} failed ({done.returncode})"
        raise RuntimeError(msg)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done, cpu, wall


def probe(rev: Rev, project: Path, tests: int) -> None:
    done, _, _ = run([sys.executable, "-c", PROBE, str(tests)], project, rev.env)
    data = json.loads(done.stdout.strip().splitlines()[-1])
    expected = plugin_file(rev.tree).resolve()
    if Path(data["file"]).resolve() != expected:
        msg = f"{rev.name}: hashreplay.plugin came from {data['file']}, not {expected}"
        raise RuntimeError(msg)
    rev.add("import", data["import"])
    rev.add("activation", data["activation"])
    rev.add("startup", data["import"] + data["activation"])
    rev.add("usage", data["usage"])
    rev.imported, rev.activated = data["imported"], data["activated"]


def collect(rev: Rev, project: Path, tests: int, *, plugin: bool) -> None:
    args = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    if not plugin:
        args += ["-p", "no:hashreplay"]
    done, cpu, wall = run(args, project, rev.env)
    if f"{tests} tests collected" not in done.stdout:
        print(done.stdout[-2000:], file=sys.stderr)
        msg = f"{rev.name}: collect-only did not collect {tests} tests"
        raise RuntimeError(msg)
    suffix = "on" if plugin else "off"
    rev.add(f"collect cpu {suffix}", cpu)
    rev.add(f"collect wall {suffix}", wall)


def overhead(rev: Rev, kind: str) -> str:
    """Plugin on above off, paired by round (the two runs of a round are close in time, so
    drift in the machine's load cancels): the median ratio, and the ratio of the minimums."""
    on = rev.series.get(f"collect {kind} on")
    off = rev.series.get(f"collect {kind} off")
    if on is None or off is None:
        return "—"
    paired = statistics.median(a / b - 1 for a, b in zip(on.samples, off.samples, strict=True))
    low = min(on.samples) / min(off.samples) - 1
    return f"{paired:+.1%} (of the minimums {low:+.1%})"


def table(revs: list[Rev], tests: int) -> list[str]:
    ms, sec = (1000.0, "ms", 1), (1.0, "s", 3)
    rows = [
        ("`import hashreplay.plugin` after pytest+openai (≤ 10 ms)", "import", ms),
        ("activation: configure + session start (≤ 5 ms)", "activation", ms),
        ("import + activation, one process", "startup", ms),
        (f"usage log of a {tests}-test run (feed, finish, write)", "usage", ms),
        (f"collect-only, {tests} tests, plugin on: CPU", "collect cpu on", sec),
        (f"collect-only, {tests} tests, `-p no:hashreplay`: CPU", "collect cpu off", sec),
        (f"collect-only, {tests} tests, plugin on: wall", "collect wall on", sec),
        (f"collect-only, {tests} tests, `-p no:hashreplay`: wall", "collect wall off", sec),
    ]
    lines = [
        "| measure | " + " | ".join(r.name for r in revs) + " |",
        "| --- |" + " --- |" * len(revs),
    ]
    for label, key, (scale, unit, digits) in rows:
        cells = [r.series.get(key, Series()).cell(scale, unit, digits) for r in revs]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for kind in ("cpu", "wall"):
        lines.append(
            f"| collect-only: plugin on above off, {kind} (≤ 3%) | "
            + " | ".join(overhead(r, kind) for r in revs)
            + " |"
        )
    lines.append(
        "| modules loaded by the import / by activation | "
        + " | ".join(f"{len(r.imported)} / {len(r.activated)}" for r in revs)
        + " |"
    )
    return lines


def plugin_file(tree: Path) -> Path:
    """The plugin's module in a source tree: `plugin/__init__.py`, or `plugin.py` before
    the plugin became a package."""
    package = tree / "src" / "hashreplay" / "plugin" / "__init__.py"
    return package if package.is_file() else tree / "src" / "hashreplay" / "plugin.py"


def parse_rev(text: str) -> tuple[str, Path]:
    name, sep, tree = text.partition("=")
    if not sep:
        name, tree = Path(text).name, text
    path = Path(tree).resolve()
    if not plugin_file(path).is_file():
        msg = f"--rev {text}: no hashreplay plugin under {path / 'src' / 'hashreplay'}"
        raise SystemExit(msg)
    return name, path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--rev",
        action="append",
        default=[],
        metavar="NAME=TREE",
        help="a hashreplay source tree to measure (repeatable; default: this tree)",
    )
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--tests", type=int, default=500)
    parser.add_argument("--show-modules", action="store_true", help="list the modules loaded")
    args = parser.parse_args()
    revs_given = [parse_rev(r) for r in args.rev] or [("this tree", ROOT)]
    with tempfile.TemporaryDirectory(prefix="hr-startup-") as tmp:
        base = Path(tmp)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
        env.pop("HASHREPLAY_MODE", None)
        revs = [
            Rev(
                name,
                tree,
                {
                    **env,
                    "PYTHONPATH": os.pathsep.join(
                        [str(tree / "src"), env.get("PYTHONPATH", "")]
                    ).rstrip(os.pathsep),
                },
            )
            for name, tree in revs_given
        ]
        projects = {
            r.name: make_project(base / f"project-{i}", args.tests) for i, r in enumerate(revs)
        }
        print(
            f"Machine: {platform.system()} {platform.machine()}, {os.cpu_count()} cores; Python {platform.python_version()}"
        )
        print(
            f"{args.rounds} interleaved rounds; revisions: "
            + ", ".join(f"{r.name} = {r.tree}" for r in revs)
            + "\n"
        )
        for rev in revs:  # warm the bytecode cache; not counted
            probe(rev, projects[rev.name], args.tests)
            collect(rev, projects[rev.name], args.tests, plugin=True)
            collect(rev, projects[rev.name], args.tests, plugin=False)
            rev.series.clear()
        for round_ in range(args.rounds):
            shift = round_ % len(revs)
            for rev in revs[shift:] + revs[:shift]:
                project = projects[rev.name]
                probe(rev, project, args.tests)
                # on and off back to back, in alternating order: a paired comparison
                for plugin in (True, False) if round_ % 2 == 0 else (False, True):
                    collect(rev, project, args.tests, plugin=plugin)
        print("\n".join(table(revs, args.tests)))
        if args.show_modules:
            for rev in revs:
                print(f"\n{rev.name}: imported {' '.join(rev.imported)}")
                print(f"{rev.name}: activation loaded {' '.join(rev.activated)}")


if __name__ == "__main__":
    main()
