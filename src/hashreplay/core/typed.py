"""Typed values to and from JSON (docs/design.md §2): pydantic models, exceptions, containers.

A pydantic model is stored as `{"__type__": "<module>.<QualName>", "__data__": {...}}` and
rebuilt as the same class. A recording must never be able to import arbitrary code: a type
is only imported when its dotted name is under an allowed module prefix.
"""

from __future__ import annotations

import base64
import builtins
import dataclasses
import importlib
import sys
from collections.abc import Iterable, Sequence
from enum import Enum
from pathlib import PurePath
from typing import Any

from pydantic import BaseModel, ValidationError

from hashreplay.core.errors import RecordingError

TYPE_KEY = "__type__"
DATA_KEY = "__data__"
EXCEPTION_KEY = "__exception__"

#: Packages whose types recordings may name without configuration: the SDKs we support.
DEFAULT_ALLOWED_PREFIXES: tuple[str, ...] = (
    "openai",
    "anthropic",
    "ollama",
    "google.genai",
    "mistralai",
    "groq",
    "cohere",
    "litellm",
    "httpx",
    "httpx2",
    "httpcore",
    "httpcore2",
    "pydantic",
)
#: Exceptions of the standard library may always be rebuilt (they cannot run code on import).
_BUILTIN_MODULES = ("builtins",)


class TypeAllowlist:
    """Dotted-name prefixes under which classes may be imported when a recording is read."""

    def __init__(self, prefixes: Iterable[str] = ()) -> None:
        self.prefixes = tuple(sorted({*DEFAULT_ALLOWED_PREFIXES, *prefixes}))

    def allows(self, dotted: str) -> bool:
        return any(dotted == p or dotted.startswith(p + ".") for p in self.prefixes)


def type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def to_jsonable(value: Any) -> Any:
    """A JSON-ready copy of `value` with pydantic models, dataclasses and exceptions wrapped
    (so they are rebuilt as the same class)."""
    if isinstance(value, BaseModel):
        return {TYPE_KEY: type_name(type(value)), DATA_KEY: value.model_dump(mode="json")}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {TYPE_KEY: type_name(type(value)), DATA_KEY: data}
    if isinstance(value, BaseException):
        return exception_to_json(value)
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value


def from_jsonable(data: Any, allowlist: TypeAllowlist, *, path: Any = None) -> Any:
    """Rebuild what `to_jsonable` wrapped. `path` names the file in errors."""
    if isinstance(data, dict):
        if TYPE_KEY in data and DATA_KEY in data:
            cls = resolve_type(str(data[TYPE_KEY]), allowlist, path=path)
            inner = data[DATA_KEY]
            if dataclasses.is_dataclass(cls) and isinstance(inner, dict):
                inner = {k: from_jsonable(v, allowlist, path=path) for k, v in inner.items()}
            return _build_model(cls, inner, path)
        if EXCEPTION_KEY in data:
            return exception_from_json(data, allowlist, path=path)
        return {k: from_jsonable(v, allowlist, path=path) for k, v in data.items()}
    if isinstance(data, list):
        return [from_jsonable(v, allowlist, path=path) for v in data]
    return data


def _build_model(cls: type, data: Any, path: Any) -> Any:
    if dataclasses.is_dataclass(cls) and isinstance(data, dict):
        fields = {f.name for f in dataclasses.fields(cls) if f.init}
        return cls(**{k: v for k, v in data.items() if k in fields})
    if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
        msg = (
            f"type {type_name(cls)} is neither a pydantic model nor a dataclass"
            if cls is not BaseModel
            else "type pydantic.BaseModel is abstract: a recording names a concrete model"
        )
        raise RecordingError(path, msg + "; re-record it")
    try:
        return cls.model_validate(data)
    except ValidationError:
        # The SDK's model drifted since the recording was made: keep the data as recorded.
        if isinstance(data, dict):
            try:
                return cls.model_construct(**data)
            except Exception as exc:
                msg = f"cannot rebuild {type_name(cls)} from its recorded data: {exc}"
                raise RecordingError(path, msg) from None
        raise
    except Exception as exc:  # PydanticUserError and the like: a class that cannot be built
        msg = f"cannot rebuild {type_name(cls)}: {type(exc).__name__}: {exc}"
        raise RecordingError(path, msg) from None


def resolve_type(dotted: str, allowlist: TypeAllowlist, *, path: Any = None) -> type:
    """Import `module.QualName`, but only under the allowlist (or builtins)."""
    module_name, _, _ = dotted.rpartition(".")
    if not (allowlist.allows(dotted) or module_name in _BUILTIN_MODULES):
        allowed = ", ".join(allowlist.prefixes)
        msg = (
            f"refusing to import type {dotted!r}: it is not under an allowed module prefix "
            f"({allowed}); add its package to `callables` in [tool.hashreplay] if it is yours"
        )
        raise RecordingError(path, msg)
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module_path = ".".join(parts[:split])
        try:
            module = importlib.import_module(module_path)
        except ImportError:
            continue
        obj: Any = module
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            break
        if isinstance(obj, type):
            return obj
        break
    msg = f"type {dotted!r} no longer exists (renamed or removed?); re-record this recording"
    raise RecordingError(path, msg)


