"""Where files go and which ones replay refuses: temp files, test ids from a header,
symlinks (docs/design.md §4)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hashreplay.core.atomic import is_temp_name, sweep_temp_files, write_bytes_atomic
from hashreplay.core.config import load_config
from hashreplay.core.errors import RecordingError
from hashreplay.core.format import Recording
from hashreplay.core.paths import find_strays
from hashreplay.core.store import Store, parse_recording
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.session import Session

HASH = "a" * 32


@pytest.fixture
def root(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    return project


@pytest.fixture
def store(root: Path) -> Store:
    return Store(root, root / "recordings")


# --- test ids from a header ------------------------------------------------------------------


@pytest.mark.parametrize(
    "test_id",
    [
        ".git/hooks/test_x.py::t",
        "tests/.git/test_x.py::t",
        ".hashreplay/test_x.py::t",
        "~/test_x.py::t",
        "~root/test_x.py::t",
        "%2e%2e/%2e%2e/test_x.py::t",
        "tests/%2E%2E/test_x.py::t",
        "..%2f..%2ftest_x.py::t",
        "C:/test_x.py::t",
        "tests\\..\\..\\test_x.py::t",
    ],
)
def test_hostile_test_ids_go_to_the_common_directory(store: Store, test_id: str) -> None:
    assert store.dir_for(test_id) == store.common_dir


def test_ordinary_test_ids_keep_their_directory(store: Store, root: Path) -> None:
    assert store.dir_for("tests/a/test_x.py::t[.git]") == root / "tests" / "a" / "recordings"
    assert store.dir_for("tests/a/../b/test_x.py::t") == root / "tests" / "b" / "recordings"


def record(root: Path, test_id: str) -> Path:
    session = Session(load_config(root, env={}, mode="record"))
    prep = session.prepare(IncomingRequest("GET", "http://h/v1/models/x", [], b""), test_id=test_id)
    return session.record(prep, LiveExchange(200, [("content-type", "application/json")], [b"{}"]))


def test_a_git_hooks_test_id_creates_no_directory_there(root: Path) -> None:
    path = record(root, ".git/hooks/test_x.py::t")
    assert path.parent == root / "recordings"
    assert not (root / ".git").exists()


# --- symlinks --------------------------------------------------------------------------------


def test_a_recording_symlinked_outside_the_root_is_refused(store: Store, root: Path) -> None:
    outside = root.parent / "elsewhere.json"
    real = record(root, "tests/test_x.py::t")
    outside.write_bytes(real.read_bytes())
    real.unlink()
    real.symlink_to(outside)
    with pytest.raises(RecordingError) as info:
        store.read_first("tests/test_x.py::t", real.stem)
    assert str(real) in str(info.value)
    assert f"is a symlink to {outside}, outside the project root" in str(info.value)


def test_a_symlink_inside_the_root_is_followed(store: Store, root: Path) -> None:
    real = record(root, "tests/test_x.py::t")
    moved = root / "kept.json"
    real.rename(moved)
    real.symlink_to(moved)
    found = store.read_first("tests/test_x.py::t", real.stem)
    assert found is not None and found[0] == real


def test_strays_name_symlinks_and_temp_files(root: Path) -> None:
    real = record(root, "tests/test_x.py::t")
    outside = root.parent / "outside-recordings"
    outside.mkdir()
    (root / "lib").mkdir()
    (root / "lib" / "recordings").symlink_to(outside, target_is_directory=True)
    (real.parent / "link.json").symlink_to(root.parent / "x.json")
    temp = real.parent / f".{real.name}.123.abcd1234.tmp"
    temp.write_bytes(b"{")
    strays = {s.path.name: s.problem for s in find_strays([root], root)}
    assert "outside the project root" in strays["recordings"]
    assert "outside the project root" in strays["link.json"]
    assert strays[temp.name].startswith("temp file left by an interrupted write")
    assert real.name not in strays


# --- temp files ------------------------------------------------------------------------------


KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from hashreplay.core.atomic import write_bytes_atomic
    from hashreplay.core.store import Store
    from tests.unit.test_store import make_recording

    original = Path.replace

    def slow_replace(self, target):
        print("READY", flush=True)
        time.sleep(30)
        return original(self, target)

    Path.replace = slow_replace
    root = Path(sys.argv[1])
    store = Store(root, root / "recordings")
    path = store.path_for("tests/test_x.py::t", sys.argv[2])
    write_bytes_atomic(path, store.dump(make_recording()), store.temp_dir)
    """
)


def kill_a_writer(root: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(root), HASH],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"READY\n"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=10)
        if child.stdout is not None:
            child.stdout.close()


def test_a_killed_writer_leaves_nothing_git_would_stage(root: Path) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    kill_a_writer(root)
    leftovers = [p for p in root.rglob("*") if p.is_file() and is_temp_name(p.name)]
    assert leftovers, "the writer was killed after writing its temp file"
    assert all(".hashreplay" in p.parts for p in leftovers)
    staged = subprocess.run(
        ["git", "add", "-A", "--dry-run"], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    assert ".tmp" not in staged
    assert find_strays([root], root) == []


def test_the_sweep_removes_dead_writers_files_only(root: Path) -> None:
    kill_a_writer(root)
    temp_dir = root / ".hashreplay" / "tmp"
    [dead] = list(temp_dir.iterdir())
    live = temp_dir / f".{HASH}.json.{os.getpid()}.abcdefgh.tmp"
    live.write_bytes(b"{")
    other = temp_dir / "not-ours.tmp"
    other.write_bytes(b"x")
    old = time.time() - 30
    for path in (dead, live, other):
        os.utime(path, (old, old))
    store = Store(root, root / "recordings")
    assert store.sweep_temp_files() == [dead]
    assert live.exists() and other.exists()


def test_a_young_temp_file_of_a_dead_pid_is_kept(tmp_path: Path) -> None:
    """It may belong to a writer in another pid namespace sharing the directory."""
    young = tmp_path / f".{HASH}.json.999999999.abcdefgh.tmp"
    young.write_bytes(b"{")
    assert sweep_temp_files([tmp_path]) == []


def test_without_a_state_directory_temp_files_go_beside_the_file(root: Path) -> None:
    (root / ".hashreplay").write_text("not a directory")  # .hashreplay/tmp cannot be made
    store = Store(root, root / "recordings")
    path = store.path_for("tests/test_x.py::t", HASH)
    write_bytes_atomic(path, store.dump(read_any_recording(root)), store.temp_dir)
    assert store.temp_dir is None
    assert path.exists()
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def read_any_recording(root: Path) -> Recording:
    other = root / "other"
    other.mkdir()
    path = record(other, "tests/test_x.py::t")
    return parse_recording(path.read_bytes(), path)
