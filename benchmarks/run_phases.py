"""Where a replay run's own cost goes: the plugin's phases, in CPU time, per source tree.

    python benchmarks/run_phases.py --tree base=/tmp/base-tree/src --tree new=src [--rounds 7]

A generated 20-test suite (one openai chat call per test, `suite.py`'s project) is recorded
by each tree against the local fake upstream, then replayed in a fresh interpreter per
round with `pytest.main` after `import pytest, openai` (so the SDK's own import is not
counted), trees interleaved. Inside that process the phases are timed with
`time.process_time` (CPU, user+sys): the plugin's import, the rest of hashreplay's import
(the engine, loaded at activation once a project opts in), `pytest_configure`,
`pytest_sessionstart`, the first replayed call above the median of the others (models
built and patterns compiled on first use), and `pytest_sessionfinish` (the usage log).
Their sum is what hashreplay adds to a run once, whatever its size (`suite.py` fits the same
thing from whole processes, with the machine's noise in it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, capture_bodies, fake_upstream
from _trees import interleaved, parse_trees
from suite import BASE_ENV, Scenario, make_project, only, pytest_run

TESTS = 20

#: Run in the recorded project; prints one JSON line of CPU seconds per phase.
PROBE = r"""
import contextlib, functools, io, json, sys, time
import pytest, openai, httpx2
T = time.process_time
t = T(); import hashreplay.plugin as plugin; t_plugin = T() - t
t = T(); import hashreplay.plugin.run, hashreplay.core.config; t_engine = T() - t
from hashreplay.engine import session
spent = {}
def timed(owner, name, label):
    original = getattr(owner, name)
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        start = T()
        try:
            return original(*args, **kwargs)
        finally:
            spent.setdefault(label, []).append(T() - start)
    setattr(owner, name, wrapper)
for hook in ("configure", "sessionstart", "sessionfinish"):
    timed(plugin, f"pytest_{hook}", hook)
timed(session.Session, "decide", "call")
with contextlib.redirect_stdout(io.StringIO()):
    code = pytest.main(["-q", "tests", "-p", "no:recording", "-p", "no:cassetter"])
assert code == 0, code
calls = spent["call"]
print(json.dumps({
    "file": plugin.__file__,
    "import: the plugin": t_plugin,
    "import: the engine": t_engine,
    "pytest_configure": spent["configure"][0],
    "pytest_sessionstart": spent["sessionstart"][0],
    "first call, above the others": calls[0] - sorted(calls[1:])[len(calls[1:]) // 2],
    "pytest_sessionfinish": spent["sessionfinish"][0],
}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tree", action="append", default=[], help="NAME=SRC_DIR (repeatable)")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    trees = parse_trees(args.tree, ROOT / "src")
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
    with tempfile.TemporaryDirectory(prefix="hr-phases-") as tmp:
        work = Path(tmp)
        projects = {}
        with fake_upstream() as fake:
            capture_bodies(fake, TESTS, stream=False)
            for i, (name, src) in enumerate(trees.items()):
                project = make_project(work / "p" / f"t{i}", Scenario(1, False), TESTS)
                env = {"INFERENCE_MODE": "record", "PYTHONPATH": src, "BENCH_URL": fake.url}
                pytest_run(project, env, only("hashreplay"), TESTS)
                projects[name] = project
            url = fake.url
        env = {
            **BASE_ENV,
            "PYTHONPYCACHEPREFIX": str(work / "pycache"),
            "INFERENCE_MODE": "replay",
            "BENCH_URL": url,
        }
        for warm, name in [(True, n) for n in trees] + [
            (False, n) for _, n in interleaved(list(trees), args.rounds)
        ]:
            done = subprocess.run(
                [sys.executable, "-c", PROBE],
                cwd=projects[name],
                env={**env, "PYTHONPATH": trees[name]},
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
                raise SystemExit(f"{name}: the probe failed ({done.returncode})")
            data = json.loads(done.stdout.strip().splitlines()[-1])
            if not Path(data.pop("file")).resolve().is_relative_to(Path(trees[name])):
                raise SystemExit(f"{name}: hashreplay was not imported from {trees[name]}")
            if not warm:
                for phase, seconds in data.items():
                    samples[name].setdefault(phase, []).append(seconds)
    names = list(trees)
    print(f"{args.rounds} interleaved rounds, {TESTS}-test replay run, CPU ms: median (min–max)")
    print("| phase | " + " | ".join(names) + " |")
    print("| --- |" + " --- |" * len(names))
    phases = list(samples[names[0]])
    for phase in phases:
        cells = []
        for name in names:
            values = [v * 1e3 for v in samples[name][phase]]
            cells.append(f"{statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f})")
        print(f"| {phase} | " + " | ".join(cells) + " |")
    totals = []
    for name in names:
        per_round = [sum(samples[name][p][r] for p in phases) * 1e3 for r in range(args.rounds)]
        totals.append(
            f"**{statistics.median(per_round):.1f}** ({min(per_round):.1f}–{max(per_round):.1f})"
        )
    print("| the run's own cost (sum, per round) | " + " | ".join(totals) + " |")


if __name__ == "__main__":
    main()
