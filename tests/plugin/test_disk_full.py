"""A full disk: when the disk fills up, the summary counts only the files written and
names every one that failed (the first ten, and a count of the rest)."""

from __future__ import annotations

import pytest

from tests.fakes.upstream import FakeUpstream

pytest_plugins = ["pytester"]

# the disk fills up after ten files' data: the eleventh file's fsync and every later one
# fail (directories, synced once per batch of files, have no data to place and still sync)
FULL_DISK_CONFTEST = """
import os
import stat
import threading

_real, _count, _lock = os.fsync, [0], threading.Lock()

def _fsync(fd):
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        return _real(fd)
    with _lock:
        _count[0] += 1
        n = _count[0]
    if n > 10:
        raise OSError(28, "No space left on device")
    return _real(fd)

os.fsync = _fsync
"""

TESTS = """
import os
import httpx
import pytest

@pytest.mark.parametrize("n", range(30))
def test_call(n):
    r = httpx.post(os.environ["FAKE_URL"] + "/v1/chat/completions",
                   json={"model": "gpt-fake-1", "messages": [{"role": "user", "content": f"m{n}"}]})
    assert r.status_code == 200
"""


def test_a_full_disk_is_counted_and_every_failure_named(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.setenv("INFERENCE_MODE", "record")
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\naddopts = "-p no:hypothesispytest"\n')
    pytester.makeconftest(FULL_DISK_CONFTEST)
    pytester.makepyfile(test_calls=TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    written = sorted((pytester.path / "recordings").glob("*.json"))
    assert len(written) == 10
    result.stdout.re_match_lines(
        [
            r"hashreplay: recording .*\.json: 20 recordings could not be written .*",
            r"  recording .*recordings/[0-9a-f]{32}\.json: cannot write the recording: "
            r".*No space left on device.*",
            r"  … and 10 more",
        ]
    )
    named = [line for line in result.outlines if line.startswith("  recording ")]
    assert len(named) == 10
    assert not any(path.name in line for path in written for line in named)
    result.stdout.fnmatch_lines(["hashreplay: 0 replayed, 10 recorded, 0 missed (record)"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
