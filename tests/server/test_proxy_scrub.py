"""`scrub` patterns in the proxy (`hashreplay serve`) over loopback (docs/design.md §14): the
same `[tool.hashreplay] scrub` table as in-process, applied to what is keyed and written."""

from __future__ import annotations

from pathlib import Path

import httpx2

from hashreplay.core.constants import TEST_ID_HEADER
from tests.fakes.upstream import FakeUpstream, Scripted
from tests.server.conftest import Servers, chat, load, recordings

HEADERS = {TEST_ID_HEADER: "tests/test_proxy.py::test_scrub"}
SCRUB = """
[tool.hashreplay]
scrub = [{pattern = "ticket-[0-9]+", replace = "ticket-N"}]
"""


def test_the_proxy_scrubs_what_it_keys_and_writes(
    servers: Servers, root: Path, upstream: FakeUpstream
) -> None:
    (root / "pyproject.toml").write_text(SCRUB)
    upstream.script(
        "POST",
        "/v1/chat/completions",
        Scripted(json={"id": "c1", "choices": [], "note": "opened ticket-42"}),
    )
    recorder = servers.serve(
        "--mode", "record", "--upstream", f"openai={upstream.url}/v1", root=root
    )
    with httpx2.Client(base_url=recorder.url + "/openai", timeout=10.0) as client:
        live = client.post("/chat/completions", json=chat("about ticket-42"), headers=HEADERS)
    assert live.status_code == 200
    recorder.stop()
    (path,) = recordings(root)
    stored = load(path)
    assert stored["request"]["body"]["messages"][0]["content"] == "about ticket-N"
    assert stored["response"]["body"]["note"] == "opened ticket-N"
    assert b"ticket-42" not in path.read_bytes()

    replayer = servers.serve("--mode", "replay", root=root)
    with httpx2.Client(base_url=replayer.url, timeout=10.0) as client:
        again = client.post("/v1/chat/completions", json=chat("about ticket-7"), headers=HEADERS)
    assert again.status_code == 200, again.text
    assert again.json()["note"] == "opened ticket-N"


def test_the_proxy_refuses_a_scrub_pattern_that_does_not_compile(
    servers: Servers, root: Path
) -> None:
    (root / "pyproject.toml").write_text(
        '[tool.hashreplay]\nscrub = [{pattern = "[unclosed", replace = "x"}]\n'
    )
    proxy = servers.serve("--mode", "replay", root=root, ready=False)
    assert proxy.proc.wait(30) != 0
    assert "`scrub`: entry 1: pattern '[unclosed' (replace 'x') does not compile" in proxy.log()
