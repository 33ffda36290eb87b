"""A test file inside a recordings directory (its recordings would nest as
`…/recordings/recordings/`, inside a store) fails its tests with an error naming the
directory and what to do, in every mode; nothing is written in the store it lies in, and
never an INTERNALERROR (docs/design.md §4: where a test's recordings live)."""

from __future__ import annotations

import pytest

from tests.fakes.upstream import FakeUpstream

pytest_plugins = ["pytester"]

TESTS = """
import os, httpx2

def test_asks():
    r = httpx2.post(os.environ["FAKE_URL"] + "/echo", json={"q": "hi"})
    assert r.status_code == 200, r.text
"""
PYPROJECT = """
[tool.hashreplay]

[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest -p no:asyncio"
"""


@pytest.fixture
def project(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    monkeypatch.delenv("HASHREPLAY_ROOT", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    pytester.makepyprojecttoml(PYPROJECT)
    (pytester.path / "tests" / "recordings").mkdir(parents=True)
    (pytester.path / "tests" / "recordings" / "test_app.py").write_text(TESTS)
    return pytester


@pytest.mark.parametrize("mode", ["record", "record-if-missing", "replay"])
def test_a_test_file_inside_a_recordings_directory_fails_by_name(
    project: pytest.Pytester, mode: str
) -> None:
    store = project.path / "tests" / "recordings"
    result = project.runpytest("-p", "hashreplay", f"--inference-mode={mode}")
    out = result.stdout.str()
    assert "INTERNALERROR" not in out, out
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ test_asks _*",
            f"*test file tests/recordings/test_app.py lies inside the recordings directory "
            f"{store}: its recordings would go to {store / 'recordings'}*move the test file "
            f"out of {store}*",
        ]
    )
    assert not (store / "recordings").exists()
    assert sorted(p.name for p in store.iterdir() if p.name != "__pycache__") == ["test_app.py"]
