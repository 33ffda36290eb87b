"""No secret ever reaches a byte under the recordings directory (docs/design.md §7), wherever it
is placed, and a recording made with one key replays with another."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import httpx2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hashreplay import Mode, test_context
from hashreplay.adapters import httpx as adapter
from hashreplay.core.config import load_config
from hashreplay.engine.session import Session
from tests.fakes.upstream import FakeUpstream, Scripted
from tests.guards import ConnectGuard

TEST_ID = "tests/test_secret.py::test_it"
ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
SECRET_KEYS = [
    "api_key",
    "API-Key",
    "x-api-key",
    "token",
    "Access_Token",
    "password",
    "secret",
    "client_secret",
    "refresh_token",
    "session_key",
    "Cookie",
    "authorization",
]

# Secrets of recognisable shapes, and opaque values that are secret only by their key.
shaped = st.one_of(
    st.text(ALNUM, min_size=24, max_size=40).map(lambda s: "sk-proj-" + s),
    st.text(ALNUM, min_size=30, max_size=30).map(lambda s: "sk-ant-api03-" + s),
    st.text(ALNUM + "_-", min_size=35, max_size=35).map(lambda s: "AIza" + s),
)
opaque = st.text(ALNUM, min_size=16, max_size=24).map(lambda s: "pw" + s)
plain = st.one_of(
    st.integers(-1000, 1000), st.booleans(), st.none(), st.text(ALNUM + " .,:", max_size=20)
)


@st.composite
def carriers(draw: st.DrawFn) -> tuple[Any, list[str], dict[str, str]]:
    """A JSON structure with secrets planted at random places; returns it, the secrets, and
    a map from each secret to a different secret of the same kind (the replay key)."""
    secrets: list[str] = []

    def leaf() -> st.SearchStrategy[Any]:
        def plant_shaped(s: str) -> Any:
            secrets.append(s)
            prefix = draw(st.text(ALNUM + " ", max_size=10))
            return f"{prefix} {s} tail" if draw(st.booleans()) else s

        return st.one_of(plain, shaped.map(plant_shaped))

    structure = draw(
        st.recursive(
            leaf(),
            lambda children: st.one_of(
                st.lists(children, max_size=3),
                st.dictionaries(st.text(ALNUM + "_", min_size=1, max_size=8), children, max_size=3),
            ),
            max_leaves=8,
        )
    )
    key = draw(st.sampled_from(SECRET_KEYS))
    hidden = draw(opaque)
    secrets.append(hidden)
    body = {"payload": structure, "nested": [{key: hidden}]}
    replacement = {
        s: s[:-6] + "ZZZZZZ" if s[-6:] != "ZZZZZZ" else s[:-6] + "YYYYYY" for s in secrets
    }
    return body, secrets, replacement


def swap(value: Any, mapping: dict[str, str]) -> Any:
    text = json.dumps(value)
    for old, new in mapping.items():
        text = text.replace(old, new)
    return json.loads(text)


def exchange(url: str, body: Any, header_key: str) -> list[Any]:
    """Every carrier at once: JSON body, headers, query, an echoed response, SSE and NDJSON."""
    out = []
    with httpx2.Client(headers={"authorization": f"Bearer {header_key}"}) as c:
        r = c.post(
            f"{url}/echo?key={header_key}&alt=json", json=body, headers={"x-api-key": header_key}
        )
        out.append(r.json()["received"])
        for path in ("/v1/chat/completions", "/api/chat"):
            r = c.post(
                f"{url}{path}?api_key={header_key}",
                json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]},
            )
            out.append(r.text.count("\n"))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(carriers(), shaped)
def test_secrets_never_reach_a_file_and_replay_with_another_key(
    planted: tuple[Any, list[str], dict[str, str]], header_key: str
) -> None:
    body, secrets, replacement = planted
    root = Path(tempfile.mkdtemp())
    try:
        with FakeUpstream() as fake:
            sse = "".join(f"data: {json.dumps({'chunk': body, 'n': i})}\n\n" for i in range(2))
            ndjson = "".join(json.dumps({"line": body, "n": i}) + "\n" for i in range(2))
            fake.script(
                "POST",
                "/v1/chat/completions",
                Scripted(
                    body=(sse + "data: [DONE]\n\n").encode(),
                    headers={"content-type": "text/event-stream"},
                ),
            )
            fake.script(
                "POST",
                "/api/chat",
                Scripted(body=ndjson.encode(), headers={"content-type": "application/x-ndjson"}),
            )
            session = Session(load_config(root, env={}, mode="record"))
            adapter.install(session)
            with test_context(TEST_ID):
                live = exchange(fake.url, body, header_key)
            url = fake.url
        written = b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())
        assert written, "nothing was recorded"
        for secret in [*secrets, header_key]:
            assert secret.encode() not in written, secret
        assert b"[secret removed]" in written

        other_key = header_key[:-6] + ("ZZZZZZ" if header_key[-6:] != "ZZZZZZ" else "YYYYYY")
        session = Session(load_config(root, env={}, mode=Mode.REPLAY.value))
        adapter.install(session)
        with ConnectGuard() as guard, test_context(TEST_ID):
            replayed = exchange(url, swap(body, replacement), other_key)
        assert guard.attempts == []
        assert session.stats.missed == 0, session.take_misses(TEST_ID)[0].report
        assert session.stats.replayed == 3
        assert replayed[1:] == live[1:]
    finally:
        adapter.uninstall()
        shutil.rmtree(root, ignore_errors=True)
