"""The call layer (docs/design.md §2): a recorded call-layer value that names a type it must not build."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hashreplay import Mode, RecordingError, ReplayMiss, test_context
from hashreplay.adapters import activate, deactivate
from hashreplay.core.typed import TypeAllowlist, exception_from_json, from_jsonable
from tests.adapters import targets
from tests.adapters.test_callables import SPECS, TEST_ID
from tests.conftest import Recorder

Layer = Callable[[Mode], None]


@pytest.fixture
def layer(recorder: Recorder) -> Iterator[Layer]:
    def start(mode: Mode) -> None:
        deactivate()
        activate(recorder.start(mode, callables=SPECS))

    yield start
    deactivate()


@pytest.mark.parametrize(
    "dotted", ["builtins.KeyboardInterrupt", "builtins.SystemExit", "builtins.GeneratorExit"]
)
def test_a_recorded_base_exception_is_a_recording_error_not_an_abort(
    layer: Layer,
    recorder: Recorder,
    dotted: str,
) -> None:
    layer(Mode.RECORD)
    with test_context(TEST_ID), pytest.raises(targets.QuotaError):
        targets.Search("eu").fail(3)
    [path] = recorder.files()
    data = json.loads(path.read_text())
    data["response"]["exception"]["type"] = dotted
    path.write_text(json.dumps(data))
    layer(Mode.REPLAY)
    # the same rule as for HTTP recordings: a miss of this test, naming the file and type
    with test_context(TEST_ID), pytest.raises(ReplayMiss) as info:
        targets.Search("eu").fail(3)
    assert f"tests/recordings/{path.name}" in str(info.value)
    assert f"{dotted} is a BaseException that is not an Exception" in str(info.value)


def test_exception_from_json_refuses_base_exceptions() -> None:
    data = {"__exception__": "builtins.KeyboardInterrupt", "args": [], "message": ""}
    with pytest.raises(RecordingError, match="BaseException that is not an Exception"):
        exception_from_json(data, TypeAllowlist(), path=Path("r.json"))


def test_the_abstract_base_model_is_a_recording_error(
    layer: Layer,
    recorder: Recorder,
) -> None:
    layer(Mode.RECORD)
    with test_context(TEST_ID):
        targets.Search("eu").query("cats")
    [path] = recorder.files()
    data = json.loads(path.read_text())
    data["response"]["body"]["__type__"] = "pydantic.BaseModel"
    path.write_text(json.dumps(data))
    layer(Mode.REPLAY)
    with test_context(TEST_ID), pytest.raises(RecordingError) as info:
        targets.Search("eu").query("cats")
    assert str(path) in str(info.value) and "pydantic.BaseModel is abstract" in str(info.value)


def test_from_jsonable_base_model_directly() -> None:
    with pytest.raises(RecordingError, match="abstract"):
        from_jsonable({"__type__": "pydantic.BaseModel", "__data__": {"a": 1}}, TypeAllowlist())
