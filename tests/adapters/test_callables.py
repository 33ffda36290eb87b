"""The call layer: typed round trips, iterators, exceptions, no double recording."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import openai
import pytest

from hashreplay import ConfigError, Mode, RecordingError, ReplayMiss, test_context
from hashreplay.adapters import callables, deactivate
from tests.adapters import targets
from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream
from tests.guards import ConnectGuard

TEST_ID = "tests/test_tools.py::test_tools"
SPECS = [
    "tests.adapters.targets:Search.query",
    "tests.adapters.targets:Search.fail",
    "tests.adapters.targets:Search.version",
    "tests.adapters.targets:Search.named",
    "tests.adapters.targets:embed",
    "tests.adapters.targets:tokens",
    "tests.adapters.targets:astream",
    "tests.adapters.targets:aanswer",
]


@pytest.fixture
def layer(recorder: Recorder):  # type: ignore[no-untyped-def]
    from hashreplay.adapters import activate

    def start(mode: Mode) -> None:
        deactivate()
        session = recorder.start(mode, callables=SPECS)
        activate(session)

    yield start
    deactivate()


def run_all() -> dict[str, object]:
    """Calls every kind of target; returns what the application sees."""
    out: dict[str, object] = {}
    with test_context(TEST_ID):
        results = targets.Search("eu").query("cats", limit=2)
        out["results"] = results
        out["results_type"] = type(results)
        out["hit_type"] = type(results.hits[0])
        out["embedding"] = targets.embed("hello")
        out["tokens"] = list(targets.tokens("a b c"))
        out["static"] = targets.Search.version()
        out["classmethod"] = targets.Search.named("x")
        with pytest.raises(targets.QuotaError) as info:
            targets.Search("eu").fail(5)
        out["error"] = (type(info.value), str(info.value), info.value.args)

        async def agen() -> list[dict[str, object]]:
            return [item async for item in targets.astream("x y z")]

        out["astream"] = asyncio.run(agen())
        out["aanswer"] = asyncio.run(targets.aanswer("why")).query
    return out


def test_round_trips_replay_without_calling_the_targets(layer, recorder: Recorder) -> None:  # type: ignore[no-untyped-def]
    layer(Mode.RECORD)
    targets.CALLS.clear()
    live = run_all()
    assert len(targets.CALLS) == 8
    layer(Mode.REPLAY)
    targets.CALLS.clear()
    replayed = run_all()
    assert targets.CALLS == []  # nothing ran: every answer came from a recording
    assert replayed["results_type"] is targets.Results
    assert replayed["hit_type"] is targets.Hit
    assert replayed["results"].hits == live["results"].hits  # type: ignore[attr-defined]
    assert replayed["results"].request_id.startswith("req_")  # type: ignore[attr-defined]
    assert replayed["embedding"] == targets.Embedding(text="hello", vector=[0.5, 0.5])
    assert isinstance(replayed["embedding"], targets.Embedding)
    for key in ("tokens", "static", "classmethod", "error", "astream", "aanswer"):
        assert replayed[key] == live[key], key
    assert replayed["error"][1] == "quota exceeded: 5 tokens used"  # type: ignore[index]
    files = recorder.files()
    assert len(files) == 8
    stored = {
        json.loads(f.read_text())["request"]["endpoint"]: json.loads(f.read_text()) for f in files
    }
    query = stored["tests.adapters.targets:Search.query"]
    assert query["request"]["method"] == "CALL"
    assert query["request"]["body"] == {"args": ["cats"], "kwargs": {"limit": 2}}  # no self
    assert query["response"]["body"]["__type__"] == "tests.adapters.targets.Results"
    stream = stored["tests.adapters.targets:astream"]["response"]
    assert stream["is_streaming"] is True and stream["stream_format"] == "values"
    assert [c["word"] for c in stream["body"]] == ["x", "y", "z"]


def test_instances_differing_only_in_self_share_a_recording(layer) -> None:  # type: ignore[no-untyped-def]
    layer(Mode.RECORD)
    with test_context(TEST_ID):
        targets.Search("eu").query("dogs")
    layer(Mode.REPLAY)
    with test_context(TEST_ID):
        assert targets.Search("us").query("dogs").query == "dogs"


def test_miss_raises_with_the_report(layer) -> None:  # type: ignore[no-untyped-def]
    layer(Mode.REPLAY)
    with test_context(TEST_ID), pytest.raises(ReplayMiss) as info:
        targets.embed("never recorded")
    assert "hashreplay: no recording for CALL call:tests.adapters.targets:embed" in str(info.value)


def test_sdk_method_as_target_records_once_not_twice(
    upstream: FakeUpstream, recorder: Recorder
) -> None:
    from hashreplay.adapters import activate

    spec = "openai.resources.chat.completions.Completions.create"
    spec = spec.rsplit(".", 2)[0] + ":" + ".".join(spec.rsplit(".", 2)[1:])
    activate(recorder.start(Mode.RECORD, callables=[spec]))
    c = openai.OpenAI(base_url=f"{upstream.url}/v1", api_key="sk-x", max_retries=0)
    with test_context(TEST_ID):
        live = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        streamed = c.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "a b"}], stream=True
        )
        live_chunks = [ch.choices[0].delta.content for ch in streamed if ch.choices]
    files = recorder.files()
    assert len(files) == 2  # the call layer's; the HTTP underneath was not recorded again
    assert {json.loads(f.read_text())["request"]["method"] for f in files} == {"CALL"}
    url = upstream.url
    upstream.stop()
    activate(recorder.start(Mode.REPLAY, callables=[spec]))
    c = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-other", max_retries=0)
    with ConnectGuard() as guard, test_context(TEST_ID):
        replayed = c.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        chunks = c.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "a b"}], stream=True
        )
        replayed_chunks = [ch.choices[0].delta.content for ch in chunks if ch.choices]
    assert guard.attempts == []
    assert type(replayed) is type(live)
    assert replayed.choices[0].message.content == live.choices[0].message.content == "echo: hi"
    assert replayed.id.startswith("rec-")
    assert replayed_chunks == live_chunks
    deactivate()


def test_unpatch_restores_the_originals() -> None:
    original = targets.Search.__dict__["query"]
    static = targets.Search.__dict__["version"]
    callables.patch_callables(
        ["tests.adapters.targets:Search.query", "tests.adapters.targets:Search.version"]
    )
    assert targets.Search.__dict__["query"] is not original
    callables.unpatch_callables()
    assert targets.Search.__dict__["query"] is original
    assert targets.Search.__dict__["version"] is static


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("tests.adapters.targets.Search.query", "missing the ':' between module and name"),
        ("tests.adapters.no_such_module:f", "cannot import module 'tests.adapters.no_such_module'"),
        ("tests.adapters.targets:Nope.query", "tests.adapters.targets has no attribute 'Nope'"),
        (
            "tests.adapters.targets:Search.nope",
            "tests.adapters.targets:Search has no attribute 'nope'",
        ),
        ("tests.adapters.targets:CALLS", "'CALLS' is not callable"),
    ],
)
def test_bad_entries_are_config_errors_naming_the_entry(spec: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        callables.patch_callables([spec])
    assert f"callables entry {spec!r}: {problem}" in str(info.value)
    callables.unpatch_callables()


def test_unsafe_type_in_a_recording_is_refused(layer, recorder: Recorder) -> None:  # type: ignore[no-untyped-def]
    layer(Mode.RECORD)
    with test_context(TEST_ID):
        targets.embed("x")
    path = recorder.files()[0]
    data = json.loads(path.read_text())
    data["response"]["body"]["__type__"] = "os.system"
    path.write_text(json.dumps(data))
    layer(Mode.REPLAY)
    with test_context(TEST_ID), pytest.raises(RecordingError) as info:
        targets.embed("x")
    message = str(info.value)
    assert str(path) in message
    assert "refusing to import type 'os.system'" in message


def test_type_that_no_longer_exists_names_file_and_type(layer, recorder: Recorder) -> None:  # type: ignore[no-untyped-def]
    layer(Mode.RECORD)
    with test_context(TEST_ID):
        targets.embed("y")
    path: Path = recorder.files()[0]
    path.write_text(path.read_text().replace("targets.Embedding", "targets.Renamed"))
    layer(Mode.REPLAY)
    with test_context(TEST_ID), pytest.raises(RecordingError) as info:
        targets.embed("y")
    assert str(path) in str(info.value)
    assert "'tests.adapters.targets.Renamed' no longer exists" in str(info.value)
