"""`hashreplay serve` options: upstream specs, routing, validation, and the CLI contract."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from hashreplay.server import cli
from hashreplay.server.cli import (
    ServeSettings,
    SettingsError,
    UnknownUpstream,
    Upstream,
    parse_upstream,
)
from hashreplay.server.wire import end_to_end


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("http://127.0.0.1:8000", Upstream(None, "http://127.0.0.1:8000")),
        ("https://llm.example.com/v1/", Upstream(None, "https://llm.example.com/v1")),
        ("openai=https://llm.example.com", Upstream("openai", "https://llm.example.com")),
        (" ollama = http://localhost:11434 ", Upstream("ollama", "http://localhost:11434")),
        ("a.b-c_d~e=http://x", Upstream("a.b-c_d~e", "http://x")),
    ],
)
def test_upstream_specs(spec: str, expected: Upstream) -> None:
    assert parse_upstream(spec) == expected


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("llm.example.com", "expected an http:// or https:// URL"),
        ("ftp://x", "expected an http:// or https:// URL"),
        ("openai=", "expected an http:// or https:// URL"),
        ("http://x/?key=1", "must have no query or fragment"),
        ("__hashreplay=http://x", "the name '__hashreplay' must start with a letter"),
        ("a b=http://x", "only letters, digits"),
        ("http://x:99999", "(?i)port out of range"),
    ],
)
def test_bad_upstream_specs_name_the_value(spec: str, problem: str) -> None:
    with pytest.raises(SettingsError, match=problem) as info:
        parse_upstream(spec)
    assert repr(spec) in str(info.value)


def test_routing_by_prefix_with_a_default() -> None:
    settings = ServeSettings(
        upstreams=(parse_upstream("http://default"), parse_upstream("oa=http://oa/v1"))
    )
    assert settings.route("/oa/chat/completions") == (settings.named["oa"], "/chat/completions")
    assert settings.route("/oa") == (settings.named["oa"], "/")
    assert settings.route("/oai/x") == (settings.default_upstream, "/oai/x")
    assert settings.route("/v1/models") == (settings.default_upstream, "/v1/models")


def test_routing_without_a_default() -> None:
    settings = ServeSettings(upstreams=(parse_upstream("oa=http://oa"),))
    with pytest.raises(UnknownUpstream, match=r"'/x/y'.*\(/oa/\).*bare --upstream URL"):
        settings.route("/x/y")
    assert ServeSettings().route("/v1/x") == (None, "/v1/x")  # replay needs no upstream


def test_settings_travel_to_workers_as_json() -> None:
    settings = ServeSettings(
        upstreams=(parse_upstream("http://a"), parse_upstream("n=http://b")),
        mode="record",
        workers=3,
        max_body_bytes=10,
        access_log=False,
    )
    again = ServeSettings.from_json(settings.to_json())
    assert again == settings
    assert again.named == {"n": Upstream("n", "http://b")}


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(SettingsError, match="'n' is given twice"):
        ServeSettings(upstreams=(parse_upstream("n=http://a"), parse_upstream("n=http://b")))


def test_hop_by_hop_and_connection_named_headers_are_dropped() -> None:
    headers = [
        ("Connection", "keep-alive, X-Private"),
        ("X-Private", "1"),
        ("Keep-Alive", "timeout=5"),
        ("Transfer-Encoding", "chunked"),
        ("TE", "trailers"),
        ("Trailer", "x"),
        ("Upgrade", "h2c"),
        ("Proxy-Authorization", "Basic x"),
        ("Proxy-Authenticate", "Basic"),
        ("Authorization", "Bearer sk-x"),
        ("Content-Type", "application/json"),
    ]
    assert end_to_end(headers, drop=("content-type",)) == [("Authorization", "Bearer sk-x")]


def test_configure_parser_has_every_option_with_its_default() -> None:
    parser = argparse.ArgumentParser()
    cli.configure_parser(parser)
    args = parser.parse_args([])
    assert vars(args) == {
        "upstream": [],
        "host": "127.0.0.1",
        "port": 8790,
        "mode": None,
        "recordings": None,
        "root": None,
        "workers": 1,
        "max_body_bytes": 32 * 1024 * 1024,
        "upstream_timeout": 300.0,
        "graceful_timeout": 30,
        "max_tests": 1000,
        "header_timeout": 30.0,
        "body_timeout": 120.0,
        "log_level": "info",
        "access_log": True,
    }
    args = parser.parse_args(["--upstream", "http://a", "--upstream", "b=http://b"])
    assert cli.settings_from_args(args).upstreams == (
        Upstream(None, "http://a"),
        Upstream("b", "http://b"),
    )


def test_command_line_paths_are_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    parser = argparse.ArgumentParser()
    cli.configure_parser(parser)
    settings = cli.settings_from_args(parser.parse_args(["--root", "proj", "--recordings", "recs"]))
    assert (settings.root, settings.recordings) == (
        str(tmp_path.resolve() / "proj"),
        str(tmp_path.resolve() / "recs"),
    )


def test_the_cli_module_imports_no_server_or_http_library() -> None:
    code = (
        "import sys, hashreplay.server.cli\n"
        "heavy = [m for m in ('uvicorn', 'starlette', 'httpx', 'httpx2', 'h11') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_python_dash_m_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hashreplay.server", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert "--upstream [NAME=]URL" in done.stdout
    assert "--max-body-bytes N" in done.stdout


def test_a_missing_extra_is_explained(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn now fails
    parser = argparse.ArgumentParser()
    cli.configure_parser(parser)
    assert cli.run(parser.parse_args(["--upstream", "http://a"])) == 2
    assert "pip install 'hashreplay[server]'" in capsys.readouterr().err
    monkeypatch.delitem(sys.modules, "uvicorn")
    monkeypatch.setitem(sys.modules, "httpx2", None)
    assert cli.run(parser.parse_args(["--upstream", "http://a"])) == 2
    assert "forwards with httpx2: pip install httpx2" in capsys.readouterr().err
