"""The public names of `hashreplay`: exactly this set, each one real and sorted."""

from __future__ import annotations

import subprocess
import sys

import pytest

import hashreplay

#: What users call. Internals (Session, Store, Redactor, request_hash, …) stay importable
#: from their own modules but are not promised.
PUBLIC = {
    "ASGITestIdMiddleware",
    "BodyTooLarge",
    "ConfigError",
    "HashReplayError",
    "HashReplayWarning",
    "Mode",
    "RecordingError",
    "ReplayMiss",
    "TestIdMiddleware",
    "WSGITestIdMiddleware",
    "__version__",
    "conversation",
    "current_test_id",
    "install",
    "record_callable",
    "test_context",
    "uninstall",
    "unpatch_callables",
}


def isort_key(name: str) -> tuple[int, str]:
    """ruff's RUF022 order: SCREAMING_CASE, then CamelCase, then everything else."""
    if name.isupper() and len(name) > 1:
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


def test_public_api_is_exactly_this_set() -> None:
    assert set(hashreplay.__all__) == PUBLIC
    assert len(hashreplay.__all__) == len(PUBLIC)


def test_all_is_sorted() -> None:
    assert hashreplay.__all__ == sorted(hashreplay.__all__, key=isort_key)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_exported_name_exists(name: str) -> None:
    assert getattr(hashreplay, name) is not None


def test_errors_share_one_root() -> None:
    for name in ("BodyTooLarge", "ConfigError", "RecordingError", "ReplayMiss"):
        assert issubclass(getattr(hashreplay, name), hashreplay.HashReplayError)


def test_version_comes_from_the_package_metadata() -> None:
    from importlib.metadata import version

    assert hashreplay.__version__ == version("hashreplay")


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Session'"):
        _ = hashreplay.Session  # type: ignore[attr-defined]


def test_import_hashreplay_loads_no_client_adapter_or_server() -> None:
    """`import hashreplay` (which loading the pytest plugin runs) stays light: the adapters,
    the middleware and every HTTP client load only when used."""
    code = (
        "import sys, hashreplay\n"
        "heavy = ('httpx', 'httpx2', 'aiohttp', 'requests', 'urllib3', 'pytest',"
        " 'hashreplay.adapters', 'hashreplay.server', 'hashreplay.engine')\n"
        "print(sorted(m for m in sys.modules if m in heavy or m.startswith(tuple(h + '.' for h in heavy))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_middlewares_are_a_pair_by_server_interface() -> None:
    from hashreplay import asgi, wsgi

    assert hashreplay.ASGITestIdMiddleware is asgi.TestIdMiddleware
    assert hashreplay.WSGITestIdMiddleware is wsgi.TestIdMiddleware
    assert hashreplay.TestIdMiddleware is hashreplay.ASGITestIdMiddleware  # the contract name
