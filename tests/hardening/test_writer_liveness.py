"""The temp-file sweep asks whether a writer still runs without ever signalling it
(docs/design.md §4, writes are atomic): on POSIX with `os.kill(pid, 0)`; on Windows, where
`os.kill(pid, 0)` sends CTRL_C_EVENT to the process group, not at all: a writer counts as
alive, and its temp file is swept only once it is older than `STALE_AFTER`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hashreplay.core import atomic


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_on_windows_no_signal_is_sent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    dead = _dead_pid()
    monkeypatch.setattr(sys, "platform", "win32")

    def no_signals(pid: int, sig: int) -> None:
        raise AssertionError(f"os.kill({pid}, {sig}) on Windows")

    monkeypatch.setattr(os, "kill", no_signals)
    assert atomic._alive(dead) is True
    young = tmp_path / f".a.json.{dead}.abcdefgh.tmp"
    old = tmp_path / f".b.json.{dead}.abcdefgh.tmp"
    for path in (young, old):
        path.write_bytes(b"{")
    now = time.time()
    os.utime(young, (now - 60, now - 60))  # past the grace time: a dead POSIX writer's goes
    os.utime(old, (now - atomic.STALE_AFTER - 60,) * 2)
    assert atomic.sweep_temp_files([tmp_path]) == [old]
    assert young.exists() and not old.exists()


@pytest.mark.skipif(sys.platform == "win32", reason="the POSIX probe")
def test_on_posix_a_dead_pid_is_dead_and_a_live_one_alive() -> None:
    assert atomic._alive(_dead_pid()) is False
    assert atomic._alive(os.getppid()) is True
