"""An attacker's fuzz campaign against redaction (docs/benchmarks.md, "Secrets fuzz campaign").

Each case is one request carrying a credential (in a header, the query or the URL's userinfo)
and a second key of a known shape that is no credential, echoed back in every form an
upstream or a test might use: plain, glued to a preceding character (`/_sk-…`, `é_sk-…`),
URL-encoded, base64 (standard and URL-safe, padded or not, at each alignment, of the key
and of `Bearer <key>`), split across stream events, in the request body, in the test id. Every
case goes through the surfaces that write or print:

- keying (`Session.prepare`: the request as hashed and stored, the test id as shown),
- staging and writing (`Session.record`: the bytes of the recording file),
- the conversation view (`core.transcript.textconv`, what `hashreplay show` and git diff print),
- the miss report of a differing request (`Session.miss`),
- the proxy's answer to it, an error body (`ProxyApp`, every `--proxy-every` case),
- the drift output of a live answer that changed (`DriftCheck` and `render`, every
  `--drift-every` case).

A case fails when any of them holds the credential or one of its encoded forms, or the shaped
key, or when anything raises other than a documented `HashReplayError`. Seeded: a failure is
reproduced with its seed and case number.

    python scripts/fuzz_secrets.py --cases 100000 --seed 1
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import random
import string
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.config import load_config
from hashreplay.core.errors import HashReplayError
from hashreplay.core.format import RecordedResponse
from hashreplay.core.store import parse_recording, read_file
from hashreplay.core.transcript import textconv
from hashreplay.engine.drift import DriftCheck, render
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.session import Session
from hashreplay.server.app import LOGGERS, ProxyApp, install_log_filter
from hashreplay.server.cli import ServeSettings

ALNUM = string.ascii_letters + string.digits
#: Cases per project directory (a fresh one keeps each directory's listing small).
BATCH = 200


def _token(rng: random.Random, size: int) -> str:
    return "".join(rng.choice(ALNUM) for _ in range(size))


#: Key shapes redaction knows (docs/usage.md, "Secrets").
SHAPED: tuple[Callable[[random.Random], str], ...] = (
    lambda r: "sk-proj-" + _token(r, 40),
    lambda r: "sk-ant-api03-" + _token(r, 40),
    lambda r: "sk-" + _token(r, 32),
    lambda r: "AIza" + _token(r, 35),
    lambda r: "ghp_" + _token(r, 36),
    lambda r: "hf_" + _token(r, 34),
    lambda r: "gsk_" + _token(r, 32),
    lambda r: "xoxb-" + _token(r, 24),
)
#: What may come right before a key glued to the text before it.
GLUES = ("_", "/_", "é_", "é", "ß", "(", "=", ":", "-", ".", "/", "\t", "\n", "…", "'", '"')
#: Ordinary key names for the fields that carry echoes (none is a secret by name).
FIELDS = ("message", "detail", "content", "text", "note", "error_description", "echo", "data")


def base64_cores(value: str) -> list[str]:
    """The characters that encode `value`'s bytes alone, at each of the three alignments,
    standard and URL-safe: one of them is in any base64 text that encodes `value`."""
    raw = value.encode()
    cores = []
    for offset, start in enumerate((0, 2, 3)):
        core = base64.b64encode(b"\0" * offset + raw).decode()[start : (offset + len(raw)) * 8 // 6]
        cores += [core, core.translate(str.maketrans("+/", "-_"))]
    return cores


def encoded(rng: random.Random, value: str) -> str:
    """`value` in one encoded form, inside what a real upstream would wrap it in."""
    how = rng.randrange(6)
    if how == 0:
        return quote(value, safe="")
    if how == 1:
        return quote_plus(value)
    text = rng.choice(["", "x", "xy", '{"authorization": "', "Basic user:"]) + value
    text += rng.choice(["", '"}', "\n", "z"])
    encode = base64.b64encode if how in (2, 3) else base64.urlsafe_b64encode
    out = encode(text.encode()).decode()
    return out.rstrip("=") if how in (3, 5) else out


@dataclass
class Case:
    index: int
    credential: str
    shaped: str
    headers: list[tuple[str, str]]
    url: str
    test_id: str
    request_body: dict[str, Any]
    response: LiveExchange
    #: what no surface may show
    forbidden: list[str] = field(default_factory=list)


def make_case(rng: random.Random, index: int, port: int) -> Case:
    unshaped = rng.random() < 0.5
    credential = ("hr" + _token(rng, 24)) if unshaped else rng.choice(SHAPED)(rng)
    shaped = rng.choice(SHAPED)(rng)
    where = rng.randrange(7)
    headers = [("content-type", "application/json")]
    query = ""
    userinfo = ""
    if where == 0:
        headers.append(("authorization", f"Bearer {credential}"))
    elif where == 1:
        headers.append(("x-api-key", credential))
    elif where == 2:
        headers.append(("api-key", credential))
    elif where == 3:
        headers.append(("x-goog-api-key", credential))
    elif where == 4:
        query = f"?key={quote(credential, safe='')}"
    elif where == 5:
        query = f"?alt=sse&api_key={quote(credential, safe='')}"
    else:
        userinfo = f"user:{quote(credential, safe='')}@"
    url = f"http://{userinfo}127.0.0.1:{port}/v1/chat/completions{query}"

    def echo() -> str:
        """One form of one of the two keys, in a sentence."""
        kind = rng.randrange(5)
        if kind == 0:
            form = credential
        elif kind == 1:
            form = encoded(rng, credential)
        elif kind == 2:
            form = encoded(rng, f"Bearer {credential}")
        elif kind == 3:
            form = rng.choice(GLUES) + shaped
        else:
            form = rng.choice(GLUES) + credential
        return rng.choice(["invalid key ", "", "token=", "see /v1/files/", "é"]) + form

    test_id = f"tests/test_fuzz_{index % 7}.py::test_case[{index}]"
    if rng.random() < 0.3:
        test_id = f"tests/test_fuzz.py::test_keys[{index}-{echo()}]".replace("\n", " ")
    request_body = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": echo() if rng.random() < 0.5 else "hi"}],
    }
    response = _response(rng, echo)
    forbidden = [credential, quote(credential, safe=""), *base64_cores(credential), shaped]
    forbidden.append(shaped.split("-", 1)[-1].split("_", 1)[-1][-16:])  # its token's tail
    return Case(index, credential, shaped, headers, url, test_id, request_body, response, forbidden)


def _response(rng: random.Random, echo: Callable[[], str]) -> LiveExchange:
    how = rng.randrange(5)
    if how == 4:  # binary (stored as base64), whole or in raw chunks
        data = b"\x89\x00\xff" + echo().encode() + b"\xfe" + echo().encode()
        cut = rng.randrange(1, len(data))
        chunked = rng.random() < 0.5
        chunks = [data[:cut], data[cut:]] if chunked else [data]
        return LiveExchange(200, [("content-type", "application/octet-stream")], chunks, chunked)
    if how == 0:  # a JSON error that echoes
        status = rng.choice([400, 401, 403, 429, 500])
        body = {"error": {"message": echo(), "type": "invalid_request_error", "code": None}}
        body[rng.choice(FIELDS)] = echo()
        return LiveExchange(status, [("content-type", "application/json")], [_dumps(body)])
    if how == 1:  # a completion whose text holds it
        body = {
            "id": "chatcmpl-" + _token(rng, 20),
            "object": "chat.completion",
            "created": 1733212345,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": echo()}}],
        }
        return LiveExchange(200, [("content-type", "application/json")], [_dumps(body)])
    if how == 2:  # a stream with the echo split across deltas at random places
        text = f"{echo()} and {echo()}"
        cuts = sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, rng.randint(1, 6))))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        events = [
            b"data: "
            + _dumps({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"content": piece}}]})
            + b"\n\n"
            for piece in pieces
        ]
        return LiveExchange(
            200, [("content-type", "text/event-stream")], [*events, b"data: [DONE]\n\n"], True
        )
    # plain text
    return LiveExchange(500, [("content-type", "text/plain")], [f"bad: {echo()}".encode()])


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=rng_ascii()).encode()


_ASCII = [True]


def rng_ascii() -> bool:
    """Alternate `\\u00e9` and raw UTF-8 in JSON bodies (both are what upstreams send)."""
    _ASCII[0] = not _ASCII[0]
    return _ASCII[0]


# --- the surfaces -----------------------------------------------------------------------------


@dataclass
class Result:
    cases: int = 0
    inputs: int = 0
    leaks: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    documented_errors: int = 0
    surfaces: dict[str, int] = field(default_factory=dict)

    def saw(self, surface: str) -> None:
        self.surfaces[surface] = self.surfaces.get(surface, 0) + 1

    @property
    def ok(self) -> bool:
        return not self.leaks and not self.crashes


def _check(result: Result, case: Case, surface: str, text: str) -> None:
    result.saw(surface)
    for value in case.forbidden:
        if value and value in text:
            at = text.index(value)
            around = text[max(0, at - 60) : at + 80]
            result.leaks.append(f"case {case.index}: {surface} shows {value!r}: …{around!r}…")
            return


def _guard(result: Result, case: Case, surface: str, run: Callable[[], None]) -> None:
    try:
        run()
    except HashReplayError:
        result.documented_errors += 1
    except Exception as exc:  # anything else is a crash
        result.crashes.append(f"case {case.index}: {surface}: {type(exc).__name__}: {exc}")


def _decoded(response: RecordedResponse) -> str:
    """A binary body or stream's bytes, as text: a key inside them is a key written."""
    body = response.body
    parts: list[bytes] = []
    if response.body_encoding is BodyEncoding.BASE64 and isinstance(body, str):
        parts.append(base64.b64decode(body))
    elif isinstance(body, list):
        parts += [
            base64.b64decode(p["base64"]) for p in body if isinstance(p, dict) and "base64" in p
        ]
    return b"".join(parts).decode("utf-8", "replace")


