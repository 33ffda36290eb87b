"""The migration off pytest-recording in docs/usage.md ("Moving off pytest-recording"), step
by step, with the commands the guide gives: vcrpy records the suite through pytest-recording
(hashreplay installed but not on), `hashreplay init`, `hashreplay import vcr` (dry run, then
for real), `hashreplay verify`, the review in git, the suite replayed offline with
pytest-recording out of the run (`-p no:recording` stands in for `pip uninstall`) under
`--strict-markers` with its `vcr` markers still on the tests, `vcr_config` deleted, the
cassettes deleted with `git rm`, and the suite still passing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hashreplay.cli import main
from tests.fakes.upstream import FakeUpstream
from tests.imports.test_import_vcr_e2e import texts

pytest_plugins = ["pytester"]

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest --strict-markers"
asyncio_default_fixture_loop_scope = "function"
"""

CONFTEST = """
import pytest

@pytest.fixture(scope="module")
def vcr_config():
    return {"filter_headers": ["authorization"], "match_on": ["method", "uri"]}
"""

APP_TESTS = """
import os
import openai
import pytest

def chat(text):
    client = openai.OpenAI(base_url=os.environ["FAKE_URL"] + "/v1", api_key=os.environ["KEY"],
                           max_retries=0)
    r = client.chat.completions.create(model="gpt-fake-1",
                                       messages=[{"role": "user", "content": text}])
    return r.choices[0].message.content

@pytest.mark.vcr
@pytest.mark.parametrize("topic", ["weather/today", "news"])
def test_chat(topic):
    print("TEXT:", chat(topic))

class TestAgent:
    @pytest.mark.vcr
    def test_two_turns(self):
        print("TEXT:", chat("plan"), chat("act"))
"""


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    return done.stdout


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


def test_the_migration_guide_works_step_by_step(
    pytester: pytest.Pytester,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("pytest_recording")
    root = pytester.path
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.setenv("KEY", "sk-migrating-0123456789abcdefghij")
    for name in ("INFERENCE_MODE", "HASHREPLAY_ROOT", "PYTEST_ADDOPTS"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    (root / "tests").mkdir()
    (root / "tests" / "conftest.py").write_text(CONFTEST)
    (root / "tests" / "test_app.py").write_text(APP_TESTS)

    # before: a pytest-recording suite; hashreplay is installed but not on (it writes nothing)
    recorded = pytester.runpytest("--record-mode=once", "-s")
    recorded.assert_outcomes(passed=3)
    assert not list(root.rglob("recordings"))
    assert not (root / ".hashreplay").exists()
    cassettes = root / "tests" / "cassettes" / "test_app"
    assert sorted(p.name for p in cassettes.iterdir()) == [
        "TestAgent.test_two_turns.yaml",
        "test_chat[news].yaml",
        "test_chat[weather-today].yaml",
    ]
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "vcr")

    # hashreplay init
    code, out = _cli(capsys, "init")
    assert code == 0, out
    assert "pyproject.toml: added [tool.hashreplay]" in out

    # hashreplay import vcr --dry-run tests; hashreplay import vcr tests
    code, out = _cli(capsys, "import", "vcr", "--dry-run", "tests")
    assert code == 0, out
    assert out.splitlines()[0] == "Test ids: 3 collected by pytest --collect-only"
    assert out.rstrip().endswith("; dry run: nothing written")
    assert not list(root.rglob("recordings"))
    code, out = _cli(capsys, "import", "vcr", "tests")
    assert code == 0, out
    assert "  tests/test_app.py::test_chat[weather/today]" in out.splitlines()
    assert "  tests/test_app.py::TestAgent::test_two_turns" in out.splitlines()
    assert out.splitlines()[-1] == (
        "Summary: 4 imported from 3 files into 3 recordings (3 new, 0 unchanged, "
        "0 overwritten, 0 kept), 0 blobs, 0 skipped"
    )

    # review: hashreplay verify; git add -A tests && git diff --cached --stat; git diff --cached
    code, out = _cli(capsys, "verify")
    assert code == 0, out
    assert out.splitlines()[-1] == "Summary: 0/3 files with problems"
    _git(root, "add", "-A", "tests")
    stat = _git(root, "diff", "--cached", "--stat")
    assert "3 files changed" in stat
    diff = _git(root, "diff", "--cached")
    assert "echo: weather/today" in diff  # shown as a conversation (git-setup's textconv)
    stored = "".join(p.read_text() for p in (root / "tests" / "recordings").glob("*.json"))
    assert "sk-migrating" not in stored

    # pip uninstall pytest-recording (vcrpy too: nothing imports it); pytest (replay, offline,
    # markers still there)
    upstream.stop()
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:recording")  # as if uninstalled
    replayed = pytester.runpytest_subprocess("-s")  # a fresh process: nothing of vcrpy loaded
    replayed.assert_outcomes(passed=3)
    replayed.stdout.fnmatch_lines(["hashreplay: 4 replayed, 0 recorded, 0 missed (replay)"])
    replayed.stdout.no_fnmatch_line("*PytestUnknownMarkWarning*")
    assert texts(replayed) == texts(recorded)
    # re-running the import is safe, and collects without pytest-recording too
    code, out = _cli(capsys, "import", "vcr", "tests")
    assert code == 0, out
    assert "(0 new, 3 unchanged, 0 overwritten, 0 kept)" in out

    # vcr_config moved (its match_on lives in each imported file) and deleted
    (root / "tests" / "conftest.py").unlink()
    # git rm -r -q tests/cassettes; pytest
    _git(root, "rm", "-r", "-q", "tests/cassettes")
    assert not cassettes.exists()
    after = pytester.runpytest_subprocess("-s")
    after.assert_outcomes(passed=3)
    after.stdout.fnmatch_lines(["hashreplay: 4 replayed, 0 recorded, 0 missed (replay)"])
    assert texts(after) == texts(recorded)


def test_the_vcr_marker_is_accepted_only_in_a_project_that_opted_in(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without pytest-recording, `--strict-markers` rejects `vcr` until the project opts in
    to hashreplay, which then registers it as a marker that does nothing."""
    for name in ("INFERENCE_MODE", "HASHREPLAY_ROOT", "PYTEST_ADDOPTS"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_m="import pytest\n\n@pytest.mark.vcr\ndef test_x():\n    pass\n")
    untouched = pytester.runpytest_subprocess("-p", "no:recording")
    assert untouched.ret == pytest.ExitCode.INTERRUPTED
    untouched.stdout.fnmatch_lines(["*'vcr' not found in `markers` configuration option*"])
    (pytester.path / "pyproject.toml").write_text(PYPROJECT + "\n[tool.hashreplay]\n")
    opted_in = pytester.runpytest_subprocess("-p", "no:recording")
    opted_in.assert_outcomes(passed=1)
    listed = pytester.runpytest_subprocess("-p", "no:recording", "--markers")
    listed.stdout.fnmatch_lines(["@pytest.mark.vcr(*cassettes, **config): pytest-recording's*"])