def jsonable_arg(value: Any) -> Any:
    """An argument of a call-layer call as plain JSON for hashing: models and dataclasses
    dumped as data, bytes as base64, and any other object by its type name only (its repr
    would carry a memory address that changes every run)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable_arg(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): jsonable_arg(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [jsonable_arg(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if isinstance(value, Enum):
        return jsonable_arg(value.value)
    if isinstance(value, (bytes, bytearray)):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, PurePath):
        return str(value)
    return f"<{type_name(type(value))}>"


def exception_to_json(exc: BaseException) -> dict[str, Any]:
    return {
        EXCEPTION_KEY: type_name(type(exc)),
        "args": [to_jsonable(a) if _serialisable_arg(a) else repr(a) for a in exc.args],
        "message": str(exc),
    }


def _serialisable_arg(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool, list, dict, BaseModel))


def exception_from_json(
    data: dict[str, Any], allowlist: TypeAllowlist, *, path: Any = None
) -> BaseException:
    """Rebuild a recorded exception as its own type, with its args and message."""
    dotted = str(data[EXCEPTION_KEY])
    refused = refused_exception(dotted)
    if refused is not None:
        raise RecordingError(path, f"{refused}; re-record it")
    found = resolve_type(dotted, allowlist, path=path)
    if not issubclass(found, Exception):
        refused = refused_exception(dotted, found) or f"type {dotted} is not an exception"
        raise RecordingError(path, f"{refused}; re-record it")
    cls: type[Exception] = found
    args = [from_jsonable(a, allowlist, path=path) for a in data.get("args", [])]
    message = str(data.get("message", ""))
    try:
        exc = cls(*args)
    except Exception:
        # Constructors with required keyword arguments (SDK status errors need a response):
        # build the instance without running __init__, keeping the recorded message.
        exc = cls.__new__(cls)
        BaseException.__init__(exc, *(args or [message]))
    if list(exc.args) != args:
        exc.args = tuple(args)
    return exc


# --- which recorded exceptions replay may raise ----------------------------------------------

#: BaseExceptions that are not Exceptions, as a recording names them: refused even in a
#: process that has not imported their module (`hashreplay verify`, the proxy).
_NOT_EXCEPTIONS = frozenset(
    {
        "builtins.BaseException",
        "builtins.BaseExceptionGroup",
        "builtins.GeneratorExit",
        "builtins.KeyboardInterrupt",
        "builtins.SystemExit",
        "_pytest.outcomes.Exit",
        "_pytest.outcomes.Failed",
        "_pytest.outcomes.OutcomeException",
        "_pytest.outcomes.Skipped",
        "_pytest.outcomes.XFailed",
        "asyncio.CancelledError",
        "asyncio.exceptions.CancelledError",
        "exceptiongroup.BaseExceptionGroup",
        "trio.Cancelled",
    }
)


def _imported_class(dotted: str) -> type | None:
    """The class `module.QualName` names, looked up only in modules already imported."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):  # the longest module prefix first
        module_name = ".".join(parts[:split])
        module = builtins if module_name == "builtins" else sys.modules.get(module_name)
        if module is None:
            continue
        obj: Any = module
        for attr in parts[split:]:
            obj = getattr(obj, attr, None)
        return obj if isinstance(obj, type) else None
    return None


def refused_exception(dotted: str, cls: type | None = None) -> str | None:
    """Why replay may not raise a recorded exception of type `dotted` (or `cls`), or None
    when it may. Only `Exception` subclasses are raised again (docs/design.md §2): a
    BaseException that is not one (`KeyboardInterrupt`, `SystemExit`, pytest's `Exit`,
    `Skipped`, `XFailed`, asyncio's `CancelledError`) would end the whole test session, or
    skip or pass a test, instead of failing the one test that replays it. This is the one
    rule every adapter, the call layer, `verify` and the importers apply."""
    if cls is None:
        cls = _imported_class(dotted)
    if dotted in _NOT_EXCEPTIONS or (
        isinstance(cls, type) and issubclass(cls, BaseException) and not issubclass(cls, Exception)
    ):
        return (
            f"the recorded exception {dotted} is a BaseException that is not an Exception: "
            "raised on replay it would stop the whole test session (or skip the test), so "
            "replay never raises it"
        )
    return None


def exception_class(
    dotted: str | None, namespaces: Sequence[Any], default: type[Exception]
) -> type[Exception]:
    """The class a recorded failure names (`module.Name`) for a client to raise: looked up
    in modules already imported (never importing anything new), then by its last name in
    `namespaces` (the client's own exception modules); `default` when none fits, and never
    a class `refused_exception` refuses."""
    if not dotted or refused_exception(dotted) is not None:
        return default
    found = _imported_class(dotted)
    if isinstance(found, type) and issubclass(found, Exception):
        return found
    name = dotted.rpartition(".")[2]
    for place in namespaces:
        found = getattr(place, name, None)
        if isinstance(found, type) and issubclass(found, Exception):
            return found
    return default