def _incoming(case: Case, body: dict[str, Any]) -> IncomingRequest:
    return IncomingRequest("POST", case.url, case.headers, json.dumps(body).encode())


def run_batch(
    root: Path,
    cases: list[Case],
    result: Result,
    *,
    proxy_every: int,
    drift_every: int,
    faults: bool = True,
) -> None:
    rng = random.Random(cases[0].index if cases else 0)
    recorder = Session(load_config(root, env={}, mode="record"))
    for case in cases:
        result.cases += 1
        result.inputs += 4  # headers/URL, request body, response, test id

        def key_and_write(case: Case = case) -> None:
            prep = recorder.prepare(_incoming(case, case.request_body), test_id=case.test_id)
            _check(
                result, case, "keying", prep.request.model_dump_json() + (prep.shown_test_id or "")
            )
            path = recorder.record(prep, case.response)
            if path is not None:
                content = path.read_bytes()
                recording = parse_recording(read_file(path), path)  # what was written still reads
                _check(result, case, "file (decoded)", _decoded(recording.response))
                _check(result, case, "file", content.decode("utf-8", "replace"))
                _check(result, case, "textconv", textconv(content).decode("utf-8", "replace"))

        _guard(result, case, "keying/writing", key_and_write)
    recorder.flush()
    replayer = Session(load_config(root, env={}, mode="replay"))
    app = ProxyApp(ServeSettings(root=str(root)), session=replayer)
    install_log_filter(replayer)  # as `hashreplay serve` does
    for case in cases:
        other = {**case.request_body, "temperature": 0.5}

        def miss(case: Case = case, other: dict[str, Any] = other) -> None:
            prep = replayer.prepare(_incoming(case, other), test_id=case.test_id)
            _check(result, case, "miss report", str(replayer.miss(prep).report))

        _guard(result, case, "miss report", miss)
        if proxy_every and case.index % proxy_every == 0:

            def proxy(case: Case = case, other: dict[str, Any] = other) -> None:
                _proxy(app, case, other, result, faults=faults, rng=rng)

            _guard(result, case, "proxy", proxy)
    if drift_every:
        for case in cases[:: max(1, drift_every)]:
            _guard(result, case, "drift", lambda case=case: _drift(root, case, result))


