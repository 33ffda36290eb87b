"""`hashreplay import vcr` end to end: a pytest-recording project records openai calls
against the fake upstream with real vcrpy; its cassettes are imported; the same tests then
pass under the hashreplay plugin in replay mode with the fake stopped, with the same answers,
streams included, and importing again changes nothing."""

from __future__ import annotations

import pytest

from hashreplay.cli import main
from tests.fakes.upstream import FakeUpstream

pytest_plugins = ["pytester"]

APP_TESTS = """
import os
import openai
import pytest

def client():
    return openai.OpenAI(base_url=os.environ["FAKE_URL"] + "/v1", api_key=os.environ["KEY"],
                         max_retries=0)

def chat(text):
    r = client().chat.completions.create(
        model="gpt-fake-1", messages=[{"role": "user", "content": text}])
    return r.choices[0].message.content

@pytest.mark.vcr
def test_chat():
    print("TEXT:", chat("hello"))

@pytest.mark.vcr
def test_same_request_twice():
    print("TEXT:", chat("again"), chat("again"))

@pytest.mark.vcr
@pytest.mark.parametrize("word", ["one", "two"])
def test_stream(word):
    s = client().chat.completions.create(
        model="gpt-fake-1", messages=[{"role": "user", "content": word}], stream=True)
    print("TEXT:", word, "".join(c.choices[0].delta.content or "" for c in s if c.choices))

class TestEmbeddings:
    @pytest.mark.vcr
    def test_embed(self):
        r = client().embeddings.create(model="emb-fake-1", input=["a b c"])
        print("TEXT:", r.data[0].embedding[:3])
"""

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest"
asyncio_default_fixture_loop_scope = "function"
markers = ["vcr: pytest-recording's marker"]

# the project opts in to hashreplay (docs/design.md §16 Activation)
[tool.hashreplay]
"""


def texts(result: pytest.RunResult) -> list[str]:
    return sorted(line[line.index("TEXT:") :] for line in result.outlines if "TEXT:" in line)


def test_a_pytest_recording_project_imports_and_replays_offline(
    pytester: pytest.Pytester,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.setenv("KEY", "sk-recorded-0123456789abcdefghij")
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    monkeypatch.delenv("HASHREPLAY_ROOT", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_app.py").write_text(APP_TESTS)

    recorded = pytester.runpytest("-p", "no:hashreplay", "--record-mode=once", "-s")
    recorded.assert_outcomes(passed=5)
    cassettes = sorted((pytester.path / "tests" / "cassettes" / "test_app").iterdir())
    assert [c.name for c in cassettes] == [
        "TestEmbeddings.test_embed.yaml",
        "test_chat.yaml",
        "test_same_request_twice.yaml",
        "test_stream[one].yaml",
        "test_stream[two].yaml",
    ]
    assert "sk-recorded" in (cassettes[1]).read_text()  # vcrpy keeps the key; we must not

    capsys.readouterr()
    code = main(["import", "vcr", "--root", str(pytester.path), str(pytester.path / "tests")])
    report = capsys.readouterr()
    assert code == 0, report.err
    assert report.out.splitlines()[-1] == (
        "Summary: 6 imported from 5 files into 5 recordings (5 new, 0 unchanged, "
        "0 overwritten, 0 kept), 0 blobs, 0 skipped"
    )
    assert "  tests/test_app.py::TestEmbeddings::test_embed" in report.out
    files = sorted((pytester.path / "tests" / "recordings").glob("*.json"))
    assert len(files) == 5
    stored = "".join(f.read_text() for f in files)
    assert "sk-recorded" not in stored
    assert '"later_responses"' in stored  # the repeated request is one recorded sequence
    assert '"stream_format": "sse"' in stored

    upstream.stop()
    replayed = pytester.runpytest("-p", "hashreplay", "-p", "no:recording", "-s")
    replayed.assert_outcomes(passed=5)
    replayed.stdout.fnmatch_lines(["hashreplay: 6 replayed, 0 recorded, 0 missed (replay)"])
    assert texts(replayed) == texts(recorded)
    assert len(texts(recorded)) == 5

    before = {f: f.read_bytes() for f in files}
    code = main(["import", "vcr", "--root", str(pytester.path), str(pytester.path / "tests")])
    assert code == 0
    assert "(0 new, 5 unchanged, 0 overwritten, 0 kept)" in capsys.readouterr().out
    assert {f: f.read_bytes() for f in files} == before
