"""The engine's one decision on what is an answer (docs/design.md, "Only answers are
recorded"): a live exchange with no response head is not recorded and is counted; a
call-layer target's exception is its answer and is recorded like any return value."""

from __future__ import annotations

import json
from pathlib import Path

from hashreplay import Mode
from hashreplay.core.config import load_config
from hashreplay.core.format import RecordedException, RecordedResponse
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.session import Session

TEST = "tests/test_x.py::test_y"


def session(root: Path, mode: Mode, **overrides: object) -> Session:
    s = Session(load_config(root, env={}, mode=mode.value, **overrides))
    s.begin_test(TEST)
    return s


def test_an_exchange_without_a_head_is_not_recorded_and_is_counted(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.RECORD)
    prep = s.prepare(IncomingRequest("GET", "http://h/v1/x", [], b""), test_id=TEST)
    refused = LiveExchange(None, [], [], exception=ConnectionRefusedError("refused"))
    assert s.record(prep, refused) is None
    assert s.stats.not_recorded == 1
    assert s.stats.recorded == 0
    assert list(tmp_path.rglob("*.json")) == []


def test_an_error_status_is_an_answer(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.RECORD)
    prep = s.prepare(IncomingRequest("GET", "http://h/v1/x", [], b""), test_id=TEST)
    path = s.record(prep, LiveExchange(503, [("content-type", "text/plain")], [b"busy"]))
    assert path is not None
    assert json.loads(path.read_text())["response"]["status"] == 503
    assert s.stats.not_recorded == 0


def test_a_call_layer_exception_is_its_answer(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.RECORD)
    prep = s.prepare_call("pkg.mod:fetch", ["q"], {}, test_id=TEST)
    raised = RecordedResponse(
        status=None,
        is_exception=True,
        exception=RecordedException(type="builtins.ConnectionError", message="down"),
    )
    path = s.record(prep, raised)
    assert path is not None
    stored = json.loads(path.read_text())["response"]
    assert stored["exception"]["type"] == "builtins.ConnectionError"
    assert s.stats.not_recorded == 0