class _Lines(logging.Handler):
    """The proxy's log lines, kept to be checked (and not printed)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


PROXY_LOG = _Lines()


def _capture_proxy_log() -> None:
    for name in LOGGERS:
        log = logging.getLogger(name)
        log.handlers[:] = [PROXY_LOG]
        log.propagate = False
        log.setLevel(logging.INFO)


async def answer(app: ProxyApp, scope: dict[str, Any], body: bytes) -> list[dict[str, Any]]:
    """What the proxy sends for one request of `scope` with `body` (a hang fails after 30 s)."""
    sent: list[dict[str, Any]] = []
    incoming = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop(0)
        await asyncio.sleep(3600)
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(dict(message))

    await asyncio.wait_for(app(scope, receive, send), timeout=30)
    return sent


def _proxy(
    app: ProxyApp,
    case: Case,
    body: dict[str, Any],
    result: Result,
    *,
    faults: bool,
    rng: random.Random,
) -> None:
    """The proxy's answer to the case's request (a miss), or with `faults`, half the time,
    to the same request with a bad `X-HashReplay-Fault` that quotes the credential."""
    path, _, query = case.url.split("127.0.0.1", 1)[1].partition("/")[2].partition("?")
    # a proxy's client has no userinfo to send: the same credential goes as Basic auth
    basic = base64.b64encode(f"user:{case.credential}".encode()).decode()
    userinfo = [("authorization", f"Basic {basic}")] if "@" in case.url else []
    headers = [
        *case.headers,
        *userinfo,
        ("x-hashreplay-test-id", case.test_id),
        ("x-hashreplay-fault", '{"status": "' + case.credential + '"}')
        if faults and rng.random() < 0.5
        else ("x-hashreplay-conversation", case.shaped),
    ]
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/" + path,
        "raw_path": ("/" + path).encode(),
        "query_string": query.encode(),
        "headers": [(k.encode(), v.encode("utf-8")) for k, v in headers],
    }
    PROXY_LOG.lines.clear()
    sent = asyncio.run(answer(app, scope, json.dumps(body).encode()))
    _check(result, case, "proxy log", "\n".join(PROXY_LOG.lines))
    head = json.dumps([[k.decode(), v.decode("latin-1")] for k, v in sent[0].get("headers", [])])
    payload = b"".join(m.get("body", b"") for m in sent[1:]).decode("utf-8", "replace")
    _check(result, case, "proxy error body", head + payload)


def _drift(root: Path, case: Case, result: Result) -> None:
    session = Session(load_config(root, env={}, mode="record"))
    check = session.drift = DriftCheck(session)
    prep = session.prepare(_incoming(case, case.request_body), test_id=case.test_id)
    changed = {"error": {"message": f"now {case.credential} {case.shaped}", "extra": [1]}}
    live = LiveExchange(418, [("content-type", "application/json")], [json.dumps(changed).encode()])
    session.record(prep, live)
    check.end_test(case.test_id)
    lines = render(check.result(), every=True)
    _check(result, case, "drift output", "\n".join(lines) + json.dumps(check.result()))


def cases_of(seed: int, count: int, port: int = 9) -> Iterator[Case]:
    rng = random.Random(seed)
    for index in range(count):
        yield make_case(rng, index, port)


def campaign(
    count: int,
    seed: int,
    *,
    proxy_every: int = 10,
    drift_every: int = 20,
    batch: int = BATCH,
    faults: bool = True,
) -> Result:
    """Run `count` cases from `seed`; returns what was found. `faults=False` leaves out the
    proxy's answer to a bad `X-HashReplay-Fault` header."""
    result = Result()
    _capture_proxy_log()
    pending: list[Case] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, case in enumerate(cases_of(seed, count)):
            pending.append(case)
            if len(pending) == batch or n == count - 1:
                root = Path(tmp) / f"p{n // batch}"
                root.mkdir()
                run_batch(
                    root,
                    pending,
                    result,
                    proxy_every=proxy_every,
                    drift_every=drift_every,
                    faults=faults,
                )
                pending = []
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--proxy-every", type=int, default=10)
    parser.add_argument("--drift-every", type=int, default=20)
    parser.add_argument(
        "--no-faults", action="store_true", help="leave out the bad X-HashReplay-Fault probe"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    result = campaign(
        args.cases,
        args.seed,
        proxy_every=args.proxy_every,
        drift_every=args.drift_every,
        faults=not args.no_faults,
    )
    took = time.monotonic() - started
    print(
        f"{result.cases} cases ({result.inputs} generated inputs), seed {args.seed}, "
        f"{took:.0f} s: {len(result.leaks)} leak(s), {len(result.crashes)} crash(es), "
        f"{result.documented_errors} documented error(s)"
    )
    print("checked: " + ", ".join(f"{k} {v}" for k, v in sorted(result.surfaces.items())))
    if result.leaks:
        where: dict[str, int] = {}
        for line in result.leaks:
            surface = line.split(": ", 1)[1].split(" shows ", 1)[0]
            where[surface] = where.get(surface, 0) + 1
        print("leaks by surface: " + ", ".join(f"{k} {v}" for k, v in sorted(where.items())))
    for line in (result.leaks + result.crashes)[:50]:
        print("  " + line)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
