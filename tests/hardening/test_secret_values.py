"""Redaction by value (docs/design.md §7): the credential values a request carries never reach a written byte."""

from __future__ import annotations

import base64
import json
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hashreplay.core.config import load_config
from hashreplay.core.constants import SECRET_PLACEHOLDER
from hashreplay.core.redact import Redactor
from hashreplay.core.secret_values import (
    NO_SECRETS,
    SecretValues,
    SeenSecrets,
    request_secrets,
)
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.session import Session
from hashreplay.engine.usage import RunUsage, TestUsage, write_usage
from hashreplay.server.app import install_log_filter

SECRET = SECRET_PLACEHOLDER


def secrets_of(url: str, *headers: tuple[str, str]) -> set[str]:
    return set(request_secrets(Redactor(), url, list(headers)).values)


# --- extraction -------------------------------------------------------------------------------


def test_bearer_header_gives_the_whole_value_and_the_token() -> None:
    found = secrets_of("http://h/x", ("Authorization", "Bearer acme-0123456789"))
    assert {"Bearer acme-0123456789", "acme-0123456789"} <= found


def test_basic_auth_gives_the_password() -> None:
    token = base64.b64encode(b"alice:correct-horse-battery").decode()
    found = secrets_of("http://h/x", ("authorization", f"Basic {token}"))
    assert "correct-horse-battery" in found and token in found


def test_key_headers_cookies_and_aws_parts() -> None:
    aws = (
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE123456/20250101/us-east-1/bedrock/aws4_request, "
        "SignedHeaders=host;x-amz-date, Signature=abcdef0123456789abcdef"
    )
    found = secrets_of(
        "http://h/x",
        ("x-api-key", "plainkey-123456"),
        ("Cookie", "session=cookievalue123; theme=dark"),
        ("Authorization", aws),
        ("X-Amz-Security-Token", "FwoGZXIvYXdzEJr-session"),
        ("content-type", "application/json-not-a-secret"),
    )
    assert {
        "plainkey-123456",
        "cookievalue123",
        "AKIDEXAMPLE123456",
        "abcdef0123456789abcdef",
        "FwoGZXIvYXdzEJr-session",
    } <= found
    assert "application/json-not-a-secret" not in found


def test_query_and_userinfo() -> None:
    found = secrets_of("https://user:pass-w0rd-123@h/x?key=query-key-123&limit=100000000")
    assert {"pass-w0rd-123", "query-key-123"} <= found
    assert "100000000" not in found
    assert "abcdefgh12" in secrets_of("https://abcdefgh12@h/x")  # a key as the user


def test_short_values_and_the_placeholder_are_never_scrubbed_by_value() -> None:
    assert not secrets_of("http://h/x", ("x-api-key", "short"))
    assert not SecretValues([SECRET])


# --- scrubbing --------------------------------------------------------------------------------


def test_scrub_text_value_and_bytes_longest_first() -> None:
    values = SecretValues(["acme-0123456789", "acme-0123456789-extended"])
    assert values.text("k=acme-0123456789-extended!") == f"k={SECRET}!"
    nested = {"acme-0123456789": ["x acme-0123456789 y", 3, None]}
    assert values.value(nested) == {SECRET: [f"x {SECRET} y", 3, None]}
    assert values.data(b"echo acme-0123456789") == b"echo " + SECRET.encode()
    assert NO_SECRETS.text("acme-0123456789") == "acme-0123456789"


def test_seen_secrets_are_bounded_and_keep_the_newest() -> None:
    seen = SeenSecrets(limit=2)
    for value in ("first-value-1", "second-value-2", "third-value-3"):
        seen.add(SecretValues([value]))
    assert seen.text("first-value-1 third-value-3") == f"first-value-1 {SECRET}"


# --- the property: plant the request's own key values everywhere, find none ------------------

KEYS = st.text(alphabet="abcdefghjkmnpqrstuvwxyz23456789", min_size=12, max_size=30)


