"""Secrets never reach a recording's bytes, through whole pytest runs against the fake upstream
(docs/design.md §7): a key split between stream events or raw chunks, a key in a parametrize
id, the names and shapes redaction knows (signatures, JWTs, lists of secrets, DSN passwords,
OAuth codes, over-long `key=` values)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.fakes.apis import sse_event
from tests.fakes.upstream import FakeUpstream, Scripted

pytest_plugins = ["pytester"]

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest -p no:asyncio"

[tool.hashreplay]
"""

#: a key of no known shape: only the request's own credential value reveals it
OWN_KEY = "acme-7f3k9q2w8e4r"
SHAPED = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx"


def _written(root: Path) -> bytes:
    """Every byte hashreplay wrote under the project (recordings and its own state)."""
    out = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and ("recordings" in path.parts or ".hashreplay" in path.parts):
            out.append(path.read_bytes())
    return b"\n".join(out)


def _recordings(root: Path) -> list[dict[str, object]]:
    return [
        json.loads(p.read_text())
        for p in sorted(root.rglob("recordings/*.json"))
        if not p.name.startswith("models-")
    ]


@pytest.fixture
def project(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    return pytester


# --- a key split between the pieces of a stream -----------------------------------------------

STREAM_APP = f"""
import os
import httpx

URL = os.environ["FAKE_URL"]
HEADERS = {{"Authorization": "Bearer {OWN_KEY}"}}

def read(path, **kw):
    with httpx.Client() as client:
        with client.stream("POST", URL + path, headers=HEADERS, **kw) as response:
            return [chunk for chunk in response.iter_raw()]

def test_sse():
    body = b"".join(read("/v1/chat/completions", json={{"model": "m", "stream": True}}))
    assert body.count(b"data:") == 6, body

def test_raw_chunks():
    body = b"".join(read("/v1/raw", content=b"x"))
    assert body.endswith(b" end"), body
"""


def _delta(text: str) -> bytes:
    return sse_event({"choices": [{"index": 0, "delta": {"content": text}}]})


def test_a_key_split_between_stream_events_or_chunks_is_never_written(
    project: pytest.Pytester, upstream: FakeUpstream
) -> None:
    project.makepyfile(test_stream=STREAM_APP)
    upstream.script(
        "POST",
        "/v1/chat/completions",
        Scripted(
            headers={"content-type": "text/event-stream"},
            frames=[
                _delta("your key is " + SHAPED[:12]),  # the shape split after `sk-proj-AbCd`
                _delta(SHAPED[12:] + " and"),
                _delta(" the echo of yours: " + OWN_KEY[:7]),  # the request's own key, split
                _delta(OWN_KEY[7:12]),
                _delta(OWN_KEY[12:] + " done"),
                b"data: [DONE]\n\n",
            ],
        ),
    )
    upstream.script(
        "POST",
        "/v1/raw",
        Scripted(
            headers={"content-type": "text/plain"},
            frames=[b"token=abcdefgh", b"ijklmnopqrstuvwxyz0123 and " + OWN_KEY[:9].encode(),
                    OWN_KEY[9:].encode() + b" end"],
        ),
    )  # fmt: skip
    project.runpytest("--inference-mode=record").assert_outcomes(passed=2)
    written = _written(project.path)
    for piece in (SHAPED[:12], SHAPED[12:], "abcdefgh", "ijklmnopqrstuvwxyz0123", OWN_KEY[:7],
                  OWN_KEY[7:12], OWN_KEY[12:], OWN_KEY[:9], OWN_KEY[9:]):  # fmt: skip
        assert piece.encode() not in written, piece
    sse, raw = sorted(_recordings(project.path), key=lambda r: r["request"]["endpoint"])  # type: ignore[index]
    events = sse["response"]["body"]  # type: ignore[index]
    # the stream keeps its events: the secret's text is cut where it was, the rest stays
    texts = [e["data"]["choices"][0]["delta"]["content"] for e in events[:5]]  # type: ignore[index]
    assert texts == [
        "your key is [secret removed]",
        " and",
        " the echo of yours: [secret removed]",
        "",
        " done",
    ]
    assert raw["response"]["body"] == [  # type: ignore[index]
        "token=[secret removed]",
        " and [secret removed]",
        " end",
    ]
    # replay reads what record wrote, event for event and chunk for chunk
    project.runpytest().assert_outcomes(passed=2)


# --- a key in a parametrize id -------------------------------------------------------------------

IDS_APP = f"""
import os
import httpx
import pytest

URL = os.environ["FAKE_URL"]
CASES = [("{SHAPED}", "one"), ("{OWN_KEY}", "two")]

@pytest.mark.parametrize(("key", "case"), CASES)
def test_with_key(key, case):
    response = httpx.post(URL + "/v1/chat/completions", json={{"model": "m", "messages": [
        {{"role": "user", "content": os.environ.get("MESSAGE", "hi") + case}}]}},
        headers={{"Authorization": "Bearer " + key}})
    assert response.status_code == 200
"""


def test_a_key_in_a_parametrize_id_is_never_written_and_replay_finds_the_file(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makepyfile(test_ids=IDS_APP)
    record = project.runpytest("--inference-mode=record", "-v")
    record.assert_outcomes(passed=2)
    written = _written(project.path)
    assert SHAPED.encode() not in written and OWN_KEY.encode() not in written
    ids = sorted(str(r["test_id"]) for r in _recordings(project.path))
    assert ids == [
        "test_ids.py::test_with_key[[secret removed]-one]",
        "test_ids.py::test_with_key[[secret removed]-two]",
    ]
    usage = json.loads((project.path / ".hashreplay" / "usage.json").read_text())
    assert sorted(usage["tests"]) == ids
    # replay computes the same redacted id, so the same file name
    project.runpytest().assert_outcomes(passed=2)
    from hashreplay.cli import main

    monkeypatch.chdir(project.path)
    assert main(["verify"]) == 0  # the name is the hash of the stored (redacted) id
    # a miss report names the redacted id, and a command that runs without the key
    monkeypatch.setenv("MESSAGE", "changed")
    miss = project.runpytest()
    miss.assert_outcomes(failed=2)
    # (pytest's own lines, the node id and the test's locals, are pytest's to print)
    report = [
        line
        for line in miss.stdout.lines
        if line.startswith(("hashreplay", "  test:", "  to record", "  nearest", "  differs"))
    ]
    assert len(report) >= 8
    assert not [line for line in report if SHAPED in line or OWN_KEY in line]
    miss.stdout.re_match_lines(
        [
            re.escape("  test:      test_ids.py::test_with_key[[secret removed]-one]"),
            re.escape("  to record it: INFERENCE_MODE=record-if-missing pytest ")
            + "test_ids.py::test_with_key$",
        ]
    )


# --- more names and shapes ---------------------------------------------------------------------

NAMES_APP = """
import os
import httpx

URL = os.environ["FAKE_URL"]

def test_names_and_shapes():
    body = {
        "model": "m",
        "max_tokens": 64,
        "signature": "sig-0a1b2c3d4e5f",
        "x-amz-signature": "amz-0a1b2c3d4e5f",
        "jwt": "jwt-0a1b2c3d4e5f",
        "bearer": "bearer-0a1b2c3d4e5f",
        "secrets": ["first-secret-0a1b", "second-secret-2c3d"],
        "dsn": "postgres://app:dsn-pass-0a1b2c@db:5432/main",
        "note": "call with key=LONGKEY" + "Q" * 300 + " please",
    }
    assert httpx.post(URL + "/v1/echo-json", json=body).status_code == 200
    form = "grant_type=authorization_code&code=oauth-code-0a1b2c3d&client_id=app"
    response = httpx.post(URL + "/oauth/token", content=form,
                          headers={"content-type": "application/x-www-form-urlencoded"})
    assert response.status_code == 200
"""


def test_more_names_and_shapes_never_reach_the_file(
    project: pytest.Pytester, upstream: FakeUpstream
) -> None:
    project.makepyfile(test_names=NAMES_APP)
    echoed = {
        "jwt": "resp-jwt-9z8y7x6w",
        "secrets": ["resp-secret-9z8y", "resp-secret-7x6w"],
        "error": {"code": "E42", "detail": "redis://:resp-pass-9z8y@cache:6379 refused"},
        "usage": {"prompt_tokens": 3, "total_tokens": 5},
    }
    upstream.script("POST", "/v1/echo-json", Scripted(json=echoed))
    upstream.script("POST", "/oauth/token", Scripted(json={"access_token": "at-9z8y7x6w5v"}))
    project.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    written = _written(project.path)
    for secret in ("sig-0a1b2c3d4e5f", "amz-0a1b2c3d4e5f", "jwt-0a1b2c3d4e5f",
                   "bearer-0a1b2c3d4e5f", "first-secret-0a1b", "second-secret-2c3d",
                   "dsn-pass-0a1b2c", "QQQQQQQQ", "oauth-code-0a1b2c3d", "resp-jwt-9z8y7x6w",
                   "resp-secret-9z8y", "resp-secret-7x6w", "resp-pass-9z8y", "at-9z8y7x6w5v"):  # fmt: skip
        assert secret.encode() not in written, secret
    # counts, versions and error codes are data, not secrets
    for kept in (b'"max_tokens": 64', b'"prompt_tokens": 3', b'"code": "E42"', b'"key_version"'):
        assert kept in written, kept
    assert b"postgres://app:[secret removed]@db:5432/main" in written
    project.runpytest().assert_outcomes(passed=1)


# --- the replay placeholder key never reaches a live upstream ----------------------------------

PLACEHOLDER_APP = """
import os
import openai
import pytest

@pytest.fixture(scope="session")
def client():
    # made in the first test, a replay test: OPENAI_API_KEY is keyless replay's placeholder
    return openai.OpenAI(base_url=os.environ["FAKE_URL"] + "/v1", max_retries=0)

def test_replay_first(client):
    assert client.api_key == "hashreplay-replay-placeholder"

@pytest.mark.hashreplay(mode="MODE")
def test_then_records(client):
    client.chat.completions.create(model="gpt-fake-1", messages=[{"role": "user", "content": "hi"}])
"""


@pytest.mark.parametrize("mode", ["record", "record-if-missing", "live"])
def test_a_session_client_made_in_replay_never_sends_the_placeholder_upstream(
    project: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    project.makepyfile(test_session_client=PLACEHOLDER_APP.replace("MODE", mode))
    run = project.runpytest()
    run.assert_outcomes(passed=1, failed=1)
    run.stdout.re_match_lines(
        [
            r"hashreplay: test_session_client\.py::test_then_records: this request carries the "
            r"replay placeholder 'hashreplay-replay-placeholder' as its credential and was not "
            rf"sent to 127\.0\.0\.1 \({mode} mode\)\. .*Set the provider's key variable "
            r"\(OPENAI_API_KEY, .*\) to a real key before pytest starts, or create the client "
            r"inside the test, then run the test again"
        ]
    )
    assert upstream.calls == []  # nothing reached the upstream
    assert not list(project.path.rglob("recordings/*.json"))  # and nothing was recorded


def test_the_placeholder_names_the_providers_own_variable() -> None:
    from hashreplay.core.network import placeholder_keys, placeholder_refusal

    keys = placeholder_keys(True)
    names = keys["hashreplay-replay-placeholder"]
    assert "OPENAI_API_KEY" in names and "AWS_DEFAULT_REGION" not in names
    assert keys["AKIAHASHREPLAYPLACEHOLDER"] == ("AWS_ACCESS_KEY_ID",)
    assert "us-east-1" not in keys  # a region is no credential
    why = placeholder_refusal(
        "hashreplay-replay-placeholder",
        names,
        "https://api.anthropic.example/v1/messages",
        "record",
    )
    assert "Set ANTHROPIC_API_KEY to a real key" in why
    assert "not sent to api.anthropic.example (record mode)" in why
