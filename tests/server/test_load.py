"""A bounded run of benchmarks/serve_load.py: correctness under concurrency, never timing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.server.conftest import REPO


@pytest.mark.parametrize(("requests", "workers"), [(300, 1), (160, 2)])
def test_concurrent_load_loses_no_write_and_replays_every_request(
    requests: int, workers: int
) -> None:
    script = REPO / "benchmarks" / "serve_load.py"
    command = [
        sys.executable, str(script), "--requests", str(requests), "--concurrency", "16",
        "--workers", str(workers), "--time-limit", "90", "--json",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=150, check=False)
    assert done.returncode in (0, 1), done.stderr
    result = json.loads(done.stdout)
    assert result["record"]["errors"] == 0, result["record"]["first_errors"]
    assert result["record"]["ok"] == requests
    assert result["files"] == {
        "files": requests,
        "parsed": requests,
        "missing": 0,
        "temp_files": 0,
        "unreadable": [],
    }
    assert result["replay"]["errors"] == 0, result["replay"]["first_errors"]
    assert result["replay"]["ok"] == requests
    if workers == 1:  # with several workers, stats are per worker process
        assert result["replay_stats"] == {"replayed": requests, "missed": 0, "errors": {}}
    assert result["ok"] is True
    assert done.returncode == 0
