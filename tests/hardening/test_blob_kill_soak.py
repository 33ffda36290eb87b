"""kill -9 soak for blobs (docs/design.md §4 and §13): a pytest run recording large bodies
(each goes to `recordings/blobs/`) is killed at random points, several rounds. After each
kill, git would stage no temp file and every blob holds exactly the bytes its name says;
the next start sweeps what the killed writers left. Bounded: a fixed number of rounds, a
time limit on each wait; only 127.0.0.1 is contacted."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import xxhash

from hashreplay.core.atomic import is_temp_name
from tests.fakes.upstream import FakeUpstream

ROUNDS = 6
#: How long to wait for a run to start writing blobs before giving up on the round.
START_LIMIT = 60.0
SEED = 20260417

RECORDING_TESTS = """
import os, secrets, httpx2

def test_large_bodies():
    for n in range(10_000):  # killed long before the end
        big = f"{n}:" + secrets.token_hex(500_000)  # 1 MB: one blob for both ways
        answer = httpx2.post(os.environ["FAKE_URL"] + "/echo", json={"q": big}, timeout=30)
        assert answer.status_code == 200
"""
QUIET_TESTS = """
def test_nothing():
    pass  # makes no call: the run exists for its start-up sweep
"""


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True, check=True
    ).stdout


def pytest_argv() -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "hashreplay", "-p", "no:cacheprovider", "-q"]


def blob_files(blobs: Path) -> list[Path]:
    return (
        sorted(p for p in blobs.iterdir() if not p.name.startswith(".")) if blobs.is_dir() else []
    )


def blob_temp_files(root: Path) -> list[str]:
    """Temp files of blobs being written (a recording's target ends in `.json`), wherever
    a writer puts them."""
    found: list[str] = []
    for directory in (root / ".hashreplay" / "tmp", root / "recordings" / "blobs"):
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        found += [n for n in names if is_temp_name(n) and ".json." not in n]
    return found


def run_and_kill(root: Path, env: dict[str, str], delay: float | None) -> int:
    """Start a recording run and kill -9 it: `delay` seconds after it wrote its first blob
    of the round, or (`delay` None) the moment a blob's temp file exists (in mid-write);
    returns how many blobs the round added."""
    blobs = root / "recordings" / "blobs"
    before = len(blob_files(blobs))
    child = subprocess.Popen(
        pytest_argv(), cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + START_LIMIT
        while not (blob_temp_files(root) if delay is None else len(blob_files(blobs)) > before):
            assert child.poll() is None, f"the recording run ended early ({child.returncode})"
            assert time.monotonic() < deadline, "the recording run wrote no blob in time"
            time.sleep(0.001)
        time.sleep(delay or 0.0)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    return len(blob_files(blobs)) - before


def test_kill_9_while_recording_blobs_leaves_nothing_git_would_stage(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    root = tmp_path / "project"
    (root / "tests").mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        "[tool.hashreplay]\n\n[tool.pytest.ini_options]\n"
        'addopts = "-p no:hypothesispytest -p no:asyncio"\n'
    )
    (root / "tests" / "test_big.py").write_text(RECORDING_TESTS)
    git(root, "init", "-q")
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("HASHREPLAY_ROOT", "PYTEST_ADDOPTS")},
        "FAKE_URL": upstream.url,
        "INFERENCE_MODE": "record",
        # absolute: the runs start in the project, and must import the hashreplay under test
        "PYTHONPATH": os.pathsep.join(
            str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p
        ),
    }
    chance = random.Random(SEED)
    blobs = root / "recordings" / "blobs"
    temp_dir = root / ".hashreplay" / "tmp"
    written = 0
    left: set[Path] = set()  # temp files the killed runs left
    for round_no in range(ROUNDS):
        # odd rounds at a random point, even ones while a blob is being written
        delay = chance.uniform(0.0, 1.0) if round_no % 2 else None
        written += run_and_kill(root, env, delay)
        staged = git(root, "add", "-A", "--dry-run")
        status = git(root, "status", "--porcelain", "--untracked-files=all")
        assert ".tmp" not in staged and ".tmp" not in status, (staged, status)
        assert ".hashreplay" not in staged
        assert not [p for p in root.joinpath("recordings").rglob("*") if is_temp_name(p.name)]
        for blob in blob_files(blobs):  # never a partial blob: its bytes are its name
            assert xxhash.xxh3_128_hexdigest(blob.read_bytes()) == blob.name, blob
        left.update(p for p in temp_dir.iterdir() if is_temp_name(p.name))
    assert written >= ROUNDS // 2

    # each start sweeps what the killed runs left (once older than a live write takes)
    assert left, "the runs killed in mid-write left their temp files"
    leftovers = [p for p in left if p.exists()]
    old_style = blobs / f".{'a' * 32}.999999999.abcdefgh.tmp"  # beside the blob: older runs
    old_style.write_bytes(b"partial")
    stale = time.time() - 3600
    for path in [*leftovers, old_style]:
        os.utime(path, (stale, stale))
    (root / "tests" / "test_big.py").write_text(QUIET_TESTS)
    quiet = subprocess.run(
        pytest_argv(), cwd=root, env=env, capture_output=True, text=True, check=False
    )
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert not [p for p in [*leftovers, old_style] if p.exists()]
    print(f"{ROUNDS} kills, {written} blobs written, {len(left)} temp files left and swept")


@pytest.mark.parametrize("where", ["recordings/blobs", "recordings"])
def test_status_names_a_temp_file_left_in_the_store(tmp_path: Path, where: str) -> None:
    from hashreplay.core.paths import find_strays

    directory = tmp_path / where
    directory.mkdir(parents=True)
    temp = directory / f".{'b' * 32}.123.abcdefgh.tmp"
    temp.write_bytes(b"x")
    (strays,) = find_strays([tmp_path], tmp_path)
    assert strays.path == temp
    assert strays.problem == "temp file left by an interrupted write; safe to delete"