def plant_and_record(
    root: Path, bearer: str, header_key: str, query_key: str, pw: str, aws: str = "aws-token-1234"
) -> str:
    test_id = f"tests/test_keys.py::test_it[{header_key}]"
    session = Session(load_config(root, env={}, mode="record"), write_behind=True)
    session.begin_test(test_id)
    headers = [
        ("authorization", f"Bearer {bearer}"),
        ("x-api-key", header_key),
        ("x-amz-security-token", aws),
        ("content-type", "application/json"),
    ]
    url = f"http://user:{pw}@127.0.0.1:9/v1/{bearer}/chat?key={query_key}"
    content = json.dumps({"model": "m", "messages": [{"content": f"my key {header_key}"}]})
    incoming = IncomingRequest("POST", url, headers, content.encode())
    echoes = f"{bearer} {header_key} {query_key} {pw} {aws}"
    exchanges = [
        LiveExchange(
            401,
            [("content-type", "application/json")],
            [json.dumps({"error": {"message": f"invalid api key {echoes}"}}).encode()],
        ),
        LiveExchange(500, [("content-type", "text/plain")], [f"bad key: {echoes}".encode()]),
        LiveExchange(
            200,
            [("content-type", "text/event-stream")],
            [f'data: {{"delta": "{echoes}"}}\n\n'.encode(), b"data: [DONE]\n\n"],
            chunked=True,
        ),
        LiveExchange(None, [], [], exception=RuntimeError(f"connect failed for {echoes}")),
    ]
    for exchange in exchanges:
        session.record(session.prepare(incoming, test_id=test_id), exchange)
    session.flush()
    # a miss report of the same request with another body
    replayer = Session(load_config(root, env={}, mode="replay"))
    replayer.begin_test(test_id)
    other = IncomingRequest("POST", url, headers, b'{"model": "other"}')
    prep = replayer.prepare(other, test_id=test_id)
    report = replayer.miss(prep).report
    usage = RunUsage(collected=[test_id], tests={test_id: TestUsage(files=["x"])})
    write_usage(usage, root, session.seen_secrets.scrubber)
    written = b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())
    return written.decode("utf-8", errors="replace") + "\n" + report


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(KEYS, KEYS, KEYS, KEYS, KEYS)
def test_property_no_planted_key_value_is_ever_written(
    bearer: str, header_key: str, query_key: str, pw: str, aws: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        output = plant_and_record(Path(tmp), bearer, header_key, query_key, pw, aws)
    for value in (bearer, header_key, query_key, pw, aws):
        assert value not in output
    assert SECRET in output


def test_recording_stays_verifiable_after_scrubbing(tmp_path: Path) -> None:
    """The test id and URL are scrubbed before hashing: the name is still recomputable."""
    plant_and_record(
        tmp_path, "bearer-abcdefgh1", "header-abcdefgh2", "query-abcdef3", "pw-abcdefgh4"
    )
    session = Session(load_config(tmp_path, env={}, mode="replay"))
    from hashreplay.core.store import parse_recording

    for path in (tmp_path / "tests" / "recordings").glob("*.json"):
        recording = parse_recording(path.read_bytes(), path)
        assert session.keyer.key_of(recording.request, recording.test_id)[0] == path.stem


class _Lines(logging.Handler):
    """The formatted lines of the records one logger handles itself."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def proxy_log_lines() -> Iterator[list[str]]:
    """What the proxy's loggers write, read on each logger itself. Not through the root
    logger (caplog): whatever configured uvicorn earlier in the process (`uvicorn.Config`
    applies its logging config: `uvicorn.access` at the given level, not propagating) would
    hide the access log's records, and the test would depend on which tests ran before."""
    handler = _Lines()
    saved = []
    for name in ("uvicorn.access", "hashreplay.serve"):
        log = logging.getLogger(name)
        saved.append((log, log.level, log.disabled))
        log.setLevel(logging.INFO)
        log.disabled = False
        log.addHandler(handler)
    try:
        yield handler.lines
    finally:
        for log, level, disabled in saved:
            log.removeHandler(handler)
            log.setLevel(level)
            log.disabled = disabled


def test_proxy_log_lines_are_scrubbed(tmp_path: Path, proxy_log_lines: list[str]) -> None:
    session = Session(load_config(tmp_path, env={}, mode="replay"))
    session.prepare(
        IncomingRequest("GET", "http://h/x", [("x-api-key", "unknown-shape-9876")], b"")
    )
    install_log_filter(session)
    logging.getLogger("uvicorn.access").info(
        '%s - "%s %s HTTP/%s" %d',
        "127.0.0.1:1",
        "GET",
        "/x?key=abc123&q=unknown-shape-9876",
        "1.1",
        200,
    )
    logging.getLogger("hashreplay.serve").warning("upstream said unknown-shape-9876")
    text = "\n".join(proxy_log_lines)
    assert len(proxy_log_lines) == 2, proxy_log_lines
    assert "unknown-shape-9876" not in text and "abc123" not in text
    assert text.count(SECRET) == 3


# --- encoded and glued forms -----------------------------------------------------------------

KEY = "sk-proj-Q7vLm2Nx8RtY4wZp6KcB3dFh"


def encoded_forms(text: str) -> dict[str, str]:
    """`text` base64-encoded (standard and URL-safe, padded and not) at each alignment inside
    a longer encoded text, and URL-encoded: what an upstream might echo."""
    from urllib.parse import quote, quote_plus

    forms: dict[str, str] = {"quote": quote(text, safe=""), "quote_plus": quote_plus(text)}
    for before in ("", "x", "xy", '{"auth": "'):
        for name, encode in (("std", base64.b64encode), ("url", base64.urlsafe_b64encode)):
            whole = encode(f"{before}{text}".encode()).decode()
            forms[f"{name}-{len(before)}"] = whole
            forms[f"{name}-{len(before)}-nopad"] = whole.rstrip("=")
            forms[f"{name}-{len(before)}-after"] = encode(f'{before}{text}"}}'.encode()).decode()
    return forms


def the_key_is_in(text: str) -> bool:
    """Whether `text` holds KEY plainly, or in any encoded form `encoded_forms` makes (the
    characters that encode the key's bytes alone)."""
    if KEY in text or any(f in text for f in encoded_forms(KEY).values() if len(f) >= 8):
        return True
    raw = KEY.encode()
    for offset, start in enumerate((0, 2, 3)):
        core = base64.b64encode(b"\0" * offset + raw).decode()[start : (offset + len(raw)) * 8 // 6]
        if core in text or core.translate(str.maketrans("+/", "-_")) in text:
            return True
    return False


@pytest.mark.parametrize(
    "form", sorted(encoded_forms(f"Bearer {KEY}").items()) + sorted(encoded_forms(KEY).items())
)
def test_an_encoded_form_of_the_request_key_is_never_written(
    tmp_path: Path, form: tuple[str, str]
) -> None:
    _, echoed = form
    session = Session(load_config(tmp_path, env={}, mode="record"))
    headers = [("authorization", f"Bearer {KEY}"), ("content-type", "application/json")]
    incoming = IncomingRequest("POST", "http://127.0.0.1:9/v1/chat", headers, b'{"q": 1}')
    answer = {"echo": f"seen: {echoed}", "list": [echoed]}
    path = session.record(
        session.prepare(incoming, test_id="tests/test_k.py::t"),
        LiveExchange(200, [("content-type", "application/json")], [json.dumps(answer).encode()]),
    )
    assert path is not None
    written = path.read_text()
    assert not the_key_is_in(written), written
    assert SECRET in written


@pytest.mark.parametrize(
    "text",
    [
        f"GET /v1/files/_{KEY} failed",
        f"key é_{KEY}",
        f"key é{KEY}",
        f"(x_{KEY})",
        f"ref:{KEY}",
        f"Authorization:_Bearer {KEY}",
    ],
)
def test_a_key_glued_to_what_comes_before_is_removed_by_its_shape(text: str) -> None:
    out = Redactor().text(text)
    assert KEY not in out and "Q7vLm2Nx8RtY4wZp6KcB3dFh" not in out
    assert SECRET in out


@pytest.mark.parametrize("chunked", [False, True], ids=["base64-body", "binary-chunks"])
def test_a_key_inside_a_binary_body_is_removed_and_the_file_still_reads(
    tmp_path: Path, chunked: bool
) -> None:
    from hashreplay.core.store import parse_recording, read_file

    session = Session(load_config(tmp_path, env={}, mode="record"))
    headers = [("authorization", f"Bearer {KEY}")]
    incoming = IncomingRequest("POST", "http://127.0.0.1:9/v1/files", headers, b"{}")
    binary = [b"\x00\xffhead ", KEY.encode() + b" tail\xfe"] if chunked else [KEY.encode()]
    answer = LiveExchange(
        200, [("content-type", "application/octet-stream")], [b"\x89\x00", *binary], chunked
    )
    path = session.record(session.prepare(incoming, test_id="tests/test_k.py::t"), answer)
    assert path is not None
    recording = parse_recording(read_file(path), path)  # the base64 it holds still decodes
    body = recording.response.body
    if chunked:  # binary chunks are stored as {"base64": …}, text chunks as text
        raw = b"".join(
            base64.b64decode(p["base64"]) if isinstance(p, dict) else p.encode() for p in body
        )
    else:
        assert recording.response.body_encoding == "base64"
        raw = base64.b64decode(body)
    assert KEY.encode() not in raw and SECRET.encode() in raw
    assert not the_key_is_in(path.read_text())
