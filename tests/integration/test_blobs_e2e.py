"""Blobs end to end (docs/design.md §13): two tests send the same 1 MB image through the openai SDK;
one blob is stored, the recordings stay small, replay works offline, and `verify`, `prune`,
`rehash` and `normalize` treat the blob as part of the store."""

from __future__ import annotations

import json
import os

import openai
import pytest

from hashreplay import Mode, test_context
from hashreplay.cli import main
from hashreplay.core.errors import BodyTooLarge
from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream

pytest_plugins = ["pytester"]

VISION_TESTS = """
import base64, os
import openai

IMAGE = "data:image/png;base64," + base64.b64encode(
    b"\\x89PNG\\r\\n\\x1a\\n" + bytes(range(256)) * 3000).decode()  # about 1 MB

def ask(question):
    client = openai.OpenAI(base_url=os.environ["FAKE_URL"] + "/v1", api_key="sk-none",
                           max_retries=0)
    r = client.chat.completions.create(model="gpt-fake-1", messages=[{"role": "user", "content": [
        {"type": "text", "text": question},
        {"type": "image_url", "image_url": {"url": IMAGE}}]}])
    return r.choices[0].message.content

def test_describe():
    assert ask("describe") == "echo: describe"

def test_count():
    assert ask("count") == "echo: count"
"""

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest"
asyncio_default_fixture_loop_scope = "function"

# the project opts in to hashreplay (docs/design.md §16 Activation)
[tool.hashreplay]
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
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_vision.py").write_text(VISION_TESTS)
    return pytester


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


def test_one_blob_for_two_tests_small_recordings_offline_replay_and_verify(
    project: pytest.Pytester,
    upstream: FakeUpstream,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = project.path
    project.runpytest("-p", "hashreplay", "--inference-mode=record").assert_outcomes(passed=2)
    files = sorted((root / "tests" / "recordings").glob("*.json"))
    assert len(files) == 2
    assert all(f.stat().st_size < 4096 for f in files), [f.stat().st_size for f in files]
    blobs = sorted((root / "recordings" / "blobs").iterdir())
    assert len(blobs) == 1
    assert blobs[0].stat().st_size > 1_000_000
    for f in files:
        part = json.loads(f.read_text())["request"]["body"]["messages"][0]["content"][1]
        assert part["image_url"]["url"]["__blob__"] == blobs[0].name
        assert part["image_url"]["url"]["type"] == "image/png"

    upstream.stop()
    project.runpytest("-p", "hashreplay").assert_outcomes(passed=2)  # replay, offline

    assert cli(capsys, "verify", "--root", str(root)) == (0, "Summary: 0/2 files with problems\n")
    code, shown = cli(capsys, "show", "--root", str(root), str(files[0]))
    assert code == 0
    assert "iVBOR" not in shown  # the show view never prints the image
    before = {f: f.read_bytes() for f in files}
    assert cli(capsys, "rehash", "--root", str(root))[0] == 0
    assert cli(capsys, "normalize", "--root", str(root))[0] == 0
    assert {f: f.read_bytes() for f in files} == before

    blobs[0].unlink()
    code, out = cli(capsys, "verify", "--root", str(root))
    assert code == 1
    assert f"blob {blobs[0]} is missing" in out
    assert "Summary: 2/2 files with problems" in out


def test_prune_deletes_only_unreferenced_blobs(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    root = project.path
    project.runpytest("-p", "hashreplay", "--inference-mode=record").assert_outcomes(passed=2)
    blob_dir = root / "recordings" / "blobs"
    (kept,) = blob_dir.iterdir()
    stray = blob_dir / ("0" * 32)
    stray.write_bytes(b"left over by a deleted recording")
    project.runpytest("-p", "hashreplay").assert_outcomes(passed=2)  # a replay run: usage log
    os.utime(stray, (0, 0))
    code, out = cli(capsys, "prune", "--root", str(root), "--dry-run")
    assert code == 0, out
    assert "Would prune: " in out
    assert stray.exists()
    code, out = cli(capsys, "prune", "--root", str(root))
    assert code == 0, out
    assert not stray.exists()
    assert kept.exists()
    assert "(no recording refers to this blob)" in out


def test_a_body_over_the_ceiling_fails_the_call_through_the_sdk_without_retries(
    recorder: Recorder, upstream: FakeUpstream
) -> None:
    recorder.start(Mode.RECORD, max_body_bytes=100)
    client = openai.OpenAI(base_url=f"{upstream.url}/v1", api_key="sk-none")  # retries on
    test_id = "tests/test_a.py::test_big"
    with test_context(test_id), pytest.raises(BodyTooLarge) as info:
        client.chat.completions.create(
            model="gpt-fake-1", messages=[{"role": "user", "content": "hi"}]
        )
    # the answer passes the limit while it arrives, before the whole exchange is staged
    # (a request body over it would be refused before it is sent)
    assert str(info.value).startswith(
        f"hashreplay: not recorded: the response body of http://localhost/v1/chat/completions "
        f"in test {test_id} passed max_body_bytes (100) while it arrived ("
    )
    assert "raise it in [tool.hashreplay] of pyproject.toml (max_body_bytes = " in str(info.value)
    assert len(upstream.calls) == 1
    assert recorder.files() == []
