"""The next step of a miss answered by `hashreplay serve` (`server/cli.py`)."""

from __future__ import annotations

import shlex

from hashreplay.core.errors import ReplayMiss
from hashreplay.server.cli import (
    ServeSettings,
    parse_upstream,
    record_command,
    with_serve_next_step,
)

REPORT = """hashreplay: no recording for POST http://proxy/v1/chat/completions (replay mode)
  test:      tests/chat.test.js::says hello
  hash:      0123
  to record it: INFERENCE_MODE=record-if-missing pytest tests/chat.test.js::says hello"""


def test_the_command_keeps_the_proxy_options_and_quotes_them() -> None:
    settings = ServeSettings(
        upstreams=(
            parse_upstream("https://api.provider-a.example.com/v1"),
            parse_upstream("claude=https://api.provider-b.example.com"),
        ),
        port=9000,
        root="/work/my app",
    )
    command = record_command(settings)
    assert shlex.split(command) == [
        "hashreplay",
        "serve",
        "--mode",
        "record-if-missing",
        "--upstream",
        "https://api.provider-a.example.com/v1",
        "--upstream",
        "claude=https://api.provider-b.example.com",
        "--port",
        "9000",
        "--root",
        "/work/my app",
    ]
    assert "'/work/my app'" in command


def test_the_pytest_line_is_replaced_and_the_test_id_is_quoted() -> None:
    miss = ReplayMiss(REPORT, test_id="tests/chat.test.js::says hello", request_hash="0123")
    settings = ServeSettings(upstreams=(parse_upstream("http://127.0.0.1:8000"),))
    done = with_serve_next_step(miss, settings)
    lines = done.report.splitlines()
    assert lines[:3] == REPORT.splitlines()[:3]
    assert lines[3] == (
        "  to record it: hashreplay serve --mode record-if-missing --upstream "
        "http://127.0.0.1:8000, then run the client again (it sends "
        "'X-HashReplay-Test-Id: tests/chat.test.js::says hello', as now)"
    )
    assert (done.test_id, done.request_hash) == (miss.test_id, miss.request_hash)
    # the quoted header is one shell word
    assert shlex.split(lines[3].split("sends ", 1)[1].removesuffix(", as now)"))[0] == (
        "X-HashReplay-Test-Id: tests/chat.test.js::says hello"
    )


def test_a_request_without_a_test_id() -> None:
    report = REPORT.replace("pytest tests/chat.test.js::says hello", "pytest").replace(
        "tests/chat.test.js::says hello", "(no test)"
    )
    done = with_serve_next_step(ReplayMiss(report, test_id=None, request_hash="0"), ServeSettings())
    assert done.report.splitlines()[-1] == (
        "  to record it: hashreplay serve --mode record-if-missing --upstream URL-OF-THE-API, "
        "then run the client again"
    )
