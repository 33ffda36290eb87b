"""The hooks a project implements in its `conftest.py` (docs/design.md §14; docs/usage.md,
"Hooks"), and how the plugin hands them to the engine.

The plugin registers these specifications (`pytest_addhooks`); the engine never imports
pytest, so it gets plain callables (`engine/hooks.py`) that look the implementations up at
each request: conftest files load while tests are collected, after the run starts. Every
implementation runs, the last-registered first as pytest orders hooks, each seeing what
the one before it left; an implementation may change its argument in place (and return
None) or return the changed dict. One that raises, or returns anything else, fails the
test it ran for with an error naming the hook and where it is defined.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from hashreplay.core.constants import RECORD_HOOK, REQUEST_HOOK

if TYPE_CHECKING:  # the engine loads when a run starts, not when the plugin is imported
    from hashreplay.engine.hooks import HookImpls, Hooks


@pytest.hookspec
def pytest_hashreplay_request(request: dict[str, Any]) -> dict[str, Any] | None:
    """Change a request before hashreplay keys it, in every mode (record and replay alike,
    so the two agree). `request` holds `method`, `endpoint` (the URL path), `query` (a dict),
    `headers` (lower-cased names) and `body` (parsed JSON where the body is JSON), before
    redaction; what you leave is redacted, scrubbed and normalised as any request, and the
    live request itself is sent unchanged.

    Example, a `conftest.py` that keys requests without the prompt's date line::

        def pytest_hashreplay_request(request):
            for message in request["body"].get("messages", []):
                if message["role"] == "system":
                    message["content"] = message["content"].split("\\nToday is")[0]
    """


@pytest.hookspec
def pytest_hashreplay_before_record(recording: dict[str, Any]) -> dict[str, Any] | None:
    """Change what a recording file holds before it is written: `recording` is the file's
    JSON (`test_id`, `request`, `response`, `later_responses`, …) after redaction.
    Redaction and the `scrub` patterns run again afterwards, so a hook cannot write a
    secret; what it leaves must still be a valid recording, and replay serves it as it is.
    Change responses and headers here; a change to `request.body` or `request.endpoint`
    leaves the file under a name its request no longer hashes to (`hashreplay verify`
    reports it): change the keyed request in `pytest_hashreplay_request` instead.

    Example, a `conftest.py` that drops a noisy response header::

        def pytest_hashreplay_before_record(recording):
            recording["response"]["headers"].pop("x-request-id", None)
            return recording
    """


def plug_in(config: pytest.Config, hooks: Hooks) -> None:
    """Hand the engine the project's implementations of both hooks."""
    hooks.request = _implementations(config, REQUEST_HOOK)
    hooks.before_record = _implementations(config, RECORD_HOOK)


def _implementations(config: pytest.Config, name: str) -> HookImpls:
    caller = getattr(config.hook, name)

    def current() -> Sequence[tuple[str, Callable[..., object]]]:
        # get_hookimpls lists them in registration order; pytest calls the last one first
        return [
            (_where(impl.plugin_name, impl.function), _bind(impl.function, impl.argnames))
            for impl in reversed(caller.get_hookimpls())
            if not (impl.hookwrapper or impl.wrapper)
        ]

    return current


def _bind(function: Callable[..., object], argnames: Sequence[str]) -> Callable[..., object]:
    """The implementation as a function of the one dict (it may leave its argument out)."""
    return lambda value: function(**dict.fromkeys(argnames, value))


def _where(plugin_name: str, function: Callable[..., object]) -> str:
    """Where an implementation is defined: its file and line (a conftest.py, a plugin)."""
    code = getattr(function, "__code__", None)
    if code is None:
        return f"in plugin {plugin_name}"
    return f"in {code.co_filename}:{code.co_firstlineno}"
