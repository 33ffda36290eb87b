"""What one owner per test changes where the user sees it, through real pytest runs: a
polling loop under `repeat = "last"` records every poll in record-if-missing and replays
them in order; a drift run of a multi-turn test whose upstream changed nothing but its ids
shows no drift, while a changed shape still does (docs/design.md §14, §15)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.fakes.upstream import FakeUpstream, Scripted

pytest_plugins = ["pytester"]

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest -p no:randomly -p no:cacheprovider"

[tool.hashreplay]
{extra}
"""


@pytest.fixture
def project(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-owner-test-0123456789")
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    return pytester


def recordings(root: Path) -> list[dict[str, Any]]:
    return [orjson.loads(p.read_bytes()) for p in sorted(root.glob("recordings/*.json"))]


POLLING = """
import os
import httpx

URL = os.environ["FAKE_URL"] + "/v1/jobs/poll"

def test_polls_until_done():
    seen = []
    for _ in range(5):
        seen.append(httpx.post(URL, json={"job": "j1"}, timeout=10).json()["status"])
        if seen[-1] == "done":
            break
    print("SEEN", seen)
    assert seen == ["pending", "pending", "done"]
"""


def status(state: str) -> Scripted:
    return Scripted(json={"status": state})


def test_a_polling_loop_is_recorded_whole_and_replays_in_order(
    project: pytest.Pytester, upstream: FakeUpstream
) -> None:
    project.makepyprojecttoml(PYPROJECT.format(extra='repeat = "last"'))
    project.makepyfile(test_jobs=POLLING)
    upstream.script("POST", "/v1/jobs/poll", status("pending"), status("pending"), status("done"))
    result = project.runpytest("--inference-mode=record-if-missing", "-s")
    result.assert_outcomes(passed=1)
    assert "SEEN ['pending', 'pending', 'done']" in result.stdout.str()
    result.stdout.fnmatch_lines(["*0 replayed, 3 recorded, 0 missed*"])
    (file,) = recordings(project.path)
    later = [r["body"]["status"] for r in file["later_responses"]]
    assert [file["response"]["body"]["status"], *later] == ["pending", "pending", "done"]
    upstream.stop()
    replayed = project.runpytest("-s")  # replay mode, nothing live
    replayed.assert_outcomes(passed=1)
    replayed.stdout.fnmatch_lines(["*3 replayed, 0 recorded, 0 missed*"])


MULTI_TURN = """
import os
import httpx

URL = os.environ["FAKE_URL"] + "/v1/responses"

def test_two_turns():
    first = httpx.post(URL, json={"model": "m", "input": "hi"}, timeout=10).json()
    body = {"model": "m", "input": "more", "previous_response_id": first["id"]}
    second = httpx.post(URL, json=body, timeout=10).json()
    job = httpx.get(os.environ["FAKE_URL"] + "/v1/jobs/" + second["id"], timeout=10)
    assert job.status_code == 200
"""


def turn(response_id: str, text: Any = "ok") -> Scripted:
    return Scripted(json={"id": response_id, "output_text": text})


def script_turns(upstream: FakeUpstream, suffix: str, text: Any = "ok") -> None:
    upstream.reset()
    upstream.script(
        "POST",
        "/v1/responses",
        turn(f"resp_{suffix}1", text),
        turn(f"resp_{suffix}2", text),
    )
    upstream.script("GET", f"/v1/jobs/resp_{suffix}2", Scripted(json={"status": "done"}))


def test_a_multi_turn_test_with_new_ids_upstream_shows_no_drift(
    project: pytest.Pytester, upstream: FakeUpstream
) -> None:
    project.makepyprojecttoml(PYPROJECT.format(extra=""))
    project.makepyfile(test_turns=MULTI_TURN)
    script_turns(upstream, "AAAA1111")
    project.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    before = recordings(project.path)
    assert len(before) == 3

    script_turns(upstream, "ZZZZ9999")  # the same shapes, other ids
    result = project.runpytest("--hashreplay-drift")
    result.assert_outcomes(passed=1)
    assert result.ret == 0, result.stdout.str()
    drift = orjson.loads((project.path / ".hashreplay" / "drift.json").read_bytes())
    assert drift["drifted"] == {}, drift
    assert recordings(project.path) == before  # a drift run writes nothing

    script_turns(upstream, "YYYY8888", text=7)  # a real change of shape
    changed = project.runpytest("--hashreplay-drift")
    assert changed.ret == 1
    drift = orjson.loads((project.path / ".hashreplay" / "drift.json").read_bytes())
    (entries,) = drift["drifted"].values()
    assert {e["kind"] for e in entries} == {"drift"}
