"""The urllib3 and http.client adapters: installing and restoring, what each leaves to the
other, a moved seam, and the replayed-response building blocks (`_shared`)."""

from __future__ import annotations

import http.client
import io
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from hashreplay import Mode, test_context
from hashreplay.adapters import _shared, activate, deactivate
from hashreplay.adapters import stdlib as stdlib_adapter
from hashreplay.core.config import load_config
from hashreplay.core.errors import HashReplayWarning
from hashreplay.engine.http import ReplayPlan
from hashreplay.engine.session import Session
from tests.fakes.upstream import FakeUpstream
from tests.sdks import sdk

urllib3 = sdk("urllib3")
HTTPConnectionPool = sdk("urllib3.connectionpool").HTTPConnectionPool
HTTPResponse = sdk("urllib3.response").HTTPResponse

from hashreplay.adapters import urllib3 as urllib3_adapter  # noqa: E402  (imports urllib3)

TEST_ID = "tests/test_adapter.py::test_it"
CONN_METHODS = ("putrequest", "putheader", "endheaders", "send", "getresponse")


def session(root: Path, mode: Mode) -> Session:
    return Session(load_config(root, env={}, mode=str(mode)))


def recordings(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.json") if ".hashreplay" not in p.parts)


def test_activate_installs_both_and_deactivate_restores_the_originals(tmp_path: Path) -> None:
    urlopen = HTTPConnectionPool.urlopen
    conn = {name: getattr(http.client.HTTPConnection, name) for name in CONN_METHODS}
    activate(session(tmp_path, Mode.REPLAY))
    try:
        assert HTTPConnectionPool.urlopen is not urlopen
        assert HTTPConnectionPool.urlopen.__wrapped__ is urlopen  # type: ignore[attr-defined]
        assert all(getattr(http.client.HTTPConnection, n) is not conn[n] for n in CONN_METHODS)
        activate(session(tmp_path, Mode.RECORD))  # again: only the session changes
        assert HTTPConnectionPool.urlopen.__wrapped__ is urlopen  # type: ignore[attr-defined]
    finally:
        deactivate()
    assert HTTPConnectionPool.urlopen is urlopen
    assert {n: getattr(http.client.HTTPConnection, n) for n in CONN_METHODS} == conn
    assert not urllib3_adapter.is_installed() and not stdlib_adapter.is_installed()


def test_a_moved_seam_warns_and_patches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(HTTPResponse, "_handle_chunk")
    urlopen = HTTPConnectionPool.urlopen
    with pytest.warns(HashReplayWarning) as caught:
        urllib3_adapter.install(session(tmp_path, Mode.RECORD))
    try:
        message = str(caught[0].message)
        assert f"urllib3 {urllib3.__version__}" in message
        assert "_handle_chunk" in message
        assert "not recorded" in message
        assert HTTPConnectionPool.urlopen is urlopen
        assert not urllib3_adapter.is_installed()
    finally:
        urllib3_adapter.uninstall()


def test_without_a_session_requests_go_out_untouched(tmp_path: Path) -> None:
    stdlib_adapter.install(session(tmp_path, Mode.REPLAY))
    _shared.detach("stdlib")  # patched, but the session is gone (as between two runs)
    try:
        assert stdlib_adapter.is_installed() and _shared.active_session() is None
        with FakeUpstream() as fake, test_context(TEST_ID):
            assert (
                urllib3.PoolManager().request("GET", f"{fake.url}/plain").data
                == b"hello from fake upstream"
            )
            assert len(fake.calls) == 1
    finally:
        stdlib_adapter.uninstall()
    assert recordings(tmp_path) == []


def test_stdlib_adapter_leaves_urllib3_connections_to_urllib3(tmp_path: Path) -> None:
    """urllib3's connections subclass http.client's: only the urllib3 adapter decides them."""
    stdlib_adapter.install(session(tmp_path, Mode.RECORD))
    try:
        with FakeUpstream() as fake, test_context(TEST_ID):
            assert urllib3.PoolManager().request("GET", f"{fake.url}/plain").status == 200
    finally:
        stdlib_adapter.uninstall()
    assert recordings(tmp_path) == []


def test_a_urllib3_request_is_recorded_once_with_both_adapters(tmp_path: Path) -> None:
    s = session(tmp_path, Mode.RECORD)
    activate(s)
    try:
        with FakeUpstream() as fake, test_context(TEST_ID):
            assert urllib3.PoolManager().request("GET", f"{fake.url}/plain").status == 200
    finally:
        deactivate()
    assert s.stats.recorded == 1
    assert len(recordings(tmp_path)) == 1


# --- _shared ---------------------------------------------------------------------------------


def plan(chunks: list[bytes], *, streaming: bool, exc: str | None = None) -> ReplayPlan:
    headers = [("content-type", "text/plain"), ("content-length", "999")]
    return ReplayPlan(200, headers, chunks, streaming, exc, "boom" if exc else "")


def test_wire_bytes_frame_a_stream_chunk_for_chunk() -> None:
    data = _shared.wire_bytes(plan([b"ab", b"", b"cde"], streaming=True))
    head, body = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"content-length" not in head  # the recorded length no longer applies
    assert b"transfer-encoding: chunked" in head
    assert body == b"2\r\nab\r\n3\r\ncde\r\n0\r\n\r\n"


def test_a_replayed_httplib_response_reads_like_a_live_one() -> None:
    raw = _shared.httplib_response(
        plan([b"line 1\n", b"line 2\n"], streaming=True), "GET", "/", None
    )
    assert raw.status == 200 and raw.getheader("content-type") == "text/plain"
    assert list(raw) == [b"line 1\n", b"line 2\n"]
    assert raw.isclosed()


def test_a_broken_recording_raises_its_failure_after_what_arrived() -> None:
    for streaming in (True, False):
        raw = _shared.httplib_response(
            plan([b"partial"], streaming=streaming, exc="builtins.ConnectionResetError"),
            "GET",
            "/",
            lambda: ConnectionResetError("reset by peer"),
        )
        assert raw.read(7) == b"partial"
        with pytest.raises((ConnectionResetError, http.client.IncompleteRead)):
            raw.read()


def test_replay_file_raises_only_past_its_end() -> None:
    fp = _shared.ReplayFile(b"abc", lambda: TimeoutError("read timed out"))
    assert fp.readline() == b"abc"
    assert fp.read(0) == b""
    with pytest.raises(TimeoutError, match="read timed out"):
        fp.read(1)
    assert _shared.ReplayFile(b"", None).read() == b""


def test_rebuilt_exceptions_keep_the_recorded_message_and_attributes() -> None:
    from urllib3.exceptions import MaxRetryError, NewConnectionError, ReadTimeoutError

    exc = _shared.rebuild_exception(ReadTimeoutError, "Read timed out.", pool=None, url="/x")
    assert isinstance(exc, ReadTimeoutError)
    assert str(exc) == "Read timed out."
    assert exc.url == "/x"  # type: ignore[attr-defined]
    message = (
        "HTTPConnectionPool(host='h', port=1): Max retries exceeded with url: /x "
        "(Caused by NewConnectionError(\"HTTPConnection(host='h', port=1): Failed to "
        'establish a new connection: [Errno 111] Connection refused"))'
    )
    assert _shared.caused_by(message) == (
        "NewConnectionError",
        "HTTPConnection(host='h', port=1): Failed to establish a new connection: "
        "[Errno 111] Connection refused",
    )
    assert _shared.caused_by("no cause here") is None
    cls = _shared.find_exception_class("urllib3.exceptions.MaxRetryError", [], Exception)
    assert cls is MaxRetryError
    assert _shared.find_exception_class("x.y.Nope", [], NewConnectionError) is NewConnectionError
    assert _shared.find_exception_class("builtins.TimeoutError", [], Exception) is TimeoutError


def test_find_exception_class_never_imports_a_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "xml.dom.minidom", raising=False)  # never a skip
    found = _shared.find_exception_class("xml.dom.minidom.Oops", [], KeyError)
    assert found is KeyError
    assert "xml.dom.minidom" not in sys.modules


@pytest.mark.parametrize(
    ("body", "data", "sent"),
    [
        (None, b"", None),
        (b"x", b"x", b"x"),
        ("é", "é".encode(), "é"),
        (bytearray(b"ab"), b"ab", b"ab"),
        (io.BytesIO(b"file"), b"file", b"file"),
        (iter([b"a", "b"]), b"ab", b"ab"),
    ],
)
def test_body_bytes(body: Any, data: bytes, sent: Any) -> None:
    assert _shared.body_bytes(body) == (data, sent)


def test_no_warning_on_a_normal_install(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        activate(session(tmp_path, Mode.REPLAY))
    deactivate()


def test_an_adapter_whose_library_is_missing_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "urllib3" else real(name, *a)
    )
    monkeypatch.delitem(sys.modules, "urllib3")  # not installed: neither found nor imported
    urlopen = HTTPConnectionPool.urlopen
    activate(session(tmp_path, Mode.REPLAY))
    try:
        assert HTTPConnectionPool.urlopen is urlopen
        assert stdlib_adapter.is_installed()
    finally:
        deactivate()
    assert not stdlib_adapter.is_installed()
