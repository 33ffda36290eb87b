"""A pytest-recording suite of the shapes real suites have migrates with the three commands of
docs/usage.md ("Moving off pytest-recording") and no edit to its code: a conftest that imports
vcr, registers a custom persister through `pytest_recording_configure` and names it (with
`filter_headers` and `decode_compressed_response`) in `vcr_config`; tests that request the
`vcr` fixture. Recorded by pytest-recording against the local fake (hashreplay installed but
not on), `hashreplay init`, `hashreplay import vcr tests`, then `pip uninstall
pytest-recording` (`-p no:recording`): every test passes offline with vcrpy kept. With vcrpy
gone too (a `vcr` that raises ModuleNotFoundError first on PYTHONPATH), the suite's own
`import vcr` cannot work: the import says so, shows pytest's error, and keeps going."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hashreplay.cli import main
from tests.fakes.upstream import FakeUpstream
from tests.imports.test_import_vcr_e2e import texts

pytest_plugins = ["pytester"]

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest -p no:asyncio --strict-markers"
"""

CONFTEST = """
import pytest
import vcr
from vcr.persisters.filesystem import FilesystemPersister

class AuditedPersister(FilesystemPersister):
    saved = []

    @classmethod
    def save_cassette(cls, cassette_path, cassette_dict, serializer):
        cls.saved.append(str(cassette_path))
        super().save_cassette(cassette_path, cassette_dict, serializer)

def pytest_recording_configure(config, vcr):
    vcr.register_persister(AuditedPersister)

@pytest.fixture(scope="module")
def vcr_config():
    return {
        "filter_headers": ["authorization"],
        "decode_compressed_response": True,
        "persister": AuditedPersister,
    }
"""

TESTS = """
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
def test_counts_what_it_played(vcr):
    print("TEXT:", chat("one"), chat("two"))
    assert len(vcr.requests) == 2
    assert all(r["status"]["code"] == 200 for r in vcr.responses)
    if vcr.write_protected:  # replaying, as pytest-recording did with --record-mode=none
        assert vcr.play_count == 2 and vcr.all_played

@pytest.mark.vcr
@pytest.mark.parametrize("topic", ["a/b", "c"])
def test_reads_the_request(vcr, topic):
    print("TEXT:", chat(topic))
    assert vcr.requests[0].method == "POST"
    assert vcr.requests[0].path.endswith("/chat/completions")

@pytest.mark.block_network
@pytest.mark.vcr
def test_blocked_but_answered(vcr):
    print("TEXT:", chat("blocked"))
"""


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


def _suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, fake: str) -> Path:
    pytest.importorskip("pytest_recording")
    monkeypatch.setenv("FAKE_URL", fake)
    monkeypatch.setenv("KEY", "sk-migrating-0123456789abcdefghij")
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    for name in ("INFERENCE_MODE", "HASHREPLAY_ROOT", "PYTEST_ADDOPTS"):
        monkeypatch.delenv(name, raising=False)
    root = pytester.path
    pytester.makepyprojecttoml(PYPROJECT)
    (root / "tests").mkdir()
    (root / "tests" / "conftest.py").write_text(CONFTEST)
    (root / "tests" / "test_agent.py").write_text(TESTS)
    return root


def test_the_suite_migrates_with_the_three_commands_and_no_edit(
    pytester: pytest.Pytester,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = _suite(pytester, monkeypatch, upstream.url)
    recorded = pytester.runpytest_subprocess("--record-mode=once", "-s")
    recorded.assert_outcomes(passed=4)
    baseline = pytester.runpytest_subprocess("--record-mode=none", "-s")
    baseline.assert_outcomes(passed=4)  # what pytest-recording passed
    assert len(list((root / "tests" / "cassettes" / "test_agent").iterdir())) == 4
    sources = {p: p.read_bytes() for p in root.rglob("*.py")}

    code, out = _cli(capsys, "init")
    assert code == 0, out
    code, out = _cli(capsys, "import", "vcr", "tests")
    assert code == 0, out
    assert out.splitlines()[0] == "Test ids: 4 collected by pytest --collect-only"
    assert (
        "Note: the suite imports vcr itself (tests/conftest.py:3, tests/conftest.py:4): keep "
        "vcrpy installed when you `pip uninstall pytest-recording`"
    ) in out
    assert "(4 new, 0 unchanged, 0 overwritten, 0 kept)" in out

    upstream.stop()
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:recording")  # pip uninstall pytest-recording
    replayed = pytester.runpytest_subprocess("-s")
    replayed.assert_outcomes(passed=4)
    replayed.stdout.fnmatch_lines(["hashreplay: 5 replayed, 0 recorded, 0 missed (replay)"])
    replayed.stdout.no_fnmatch_line("*PytestUnknownMarkWarning*")
    assert texts(replayed) == texts(recorded)
    # its --record-mode still works, mapped to the mode
    legacy = pytester.runpytest_subprocess("--record-mode=none")
    legacy.assert_outcomes(passed=4)
    assert {p: p.read_bytes() for p in root.rglob("*.py")} == sources  # no edit to its code


def test_with_vcrpy_gone_the_import_shows_why_the_suite_cannot_be_collected(
    pytester: pytest.Pytester,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = _suite(pytester, monkeypatch, upstream.url)
    pytester.runpytest_subprocess("--record-mode=once").assert_outcomes(passed=4)
    code, out = _cli(capsys, "init")
    assert code == 0, out
    blocker = root.parent / f"{root.name}-no-vcrpy"
    (blocker / "vcr").mkdir(parents=True)
    (blocker / "vcr" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'vcr'\", name='vcr')\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(blocker), os.environ["PYTHONPATH"]]))
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:recording")

    code, out = _cli(capsys, "import", "vcr", "tests")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("Test ids: guessed from pytest-recording's layout")
    assert f"not collected: pytest --collect-only in {root} failed (exit 4)" in lines[0]
    said = lines.index("pytest --collect-only said:")
    assert lines[said + 1].startswith("  ImportError while loading conftest")
    assert "  E   ModuleNotFoundError: No module named 'vcr'" in lines[said + 1 : said + 13]
    assert any(line.startswith("Note: the suite imports vcr itself") for line in lines)
    # the layout's guess still imports every cassette
    assert "(4 new, 0 unchanged, 0 overwritten, 0 kept)" in out

    # the suite's own `import vcr` fails without vcrpy: hashreplay does not pretend otherwise
    upstream.stop()
    gone = pytester.runpytest_subprocess()
    assert gone.ret == pytest.ExitCode.USAGE_ERROR
    gone.stderr.fnmatch_lines(["*ModuleNotFoundError: No module named 'vcr'"])
