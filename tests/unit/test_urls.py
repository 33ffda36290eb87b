"""The stored URL of a recording (`core/urls.py`): a loopback upstream keeps no port."""

from __future__ import annotations

import pytest

from hashreplay.core.urls import is_loopback_host, stored_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8765/v1/chat/completions", "http://localhost/v1/chat/completions"),
        ("http://localhost:11434/api/chat", "http://localhost/api/chat"),
        ("http://LOCALHOST:80/x?limit=5", "http://localhost/x?limit=5"),
        ("http://[::1]:9000/v1/models", "http://localhost/v1/models"),
        ("http://127.8.9.10:1/a", "http://localhost/a"),
        ("http://app.localhost:3000/v1", "http://localhost/v1"),
        (
            "http://user:%5Bsecret%20removed%5D@127.0.0.1:9/x",
            "http://user:%5Bsecret%20removed%5D@localhost/x",
        ),
        # provider and other hosts stay as they are, port and all
        (
            "https://api.provider-a.example.com/v1/chat/completions",
            "https://api.provider-a.example.com/v1/chat/completions",
        ),
        ("http://10.0.0.5:8000/v1", "http://10.0.0.5:8000/v1"),
        ("http://localhost.example.com:8000/v1", "http://localhost.example.com:8000/v1"),
        # not URLs with a host: unchanged
        ("call:pkg.mod:fn", "call:pkg.mod:fn"),
        ("/relative/path", "/relative/path"),
        ("http://[not-an-ip/x", "http://[not-an-ip/x"),
    ],
)
def test_stored_url(url: str, expected: str) -> None:
    assert stored_url(url) == expected
    assert stored_url(expected) == expected  # idempotent


def test_loopback_hosts() -> None:
    assert is_loopback_host("127.0.0.1")
    assert is_loopback_host("[::1]")
    assert is_loopback_host("localhost.")
    assert not is_loopback_host("0.0.0.0")  # a bind address, not a destination
    assert not is_loopback_host("example.com")
